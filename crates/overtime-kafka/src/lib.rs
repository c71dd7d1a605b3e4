//! # overtime-kafka
//!
//! The Kafka source (docs/inputs.md#spans, ARCHITECTURE "Durability before
//! acknowledgement"): one consumer in a consumer group reads the configured
//! topics, each in its format (nginx line, JSONL span, OTLP JSON or protobuf — one
//! record per message), and delivers them to a
//! [`RecordSink`](overtime_model::RecordSink) that also
//! tells where to commit ([`CommitPoints`]).
//!
//! Design rules:
//! - At-least-once made exactly-once by the sink's checkpoint: a
//!   partition's batch is written with `Checkpoint { source:
//!   "kafka:<group>/<topic>/<partition>", position: <next offset> }`, and
//!   the offset committed is the sink's commit point for that source, in
//!   order per partition. With a local store that is the durable (WAL)
//!   checkpoint; with a store on object storage, what its last flush put
//!   in the bucket — Kafka keeps the rest, so the partition's next owner
//!   reads it again if this collector dies ([`CommitPoints::commit_point`]).
//!   On assign a partition starts at the later of the committed offset and
//!   the checkpoint, so a crash between the write and the commit reads
//!   nothing twice.
//! - `enable.auto.commit=false`, `enable.auto.offset.store=false`, and
//!   librdkafka's prefetch capped by `queued.max.messages.kbytes`.
//! - Backpressure pauses partitions (`SinkError::Full`) and retries the
//!   same batch; nothing is skipped, nothing is committed on failure.
//! - Bad messages become `rejected` rows at `topic/partition@offset`.
//! - One OS thread ([`spawn_kafka_source`]): the sink's write blocks until
//!   durable, and librdkafka's consumer is a blocking poll. Shutdown is a
//!   [`CancellationToken`], checked at least every 50 ms.
//!
//! Configuration: a `[[kafka]]` block of overtime's TOML is a
//! [`KafkaSourceSettings`] (this crate's own type, embedded by
//! `overtime-config`); its `build()` makes the [`KafkaSourceConfig`] that
//! [`spawn_kafka_source`] runs.
//!
//! Producers must key messages by trace id so that a trace's records meet
//! on one partition: see `docs/kafka.md`.
//!
//! Besides the source, the root exports its counters ([`KafkaStats`], and
//! [`KafkaCollector`] for `/metrics`) and the pure message [`Decoder`]
//! the consumer uses, for a test or tool that decodes messages without a
//! broker.

#![warn(missing_docs)]

mod collector;
mod config;
mod context;
mod decode;
mod run;
mod settings;
mod stats;

pub use collector::{KafkaCollector, LabeledStats};
pub use config::{ConfigError, DEFAULT_BATCH_MAX_MESSAGES, KafkaSourceConfig, TopicConfig};
pub use decode::{Decoded, Decoder, Msg};
pub use settings::{KafkaSourceSettings, TopicSettings};
pub use stats::KafkaStats;

use overtime_model::CommitPoints;
use rdkafka::error::KafkaError;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why the source could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum KafkaSourceError {
    /// The configuration cannot run (checked before any client is made).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// librdkafka refused to create the consumer or to subscribe.
    #[error("kafka client: {0}")]
    Client(KafkaError),
    /// The source thread panicked (only seen from [`KafkaSource::join`]).
    #[error("the kafka source thread panicked")]
    Panicked,
}

/// The checkpoint source name of a partition:
/// `kafka:<group>/<topic>/<partition>`.
///
/// ```
/// assert_eq!(overtime_kafka::source_name("overtime", "spans", 3), "kafka:overtime/spans/3");
/// ```
pub fn source_name(group: &str, topic: &str, partition: i32) -> String {
    format!("kafka:{group}/{topic}/{partition}")
}

/// A running Kafka source.
pub struct KafkaSource {
    stats: Arc<KafkaStats>,
    thread: JoinHandle<Result<(), KafkaSourceError>>,
}

impl KafkaSource {
    /// The source's counters.
    pub fn stats(&self) -> &Arc<KafkaStats> {
        &self.stats
    }

    /// Has the thread ended?
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the thread to end (cancel the token first). It commits
    /// what is durable and leaves the group before returning.
    pub fn join(self) -> Result<(), KafkaSourceError> {
        self.thread
            .join()
            .unwrap_or(Err(KafkaSourceError::Panicked))
    }
}

/// Validates `cfg`, creates the consumer, subscribes to the topics and
/// runs it on its own thread until `shutdown` is cancelled. The brokers
/// need not be up yet: librdkafka connects and reconnects by itself.
///
/// Panics only if the OS cannot start a thread.
pub fn spawn_kafka_source(
    cfg: KafkaSourceConfig,
    sink: Arc<dyn CommitPoints>,
    shutdown: CancellationToken,
) -> Result<KafkaSource, KafkaSourceError> {
    cfg.validate()?;
    let stats = Arc::new(KafkaStats::default());
    let ctx = context::SourceContext::new(&cfg.group_id, sink.clone(), stats.clone());
    let consumer = run::subscribe(&cfg, ctx)?;
    let runner = run::Runner::new(cfg.clone(), consumer, sink, stats.clone(), shutdown);
    let thread = std::thread::Builder::new()
        .name(format!("kafka {}", cfg.group_id))
        .spawn(move || runner.run())
        .expect("spawning a thread");
    Ok(KafkaSource { stats, thread })
}
