//! The notifier: takes new incidents (durably, into the outbox) and a
//! background tokio task that delivers them to Jira in order.
//!
//! Design rules:
//! - `incident_opened` returns only once the event is fsynced in the
//!   outbox (a few milliseconds of blocking file I/O, once per incident);
//! - one event at a time, oldest first; a transient failure (429, 5xx,
//!   connection error, timeout) waits — `Retry-After` when Jira gave one,
//!   else exponential backoff with jitter — and retries the same event;
//!   events behind it wait their turn, so after an outage every queued
//!   event is delivered, in order;
//! - a 4xx other than 429 fails that event for good: it moves to
//!   `failed/` with Jira's messages, is counted and logged, and the queue
//!   goes on;
//! - the delivery journal is written before the pending file is removed,
//!   and each delivery re-reads Jira first (see [`crate::deliver`]), so a
//!   crash or restart at any point never opens a second ticket.

use crate::client::JiraClient;
use crate::config::{ConfigError, JiraConfig};
use crate::deliver::{Action, Failure, deliver};
use crate::event::IncidentEvent;
use crate::outbox::{Delivered, Entry, Outbox, OutboxError};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// Why the notifier could not start or take an event.
#[derive(Debug, thiserror::Error)]
pub enum JiraError {
    /// The `[jira]` section cannot work (a missing `base_url`, project…).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Jira is enabled but the variable named by `token_env` (the name is
    /// carried) is unset or empty.
    #[error("jira: the token environment variable {0} is unset or empty")]
    MissingToken(String),
    /// The HTTP client could not be built (a malformed `base_url`, TLS).
    #[error("jira: {0}")]
    Client(String),
    /// The outbox folder could not be opened or written: the event is not
    /// durable and was not accepted.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// [`Notifier::start`] was called outside a tokio runtime.
    #[error("jira: Notifier::start must be called inside a tokio runtime")]
    NoRuntime,
}

/// What `incident_opened` did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Durably queued for delivery.
    Queued,
    /// This incident id is already queued or delivered.
    Duplicate,
    /// Not a ticket: root-cause kind `unknown` (or empty ids).
    Skipped,
    /// Jira is not enabled in the config.
    Disabled,
}

/// The notifier's counters, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct JiraStats {
    /// Issues created.
    pub created: u64,
    /// Comments on an open issue for a recurrence.
    pub commented: u64,
    /// Resolved issues reopened (and commented) for a recurrence.
    pub reopened: u64,
    /// Events whose issue was already there (found by the incident label).
    pub found_existing: u64,
    /// Events Jira refused for good or that ran out of attempts.
    pub failed: u64,
    /// Delivery attempts that failed transiently and were retried.
    pub retries: u64,
    /// Of those, answered 429.
    pub rate_limited: u64,
    /// Events waiting in the outbox now.
    pub queued: u64,
    /// Events refused because their kind is `unknown` (or ids empty).
    pub skipped_unknown: u64,
    /// Events for an incident id already queued or delivered.
    pub skipped_duplicate: u64,
    /// Unreadable outbox files moved to `failed/` at start.
    pub bad_outbox_files: u64,
    /// The last delivery error, if the last attempt failed.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    created: AtomicU64,
    commented: AtomicU64,
    reopened: AtomicU64,
    found_existing: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
    skipped_unknown: AtomicU64,
    skipped_duplicate: AtomicU64,
    bad_outbox_files: AtomicU64,
    last_error: Mutex<Option<String>>,
}

pub(crate) struct Inner {
    cfg: JiraConfig,
    outbox: Mutex<Outbox>,
    wake: Notify,
    counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Files incidents in Jira through a durable outbox.
pub struct Notifier {
    pub(crate) inner: Option<Arc<Inner>>,
    disabled_skips: AtomicU64,
    stop: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl Notifier {
    /// Opens the outbox and starts delivering (inside the current tokio
    /// runtime). With `cfg.enabled == false` it returns a notifier that
    /// files nothing and needs neither token nor folder.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use overtime_jira::{Accepted, JiraConfig, Notifier};
    /// let n = Notifier::start(JiraConfig::default(), None, "/nonexistent".into()).unwrap();
    /// assert_eq!(n.stats().queued, 0);
    /// n.shutdown().await;
    /// # }
    /// ```
    pub fn start(
        cfg: JiraConfig,
        token: Option<String>,
        outbox_dir: PathBuf,
    ) -> Result<Notifier, JiraError> {
        if !cfg.enabled {
            return Ok(Notifier {
                inner: None,
                disabled_skips: AtomicU64::new(0),
                stop: None,
                task: None,
            });
        }
        cfg.validate()?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| JiraError::NoRuntime)?;
        let token = token
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| JiraError::MissingToken(cfg.token_env.clone()))?;
        let client = JiraClient::new(&cfg, token.trim()).map_err(JiraError::Client)?;
        let (outbox, report) = Outbox::open(&outbox_dir)?;
        if report.bad_journal_lines > 0 || report.removed_tmp > 0 {
            eprintln!(
                "overtime-jira: outbox {}: dropped {} torn journal line(s) and {} unfinished write(s) left by a crash",
                outbox_dir.display(),
                report.bad_journal_lines,
                report.removed_tmp
            );
        }
        if !outbox.is_empty() {
            eprintln!(
                "overtime-jira: {} incident(s) waiting in the outbox from before the restart",
                outbox.len()
            );
        }
        let counters = Counters::default();
        counters
            .bad_outbox_files
            .store(report.bad_files as u64, Relaxed);
        let inner = Arc::new(Inner {
            cfg,
            outbox: Mutex::new(outbox),
            wake: Notify::new(),
            counters,
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = handle.spawn(run(inner.clone(), client, stop_rx));
        Ok(Notifier {
            inner: Some(inner),
            disabled_skips: AtomicU64::new(0),
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Takes a new incident. Returns once it is durable in the outbox
    /// (blocking file I/O: a write and two fsyncs); delivery happens in
    /// the background.
    pub fn incident_opened(&self, ev: IncidentEvent) -> Result<Accepted, JiraError> {
        let Some(inner) = &self.inner else {
            self.disabled_skips.fetch_add(1, Relaxed);
            return Ok(Accepted::Disabled);
        };
        let c = &inner.counters;
        if !ev.is_actionable() {
            c.skipped_unknown.fetch_add(1, Relaxed);
            eprintln!(
                "overtime-jira: no ticket for incident {:?}: root-cause kind {:?} is not a known cause",
                ev.incident_id, ev.kind
            );
            return Ok(Accepted::Skipped);
        }
        let mut outbox = lock(&inner.outbox);
        if outbox.knows(&ev.incident_id) {
            c.skipped_duplicate.fetch_add(1, Relaxed);
            return Ok(Accepted::Duplicate);
        }
        outbox.push(ev)?;
        drop(outbox);
        inner.wake.notify_one();
        Ok(Accepted::Queued)
    }

    /// The counters now.
    pub fn stats(&self) -> JiraStats {
        stats_of(self.inner.as_deref())
    }

    /// Stops the background task promptly (an HTTP call in flight is
    /// abandoned: its intent is in the outbox, and the next start
    /// resolves it without a duplicate). Pending events stay queued.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

/// The counters of a notifier (`None`: disabled, all zero).
pub(crate) fn stats_of(inner: Option<&Inner>) -> JiraStats {
    let Some(inner) = inner else {
        return JiraStats::default();
    };
    let c = &inner.counters;
    let outbox = lock(&inner.outbox); // counters and queue move together under it
    JiraStats {
        created: c.created.load(Relaxed),
        commented: c.commented.load(Relaxed),
        reopened: c.reopened.load(Relaxed),
        found_existing: c.found_existing.load(Relaxed),
        failed: c.failed.load(Relaxed),
        retries: c.retries.load(Relaxed),
        rate_limited: c.rate_limited.load(Relaxed),
        queued: outbox.len() as u64,
        skipped_unknown: c.skipped_unknown.load(Relaxed),
        skipped_duplicate: c.skipped_duplicate.load(Relaxed),
        bad_outbox_files: c.bad_outbox_files.load(Relaxed),
        last_error: lock(&c.last_error).clone(),
    }
}

async fn run(inner: Arc<Inner>, client: JiraClient, mut stop: watch::Receiver<bool>) {
    let cfg = &inner.cfg;
    let c = &inner.counters;
    loop {
        if *stop.borrow() {
            return;
        }
        let head = lock(&inner.outbox).front().cloned();
        let Some(mut entry) = head else {
            tokio::select! {
                _ = inner.wake.notified() => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        let result = {
            let saver = inner.clone();
            let mut persist = move |e: &Entry| lock(&saver.outbox).save(e);
            tokio::select! {
                r = deliver(&client, cfg, &mut entry, &mut persist) => r,
                _ = stop.changed() => return,
            }
        };
        let id = entry.event.incident_id.clone();
        let delay = match result {
            Ok(done) => {
                let record = Delivered {
                    incident_id: id.clone(),
                    issue_key: done.key.clone(),
                    action: done.action.as_str().into(),
                    at: chrono::Utc::now(),
                };
                // Counters move under the outbox lock, as the queue does, so
                // that `stats` never sees an event gone and not yet counted.
                let mut outbox = lock(&inner.outbox);
                let completed = outbox.complete(entry.seq, record);
                if completed.is_ok() {
                    let counter = match done.action {
                        Action::Created => &c.created,
                        Action::Commented => &c.commented,
                        Action::Reopened => &c.reopened,
                        Action::Found => &c.found_existing,
                    };
                    counter.fetch_add(1, Relaxed);
                }
                drop(outbox);
                match completed {
                    Ok(()) => {
                        *lock(&c.last_error) = None;
                        eprintln!(
                            "overtime-jira: incident {id}: {} {}",
                            done.action.as_str(),
                            done.key
                        );
                        None
                    }
                    Err(e) => {
                        // Delivered but not recorded: the next attempt finds it.
                        eprintln!(
                            "overtime-jira: incident {id} delivered as {} but {e}",
                            done.key
                        );
                        *lock(&c.last_error) = Some(e.to_string());
                        Some(cfg.retry.backoff(entry.attempts + 1))
                    }
                }
            }
            Err(Failure::Permanent(why)) => {
                fail(&inner, entry, &why);
                None
            }
            Err(Failure::Retry {
                why,
                retry_after,
                rate_limited,
            }) => {
                entry.attempts += 1;
                c.retries.fetch_add(1, Relaxed);
                if rate_limited {
                    c.rate_limited.fetch_add(1, Relaxed);
                }
                *lock(&c.last_error) = Some(why.clone());
                let max = cfg.retry.max_attempts;
                if max > 0 && entry.attempts >= max {
                    fail(
                        &inner,
                        entry,
                        &format!("gave up after {max} attempts: {why}"),
                    );
                    None
                } else {
                    entry.last_error = Some(why.clone());
                    if let Err(e) = lock(&inner.outbox).save(&entry) {
                        eprintln!("overtime-jira: {e}");
                    }
                    let wait = match retry_after {
                        Some(d) => d.min(Duration::from_secs(cfg.retry.max_retry_after_secs)),
                        None => cfg.retry.backoff(entry.attempts),
                    };
                    eprintln!(
                        "overtime-jira: incident {id}: attempt {} failed ({why}); retrying in {:.1} s",
                        entry.attempts,
                        wait.as_secs_f64()
                    );
                    Some(wait)
                }
            }
        };
        if let Some(wait) = delay {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

fn fail(inner: &Inner, entry: Entry, why: &str) {
    let c = &inner.counters;
    *lock(&c.last_error) = Some(why.to_string());
    eprintln!(
        "overtime-jira: incident {}: not filed: {why} (event kept in the outbox's failed/ folder)",
        entry.event.incident_id
    );
    let mut outbox = lock(&inner.outbox);
    c.failed.fetch_add(1, Relaxed);
    if let Err(e) = outbox.dead_letter(entry, why) {
        eprintln!("overtime-jira: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notifier_can_be_shared_across_tasks() {
        fn shareable<T: Send + Sync + 'static>() {}
        shareable::<Notifier>();
        shareable::<JiraStats>();
    }

    #[tokio::test]
    async fn a_disabled_notifier_files_nothing_and_says_so() {
        let n = Notifier::start(JiraConfig::default(), None, "/nonexistent".into()).unwrap();
        let ev: IncidentEvent = serde_json::from_value(serde_json::json!({
            "incident_id": "a", "fingerprint": "k:c", "kind": "k", "component": "c",
            "headline": "h", "report_markdown": "", "report_url": null, "failures": 1,
            "at": "2026-03-01T10:00:00Z"
        }))
        .unwrap();
        assert_eq!(n.incident_opened(ev).unwrap(), Accepted::Disabled);
        assert_eq!(n.stats(), JiraStats::default());
        n.shutdown().await;
    }
}
