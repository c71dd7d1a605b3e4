//! What the notifier is told: one new incident.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A new incident, as the serve loop sees it when the incident opens (a
/// recurrence of a fingerprint after it closed is a new incident id with
/// the same fingerprint).
///
/// ```
/// use overtime_jira::IncidentEvent;
/// let ev = IncidentEvent {
///     incident_id: "llm_prefill_slow:deepseek-v4-pro@2026-03-01T10:00:00.000Z".into(),
///     fingerprint: "llm_prefill_slow:deepseek-v4-pro".into(),
///     kind: "llm_prefill_slow".into(),
///     component: "deepseek-v4-pro".into(),
///     headline: "73 % of 504s came from llm_prefill_slow on deepseek-v4-pro".into(),
///     report_markdown: "## 73 % of 504s ...\n".into(),
///     report_url: Some("http://overtime:8080/api/incidents/x?format=markdown".into()),
///     failures: 41,
///     at: "2026-03-01T10:00:00Z".parse().unwrap(),
/// };
/// assert!(ev.is_actionable());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentEvent {
    /// The incident's id (unique per opening).
    pub incident_id: String,
    /// The grouping key (`kind:component`); one ticket per fingerprint.
    pub fingerprint: String,
    /// Root-cause kind (docs/diagnosis.md#root-cause-kinds); `unknown` is refused.
    pub kind: String,
    /// The component blamed (model, tool, host, …).
    pub component: String,
    /// The report's one-line headline: the ticket's summary.
    pub headline: String,
    /// The report in Markdown: the ticket's description.
    pub report_markdown: String,
    /// Where the live report is, linked from the ticket and comments.
    pub report_url: Option<String>,
    /// Failing traces so far.
    pub failures: u64,
    /// When the incident opened.
    pub at: DateTime<Utc>,
}

impl IncidentEvent {
    /// Whether this event may become a ticket: a known root-cause kind and
    /// the ids filled in. Healthy traffic makes no incident; an `unknown`
    /// cause is too little data to file.
    pub fn is_actionable(&self) -> bool {
        !self.kind.trim().is_empty()
            && !self.kind.eq_ignore_ascii_case("unknown")
            && !self.incident_id.trim().is_empty()
            && !self.fingerprint.trim().is_empty()
    }
}
