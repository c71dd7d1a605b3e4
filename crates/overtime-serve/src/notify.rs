//! Carrying out the notification policy ([`crate::policy`]): every action
//! becomes a [`Notice`] about an [`Incident`] snapshot and goes to every
//! alert channel, built from the config — Alertmanager pages
//! (`[alerts]`), Jira tickets (`[jira]`) and each `[[channels]]` entry
//! (Slack, PagerDuty). Nothing here decides whether to notify, and
//! nothing here knows a channel: a channel takes the notices it is for
//! and ignores the rest.
//!
//! Design rules:
//! - The channels are a list; adding one is a variant of
//!   `overtime_notify::ChannelConfig` and its module, not a change here.
//! - A resolution or hand over carries the incident's last snapshot, kept
//!   here while its page fires, so it can go out after the incident has
//!   left the list (late spans moved its traces elsewhere).
//! - Errors are this module's own ([`NotifyError`]); a channel that cannot
//!   take a notice is logged and the others still get it.

use crate::policy::{Action, NotifyPolicy, Sighting};
use chrono::Utc;
use overtime_alert::{Alert, AlertSender, PageChannel};
use overtime_config::Config;
use overtime_diagnose::IncidentReport;
use overtime_jira::Notifier;
use overtime_notify::{
    ChannelError, ChannelMetrics, ChannelsCollector, Incident, IncidentChannel, Links, Notice,
    TopCause,
};
use overtime_server::Metrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the notifications could not start.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// `[alerts]` names a target the sender cannot use.
    #[error("starting the alert sender: {0}")]
    Alerts(#[from] overtime_alert::AlertError),
    /// `[jira]` is enabled but cannot work (token, outbox, config).
    #[error("starting the Jira notifier: {0}")]
    Jira(#[from] overtime_jira::JiraError),
    /// A `[[channels]]` entry cannot start (secret, outbox, config).
    #[error("starting alert channel {name}: {source}")]
    Channel {
        /// The entry's name.
        name: String,
        /// Why.
        source: ChannelError,
    },
}

/// The notification side of `overtime serve`.
pub(crate) struct Notifications {
    /// The sender of the SLO alerts (and, through its channel, the pages).
    alerts: Option<Arc<AlertSender>>,
    channels: Vec<Box<dyn IncidentChannel>>,
    external_url: String,
    policy: NotifyPolicy,
    /// The last snapshot of each incident whose page fires, by id.
    paged: HashMap<String, Incident>,
}

impl Notifications {
    /// Starts the alert sender (when a target is configured), the Jira
    /// notifier (a no-op unless `[jira] enabled`) and every
    /// `[[channels]]` entry. Needs the runtime.
    pub(crate) fn start(cfg: &Config) -> Result<Notifications, NotifyError> {
        let a = &cfg.alerts;
        let alerts = if a.alertmanager_urls.is_empty() && a.webhook_url.is_none() {
            None
        } else {
            Some(Arc::new(AlertSender::spawn(a.clone())?))
        };
        let mut channels: Vec<Box<dyn IncidentChannel>> = Vec::new();
        if let Some(sender) = &alerts {
            channels.push(Box::new(PageChannel::new(sender.clone(), &a.external_url)));
        }
        let outbox = cfg.jira.outbox_path(&cfg.store.data_dir);
        channels.push(Box::new(Notifier::start(
            cfg.jira.clone(),
            cfg.jira.token_from_env(),
            outbox,
        )?));
        for c in &cfg.channels {
            let started = c
                .start(&cfg.store.data_dir)
                .map_err(|source| NotifyError::Channel {
                    name: c.name().to_string(),
                    source,
                })?;
            channels.push(started);
        }
        Ok(Notifications {
            alerts,
            channels,
            external_url: a.external_url.clone(),
            policy: NotifyPolicy::new(Duration::from_millis(cfg.diagnose.grace_ms)),
            paged: HashMap::new(),
        })
    }

    /// Shows the incidents as they are now to the policy and hands what
    /// it returns to every channel.
    /// `owns` says whether this collector speaks for a fingerprint (see
    /// `AppState::owns`); the others' incidents are watched, not notified.
    pub(crate) fn incidents(&mut self, reports: &[IncidentReport], owns: impl Fn(&str) -> bool) {
        let seen: Vec<Sighting<'_>> = reports
            .iter()
            .map(|r| Sighting {
                owned: owns(&r.fingerprint),
                ..Sighting::from(r)
            })
            .collect();
        let actions = self.policy.step(Instant::now(), &seen);
        // The open report of an id (the first, as the policy saw them).
        let open = |id: &str| reports.iter().find(|r| r.status == "open" && r.id == id);
        for action in actions {
            let notice = match action {
                Action::Page { incident_id } => open(&incident_id)
                    .map(|r| self.remember(r))
                    .map(Notice::Page),
                Action::Update { incident_id } => open(&incident_id)
                    .map(|r| self.remember(r))
                    .map(Notice::Update),
                Action::ResolvePage { incident_id } => {
                    let listed = reports.iter().find(|r| r.id == incident_id);
                    let last = self.paged.remove(&incident_id);
                    listed.map(|r| self.snapshot(r)).or(last).map(|mut i| {
                        i.open = false;
                        Notice::Resolve(i)
                    })
                }
                Action::HandOverPage { incident_id } => {
                    self.paged.remove(&incident_id).map(Notice::HandOver)
                }
                Action::Rename { from, to } => {
                    if let Some(mut i) = self.paged.remove(&from) {
                        i.id = to.clone();
                        self.paged.insert(to.clone(), i);
                    }
                    Some(Notice::Rename { from, to })
                }
                Action::Ticket { incident_id } => {
                    open(&incident_id).map(|r| Notice::Ticket(self.snapshot(r)))
                }
            };
            if let Some(n) = notice {
                self.tell(&n);
            }
        }
    }

    /// Hands a notice to every channel.
    fn tell(&self, notice: &Notice) {
        for c in &self.channels {
            if let Err(e) = c.notify(notice) {
                tracing::warn!(
                    "overtime: {} of {} not taken by {}: {e}",
                    notice.name(),
                    notice.about(),
                    c.name()
                );
            }
        }
    }

    /// The snapshot of a paged incident, kept for its resolution.
    fn remember(&mut self, r: &IncidentReport) -> Incident {
        let i = self.snapshot(r);
        self.paged.insert(i.id.clone(), i.clone());
        i
    }

    /// What the channels are told of an incident report.
    fn snapshot(&self, r: &IncidentReport) -> Incident {
        let started_at = chrono::DateTime::parse_from_rfc3339(&r.window.start)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|_| Utc::now());
        Incident {
            id: r.id.clone(),
            fingerprint: r.fingerprint.clone(),
            kind: r.kind.to_string(),
            component: r.component.clone(),
            open: r.status == "open",
            headline: r.headline.clone(),
            started_at,
            failures: r.trace_count as u64,
            gateway_504: r.totals.gateway_504 as u64,
            requests: r.totals.requests as u64,
            timeouts: r.totals.timeouts as u64,
            top_cause: r.causes.first().map(|c| TopCause {
                kind: c.kind.to_string(),
                component: c.component.clone(),
                count: c.count as u64,
                share: c.share,
            }),
            example_trace_ids: r.example_trace_ids.clone(),
            links: Links::new(&self.external_url, &r.id, &r.example_trace_ids),
            report_markdown: overtime_diagnose::markdown::incident(r),
        }
    }

    /// Registers every channel's delivery metrics in the collector's
    /// registry, read at each scrape: the shared `overtime_channel_*`
    /// families (declared even with no such channel) and the channels'
    /// own (`overtime_alert_*`, `overtime_jira_*`).
    pub(crate) fn register_metrics(&self, metrics: &Metrics) {
        let mut shared = ChannelsCollector::default();
        for c in &self.channels {
            match c.metrics() {
                ChannelMetrics::Shared(stats) => shared.add(c.name(), stats),
                ChannelMetrics::Own(collector) => metrics.register(Own(collector)),
            }
        }
        metrics.register(shared);
    }

    /// The SLO alerts that hold now (the full set; the sender diffs it).
    pub(crate) fn slo_alerts(&self, active: &[overtime_slo::Alert]) {
        if let Some(a) = &self.alerts {
            a.update(active.iter().map(to_alert).collect(), Utc::now());
        }
    }

    pub(crate) async fn shutdown(self) {
        for c in self.channels {
            c.shutdown().await;
        }
        // The page channel's handle is gone with it: the sender is ours.
        if let Some(a) = self.alerts.and_then(Arc::into_inner) {
            a.shutdown(Duration::from_secs(2)).await;
        }
    }
}

/// A channel's own families, registered as they are.
#[derive(Debug)]
struct Own(Box<dyn Collector>);

impl Collector for Own {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

/// An SLO alert as the sender takes it (same labels and annotations).
/// `startsAt` is the sender's first sighting on the wall clock: the SLOs
/// run on data time, which for replayed logs can be days in the past.
fn to_alert(a: &overtime_slo::Alert) -> Alert {
    Alert {
        labels: a.labels.clone(),
        annotations: a.annotations.clone(),
        starts_at: None,
        generator_url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_notify::{Accepted, Stopping};
    use std::sync::Mutex;

    /// A channel that keeps what it is told.
    #[derive(Default)]
    struct Recorder(Arc<Mutex<Vec<Notice>>>);

    impl IncidentChannel for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        fn notify(&self, notice: &Notice) -> Result<Accepted, ChannelError> {
            self.0.lock().unwrap().push(notice.clone());
            Ok(Accepted::Done)
        }
        fn metrics(&self) -> ChannelMetrics {
            ChannelMetrics::Shared(Arc::new(overtime_notify::ChannelStats::default))
        }
        fn shutdown(self: Box<Self>) -> Stopping {
            Box::pin(async {})
        }
    }

    fn report(failures: usize) -> IncidentReport {
        serde_json::from_value(serde_json::json!({
            "id": "tool_slow:search@2026-03-01T10:00:00Z", "fingerprint": "tool_slow:search",
            "kind": "tool_slow", "component": "search", "status": "open",
            "window": {"start": "2026-03-01T10:00:00Z", "end": "2026-03-01T10:05:00Z"},
            "headline": "all 504s: tool_slow on search",
            "headline_share": {"of": "504s", "count": failures, "total": failures,
                "window": {"start": "2026-03-01T10:00:00Z", "end": "2026-03-01T10:05:00Z"}},
            "totals": {"requests": 40, "failures": failures, "gateway_504": failures, "gateway_503": 0, "timeouts": failures},
            "causes": [{"kind": "tool_slow", "component": "search", "count": failures, "share": 1.0}],
            "cause_stats": {}, "llm_latency_by_input_tokens": [],
            "findings": [], "example_trace_ids": ["4bf92f3577b34da6a3ce929d0e0e4736"], "trace_count": failures
        }))
        .expect("an incident report")
    }

    #[test]
    fn every_channel_is_paged_with_the_snapshot_and_a_vanished_incident_resolves_with_its_last() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let mut n = Notifications {
            alerts: None,
            channels: vec![
                Box::new(Recorder(told.clone())),
                Box::new(Recorder(told.clone())),
            ],
            external_url: "http://overtime.example:8080".into(),
            policy: NotifyPolicy::new(Duration::from_secs(3600)).update_every(Duration::ZERO),
            paged: HashMap::new(),
        };
        n.incidents(&[report(3)], |_| true);
        n.incidents(&[report(5)], |_| true);
        // Late spans moved its traces elsewhere: it is no longer listed.
        n.incidents(&[], |_| true);
        let told = told.lock().unwrap().clone();
        let names: Vec<&str> = told.iter().map(Notice::name).collect();
        assert_eq!(
            names,
            ["page", "page", "update", "update", "resolve", "resolve"]
        );
        let Notice::Page(page) = &told[0] else {
            unreachable!()
        };
        assert_eq!(
            page.links.incident,
            "http://overtime.example:8080/#/incidents/tool_slow%3Asearch%402026-03-01T10%3A00%3A00Z"
        );
        assert_eq!(page.top_cause.as_ref().map(|c| c.count), Some(3));
        let Notice::Resolve(last) = &told[4] else {
            unreachable!()
        };
        assert_eq!((last.failures, last.open), (5, false));
    }
}
