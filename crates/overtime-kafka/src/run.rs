//! The consumer thread: poll, batch per partition, write, then commit the
//! sink's commit point; pause partitions the sink pushes back on.
//!
//! Design rules:
//! - One thread owns the consumer and every partition's state, so a
//!   partition's batches are written strictly in order, each with its
//!   checkpoint. Batches are written with `write_replayable` (Kafka keeps
//!   them until committed), and the offset committed is the sink's
//!   commit point (context.rs): after each batch and every
//!   [`COMMIT_EVERY`], as the store's flushes move it.
//! - A batch is written rejected rows first, then its records with the
//!   checkpoint; the checkpoint therefore only ever follows a batch that
//!   is wholly durable. A write that fails keeps the rest of the batch for
//!   the retry and never commits: no "commit even on failure".
//! - `SinkError::Full` or `Failed`: the partition is paused (the consumer
//!   keeps polling, so the group keeps it), the same batch is retried after
//!   the delay (`Failed`: doubling, capped), then the partition resumes.
//!   Messages already prefetched are kept in order behind the batch.
//! - Messages below a partition's start read again for the replay window
//!   (context.rs) are decoded in batches as the others and handed to
//!   `CommitPoints::replay`: no checkpoint, no commit, their rejected rows
//!   dropped (the owner that stored them counted those).
//! - Any message below a partition's next expected offset (a re-fetch
//!   after a seek, pause or rebalance) is dropped: it is already durable or
//!   already buffered.

use crate::context::{Event, SourceContext};
use crate::decode::{Decoder, Msg};
use crate::stats::KafkaStats;
use crate::{KafkaSourceConfig, KafkaSourceError, source_name};
use arrow::record_batch::RecordBatch;
use overtime_model::{Checkpoint, CommitPoints, SinkError, Table};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::TopicPartitionList;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Longest single wait in `poll`, so shutdown and deadlines are noticed.
const POLL: Duration = Duration::from_millis(50);
/// How often the commit points are looked at between batches (a store
/// flushes on its own clock). Short: a collector killed after a flush and
/// before the commit of its point leaves that flush's rows to be read
/// again by the next owner, so they would be in the bucket twice; this is
/// that window (a map lookup per partition, nothing sent unless a point
/// moved).
const COMMIT_EVERY: Duration = Duration::from_millis(50);
/// First and largest retry delay after `SinkError::Failed`.
const FAIL_BACKOFF_MS: (u64, u64) = (100, 5_000);

/// A batch taken from a partition, not yet wholly durable.
struct Pending {
    /// Writes still to do, in order; the last carries the checkpoint.
    writes: VecDeque<(Table, RecordBatch, Option<Checkpoint>)>,
    records: u64,
    rejected: u64,
    rejected_by_reason: BTreeMap<String, u64>,
}

/// One assigned partition.
#[derive(Default)]
struct Partition {
    buf: VecDeque<Msg>,
    /// When the oldest buffered message arrived.
    oldest: Option<Instant>,
    /// Next offset expected; anything below is a re-fetch.
    next: Option<i64>,
    /// The first offset stored; messages below it are read again for the
    /// diagnosis only (the replay window).
    store_from: Option<i64>,
    /// Messages of the replay window not yet handed over, and when the
    /// oldest of them arrived.
    replay: Vec<Msg>,
    replay_oldest: Option<Instant>,
    pending: Option<Pending>,
    paused: bool,
    retry_at: Option<Instant>,
    backoff_ms: u64,
}

/// The run loop's state.
pub(crate) struct Runner {
    cfg: KafkaSourceConfig,
    consumer: BaseConsumer<SourceContext>,
    sink: Arc<dyn CommitPoints>,
    stats: Arc<KafkaStats>,
    shutdown: CancellationToken,
    decoders: HashMap<String, Decoder>,
    parts: BTreeMap<(String, i32), Partition>,
    /// When the commit points were last looked at.
    commit_checked: Instant,
}

impl Runner {
    pub(crate) fn new(
        cfg: KafkaSourceConfig,
        consumer: BaseConsumer<SourceContext>,
        sink: Arc<dyn CommitPoints>,
        stats: Arc<KafkaStats>,
        shutdown: CancellationToken,
    ) -> Self {
        let decoders = cfg
            .topics
            .iter()
            .map(|t| (t.topic.clone(), Decoder::new(&t.format, &t.topic)))
            .collect();
        Runner {
            cfg,
            consumer,
            sink,
            stats,
            shutdown,
            decoders,
            parts: BTreeMap::new(),
            commit_checked: Instant::now(),
        }
    }

    /// Runs until shutdown; then commits what is durable and leaves the
    /// group (batches not yet durable are read again by the next owner).
    pub(crate) fn run(mut self) -> Result<(), KafkaSourceError> {
        while !self.shutdown.is_cancelled() {
            // Copy the message out at once: its borrow of the consumer must
            // end before the rebalance events are applied.
            let polled = match self.consumer.poll(self.poll_timeout()) {
                Some(Ok(m)) => Some(Ok((
                    (m.topic().to_string(), m.partition()),
                    Msg {
                        offset: m.offset(),
                        payload: m.payload().map(<[u8]>::to_vec),
                    },
                ))),
                Some(Err(e)) => Some(Err(e)),
                None => None,
            };
            self.apply_events();
            match polled {
                Some(Ok((key, msg))) => self.accept(key, msg),
                Some(Err(e)) => {
                    self.stats.consumer_errors.fetch_add(1, Relaxed);
                    self.stats.error(format!("consumer: {e}"));
                }
                None => {}
            }
            self.flush_due();
            if self.commit_checked.elapsed() >= COMMIT_EVERY {
                self.commit_checked = Instant::now();
                let keys: Vec<(String, i32)> = self.parts.keys().cloned().collect();
                for (topic, partition) in keys {
                    self.commit(&topic, partition);
                }
            }
        }
        self.close();
        Ok(())
    }

    /// Until the nearest batch deadline or retry, at most [`POLL`].
    fn poll_timeout(&self) -> Duration {
        let now = Instant::now();
        let max_wait = Duration::from_millis(self.cfg.batch_max_ms);
        let mut t = POLL;
        for p in self.parts.values() {
            let due = match (&p.pending, p.retry_at, p.oldest.or(p.replay_oldest)) {
                (Some(_), Some(at), _) => Some(at),
                (None, _, Some(oldest)) => Some(oldest + max_wait),
                _ => None,
            };
            if let Some(due) = due {
                t = t.min(due.saturating_duration_since(now));
            }
        }
        t
    }

    fn apply_events(&mut self) {
        for e in self.consumer.context().take_events() {
            match e {
                Event::Assigned {
                    topic,
                    partition,
                    start,
                    replay_from,
                } => {
                    // The group catches up with what the sink holds, and
                    // with a start past its offset (what a dead owner
                    // published): what lies before it is in the bucket.
                    self.commit(&topic, partition);
                    if let Some(s) = start {
                        self.commit_offset(&topic, partition, s);
                    }
                    let p = Partition {
                        next: replay_from.or(start),
                        store_from: start,
                        ..Partition::default()
                    };
                    self.parts.insert((topic, partition), p);
                }
                Event::Revoked { topic, partition } => {
                    // Whatever was not durable was not committed: the next
                    // owner reads it again.
                    let gone = self.parts.remove(&(topic.clone(), partition));
                    // No longer ours, so no longer paused by us: the
                    // paused gauge (pauses − resumes) must not keep it.
                    if gone.is_some_and(|p| p.paused) {
                        self.stats.resumes.fetch_add(1, Relaxed);
                    }
                    self.stats.set_lag(&format!("{topic}/{partition}"), None);
                }
            }
        }
    }

    fn accept(&mut self, key: (String, i32), msg: Msg) {
        let p = self.parts.entry(key).or_default();
        if p.next.is_some_and(|n| msg.offset < n) {
            self.stats.skipped_below_checkpoint.fetch_add(1, Relaxed);
            return;
        }
        p.next = Some(msg.offset + 1);
        if p.store_from.is_some_and(|s| msg.offset < s) {
            if p.replay.is_empty() {
                p.replay_oldest = Some(Instant::now());
            }
            p.replay.push(msg);
            self.stats.replayed.fetch_add(1, Relaxed);
            return;
        }
        if p.buf.is_empty() {
            p.oldest = Some(Instant::now());
        }
        p.buf.push_back(msg);
        self.stats.messages.fetch_add(1, Relaxed);
    }

    /// Writes every batch that is due: full, old enough, or a retry.
    fn flush_due(&mut self) {
        let now = Instant::now();
        let max_wait = Duration::from_millis(self.cfg.batch_max_ms);
        let keys: Vec<(String, i32)> = self.parts.keys().cloned().collect();
        for key in keys {
            let Some(p) = self.parts.get_mut(&key) else {
                continue;
            };
            let replay_due = p.replay.len() >= self.cfg.batch_max_messages
                || !p.buf.is_empty()
                || p.replay_oldest
                    .is_some_and(|o| now.duration_since(o) >= max_wait);
            if replay_due
                && !p.replay.is_empty()
                && let Some(decoder) = self.decoders.get_mut(&key.0)
            {
                let msgs = std::mem::take(&mut p.replay);
                p.replay_oldest = None;
                let d = decoder.decode(key.1, &msgs);
                if d.records.num_rows() > 0 {
                    self.sink.replay(d.table, d.records);
                }
            }
            if p.pending.is_some() {
                if p.retry_at.is_some_and(|at| at > now) {
                    continue;
                }
            } else {
                let full = p.buf.len() >= self.cfg.batch_max_messages;
                let old = p.oldest.is_some_and(|o| now.duration_since(o) >= max_wait);
                if !(full || old) || p.buf.is_empty() {
                    continue;
                }
                // Every subscribed topic has a decoder; a message of another
                // topic cannot arrive.
                let Some(decoder) = self.decoders.get_mut(&key.0) else {
                    continue;
                };
                let n = p.buf.len().min(self.cfg.batch_max_messages);
                let msgs: Vec<Msg> = p.buf.drain(..n).collect();
                p.oldest = (!p.buf.is_empty()).then(Instant::now);
                p.pending = Some(prepare(&self.cfg.group_id, &key, decoder, &msgs));
            }
            self.write_pending(&key);
        }
    }

    /// Tries the pending batch of `key`; on success stores and commits its
    /// offset and resumes the partition.
    fn write_pending(&mut self, key: &(String, i32)) {
        let Some(p) = self.parts.get_mut(key) else {
            return;
        };
        let Some(pending) = p.pending.as_mut() else {
            return;
        };
        while let Some((table, batch, cp)) = pending.writes.front() {
            match self
                .sink
                .write_replayable(*table, batch.clone(), cp.clone())
            {
                Ok(()) => {
                    pending.writes.pop_front();
                }
                Err(e) => {
                    let delay = match &e {
                        SinkError::Full { retry_after_ms } => {
                            self.stats.sink_full.fetch_add(1, Relaxed);
                            (*retry_after_ms).max(1)
                        }
                        SinkError::Failed(msg) => {
                            self.stats.sink_failures.fetch_add(1, Relaxed);
                            self.stats.error(format!("sink: {msg}"));
                            p.backoff_ms =
                                (p.backoff_ms * 2).clamp(FAIL_BACKOFF_MS.0, FAIL_BACKOFF_MS.1);
                            p.backoff_ms
                        }
                    };
                    p.retry_at = Some(Instant::now() + Duration::from_millis(delay));
                    if !p.paused {
                        p.paused = true;
                        self.stats.pauses.fetch_add(1, Relaxed);
                        pause_or_resume(&self.consumer, &self.stats, key, true);
                    }
                    return;
                }
            }
        }
        let done = p.pending.take().expect("checked above");
        p.retry_at = None;
        p.backoff_ms = 0;
        let was_paused = std::mem::take(&mut p.paused);
        self.stats.records.fetch_add(done.records, Relaxed);
        self.stats.rejected.fetch_add(done.rejected, Relaxed);
        self.stats.add_rejections(&done.rejected_by_reason);
        self.stats.batches.fetch_add(1, Relaxed);
        self.commit(&key.0, key.1);
        if was_paused {
            self.stats.resumes.fetch_add(1, Relaxed);
            pause_or_resume(&self.consumer, &self.stats, key, false);
        }
    }

    /// Commits the sink's commit point of the partition when it moved past
    /// what the group has (asynchronously: librdkafka sends commits in
    /// order; the final one is synchronous).
    fn commit(&self, topic: &str, partition: i32) {
        let ctx = self.consumer.context();
        if ctx
            .store_commit_point(&self.consumer, topic, partition)
            .is_none()
        {
            return;
        }
        self.send_commit(topic, partition);
    }

    /// Commits `offset` when it is past what the group has.
    fn commit_offset(&self, topic: &str, partition: i32, offset: i64) {
        let ctx = self.consumer.context();
        if ctx
            .store_offset(&self.consumer, topic, partition, offset)
            .is_some()
        {
            self.send_commit(topic, partition);
        }
    }

    fn send_commit(&self, topic: &str, partition: i32) {
        self.stats.commits.fetch_add(1, Relaxed);
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Async) {
            self.stats.commit_errors.fetch_add(1, Relaxed);
            self.stats.error(format!("commit {topic}/{partition}: {e}"));
        }
    }

    /// Shutdown: publish, commit the commit points synchronously, then
    /// leave.
    fn close(self) {
        let keys: Vec<(String, i32)> = self.parts.keys().cloned().collect();
        self.consumer
            .context()
            .publish_and_store(&self.consumer, &keys);
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            // `NoOffset` when nothing new was stored: not an error.
            if !e.to_string().contains("No offset") {
                self.stats.error(format!("final commit: {e}"));
            }
        }
        self.consumer.unsubscribe();
    }
}

/// Decodes `msgs` into the writes of one batch: rejected rows first, then
/// the records with the checkpoint (or the rejected rows carry it when
/// there are no records). A batch with no rows at all is the checkpoint
/// alone, so commit points move in offset order.
fn prepare(group: &str, key: &(String, i32), decoder: &mut Decoder, msgs: &[Msg]) -> Pending {
    let next_offset = msgs.last().map(|m| m.offset + 1).unwrap_or(0);
    let d = decoder.decode(key.1, msgs);
    let checkpoint = Checkpoint {
        source: source_name(group, &key.0, key.1),
        position: next_offset.to_string(),
    };
    let (records, rejected) = (d.records.num_rows() as u64, d.rejected.num_rows() as u64);
    let mut writes = VecDeque::new();
    match (records > 0, rejected > 0) {
        (true, true) => {
            writes.push_back((Table::Rejected, d.rejected, None));
            writes.push_back((d.table, d.records, Some(checkpoint)));
        }
        (true, false) => writes.push_back((d.table, d.records, Some(checkpoint))),
        (false, true) => writes.push_back((Table::Rejected, d.rejected, Some(checkpoint))),
        (false, false) => writes.push_back((d.table, d.records, Some(checkpoint))),
    }
    Pending {
        writes,
        records,
        rejected,
        rejected_by_reason: d.rejected_by_reason,
    }
}

fn pause_or_resume(
    consumer: &BaseConsumer<SourceContext>,
    stats: &KafkaStats,
    key: &(String, i32),
    pause: bool,
) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&key.0, key.1);
    let r = if pause {
        consumer.pause(&tpl)
    } else {
        consumer.resume(&tpl)
    };
    if let Err(e) = r {
        stats.consumer_errors.fetch_add(1, Relaxed);
        stats.error(format!(
            "{} {}/{}: {e}",
            if pause { "pause" } else { "resume" },
            key.0,
            key.1
        ));
    }
}

/// Creates the consumer and subscribes it to the configured topics.
pub(crate) fn subscribe(
    cfg: &KafkaSourceConfig,
    ctx: SourceContext,
) -> Result<BaseConsumer<SourceContext>, KafkaSourceError> {
    let mut client = cfg.client_config();
    if !cfg.extra.contains_key("statistics.interval.ms") {
        // Lag comes from librdkafka's statistics: no broker round trip.
        client.set("statistics.interval.ms", "5000");
    }
    let consumer: BaseConsumer<SourceContext> = client
        .create_with_context(ctx)
        .map_err(KafkaSourceError::Client)?;
    let topics: Vec<&str> = cfg.topics.iter().map(|t| t.topic.as_str()).collect();
    consumer
        .subscribe(&topics)
        .map_err(KafkaSourceError::Client)?;
    Ok(consumer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_parse::record::RecordFormat;
    use overtime_parse::spans::SpanFormat;

    fn msg(offset: i64, p: &[u8]) -> Msg {
        Msg {
            offset,
            payload: Some(p.to_vec()),
        }
    }

    const SPAN: &[u8] = br#"{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","service":"agent","name":"root","start_time":1714561200000,"duration_ms":5}"#;

    fn shape(p: &Pending) -> Vec<(Table, usize, Option<String>)> {
        p.writes
            .iter()
            .map(|(t, b, cp)| (*t, b.num_rows(), cp.as_ref().map(|c| c.position.clone())))
            .collect()
    }

    #[test]
    fn rejected_rows_first_checkpoint_last() {
        let key = ("spans".to_string(), 2);
        let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::Jsonl), "spans");
        let p = prepare("g", &key, &mut d, &[msg(7, SPAN), msg(8, b"{oops")]);
        assert_eq!(
            shape(&p),
            vec![
                (Table::Rejected, 1, None),
                (Table::Spans, 1, Some("9".to_string()))
            ]
        );
        assert_eq!(p.writes[1].2.as_ref().unwrap().source, "kafka:g/spans/2");
        assert_eq!((p.records, p.rejected), (1, 1));

        let p = prepare("g", &key, &mut d, &[msg(9, b"{oops")]);
        assert_eq!(
            shape(&p),
            vec![(Table::Rejected, 1, Some("10".to_string()))]
        );
        assert_eq!(p.rejected_by_reason["bad_json"], 1);
    }
}
