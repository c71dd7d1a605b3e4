//! The alert itself as it is delivered. The alert names and their
//! severities are overtime-slo's catalog (the crate that decides when each
//! holds); this crate re-exports them.

use chrono::{DateTime, Utc};
use overtime_slo::alert_names::INCIDENT;
use std::collections::BTreeMap;

/// One alert as the caller sees it: its identity is its label set.
///
/// Two alerts with the same labels are the same alert (Alertmanager
/// deduplicates on exactly that), so labels carry what tells alerts apart
/// (`alertname`, `severity`, `model`, `kind`, …) and annotations carry what
/// describes them (`summary`, `description`, `report_url`).
///
/// ```
/// use overtime_alert::Alert;
/// let a = Alert::new("OvertimeChainHealthLow", "page")
///     .label("service", "agent-api")
///     .annotation("summary", "chain health 0.71 < 0.8");
/// assert_eq!(a.name(), "OvertimeChainHealthLow");
/// assert_eq!(a.labels["severity"], "page");
/// assert_eq!(a.annotations["summary"], "chain health 0.71 < 0.8");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// Identity: `alertname`, `severity` and what tells instances apart.
    pub labels: BTreeMap<String, String>,
    /// Description: `summary`, `description`, `report_url`, …
    pub annotations: BTreeMap<String, String>,
    /// When the condition started; `None` means "when the sender first saw
    /// it". Kept from the first sighting while the alert stays active.
    pub starts_at: Option<DateTime<Utc>>,
    /// Link back to the source (Alertmanager's `generatorURL`); `None` uses
    /// the config's `external_url`.
    pub generator_url: Option<String>,
}

impl Alert {
    /// An alert with labels `alertname` and `severity` and nothing else.
    pub fn new(alertname: &str, severity: &str) -> Alert {
        let mut labels = BTreeMap::new();
        labels.insert("alertname".to_string(), alertname.to_string());
        labels.insert("severity".to_string(), severity.to_string());
        Alert {
            labels,
            annotations: BTreeMap::new(),
            starts_at: None,
            generator_url: None,
        }
    }

    /// Adds or replaces a label (part of the alert's identity).
    pub fn label(mut self, name: &str, value: &str) -> Alert {
        self.labels.insert(name.to_string(), value.to_string());
        self
    }

    /// Adds or replaces an annotation (not part of the identity).
    pub fn annotation(mut self, name: &str, value: &str) -> Alert {
        self.annotations.insert(name.to_string(), value.to_string());
        self
    }

    /// Sets when the condition started.
    pub fn starting_at(mut self, at: DateTime<Utc>) -> Alert {
        self.starts_at = Some(at);
        self
    }

    /// The `alertname` label, or "" when missing.
    pub fn name(&self) -> &str {
        self.labels
            .get("alertname")
            .map(String::as_str)
            .unwrap_or("")
    }

    /// The per-incident page: `Overtime504Incident` with labels `kind`,
    /// `component`, `fingerprint` and annotations `summary` (the report's
    /// headline) and `report_url`
    /// (`<external_url>/api/incidents/<id>?format=markdown`).
    ///
    /// ```
    /// use overtime_alert::Alert;
    /// let a = Alert::incident(
    ///     "llm_prefill_slow", "deepseek-v4-pro", "llm_prefill_slow/deepseek-v4-pro",
    ///     "73 % of 504s came from llm_prefill_slow on deepseek-v4-pro",
    ///     "inc-42", "http://overtime:8080/",
    /// );
    /// assert_eq!(a.name(), "Overtime504Incident");
    /// assert_eq!(a.labels["kind"], "llm_prefill_slow");
    /// assert_eq!(a.annotations["report_url"], "http://overtime:8080/api/incidents/inc-42?format=markdown");
    /// ```
    pub fn incident(
        kind: &str,
        component: &str,
        fingerprint: &str,
        headline: &str,
        incident_id: &str,
        external_url: &str,
    ) -> Alert {
        let base = external_url.trim_end_matches('/');
        Alert::new(INCIDENT, "page")
            .label("kind", kind)
            .label("component", component)
            .label("fingerprint", fingerprint)
            .annotation("summary", headline)
            .annotation(
                "report_url",
                &format!("{base}/api/incidents/{incident_id}?format=markdown"),
            )
            .annotation("incident_id", incident_id)
    }
}

/// Alertmanager's identity of an alert: its label set, written out.
pub(crate) fn identity(labels: &BTreeMap<String, String>) -> String {
    let mut key = String::new();
    for (k, v) in labels {
        key.push_str(k);
        key.push('\u{1f}');
        key.push_str(v);
        key.push('\u{1e}');
    }
    key
}

/// A short stable fingerprint of a label set (FNV-1a 64, hex), the
/// `fingerprint` field of webhook alerts.
///
/// ```
/// use overtime_alert::{fingerprint, Alert};
/// let a = Alert::new("X", "page");
/// assert_eq!(fingerprint(&a.labels), fingerprint(&a.clone().labels));
/// assert_ne!(fingerprint(&a.labels), fingerprint(&a.label("model", "m").labels));
/// ```
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity(labels).bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
