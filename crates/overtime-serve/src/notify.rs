//! Carrying out the notification policy ([`crate::policy`]): pages and SLO
//! alerts through `overtime-alert`, tickets through `overtime-jira` (which
//! deduplicates by fingerprint and keeps a durable outbox). Nothing here
//! decides whether to notify: it builds the page or the ticket of an
//! [`Action`] and hands it to its sender.

use crate::policy::{Action, NotifyPolicy, Sighting};
use anyhow::{Context, Result};
use chrono::Utc;
use overtime_alert::{Alert, AlertSender};
use overtime_config::Config;
use overtime_diagnose::IncidentReport;
use overtime_jira::{IncidentEvent, Notifier};
use overtime_server::Metrics;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The notification side of `overtime serve`.
pub(crate) struct Notifications {
    alerts: Option<AlertSender>,
    jira: Notifier,
    external_url: String,
    policy: NotifyPolicy,
    /// The labels of each page still firing, by incident id: what its
    /// resolution is sent with.
    page_labels: HashMap<String, BTreeMap<String, String>>,
}

impl Notifications {
    /// Starts the alert sender (when a target is configured) and the Jira
    /// notifier (a no-op unless `[jira] enabled`). Needs the runtime.
    pub(crate) fn start(cfg: &Config) -> Result<Notifications> {
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
            policy: NotifyPolicy::new(Duration::from_millis(cfg.diagnose.grace_ms)),
            page_labels: HashMap::new(),
        })
    }

    /// Shows the incidents as they are now to the policy and carries out
    /// what it returns.
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
            match action {
                Action::ResolvePage { incident_id } => {
                    if let (Some(a), Some(labels)) =
                        (&self.alerts, self.page_labels.remove(&incident_id))
                    {
                        a.resolve_once(&labels, Utc::now());
                    }
                }
                Action::HandOverPage { incident_id } => {
                    if let (Some(a), Some(labels)) =
                        (&self.alerts, self.page_labels.remove(&incident_id))
                    {
                        a.hand_over_once(&labels);
                    }
                }
                Action::Rename { from, to } => {
                    // The page already sent stands for the renamed
                    // incident (same labels); resolving or handing it
                    // over goes by its new id.
                    if let Some(labels) = self.page_labels.remove(&from) {
                        self.page_labels.insert(to, labels);
                    }
                }
                Action::Page { incident_id } => {
                    if let Some(r) = open(&incident_id) {
                        self.page(r);
                    }
                }
                Action::Ticket { incident_id } => {
                    if let Some(r) = open(&incident_id) {
                        self.ticket(r);
                    }
                }
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
        self.page_labels.insert(r.id.clone(), page.labels.clone());
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
    pub(crate) fn register_metrics(&self, metrics: &Metrics) {
        if let Some(a) = &self.alerts {
            metrics.register(a.collector());
        }
        metrics.register(self.jira.collector());
    }

    /// The SLO alerts that hold now (the full set; the sender diffs it).
    pub(crate) fn slo_alerts(&self, active: &[overtime_slo::Alert]) {
        if let Some(a) = &self.alerts {
            a.update(active.iter().map(to_alert).collect(), Utc::now());
        }
    }

    pub(crate) async fn shutdown(self) {
        if let Some(a) = self.alerts {
            a.shutdown(Duration::from_secs(2)).await;
        }
        self.jira.shutdown().await;
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
