//! What the collector tells people about on its own: a page per new 504
//! incident and the SLO alerts (through `overtime-alert`), and a Jira
//! ticket per new incident (through `overtime-jira`, which deduplicates by
//! fingerprint and keeps a durable outbox).
//!
//! Design rules:
//! - A page goes out the first time an incident with 504s is seen open:
//!   that can be on an early verdict, seconds after the 504 (see
//!   `diagnose.failure_grace_ms`). It is resolved when the incident closes
//!   or disappears (late spans moved its traces to another cause).
//! - A ticket waits until the incident has been open for the full grace
//!   period: by then its verdicts are final, so a cause that early
//!   verdicts got wrong never reaches Jira.
//! - Each incident id is paged once and ticketed once for the life of the
//!   process (Jira's outbox remembers across restarts, so a restart never
//!   files twice).

use anyhow::{Context, Result};
use chrono::Utc;
use overtime_alert::{Alert, AlertSender};
use overtime_config::Config;
use overtime_diagnose::report::IncidentReport;
use overtime_jira::{IncidentEvent, Notifier};
use overtime_server::metrics::Metrics;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// The notification side of `overtime serve`.
pub struct Notifications {
    pub alerts: Option<AlertSender>,
    pub jira: Notifier,
    external_url: String,
    /// How long an incident stays open before it is ticketed.
    ticket_after: Duration,
    /// Open incidents not ticketed yet, with when they were first seen.
    first_seen: HashMap<String, Instant>,
    ticketed: HashSet<String>,
    paged_ids: HashSet<String>,
    /// The labels of each incident's page still firing, by incident id.
    paged: HashMap<String, BTreeMap<String, String>>,
}

impl Notifications {
    /// Starts the alert sender (when a target is configured) and the Jira
    /// notifier (a no-op unless `[jira] enabled`). Needs the runtime.
    pub fn start(cfg: &Config) -> Result<Notifications> {
        let a = &cfg.alerts;
        let alerts = if a.alertmanager_urls.is_empty() && a.webhook_url.is_none() {
            None
        } else {
            Some(AlertSender::spawn(a.clone()).context("starting the alert sender")?)
        };
        let outbox = cfg.jira.outbox_path(&cfg.store.data_dir);
        let jira = Notifier::start(cfg.jira.clone(), cfg.jira.token_from_env(), outbox)
            .context("starting the Jira notifier")?;
        Ok(Notifications {
            alerts,
            jira,
            external_url: a.external_url.clone(),
            ticket_after: Duration::from_millis(cfg.diagnose.grace_ms),
            first_seen: HashMap::new(),
            ticketed: HashSet::new(),
            paged_ids: HashSet::new(),
            paged: HashMap::new(),
        })
    }

    /// Pages every new open incident with 504s, resolves the page of every
    /// incident no longer open, and tickets every incident open for the
    /// full grace period.
    pub fn incidents(&mut self, reports: &[IncidentReport]) {
        let open: HashMap<&str, &IncidentReport> = reports
            .iter()
            .filter(|r| r.status == "open")
            .map(|r| (r.id.as_str(), r))
            .collect();
        if let Some(a) = &self.alerts {
            let gone: Vec<String> = self
                .paged
                .keys()
                .filter(|id| !open.contains_key(id.as_str()))
                .cloned()
                .collect();
            for id in gone {
                if let Some(labels) = self.paged.remove(&id) {
                    a.resolve_once(&labels, Utc::now());
                }
            }
        }
        self.first_seen
            .retain(|id, _| open.contains_key(id.as_str()));
        let now = Instant::now();
        for r in reports.iter().filter(|r| r.status == "open") {
            if r.totals.gateway_504 > 0 && self.paged_ids.insert(r.id.clone()) {
                self.page(r);
            }
            if self.ticketed.contains(&r.id) {
                continue;
            }
            let seen = *self.first_seen.entry(r.id.clone()).or_insert(now);
            if now.duration_since(seen) >= self.ticket_after {
                self.first_seen.remove(&r.id);
                self.ticketed.insert(r.id.clone());
                self.ticket(r);
            }
        }
    }

    fn page(&mut self, r: &IncidentReport) {
        let Some(a) = &self.alerts else { return };
        let page = Alert::incident(
            &r.kind.to_string(),
            &r.component,
            &r.fingerprint,
            &r.headline,
            &r.id,
            &self.external_url,
        );
        self.paged.insert(r.id.clone(), page.labels.clone());
        a.fire_once(page, Utc::now());
    }

    fn ticket(&self, r: &IncidentReport) {
        let at = chrono::DateTime::parse_from_rfc3339(&r.window.start)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|_| Utc::now());
        let ev = IncidentEvent {
            incident_id: r.id.clone(),
            fingerprint: r.fingerprint.clone(),
            kind: r.kind.to_string(),
            component: r.component.clone(),
            headline: r.headline.clone(),
            report_markdown: overtime_diagnose::markdown::incident(r),
            report_url: Some(format!(
                "{}/api/incidents/{}?format=markdown",
                self.external_url.trim_end_matches('/'),
                r.id
            )),
            failures: r.trace_count as u64,
            at,
        };
        if let Err(e) = self.jira.incident_opened(ev) {
            eprintln!("overtime: incident {} not queued for Jira: {e}", r.id);
        }
    }

    /// Registers the delivery counters (`overtime_alert_*` when a target
    /// is configured, `overtime_jira_*` always) in the collector's
    /// registry, read at each scrape.
    pub fn register_metrics(&self, metrics: &Metrics) {
        if let Some(a) = &self.alerts {
            metrics.register(a.collector());
        }
        metrics.register(self.jira.collector());
    }

    /// The SLO alerts that hold now (the full set; the sender diffs it).
    pub fn slo_alerts(&self, active: Vec<Alert>) {
        if let Some(a) = &self.alerts {
            a.update(active, Utc::now());
        }
    }

    pub async fn shutdown(self) {
        if let Some(a) = self.alerts {
            a.shutdown(std::time::Duration::from_secs(2)).await;
        }
        self.jira.shutdown().await;
    }
}

/// An SLO alert as the sender takes it (same labels and annotations).
/// `startsAt` is the sender's first sighting on the wall clock: the SLOs
/// run on data time, which for replayed logs can be days in the past.
pub fn to_alert(a: &overtime_slo::Alert) -> Alert {
    Alert {
        labels: a.labels.clone(),
        annotations: a.annotations.clone(),
        starts_at: None,
        generator_url: None,
    }
}
