//! Where sources deliver records: the contract between every source (file
//! tail, OTLP, Kafka) and the durable store — [`RecordSink`], how records
//! are written, and [`CommitPoints`], what a source whose upstream keeps
//! records until it commits them (Kafka) may commit.
//!
//! Design rules:
//! - `write` returns `Ok` only once the batch is durable (in the WAL):
//!   only then may a source acknowledge (OTLP 200, Kafka offset, file
//!   checkpoint).
//! - A source's position travels with its data: the store keeps the
//!   checkpoint in the same WAL record, so after a crash a source resumes
//!   exactly after the last durable batch — no loss, no duplicate.
//! - Writing and committing are two traits: every source writes to a
//!   [`RecordSink`]; only a source whose upstream keeps records until it
//!   commits them (a Kafka consumer group) needs [`CommitPoints`], and it
//!   commits at [`CommitPoints::commit_point`], not at the durable
//!   checkpoint: for a store whose files other collectors read (object
//!   storage) that is what its last flush holds, so a collector that dies
//!   loses nothing the group committed — the partition's next owner reads
//!   again from there. Such a source writes with
//!   [`RecordSink::write_replayable`] (no second durable copy of what
//!   Kafka still holds, so nothing to replay twice after a crash) and
//!   calls [`CommitPoints::publish`] before it hands its partitions over.
//! - `Full` is backpressure, not failure: the source waits `retry_after_ms`
//!   (OTLP answers 429 with Retry-After, Kafka pauses its partitions, the
//!   file tail sleeps) and tries the same batch again.

use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The tables sources write to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// One row per request a gateway (nginx) logged.
    GatewayRequests,
    /// One row per span of a trace.
    Spans,
    /// One row per record that could not be read, with its reason.
    Rejected,
    /// One row per sample scraped from a model server's `/metrics`.
    ModelServerMetrics,
}

impl Table {
    /// Every table, in the order the store lays them out.
    pub const ALL: [Table; 4] = [
        Table::GatewayRequests,
        Table::Spans,
        Table::Rejected,
        Table::ModelServerMetrics,
    ];
    /// The table's name (`gateway_requests`, `spans`, `rejected`,
    /// `model_server_metrics`), as in SQL and on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::GatewayRequests => "gateway_requests",
            Table::Spans => "spans",
            Table::Rejected => "rejected",
            Table::ModelServerMetrics => "model_server_metrics",
        }
    }
    /// The table named `s` (exact name), if any.
    pub fn parse(s: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A source's position after a batch, opaque to the store (e.g.
/// `"inode=42 offset=1048576 line=4096"`, or a Kafka partition's next offset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Stable name of the source (`file:/var/log/nginx/edge.log`,
    /// `kafka:spans/3`).
    pub source: String,
    /// Where to resume, in the source's own words.
    pub position: String,
}

/// Why a [`RecordSink`] refused a batch.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SinkError {
    /// Over the memory budget: retry the same batch after this long.
    #[error("store is full, retry in {retry_after_ms} ms")]
    Full {
        /// How long to wait before retrying, ms.
        retry_after_ms: u64,
    },
    /// The write failed (disk full, I/O error); nothing was stored.
    #[error("store write failed: {0}")]
    Failed(String),
}

/// The durable destination of every source.
pub trait RecordSink: Send + Sync {
    /// Stores `batch` (and `checkpoint` with it) durably; `Ok` means durable.
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError>;
    /// The last durable position of `source`, if any.
    fn checkpoint(&self, source: &str) -> Option<String>;
    /// Stores `batch` for a source that can read it again until
    /// [`CommitPoints::commit_point`] passes `checkpoint`: a store whose
    /// files are shared keeps it in memory until its next flush, without a
    /// durable copy of its own (the source's upstream is that copy). The
    /// default is [`RecordSink::write`].
    fn write_replayable(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        self.write(table, batch, checkpoint)
    }
    /// `Some(retry_after_ms)` when a write now would most likely be refused
    /// with [`SinkError::Full`]: a cheap check a source makes before it
    /// spends CPU and memory decoding a request it would then refuse (an
    /// OTLP receiver answers 429 at once). Advisory: `None` does not
    /// promise the next write succeeds, and `write` stays the authority.
    /// The default never pushes back early.
    fn backpressure(&self) -> Option<u64> {
        None
    }
}

/// The commit semantics of a sink, for a source whose upstream keeps its
/// records until they are committed (a Kafka consumer group): where it may
/// commit, and what the collectors sharing the sink's files (a bucket)
/// have published. Every method has a default for a sink whose durable
/// checkpoint is all there is (nothing shared).
pub trait CommitPoints: RecordSink {
    /// Where `source` may be committed to: the position of the last batch
    /// that outlives this process *for every reader*. A store whose files
    /// other collectors read answers what its last flush holds; the
    /// default is the durable [`RecordSink::checkpoint`].
    fn commit_point(&self, source: &str) -> Option<String> {
        self.checkpoint(source)
    }
    /// Brings every [`CommitPoints::commit_point`] up to the checkpoint (a
    /// store flushes): called before a source hands its work to another
    /// collector, which then reads nothing this one already holds. The
    /// default has nothing to do.
    fn publish(&self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Every position the collectors sharing this sink's files have
    /// published with their flushes (this one's included), for every
    /// source: a source taking over work another collector held starts
    /// after the furthest of its own, since every collector already reads
    /// those records. The default has none (nothing is shared).
    fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, SinkError> {
        Ok(Vec::new())
    }
    /// How far back, ms, a source taking over work another collector held
    /// reads its records again *for this sink's diagnosis only*
    /// ([`CommitPoints::replay`]): the previous holder may have died with
    /// traces it had stored but not yet judged and told anyone of, and
    /// nobody else holds their records. 0 (the default): nothing is read
    /// again.
    fn replay_window_ms(&self) -> u64 {
        0
    }
    /// Records read again from before where the source stores (another
    /// collector stored them): shown to what watches this sink, never
    /// stored twice. The watcher decides which of them nobody has judged.
    /// The default has no watcher and nothing to do (the records are
    /// stored already).
    fn replay(&self, _table: Table, _batch: RecordBatch) {}
}
