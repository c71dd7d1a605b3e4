//! `AlertSender`: the book plus one delivery worker per target.

use crate::alert::Alert;
use crate::book::{AlertBook, Outgoing};
use crate::config::{AlertConfig, ConfigError};
use crate::deliver::{Delivery, Retry, Target, TargetStats, run};
use crate::payload::{alertmanager_body, webhook_bodies};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Why an `AlertSender` could not start.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `spawn` was called outside a tokio runtime.
    #[error("alert sender: no tokio runtime to run the delivery tasks on")]
    NoRuntime,
    /// The HTTP client could not be built (TLS setup).
    #[error("alert sender: building the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Delivery counters of every target and the alerts firing now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AlertStats {
    /// One entry per Alertmanager URL, then the webhook.
    pub targets: Vec<TargetStats>,
    /// Alerts firing now by `alertname` (`overtime_alerts_firing`).
    pub firing: BTreeMap<String, usize>,
}

impl AlertStats {
    /// Alerts delivered, all targets.
    pub fn sent(&self) -> u64 {
        self.targets.iter().map(|t| t.sent).sum()
    }
    /// Alerts given up on, all targets.
    pub fn failed(&self) -> u64 {
        self.targets.iter().map(|t| t.failed).sum()
    }
    /// Alerts dropped from full queues, all targets.
    pub fn dropped(&self) -> u64 {
        self.targets.iter().map(|t| t.dropped).sum()
    }
}

/// The collector's alert delivery.
///
/// Every evaluation the caller hands over the complete set of alerts
/// active now ([`AlertSender::update`]); the sender diffs it against what
/// it sent: new alerts fire, still-active ones are re-sent every
/// `resend_interval` (`endsAt` = now + 4 × that), missing ones are
/// resolved (`endsAt` = now) and re-sent resolved a few times. Per-incident
/// pages go through [`AlertSender::fire_once`]. Each Alertmanager URL and
/// the webhook has its own bounded queue and worker, so a dead receiver
/// delays no other.
///
/// ```no_run
/// # async fn demo() -> Result<(), overtime_alert::AlertError> {
/// use overtime_alert::{Alert, AlertConfig, AlertSender};
/// let sender = AlertSender::spawn(AlertConfig {
///     alertmanager_urls: vec!["http://alertmanager:9093".into()],
///     ..Default::default()
/// })?;
/// sender.update(vec![Alert::new("OvertimeChainHealthLow", "page")], chrono::Utc::now());
/// let stats = sender.shutdown(std::time::Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
pub struct AlertSender {
    external_url: String,
    book: Mutex<AlertBook>,
    alertmanagers: Vec<Arc<Target>>,
    webhook: Option<Arc<Target>>,
    workers: Vec<JoinHandle<()>>,
    closed: Arc<AtomicBool>,
}

impl AlertSender {
    /// Validates `cfg` and starts one delivery task per target on the
    /// current tokio runtime.
    pub fn spawn(cfg: AlertConfig) -> Result<AlertSender, AlertError> {
        cfg.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| AlertError::NoRuntime)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.timeout_ms))
            .connect_timeout(Duration::from_millis(cfg.timeout_ms.min(5_000)))
            .build()?;
        let retry = Retry {
            max_attempts: cfg.max_attempts,
            initial: Duration::from_millis(cfg.backoff_initial_ms),
            max: Duration::from_millis(cfg.backoff_max_ms),
        };
        let url = |base: &str, suffix: &str| {
            let full = format!("{}{suffix}", base.trim_end_matches('/'));
            reqwest::Url::parse(&full).map_err(|e| ConfigError {
                field: "alertmanager_urls",
                message: format!("{full:?}: {e}"),
            })
        };
        let mut alertmanagers = Vec::new();
        for base in &cfg.alertmanager_urls {
            let u = url(base, "/api/v2/alerts")?;
            alertmanagers.push(Arc::new(Target::new("alertmanager", u, cfg.queue_capacity)));
        }
        let webhook = match &cfg.webhook_url {
            Some(u) => Some(Arc::new(Target::new(
                "webhook",
                url(u, "")?,
                cfg.queue_capacity,
            ))),
            None => None,
        };
        let closed = Arc::new(AtomicBool::new(false));
        let workers = alertmanagers
            .iter()
            .chain(webhook.iter())
            .map(|t| runtime.spawn(run(t.clone(), client.clone(), retry, closed.clone())))
            .collect();
        Ok(AlertSender {
            external_url: cfg.external_url.clone(),
            book: Mutex::new(AlertBook::new(&cfg)),
            alertmanagers,
            webhook,
            workers,
            closed,
        })
    }

    /// Hands over every alert active at `now` (the full set, each
    /// evaluation; call it at least once per resend interval). Never blocks
    /// on the network: deliveries are queued.
    pub fn update(&self, active: Vec<Alert>, now: DateTime<Utc>) {
        let out = self.book().update(active, now);
        self.dispatch(out);
    }

    /// Fires a one-shot alert (one per new 504 incident; see
    /// [`Alert::incident`]). Deduplicated by labels while it lives.
    pub fn fire_once(&self, alert: Alert, now: DateTime<Utc>) {
        let out = self.book().fire_once(alert, now);
        self.dispatch(out);
    }

    /// Resolves a one-shot alert early (its incident closed).
    pub fn resolve_once(&self, labels: &BTreeMap<String, String>, now: DateTime<Utc>) {
        let out = self.book().resolve_once(labels, now);
        self.dispatch(out);
    }

    /// Stops re-sending a one-shot alert without resolving it (another
    /// collector sends it now; see [`AlertBook::hand_over_once`]).
    pub fn hand_over_once(&self, labels: &BTreeMap<String, String>) {
        self.book().hand_over_once(labels);
    }

    /// The delivery counters and the alerts firing now.
    pub fn stats(&self) -> AlertStats {
        AlertStats {
            targets: self.targets().map(|t| t.stats()).collect(),
            firing: self.book().firing(),
        }
    }

    /// Every Alertmanager, then the webhook.
    pub(crate) fn targets(&self) -> impl Iterator<Item = &Arc<Target>> {
        self.alertmanagers.iter().chain(self.webhook.iter())
    }

    /// Stops taking work, lets the workers finish the queues for at most
    /// `grace`, then stops them; returns the final counters (a delivery cut
    /// short counts as failed, what was still queued as dropped).
    pub async fn shutdown(mut self, grace: Duration) -> AlertStats {
        self.close();
        let mut workers = std::mem::take(&mut self.workers);
        let all = async {
            for w in workers.iter_mut() {
                let _ = w.await;
            }
        };
        if tokio::time::timeout(grace, all).await.is_err() {
            for w in &workers {
                w.abort();
            }
            for w in workers.into_iter().filter(|w| !w.is_finished()) {
                let _ = w.await; // cancelled: it no longer touches the counters
            }
        }
        for t in self.alertmanagers.iter().chain(self.webhook.iter()) {
            t.account_abandoned();
        }
        self.stats()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for t in self.alertmanagers.iter().chain(self.webhook.iter()) {
            t.wake();
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, AlertBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dispatch(&self, out: Outgoing) {
        if !out.alertmanager.is_empty() && !self.alertmanagers.is_empty() {
            let body = alertmanager_body(&out.alertmanager)
                .to_string()
                .into_bytes();
            for t in &self.alertmanagers {
                t.push(Delivery {
                    body: body.clone(),
                    alerts: out.alertmanager.len() as u64,
                });
            }
        }
        if let Some(t) = &self.webhook {
            for body in webhook_bodies(&out.webhook, &self.external_url) {
                let alerts = body["alerts"].as_array().map_or(0, Vec::len) as u64;
                t.push(Delivery {
                    body: body.to_string().into_bytes(),
                    alerts,
                });
            }
        }
    }
}

impl Drop for AlertSender {
    /// Dropped without `shutdown`: the workers finish their queues and stop.
    fn drop(&mut self) {
        self.close();
    }
}
