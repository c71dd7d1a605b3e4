//! The notifier: takes new incidents durably and delivers them to Jira in
//! order, on overtime's shared durable outbox ([`overtime_notify::Durable`]).
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
//!
//! What is Jira's own here: which events become tickets, the counters'
//! names ([`JiraStats`]) and one attempt at a delivery ([`Jira`]); the
//! queue, the retries and the journal are the shared outbox's.

use crate::client::JiraClient;
use crate::config::{ConfigError, JiraConfig};
use crate::deliver::deliver;
use crate::event::IncidentEvent;
use crate::outbox::{Entry, OutboxError, Progress};
use overtime_notify::{ChannelError, ChannelStats, Deliver, Done, Durable, Failure, StatsSource};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

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

/// Where the counters are read from (shared with the collector, which
/// outlives the notifier).
#[derive(Clone, Default)]
pub(crate) struct StatsHandle {
    /// The outbox's counters; `None`: Jira disabled.
    source: Option<StatsSource>,
    skipped_unknown: Arc<AtomicU64>,
}

impl StatsHandle {
    pub(crate) fn enabled(&self) -> bool {
        self.source.is_some()
    }

    pub(crate) fn stats(&self) -> JiraStats {
        let Some(source) = &self.source else {
            return JiraStats::default();
        };
        let s: ChannelStats = source();
        JiraStats {
            created: s.delivered("created"),
            commented: s.delivered("commented"),
            reopened: s.delivered("reopened"),
            found_existing: s.delivered("found"),
            failed: s.failed,
            retries: s.retries,
            rate_limited: s.rate_limited,
            queued: s.queued,
            skipped_unknown: self.skipped_unknown.load(Relaxed),
            skipped_duplicate: s.duplicates,
            bad_outbox_files: s.bad_outbox_files,
            last_error: s.last_error,
        }
    }
}

/// One attempt at filing an event in Jira (see [`crate::deliver`]).
pub(crate) struct Jira {
    client: JiraClient,
    cfg: JiraConfig,
}

impl Deliver for Jira {
    type Event = IncidentEvent;
    type Progress = Progress;

    fn wants(&self, event: &IncidentEvent) -> bool {
        event.is_actionable()
    }

    async fn deliver(
        &self,
        entry: &mut Entry,
        _reference: Option<String>,
        persist: &mut crate::deliver::Persist<'_>,
    ) -> Result<Done, Failure> {
        let done = deliver(&self.client, &self.cfg, entry, persist).await?;
        tracing::warn!(
            "overtime-jira: incident {}: {} {}",
            entry.event.incident_id,
            done.action.as_str(),
            done.key
        );
        Ok(Done {
            action: done.action.as_str(),
            reference: Some(done.key),
        })
    }
}

/// Files incidents in Jira through a durable outbox.
pub struct Notifier {
    durable: Option<Durable<Jira>>,
    pub(crate) stats: StatsHandle,
    disabled_skips: AtomicU64,
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
                durable: None,
                stats: StatsHandle::default(),
                disabled_skips: AtomicU64::new(0),
            });
        }
        cfg.validate()?;
        tokio::runtime::Handle::try_current().map_err(|_| JiraError::NoRuntime)?;
        let token = token
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| JiraError::MissingToken(cfg.token_env.clone()))?;
        let client = JiraClient::new(&cfg, token.trim()).map_err(JiraError::Client)?;
        let retry = cfg.retry.clone();
        let durable = Durable::start("jira", Jira { client, cfg }, &outbox_dir, retry).map_err(
            |e| match e {
                ChannelError::Outbox(o) => JiraError::Outbox(o),
                ChannelError::NoRuntime(_) => JiraError::NoRuntime,
                other => JiraError::Client(other.to_string()),
            },
        )?;
        Ok(Notifier {
            stats: StatsHandle {
                source: Some(durable.stats_source()),
                skipped_unknown: Arc::new(AtomicU64::new(0)),
            },
            durable: Some(durable),
            disabled_skips: AtomicU64::new(0),
        })
    }

    /// Takes a new incident. Returns once it is durable in the outbox
    /// (blocking file I/O: a write and two fsyncs); delivery happens in
    /// the background.
    pub fn incident_opened(&self, ev: IncidentEvent) -> Result<Accepted, JiraError> {
        let Some(durable) = &self.durable else {
            self.disabled_skips.fetch_add(1, Relaxed);
            return Ok(Accepted::Disabled);
        };
        if !ev.is_actionable() {
            self.stats.skipped_unknown.fetch_add(1, Relaxed);
            tracing::warn!(
                "overtime-jira: no ticket for incident {:?}: root-cause kind {:?} is not a known cause",
                ev.incident_id,
                ev.kind
            );
            return Ok(Accepted::Skipped);
        }
        Ok(match durable.queue(ev)? {
            overtime_notify::Accepted::Queued => Accepted::Queued,
            overtime_notify::Accepted::Duplicate => Accepted::Duplicate,
            overtime_notify::Accepted::Ignored | overtime_notify::Accepted::Done => {
                Accepted::Skipped
            }
        })
    }

    /// The counters now.
    pub fn stats(&self) -> JiraStats {
        self.stats.stats()
    }

    /// Stops the background task promptly (an HTTP call in flight is
    /// abandoned: its intent is in the outbox, and the next start
    /// resolves it without a duplicate). Pending events stay queued.
    pub async fn shutdown(mut self) {
        if let Some(d) = self.durable.take() {
            d.stop().await;
        }
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
