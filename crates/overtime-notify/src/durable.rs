//! [`Durable`]: a channel whose notices go through a durable outbox and a
//! background task that delivers them, in order, each once. A channel
//! module writes only its [`Deliver`] — which notices it wants and one
//! attempt at delivering one — and gets the rest from here.
//!
//! Design rules:
//! - `notify` (and [`Durable::queue`]) returns only once the item is
//!   fsynced in the outbox; one already waiting or delivered (by its
//!   [`Queued::key`], across restarts) is a duplicate and is not queued
//!   again;
//! - one notice at a time, oldest first; a transient failure (429, 5xx,
//!   connection error, timeout) waits — `Retry-After` when the server gave
//!   one, else exponential backoff with jitter ([`RetryPolicy`]) — and
//!   retries the same notice; those behind it wait their turn, so after
//!   an outage every notice is delivered, in order;
//! - a permanent refusal moves that notice to `failed/` with the reason,
//!   counts and logs it, and the queue goes on;
//! - the journal is written before the waiting file is removed; a call
//!   that is not safe to repeat is marked `sent` in the entry first, so
//!   the attempt after a crash or a lost answer looks before it sends.

use crate::channel::{
    Accepted, ChannelError, ChannelMetrics, IncidentChannel, StatsSource, Stopping,
};
use crate::collector::ChannelStats;
use crate::notice::Notice;
use crate::outbox::{Delivered, Entry, Outbox, OutboxError, Pushed, Queued};
use crate::retry::{Failure, RetryPolicy};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// A waiting notice.
pub type NoticeEntry = Entry<Notice>;

/// Saves an entry's progress durably (before a call not safe to repeat).
pub type Persist<'a, E = Notice, P = ()> =
    dyn FnMut(&Entry<E, P>) -> Result<(), OutboxError> + Send + 'a;

/// What a channel records of its progress in an entry (`()`: nothing
/// beyond [`Entry::sent`]).
pub trait Progress: Serialize + DeserializeOwned + Clone + Default + Send + Sync + 'static {}

impl<P: Serialize + DeserializeOwned + Clone + Default + Send + Sync + 'static> Progress for P {}

/// A delivered item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// What it did (`posted`, `updated`, `triggered`, `created`…): the
    /// `action` label of `overtime_channel_deliveries_total`.
    pub action: &'static str,
    /// What to remember for the incident (a Slack message, a Jira issue),
    /// recorded in the journal under [`Queued::records_for`].
    pub reference: Option<String>,
}

/// One channel's way of delivering what waits in its outbox: the
/// policy's [`Notice`]s (Slack, PagerDuty) or an item of its own (Jira's
/// incident events).
pub trait Deliver: Send + Sync + 'static {
    /// What waits in the outbox.
    type Event: Queued;
    /// What an entry records of the channel's progress.
    type Progress: Progress;
    /// Whether this channel takes the item at all.
    fn wants(&self, event: &Self::Event) -> bool;
    /// One attempt at delivering `entry`. `reference` is what an earlier
    /// delivery recorded for [`Queued::about`] (a Slack message). Call
    /// `persist` after marking `entry.sent` (or the progress) before a
    /// call that is not safe to repeat.
    fn deliver(
        &self,
        entry: &mut Entry<Self::Event, Self::Progress>,
        reference: Option<String>,
        persist: &mut Persist<'_, Self::Event, Self::Progress>,
    ) -> impl Future<Output = Result<Done, Failure>> + Send;
}

#[derive(Default)]
struct Counters {
    by_action: BTreeMap<&'static str, u64>,
    failed: u64,
    duplicates: u64,
    retries: u64,
    rate_limited: u64,
    bad_outbox_files: u64,
    last_error: Option<String>,
}

struct Inner<E, P> {
    name: String,
    retry: RetryPolicy,
    outbox: Mutex<Outbox<E, P>>,
    /// Moved together with the queue: always take `outbox` first.
    counters: Mutex<Counters>,
    wake: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<E: Queued, P: Progress> Inner<E, P> {
    fn stats(&self) -> ChannelStats {
        let outbox = lock(&self.outbox);
        let c = lock(&self.counters);
        ChannelStats {
            delivered: c.by_action.clone(),
            failed: c.failed,
            duplicates: c.duplicates,
            retries: c.retries,
            rate_limited: c.rate_limited,
            queued: outbox.len() as u64,
            bad_outbox_files: c.bad_outbox_files,
            last_error: c.last_error.clone(),
        }
    }
}

/// A channel on a durable outbox (see the module doc).
pub struct Durable<D: Deliver> {
    inner: Arc<Inner<D::Event, D::Progress>>,
    deliver: Arc<D>,
    stop: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl<D: Deliver> Durable<D> {
    /// Opens the outbox folder `dir` and starts delivering through
    /// `deliver` (inside the current tokio runtime).
    pub fn start(
        name: &str,
        deliver: D,
        dir: &Path,
        retry: RetryPolicy,
    ) -> Result<Durable<D>, ChannelError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| ChannelError::NoRuntime(name.to_string()))?;
        let (outbox, report) = Outbox::<D::Event, D::Progress>::open(dir)?;
        if report != Default::default() {
            tracing::warn!(
                "overtime: {name} outbox {}: {} unreadable file(s) moved to failed/, {} torn journal line(s) and {} unfinished write(s) dropped",
                dir.display(),
                report.bad_files,
                report.bad_journal_lines,
                report.removed_tmp
            );
        }
        if !outbox.is_empty() {
            tracing::warn!(
                "overtime: {name}: {} waiting in the outbox from before the restart",
                outbox.len()
            );
        }
        let inner = Arc::new(Inner {
            name: name.to_string(),
            retry,
            outbox: Mutex::new(outbox),
            counters: Mutex::new(Counters {
                bad_outbox_files: report.bad_files as u64,
                ..Default::default()
            }),
            wake: Notify::new(),
        });
        let deliver = Arc::new(deliver);
        let (stop, stop_rx) = watch::channel(false);
        let task = handle.spawn(run(inner.clone(), deliver.clone(), stop_rx));
        Ok(Durable {
            inner,
            deliver,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The counters now.
    pub fn stats(&self) -> ChannelStats {
        self.inner.stats()
    }

    /// The counters, read afresh at each call (for a collector that
    /// outlives the channel).
    pub fn stats_source(&self) -> StatsSource {
        let inner = self.inner.clone();
        Arc::new(move || inner.stats())
    }

    /// Takes an item: returns once it is durable in the outbox (blocking
    /// file I/O: a write and two fsyncs), or says why it was not queued.
    pub fn queue(&self, event: D::Event) -> Result<Accepted, OutboxError> {
        if !self.deliver.wants(&event) {
            return Ok(Accepted::Ignored);
        }
        let mut outbox = lock(&self.inner.outbox);
        match outbox.push(event)? {
            Pushed::Queued => {
                drop(outbox);
                self.inner.wake.notify_one();
                Ok(Accepted::Queued)
            }
            Pushed::Merged => Ok(Accepted::Duplicate),
            Pushed::Duplicate => {
                lock(&self.inner.counters).duplicates += 1;
                Ok(Accepted::Duplicate)
            }
        }
    }

    /// Stops the background task promptly (a call in flight is abandoned:
    /// its intent is in the outbox, and the next start settles it without
    /// a duplicate). Waiting items stay queued.
    pub fn stop(mut self) -> Stopping {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let task = self.task.take();
        Box::pin(async move {
            if let Some(task) = task {
                let _ = task.await;
            }
        })
    }
}

impl<D: Deliver<Event = Notice>> IncidentChannel for Durable<D> {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn notify(&self, notice: &Notice) -> Result<Accepted, ChannelError> {
        Ok(self.queue(notice.clone())?)
    }

    fn metrics(&self) -> ChannelMetrics {
        ChannelMetrics::Shared(self.stats_source())
    }

    fn shutdown(self: Box<Self>) -> Stopping {
        (*self).stop()
    }
}

impl<D: Deliver> Drop for Durable<D> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

async fn run<D: Deliver>(
    inner: Arc<Inner<D::Event, D::Progress>>,
    deliver: Arc<D>,
    mut stop: watch::Receiver<bool>,
) {
    let name = inner.name.as_str();
    loop {
        if *stop.borrow() {
            return;
        }
        let head = {
            let outbox = lock(&inner.outbox);
            outbox.front().cloned().map(|e| {
                let r = outbox.reference(e.event.about()).map(str::to_string);
                (e, r)
            })
        };
        let Some((mut entry, reference)) = head else {
            tokio::select! {
                _ = inner.wake.notified() => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        let result = {
            let saver = inner.clone();
            let mut persist = move |e: &Entry<D::Event, D::Progress>| lock(&saver.outbox).save(e);
            tokio::select! {
                r = deliver.deliver(&mut entry, reference, &mut persist) => r,
                _ = stop.changed() => return,
            }
        };
        let delay = match result {
            Ok(done) => {
                let record = Delivered {
                    key: entry.key.clone(),
                    for_incident: entry.event.records_for().to_string(),
                    reference: done.reference.clone(),
                    action: done.action.into(),
                    at: chrono::Utc::now(),
                };
                let mut outbox = lock(&inner.outbox);
                match outbox.complete(entry.seq, record) {
                    Ok(()) => {
                        let mut c = lock(&inner.counters);
                        *c.by_action.entry(done.action).or_default() += 1;
                        c.last_error = None;
                        None
                    }
                    Err(e) => {
                        // Delivered but not recorded: the next attempt looks first.
                        drop(outbox);
                        tracing::warn!("overtime: {name}: {} delivered but {e}", entry.key);
                        lock(&inner.counters).last_error = Some(e.to_string());
                        Some(inner.retry.backoff(entry.attempts + 1))
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
                {
                    let mut c = lock(&inner.counters);
                    c.retries += 1;
                    c.rate_limited += u64::from(rate_limited);
                    c.last_error = Some(why.clone());
                }
                let max = inner.retry.max_attempts;
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
                        tracing::warn!("overtime: {name}: {e}");
                    }
                    let wait = inner.retry.wait(entry.attempts, retry_after);
                    tracing::warn!(
                        "overtime: {name}: {} attempt {} failed ({why}); retrying in {:.1} s",
                        entry.key,
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

fn fail<E: Queued, P: Progress>(inner: &Inner<E, P>, entry: Entry<E, P>, why: &str) {
    tracing::warn!(
        "overtime: {}: {} not delivered: {why} (kept in the outbox's failed/ folder)",
        inner.name,
        entry.key
    );
    let mut outbox = lock(&inner.outbox);
    if let Err(e) = outbox.dead_letter(entry, why) {
        tracing::warn!("overtime: {}: {e}", inner.name);
    }
    let mut c = lock(&inner.counters);
    c.failed += 1;
    c.last_error = Some(why.to_string());
}
