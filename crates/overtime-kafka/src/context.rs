//! The consumer's librdkafka context: where a newly assigned partition
//! starts, what a revoke commits, and the client's statistics and errors.
//!
//! Design rules:
//! - A partition starts at the latest of the group's committed offset,
//!   the sink's checkpoint for it, and the furthest position any collector
//!   sharing the sink's files has published for it
//!   ([`CommitPoints::shared_checkpoints`]: a collector killed between its
//!   flush and its commit has its rows in the bucket, so the next owner
//!   starts after them). The sink's checkpoint is written in the
//!   same durable record as the data, the commit only after: a crash in
//!   between leaves the checkpoint ahead, and starting from it reads
//!   nothing twice. The committed offset can be ahead too (another
//!   collector with its own store held the partition since): starting from
//!   the later one never re-reads what the group already stored.
//! - What is committed is the sink's [`CommitPoints::commit_point`], and
//!   only past what the group has committed (never back): with a store on
//!   object storage that is what its last flush holds, so when this
//!   collector dies the partition's next owner reads again everything the
//!   bucket lacks. With a local store it is the durable checkpoint.
//! - With a replay window ([`CommitPoints::replay_window_ms`]: a store
//!   shared by collectors that judge traces after a grace period), a
//!   partition is read from the first message of the window (by the
//!   messages' timestamps, `offsets_for_times`) when that is before its
//!   start: what lies between goes to [`CommitPoints::replay`], for the
//!   diagnosis only, never stored or committed again. A previous owner
//!   killed before judging what it had stored took those traces with it;
//!   the sink decides which of them nobody told of.
//! - Revoke publishes (the store flushes) and commits the commit points
//!   synchronously before giving the partitions up, so the next owner
//!   reads nothing this collector holds; a batch still in flight was never
//!   written, so the next owner reads it again: nothing is lost.
//! - The callbacks run on the consumer thread inside `poll`; they only
//!   queue [`Event`]s for the run loop, which owns the batches.

use crate::source_name;
use crate::stats::KafkaStats;
use overtime_model::CommitPoints;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long an assign waits for the group's committed offsets.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

/// A checkpoint's position as a Kafka offset (the next one to read).
fn offset(position: &str) -> Option<i64> {
    position.trim().parse::<i64>().ok().filter(|&o| o >= 0)
}

/// What a rebalance did, for the run loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Partition assigned; `start` is the first offset to store when
    /// known, `replay_from` (below it) the first to read again for the
    /// sink's diagnosis only ([`CommitPoints::replay`]).
    Assigned {
        topic: String,
        partition: i32,
        start: Option<i64>,
        replay_from: Option<i64>,
    },
    Revoked {
        topic: String,
        partition: i32,
    },
}

/// The consumer's context.
pub(crate) struct SourceContext {
    group: String,
    sink: Arc<dyn CommitPoints>,
    stats: Arc<KafkaStats>,
    events: Mutex<Vec<Event>>,
    /// Per assigned partition, the offset the group has committed as far
    /// as we know (read at assign, then our own commits).
    committed: Mutex<HashMap<(String, i32), i64>>,
}

impl SourceContext {
    pub(crate) fn new(group: &str, sink: Arc<dyn CommitPoints>, stats: Arc<KafkaStats>) -> Self {
        SourceContext {
            group: group.to_string(),
            sink,
            stats,
            events: Mutex::new(Vec::new()),
            committed: Mutex::new(HashMap::new()),
        }
    }

    fn committed_map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i32), i64>> {
        self.committed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the sink's commit point of `topic/partition` as the offset
    /// to commit when it is past what the group has committed; returns it
    /// then. The caller commits.
    pub(crate) fn store_commit_point(
        &self,
        consumer: &BaseConsumer<Self>,
        topic: &str,
        partition: i32,
    ) -> Option<i64> {
        let point = self
            .sink
            .commit_point(&source_name(&self.group, topic, partition))
            .and_then(|p| offset(&p))?;
        self.store_offset(consumer, topic, partition, point)
    }

    /// Stores `point` as the offset to commit when it is past what the
    /// group has committed; returns it then. The caller commits.
    pub(crate) fn store_offset(
        &self,
        consumer: &BaseConsumer<Self>,
        topic: &str,
        partition: i32,
        point: i64,
    ) -> Option<i64> {
        let key = (topic.to_string(), partition);
        if self.committed_map().get(&key).is_some_and(|&c| c >= point) {
            return None;
        }
        // `store_offsets` stores the offset as given; `store_offset` (the
        // legacy `rd_kafka_offset_store`) would store `point + 1` and skip
        // a message on the next start.
        let mut tpl = TopicPartitionList::new();
        let r = tpl
            .add_partition_offset(topic, partition, Offset::Offset(point))
            .and_then(|()| consumer.store_offsets(&tpl));
        match r {
            Ok(()) => {
                self.committed_map().insert(key, point);
                Some(point)
            }
            Err(e) => {
                self.stats.commit_errors.fetch_add(1, Relaxed);
                self.stats
                    .error(format!("storing {topic}/{partition}@{point}: {e}"));
                None
            }
        }
    }

    /// Publishes what the sink holds and stores the commit point of each
    /// partition in `parts` (before they are given up, or at shutdown).
    pub(crate) fn publish_and_store(&self, consumer: &BaseConsumer<Self>, parts: &[(String, i32)]) {
        if let Err(e) = self.sink.publish() {
            // The commit points stay where the last flush left them: the
            // next owner reads the rest again.
            self.stats.error(format!("publishing before commit: {e}"));
        }
        for (topic, partition) in parts {
            self.store_commit_point(consumer, topic, *partition);
        }
    }

    /// The events queued since the last call.
    pub(crate) fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, e: Event) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e);
    }

    /// Sets each partition's start offset in `tpl` to the latest of the
    /// committed offset, the sink's checkpoint and the published ones (or
    /// to the start of the sink's replay window, when that is before it),
    /// and queues the events.
    fn choose_starts(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let committed = match consumer.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT) {
            Ok(c) => Some(c),
            Err(e) => {
                // Without it the checkpoint alone decides (it is never
                // behind our own commits).
                self.stats.consumer_errors.fetch_add(1, Relaxed);
                self.stats.error(format!("reading committed offsets: {e}"));
                None
            }
        };
        let shared = self.sink.shared_checkpoints().unwrap_or_else(|e| {
            // Without them a partition whose owner died between its flush
            // and its commit has that flush read twice; nothing is lost.
            self.stats.consumer_errors.fetch_add(1, Relaxed);
            self.stats
                .error(format!("reading the shared checkpoints: {e}"));
            Vec::new()
        });
        let parts: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let mut starts = Vec::with_capacity(parts.len());
        for (topic, partition) in parts {
            let source = source_name(&self.group, &topic, partition);
            let committed_at = committed
                .as_ref()
                .and_then(|c| c.find_partition(&topic, partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                });
            let checkpoint = self.sink.checkpoint(&source).and_then(|p| offset(&p));
            let published = shared
                .iter()
                .filter(|c| c.source == source)
                .filter_map(|c| offset(&c.position))
                .max();
            let start = committed_at.max(checkpoint).max(published);
            let seeked = start > committed_at;
            match committed_at {
                Some(c) => self.committed_map().insert((topic.clone(), partition), c),
                None => self.committed_map().remove(&(topic.clone(), partition)),
            };
            if seeked {
                self.stats.checkpoint_seeks.fetch_add(1, Relaxed);
            }
            starts.push((topic, partition, start));
        }
        let replays = self.replay_starts(consumer, &starts);
        for (topic, partition, start) in starts {
            let replay_from = replays
                .get(&(topic.clone(), partition))
                .copied()
                .filter(|&r| start.is_some_and(|s| r < s));
            if let Some(s) = replay_from.or(start)
                && let Err(e) = tpl.set_partition_offset(&topic, partition, Offset::Offset(s))
            {
                self.stats.error(format!("{topic}/{partition}: {e}"));
            }
            self.push(Event::Assigned {
                topic,
                partition,
                start,
                replay_from,
            });
        }
    }

    /// Per partition with a known start, the first offset of the sink's
    /// replay window ([`CommitPoints::replay_window_ms`]) by the messages'
    /// timestamps; none when the window is 0 or the lookup fails (counted:
    /// the partition is read from its start, as without a window).
    fn replay_starts(
        &self,
        consumer: &BaseConsumer<Self>,
        starts: &[(String, i32, Option<i64>)],
    ) -> HashMap<(String, i32), i64> {
        let window = self.sink.replay_window_ms();
        let mut out = HashMap::new();
        if window == 0 || starts.iter().all(|s| s.2.is_none()) {
            return out;
        }
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            - window as i64;
        let mut q = TopicPartitionList::new();
        for (topic, partition, _) in starts.iter().filter(|s| s.2.is_some()) {
            if let Err(e) = q.add_partition_offset(topic, *partition, Offset::Offset(since)) {
                self.stats.error(format!("{topic}/{partition}: {e}"));
            }
        }
        match consumer.offsets_for_times(q, COMMITTED_TIMEOUT) {
            Ok(found) => {
                for e in found.elements() {
                    if let Offset::Offset(o) = e.offset()
                        && o >= 0
                    {
                        out.insert((e.topic().to_string(), e.partition()), o);
                    }
                }
            }
            Err(e) => {
                self.stats.consumer_errors.fetch_add(1, Relaxed);
                self.stats.error(format!(
                    "looking up the offsets of the last {window} ms to read again: {e}"
                ));
            }
        }
        out
    }

    fn revoked(&self, tpl: &TopicPartitionList) {
        for e in tpl.elements() {
            self.committed_map()
                .remove(&(e.topic().to_string(), e.partition()));
            self.push(Event::Revoked {
                topic: e.topic().to_string(),
                partition: e.partition(),
            });
        }
    }
}

impl ClientContext for SourceContext {
    fn stats(&self, statistics: Statistics) {
        for (topic, t) in &statistics.topics {
            for (&partition, p) in &t.partitions {
                if partition < 0 || !p.desired {
                    continue;
                }
                // hi_offset − stored offset: what is not yet durable.
                let lag = (p.consumer_lag_stored >= 0).then_some(p.consumer_lag_stored as u64);
                self.stats.set_lag(&format!("{topic}/{partition}"), lag);
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.stats.consumer_errors.fetch_add(1, Relaxed);
        self.stats.error(format!("librdkafka: {error}: {reason}"));
    }
}

impl ConsumerContext for SourceContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        self.stats.rebalances.fetch_add(1, Relaxed);
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.choose_starts(consumer, tpl);
                if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Publish and commit now, while the partitions are still
                // ours. Nothing stored is fine.
                let parts: Vec<(String, i32)> = tpl
                    .elements()
                    .iter()
                    .map(|e| (e.topic().to_string(), e.partition()))
                    .collect();
                self.publish_and_store(consumer, &parts);
                let _ = consumer.commit_consumer_state(CommitMode::Sync);
                self.revoked(tpl);
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                self.stats.error(format!("rebalance error: {other:?}"));
                self.revoked(tpl);
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            self.stats.consumer_errors.fetch_add(1, Relaxed);
            self.stats.error(format!("rebalance: {e}"));
        }
    }
}
