//! The Kafka source's counters, shared through an `Arc` with whoever
//! renders metrics.
//!
//! Design rules:
//! - Plain atomics for counters (written by the consumer thread, read by
//!   anyone); the two maps (rejections by reason, lag by partition) sit
//!   behind mutexes that are held only to copy or bump a value.
//! - Lag is librdkafka's cached high watermark minus the next offset to
//!   read, refreshed after each batch: no broker round trip.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one running Kafka source.
#[derive(Debug, Default)]
pub struct KafkaStats {
    pub(crate) messages: AtomicU64,
    pub(crate) records: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) commit_errors: AtomicU64,
    pub(crate) pauses: AtomicU64,
    pub(crate) resumes: AtomicU64,
    pub(crate) sink_full: AtomicU64,
    pub(crate) sink_failures: AtomicU64,
    pub(crate) skipped_below_checkpoint: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) checkpoint_seeks: AtomicU64,
    pub(crate) rebalances: AtomicU64,
    pub(crate) consumer_errors: AtomicU64,
    pub(crate) rejected_by_reason: Mutex<BTreeMap<String, u64>>,
    pub(crate) lag: Mutex<BTreeMap<String, u64>>,
    pub(crate) last_error: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl KafkaStats {
    /// Messages taken from the consumer (after dropping those already
    /// durable below a partition's checkpoint).
    pub fn messages(&self) -> u64 {
        self.messages.load(Relaxed)
    }
    /// Records (gateway rows and spans) written durably.
    pub fn records(&self) -> u64 {
        self.records.load(Relaxed)
    }
    /// Rejected rows written durably.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Relaxed)
    }
    /// Batches made durable and committed.
    pub fn batches(&self) -> u64 {
        self.batches.load(Relaxed)
    }
    /// Offset commits requested, and those the broker refused.
    pub fn commits(&self) -> (u64, u64) {
        (self.commits.load(Relaxed), self.commit_errors.load(Relaxed))
    }
    /// Partitions paused because the sink pushed back or failed.
    pub fn pauses(&self) -> u64 {
        self.pauses.load(Relaxed)
    }
    /// Partitions resumed after their batch became durable, or revoked
    /// while paused (no longer ours to resume).
    pub fn resumes(&self) -> u64 {
        self.resumes.load(Relaxed)
    }
    /// `SinkError::Full` answers received.
    pub fn sink_full(&self) -> u64 {
        self.sink_full.load(Relaxed)
    }
    /// `SinkError::Failed` answers received (the batch was retried).
    pub fn sink_failures(&self) -> u64 {
        self.sink_failures.load(Relaxed)
    }
    /// Messages of a replay window read again for the sink's diagnosis
    /// only, below where the partition's records are stored (not in
    /// [`KafkaStats::messages`]).
    pub fn replayed(&self) -> u64 {
        self.replayed.load(Relaxed)
    }
    /// Messages dropped because the sink already held them (below its
    /// checkpoint for the partition).
    pub fn skipped_below_checkpoint(&self) -> u64 {
        self.skipped_below_checkpoint.load(Relaxed)
    }
    /// Partitions started from the sink's checkpoint because it was ahead
    /// of the group's committed offset.
    pub fn checkpoint_seeks(&self) -> u64 {
        self.checkpoint_seeks.load(Relaxed)
    }
    /// Rebalance events (assign or revoke) seen.
    pub fn rebalances(&self) -> u64 {
        self.rebalances.load(Relaxed)
    }
    /// Errors reported by the consumer (librdkafka retries them itself).
    pub fn consumer_errors(&self) -> u64 {
        self.consumer_errors.load(Relaxed)
    }
    /// Rejections by reason code (`format_mismatch`, `bad_json`,
    /// `bad_proto`, `empty_message`…).
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        lock(&self.rejected_by_reason).clone()
    }
    /// Lag by `topic/partition`, in messages, as of the last batch.
    pub fn lag_by_partition(&self) -> BTreeMap<String, u64> {
        lock(&self.lag).clone()
    }
    /// Total lag over the assigned partitions, in messages.
    pub fn lag(&self) -> u64 {
        lock(&self.lag).values().sum()
    }
    /// The last error seen (consumer, commit or sink), if any.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    pub(crate) fn add_rejections(&self, reasons: &BTreeMap<String, u64>) {
        let mut m = lock(&self.rejected_by_reason);
        for (r, n) in reasons {
            *m.entry(r.clone()).or_default() += n;
        }
    }

    pub(crate) fn set_lag(&self, partition: &str, lag: Option<u64>) {
        let mut m = lock(&self.lag);
        match lag {
            Some(l) => {
                m.insert(partition.to_string(), l);
            }
            None => {
                m.remove(partition);
            }
        }
    }

    pub(crate) fn error(&self, e: impl ToString) {
        *lock(&self.last_error) = Some(e.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_accumulate_and_clear() {
        let s = KafkaStats::default();
        let mut r = BTreeMap::new();
        r.insert("bad_json".to_string(), 2);
        s.add_rejections(&r);
        s.add_rejections(&r);
        assert_eq!(s.rejected_by_reason()["bad_json"], 4);
        s.set_lag("t/0", Some(5));
        s.set_lag("t/1", Some(7));
        assert_eq!(s.lag(), 12);
        s.set_lag("t/0", None);
        assert_eq!(s.lag_by_partition().len(), 1);
        s.error("boom");
        assert_eq!(s.last_error().as_deref(), Some("boom"));
    }
}
