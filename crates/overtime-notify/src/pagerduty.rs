//! The PagerDuty channel (docs/channels.md, "PagerDuty"): Events API v2,
//! one alert per incident fingerprint.
//!
//! Design rules:
//! - The fingerprint is the `dedup_key`, so PagerDuty itself keeps one
//!   alert per cause: a page is a `trigger`, growth re-triggers (PagerDuty
//!   adds it to the open alert and notifies no one again), a rename
//!   changes nothing, and a resolution is a `resolve` with the same key.
//!   A cause that fails again after its alert resolved opens a new one.
//! - Every call is safe to repeat (PagerDuty deduplicates by the key), so
//!   a lost answer is simply retried.
//! - The payload keeps PagerDuty's documented limits: `summary` at most
//!   1024 characters, `dedup_key` at most 255, `severity` one of
//!   `critical`, `error`, `warning`, `info`.
//! - The routing key is a secret: it comes from the variable
//!   `routing_key_env`, never from the file.

use crate::channel::ChannelError;
use crate::durable::{Deliver, Done, Durable, NoticeEntry, Persist};
use crate::notice::{Incident, Notice, clip};
use crate::retry::{Failure, RetryPolicy, classify};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// PagerDuty's limit on `payload.summary`.
pub const SUMMARY_MAX: usize = 1024;
/// PagerDuty's limit on `dedup_key`.
pub const DEDUP_KEY_MAX: usize = 255;

/// How bad an alert is, as PagerDuty names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The default: a 504 incident is an outage of the requests it hits.
    #[default]
    Critical,
    /// An error.
    Error,
    /// A warning.
    Warning,
    /// For information.
    Info,
}

/// The PagerDuty channel's configuration (a `[[channels]]` entry with
/// `type = "pagerduty"` in overtime's TOML).
///
/// ```
/// use overtime_notify::pagerduty::{PagerDutyConfig, Severity};
/// let cfg: PagerDutyConfig = serde_json::from_str(r#"{"severity": "error"}"#).unwrap();
/// assert_eq!(cfg.severity, Severity::Error);
/// assert_eq!(cfg.routing_key_env, "OVERTIME_PAGERDUTY_ROUTING_KEY");
/// assert!(serde_json::from_str::<PagerDutyConfig>(r#"{"severity": "high"}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PagerDutyConfig {
    /// The channel's name in logs, metrics (`channel` label) and its
    /// outbox folder; unique among `[[channels]]`. Default `pagerduty`.
    pub name: String,
    /// Environment variable holding the integration's routing key.
    /// Default `OVERTIME_PAGERDUTY_ROUTING_KEY`.
    pub routing_key_env: String,
    /// The Events API v2 endpoint. Default
    /// `https://events.pagerduty.com/v2/enqueue`.
    pub events_url: String,
    /// `critical` (default), `error`, `warning` or `info`.
    pub severity: Severity,
    /// `payload.source`: the system that has the problem. Default `overtime`.
    pub source: String,
    /// `payload.group`, if set (e.g. the cluster's name).
    pub group: String,
    /// The outbox folder. Empty (default): `<data dir>/<name>-outbox`.
    pub outbox_dir: String,
    /// Timeout of one HTTP request, in seconds. Default 30.
    pub request_timeout_secs: u64,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
}

impl Default for PagerDutyConfig {
    fn default() -> Self {
        PagerDutyConfig {
            name: "pagerduty".into(),
            routing_key_env: "OVERTIME_PAGERDUTY_ROUTING_KEY".into(),
            events_url: "https://events.pagerduty.com/v2/enqueue".into(),
            severity: Severity::Critical,
            source: "overtime".into(),
            group: String::new(),
            outbox_dir: String::new(),
            request_timeout_secs: 30,
            retry: RetryPolicy::default(),
        }
    }
}

impl PagerDutyConfig {
    /// The routing key from the environment; `None` when unset or empty.
    pub fn routing_key_from_env(&self) -> Option<String> {
        crate::config::secret_from_env(&self.routing_key_env)
    }

    /// The outbox folder: `outbox_dir`, or `<data_dir>/<name>-outbox`.
    pub fn outbox_path(&self, data_dir: &Path) -> PathBuf {
        crate::config::outbox_path(&self.name, &self.outbox_dir, data_dir)
    }

    /// Checks what can be checked without the environment.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.events_url.starts_with("https://") || self.events_url.starts_with("http://")) {
            return Err(format!(
                "[[channels]] pagerduty: events_url must start with https://, got {:?}",
                self.events_url
            ));
        }
        if self.routing_key_env.is_empty() {
            return Err("[[channels]] pagerduty: routing_key_env is empty".into());
        }
        if self.source.trim().is_empty() {
            return Err(
                "[[channels]] pagerduty: source is empty (PagerDuty requires payload.source)"
                    .into(),
            );
        }
        if self.request_timeout_secs == 0 {
            return Err("[[channels]] pagerduty: request_timeout_secs must be at least 1".into());
        }
        Ok(())
    }
}

/// Delivers notices to PagerDuty.
pub struct PagerDuty {
    http: reqwest::Client,
    url: String,
    routing_key: String,
    cfg: PagerDutyConfig,
}

/// Starts the PagerDuty channel on its outbox folder.
pub fn start(
    cfg: &PagerDutyConfig,
    routing_key: Option<String>,
    outbox_dir: &Path,
) -> Result<Durable<PagerDuty>, ChannelError> {
    let (routing_key, http) = crate::config::prepare(
        "pagerduty",
        cfg.validate(),
        routing_key,
        &cfg.routing_key_env,
        cfg.request_timeout_secs,
    )?;
    let pd = PagerDuty {
        http,
        url: cfg.events_url.clone(),
        routing_key,
        cfg: cfg.clone(),
    };
    Durable::start(&cfg.name, pd, outbox_dir, cfg.retry.clone())
}

/// The `dedup_key` of a fingerprint: itself, cut to 255 characters.
pub fn dedup_key(fingerprint: &str) -> String {
    fingerprint.chars().take(DEDUP_KEY_MAX).collect()
}

impl PagerDuty {
    /// The `trigger` event of `i`.
    pub fn trigger(&self, i: &Incident) -> Value {
        let mut links = vec![json!({"href": i.links.incident, "text": "The incident in overtime"})];
        if !i.links.report.is_empty() {
            links.push(json!({"href": i.links.report, "text": "The report (Markdown)"}));
        }
        for (id, url) in i.links.traces.iter().take(3) {
            links.push(json!({"href": url, "text": format!("Trace {id}")}));
        }
        let mut payload = json!({
            "summary": clip(&i.headline, SUMMARY_MAX),
            "source": self.cfg.source,
            "severity": self.cfg.severity,
            "timestamp": i.started_at.to_rfc3339(),
            "component": i.component,
            "class": i.kind,
            "custom_details": {
                "incident_id": i.id,
                "fingerprint": i.fingerprint,
                "failures": i.failures,
                "gateway_504": i.gateway_504,
                "timeouts": i.timeouts,
                "requests": i.requests,
                "top_cause": i.top_cause,
            },
        });
        if !self.cfg.group.trim().is_empty() {
            payload["group"] = json!(self.cfg.group);
        }
        json!({
            "routing_key": self.routing_key,
            "event_action": "trigger",
            "dedup_key": dedup_key(&i.fingerprint),
            "payload": payload,
            "links": links,
            "client": "overtime",
            "client_url": i.links.incident,
        })
    }

    async fn send(&self, event: Value) -> Result<(), Failure> {
        let req = self.http.post(&self.url).json(&event);
        let a = classify("events API", req).await.0?;
        let v: Value = serde_json::from_str(&a.body).unwrap_or(Value::Null);
        match v["status"].as_str() {
            Some("success") | None => Ok(()),
            Some(other) => Err(Failure::Permanent(format!(
                "events API: status {other:?}: {}",
                v["message"]
            ))),
        }
    }
}

impl Deliver for PagerDuty {
    type Event = Notice;
    type Progress = ();

    fn wants(&self, notice: &Notice) -> bool {
        matches!(
            notice,
            Notice::Page(_) | Notice::Update(_) | Notice::Resolve(_)
        )
    }

    async fn deliver(
        &self,
        entry: &mut NoticeEntry,
        _reference: Option<String>,
        _persist: &mut Persist<'_>,
    ) -> Result<Done, Failure> {
        match &entry.event {
            Notice::Page(i) | Notice::Update(i) => {
                self.send(self.trigger(i)).await?;
                Ok(Done {
                    action: "triggered",
                    reference: None,
                })
            }
            Notice::Resolve(i) => {
                self.send(json!({
                    "routing_key": self.routing_key,
                    "event_action": "resolve",
                    "dedup_key": dedup_key(&i.fingerprint),
                }))
                .await?;
                Ok(Done {
                    action: "resolved",
                    reference: None,
                })
            }
            _ => Ok(Done {
                action: "skipped",
                reference: None,
            }),
        }
    }
}
