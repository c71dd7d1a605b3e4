//! `AlertConfig`: where alerts go and how often they are re-sent.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Alert delivery settings (the `[alert]` section of overtime's config).
/// Every field has a default; with no URL at all nothing is sent, but the
/// alerts are still tracked (for `overtime_alerts_firing`).
///
/// ```
/// let cfg: overtime_alert::AlertConfig = serde_json::from_str(
///     r#"{"alertmanager_urls": ["http://alertmanager:9093"], "resend_interval_ms": 30000}"#,
/// ).unwrap();
/// assert_eq!(cfg.resend_interval().as_secs(), 30);
/// assert_eq!(cfg.queue_capacity, 256); // defaulted
/// cfg.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertConfig {
    /// Alertmanager base URLs (`http://host:9093`, a path prefix allowed);
    /// each gets every alert at `<url>/api/v2/alerts`. List every member of
    /// an Alertmanager cluster, as Prometheus does: they gossip to dedupe.
    pub alertmanager_urls: Vec<String>,
    /// A generic JSON webhook: one POST per delivery, the body shaped like
    /// Alertmanager's webhook payload (see docs/alerts.md). `None`: off.
    pub webhook_url: Option<String>,
    /// How often an alert still active is re-sent to Alertmanager, which
    /// resolves an alert by itself once `endsAt` (now + 4 × this) passes.
    pub resend_interval_ms: u64,
    /// How many times a resolved alert is sent to Alertmanager (the first
    /// at once, the rest one resend interval apart) before it is forgotten.
    pub resolved_resends: u32,
    /// The webhook gets an alert when it starts and when it is resolved; a
    /// still-firing alert is repeated to it this often (0: never), like
    /// Alertmanager's `repeat_interval`.
    pub webhook_repeat_interval_ms: u64,
    /// How long a one-shot alert (one per 504 incident) stays firing unless
    /// resolved earlier.
    pub one_shot_lifetime_ms: u64,
    /// overtime's own address as users reach it: `generatorURL` of every
    /// alert and the base of `report_url` links.
    pub external_url: String,
    /// Labels added to every alert (e.g. `cluster`, `env`), for routing and
    /// to keep several collectors' alerts apart when that is wanted.
    pub extra_labels: BTreeMap<String, String>,
    /// Timeout of one HTTP POST.
    pub timeout_ms: u64,
    /// Attempts per delivery (the first included) before it counts as failed.
    pub max_attempts: u32,
    /// First retry delay; doubled after each failure up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
    /// Deliveries waiting per target; when full the oldest is dropped (and
    /// counted): a newer delivery carries the same alerts' newer state.
    pub queue_capacity: usize,
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            alertmanager_urls: Vec::new(),
            webhook_url: None,
            resend_interval_ms: 60_000,
            resolved_resends: 3,
            webhook_repeat_interval_ms: 4 * 3_600_000,
            one_shot_lifetime_ms: 3_600_000,
            external_url: "http://localhost:8080".to_string(),
            extra_labels: BTreeMap::new(),
            timeout_ms: 10_000,
            max_attempts: 5,
            backoff_initial_ms: 500,
            backoff_max_ms: 30_000,
            queue_capacity: 256,
        }
    }
}

/// A configuration that cannot work, with the field at fault.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("alert.{field}: {message}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl AlertConfig {
    /// `resend_interval_ms` as a duration.
    pub fn resend_interval(&self) -> Duration {
        Duration::from_millis(self.resend_interval_ms)
    }

    /// Checks every URL and number; the first problem is returned.
    ///
    /// ```
    /// let cfg = overtime_alert::AlertConfig {
    ///     alertmanager_urls: vec!["alertmanager:9093".into()],
    ///     ..Default::default()
    /// };
    /// let err = cfg.validate().unwrap_err();
    /// assert_eq!(err.field, "alertmanager_urls");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, message: String| Err(ConfigError { field, message });
        for url in &self.alertmanager_urls {
            if let Err(m) = check_url(url) {
                return bad("alertmanager_urls", m);
            }
        }
        if let Some(url) = &self.webhook_url
            && let Err(m) = check_url(url)
        {
            return bad("webhook_url", m);
        }
        if let Err(m) = check_url(&self.external_url) {
            return bad("external_url", m);
        }
        if self.resend_interval_ms == 0 {
            return bad("resend_interval_ms", "must be > 0".into());
        }
        if self.resolved_resends == 0 {
            return bad("resolved_resends", "must be ≥ 1".into());
        }
        if self.one_shot_lifetime_ms == 0 {
            return bad("one_shot_lifetime_ms", "must be > 0".into());
        }
        if self.timeout_ms == 0 {
            return bad("timeout_ms", "must be > 0".into());
        }
        if self.max_attempts == 0 {
            return bad("max_attempts", "must be ≥ 1".into());
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            return bad(
                "backoff_initial_ms",
                format!(
                    "{} > backoff_max_ms {}",
                    self.backoff_initial_ms, self.backoff_max_ms
                ),
            );
        }
        if self.queue_capacity == 0 {
            return bad("queue_capacity", "must be ≥ 1".into());
        }
        for name in self.extra_labels.keys() {
            if !valid_label_name(name) {
                return bad(
                    "extra_labels",
                    format!("{name:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"),
                );
            }
        }
        Ok(())
    }
}

fn check_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!("{url:?}: scheme {:?} is not http(s)", u.scheme())),
        Err(e) => Err(format!("{url:?}: {e}")),
    }
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_prometheus_like() {
        let cfg = AlertConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.resend_interval(), Duration::from_secs(60));
    }

    #[test]
    fn rejects_what_cannot_work() {
        let with = |f: fn(&mut AlertConfig)| {
            let mut c = AlertConfig::default();
            f(&mut c);
            c.validate().unwrap_err().field
        };
        assert_eq!(
            with(|c| c.webhook_url = Some("ftp://x/".into())),
            "webhook_url"
        );
        assert_eq!(with(|c| c.resend_interval_ms = 0), "resend_interval_ms");
        assert_eq!(with(|c| c.queue_capacity = 0), "queue_capacity");
        assert_eq!(
            with(|c| {
                c.extra_labels.insert("bad-name".into(), "x".into());
            }),
            "extra_labels"
        );
        assert_eq!(
            with(|c| c.backoff_initial_ms = c.backoff_max_ms + 1),
            "backoff_initial_ms"
        );
    }

    #[test]
    fn unknown_fields_are_an_error() {
        let err = serde_json::from_str::<AlertConfig>(r#"{"resend_interval": 5}"#).unwrap_err();
        assert!(err.to_string().contains("resend_interval"), "{err}");
    }
}
