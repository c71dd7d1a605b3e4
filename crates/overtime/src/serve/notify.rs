//! What the collector tells people about on its own: a page per new 504
//! incident and the SLO alerts (through `overtime-alert`), and a Jira
//! ticket per new incident (through `overtime-jira`, which deduplicates by
//! fingerprint and keeps a durable outbox).
//!
//! An incident is announced once per incident id, when it is first seen
//! open; the ids already announced are remembered for the life of the
//! process (Jira's outbox remembers across restarts, so a restart never
//! files twice).

use anyhow::{Context, Result};
use chrono::Utc;
use overtime_alert::{Alert, AlertSender};
use overtime_config::Config;
use overtime_diagnose::report::IncidentReport;
use overtime_jira::{IncidentEvent, Notifier};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The notification side of `overtime serve`.
pub struct Notifications {
    pub alerts: Option<AlertSender>,
    pub jira: Notifier,
    external_url: String,
    announced: HashSet<String>,
    /// The labels of each incident's page still firing, by incident id:
    /// resolved in Alertmanager when the incident closes.
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
            announced: HashSet::new(),
            paged: HashMap::new(),
        })
    }

    /// Announces every open incident not announced yet, and resolves the
    /// page of every incident that closed.
    pub fn incidents(&mut self, reports: &[IncidentReport]) {
        if let Some(a) = &self.alerts {
            for r in reports.iter().filter(|r| r.status != "open") {
                if let Some(labels) = self.paged.remove(&r.id) {
                    a.resolve_once(&labels, Utc::now());
                }
            }
        }
        for r in reports {
            if r.status != "open" || !self.announced.insert(r.id.clone()) {
                continue;
            }
            let kind = r.kind.to_string();
            if let Some(a) = &self.alerts {
                if r.totals.gateway_504 > 0 {
                    let page = Alert::incident(
                        &kind,
                        &r.component,
                        &r.fingerprint,
                        &r.headline,
                        &r.id,
                        &self.external_url,
                    );
                    self.paged.insert(r.id.clone(), page.labels.clone());
                    a.fire_once(page, Utc::now());
                }
            }
            let at = chrono::DateTime::parse_from_rfc3339(&r.window.start)
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_else(|_| Utc::now());
            let ev = IncidentEvent {
                incident_id: r.id.clone(),
                fingerprint: r.fingerprint.clone(),
                kind,
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
