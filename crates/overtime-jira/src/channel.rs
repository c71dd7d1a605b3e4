//! The Jira notifier as one of overtime's alert channels
//! ([`overtime_notify::IncidentChannel`]): it takes the policy's `ticket`
//! notices — an incident open for the full grace period — and ignores the
//! rest (pages, updates and resolutions are for Alertmanager, Slack and
//! PagerDuty; a ticket stays until a human closes it).

use crate::event::IncidentEvent;
use crate::notifier::{Accepted, Notifier};
use overtime_notify::{
    Accepted as Taken, ChannelError, ChannelMetrics, Incident, IncidentChannel, Notice, Stopping,
};

impl From<&Incident> for IncidentEvent {
    /// The ticket of an incident: its headline as the summary, its report
    /// as the description, linked to the live report.
    fn from(i: &Incident) -> Self {
        IncidentEvent {
            incident_id: i.id.clone(),
            fingerprint: i.fingerprint.clone(),
            kind: i.kind.clone(),
            component: i.component.clone(),
            headline: i.headline.clone(),
            report_markdown: i.report_markdown.clone(),
            report_url: (!i.links.report.is_empty()).then(|| i.links.report.clone()),
            failures: i.failures,
            at: i.started_at,
        }
    }
}

impl IncidentChannel for Notifier {
    fn name(&self) -> &str {
        "jira"
    }

    fn notify(&self, notice: &Notice) -> Result<Taken, ChannelError> {
        let Notice::Ticket(i) = notice else {
            return Ok(Taken::Ignored);
        };
        match self.incident_opened(IncidentEvent::from(i)) {
            Ok(Accepted::Queued) => Ok(Taken::Queued),
            Ok(Accepted::Duplicate) => Ok(Taken::Duplicate),
            Ok(Accepted::Skipped | Accepted::Disabled) => Ok(Taken::Ignored),
            Err(e) => Err(ChannelError::Refused(e.to_string())),
        }
    }

    fn metrics(&self) -> ChannelMetrics {
        ChannelMetrics::Own(Box::new(self.collector()))
    }

    fn shutdown(self: Box<Self>) -> Stopping {
        Box::pin(Notifier::shutdown(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JiraConfig;

    #[tokio::test]
    async fn only_ticket_notices_reach_jira() {
        let n = Notifier::start(JiraConfig::default(), None, "/nonexistent".into()).unwrap();
        let i: Incident = serde_json::from_value(serde_json::json!({
            "id": "k:c@2026-03-01T10:00:00Z", "fingerprint": "k:c", "kind": "k", "component": "c",
            "open": true, "headline": "h", "started_at": "2026-03-01T10:00:00Z",
            "failures": 3, "gateway_504": 3, "requests": 9, "timeouts": 3, "top_cause": null,
            "example_trace_ids": [], "links": {"incident": "", "report": "http://o/api/incidents/x", "traces": []}
        }))
        .unwrap();
        assert_eq!(n.notify(&Notice::Page(i.clone())).unwrap(), Taken::Ignored);
        // Disabled Jira takes the ticket and files nothing.
        assert_eq!(
            n.notify(&Notice::Ticket(i.clone())).unwrap(),
            Taken::Ignored
        );
        let ev = IncidentEvent::from(&i);
        assert_eq!(ev.report_url.as_deref(), Some("http://o/api/incidents/x"));
        assert_eq!(ev.failures, 3);
        Box::new(n).shutdown().await;
    }
}
