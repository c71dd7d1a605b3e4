//! The file source: tails an nginx access log or a span log (JSONL or OTLP
//! JSON lines) into the sink, following rotation, resuming from the
//! checkpoint the sink keeps with the data.
//!
//! Design rules:
//! - One OS thread per file ([`spawn_file_tail`]): reads, parsing and the
//!   wait on a full sink are blocking work, and a thread keeps them off the
//!   async runtime that serves OTLP. Shutdown is a [`CancellationToken`],
//!   checked between reads and every 20 ms of any wait.
//! - A position is acknowledged only by the sink: each batch carries
//!   `Checkpoint { source: "file:<path>", position: "inode=… offset=… line=…" }`
//!   and a restart resumes from [`RecordSink::checkpoint`], so nothing is
//!   lost and nothing is read twice.
//! - Counters are plain atomics in [`FileTailStats`], shared through an
//!   `Arc` with whoever renders metrics.
//! - A `[[file]]` block of overtime's TOML is this module's own
//!   [`FileSourceSettings`] (embedded by `overtime-config`); its `build()`
//!   makes the [`FileSourceConfig`] the tail runs with.
//!
//! ```
//! use overtime_ingest::file_tail::{spawn_file_tail, FileSourceConfig};
//! use overtime_parse::{record::RecordFormat, spans::SpanFormat};
//! use overtime_model::{Checkpoint, RecordSink, SinkError, Table};
//! use arrow::record_batch::RecordBatch;
//! use std::sync::{Arc, Mutex};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(Default)]
//! struct Rows(Mutex<(usize, Option<String>)>);
//! impl RecordSink for Rows {
//!     fn write(&self, _: Table, b: RecordBatch, cp: Option<Checkpoint>) -> Result<(), SinkError> {
//!         let mut g = self.0.lock().unwrap();
//!         g.0 += b.num_rows();
//!         if let Some(cp) = cp { g.1 = Some(cp.position); }
//!         Ok(())
//!     }
//!     fn checkpoint(&self, _: &str) -> Option<String> { self.0.lock().unwrap().1.clone() }
//! }
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("spans.jsonl");
//! std::fs::write(&path, "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"b7ad6b7169203331\",\
//!     \"service\":\"agent\",\"name\":\"root\",\"start_time\":1714561200000,\"duration_ms\":5}\n{\"trace_id\":").unwrap();
//! let sink = Arc::new(Rows::default());
//! let stop = CancellationToken::new();
//! let tail = spawn_file_tail(
//!     FileSourceConfig::new(&path, RecordFormat::Spans(SpanFormat::Jsonl)),
//!     sink.clone(),
//!     stop.clone(),
//! );
//! while tail.stats().lines() < 1 { std::thread::sleep(std::time::Duration::from_millis(5)); }
//! stop.cancel();
//! tail.join().unwrap();
//! // The partial second line waits for its end: one line read, one span.
//! assert_eq!(sink.0.lock().unwrap().0, 1);
//! assert!(sink.checkpoint("").unwrap().ends_with("line=1"));
//! ```

mod batcher;
mod follow;
mod position;
mod settings;

pub use position::{BadPosition, FilePosition};
pub use settings::{FileSettingsError, FileSourceSettings};

use overtime_model::RecordSink;
use overtime_parse::record::RecordFormat;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One tailed file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSourceConfig {
    /// The file tailed; it need not exist yet. Its checkpoint source is
    /// `file:<path>` ([`source_name`]).
    pub path: PathBuf,
    /// What the file's lines are (an nginx log of a gateway layer, JSONL
    /// spans or OTLP JSON lines).
    pub format: RecordFormat,
    /// Lines per delivered batch (and per checkpoint); a shorter batch is
    /// delivered whenever the end of the file is reached. Default 8192.
    pub batch_lines: usize,
    /// How often end of file, rotation and truncation are checked.
    /// Default 200 ms.
    pub poll_interval_ms: u64,
    /// After a rotation by rename, how long the old file must stay idle
    /// before the tail moves to the new one (writers such as nginx keep
    /// writing to the old file until they reopen). Default 1000 ms.
    pub rotate_wait_ms: u64,
}

impl FileSourceConfig {
    /// `path` with the default batch size and intervals.
    ///
    /// ```
    /// use overtime_ingest::file_tail::FileSourceConfig;
    /// use overtime_parse::{record::RecordFormat, spans::SpanFormat};
    /// let c = FileSourceConfig::new("/var/log/nginx/access.log", RecordFormat::Spans(SpanFormat::Jsonl));
    /// assert_eq!((c.batch_lines, c.poll_interval_ms, c.rotate_wait_ms), (8192, 200, 1000));
    /// ```
    pub fn new(path: impl Into<PathBuf>, format: RecordFormat) -> Self {
        FileSourceConfig {
            path: path.into(),
            format,
            batch_lines: 8192,
            poll_interval_ms: 200,
            rotate_wait_ms: 1000,
        }
    }
}

/// The checkpoint source name of a tailed path: `file:<path>`.
///
/// ```
/// assert_eq!(overtime_ingest::file_tail::source_name("/var/log/a.log"), "file:/var/log/a.log");
/// ```
pub fn source_name(path: impl AsRef<Path>) -> String {
    format!("file:{}", path.as_ref().display())
}

/// Why a tail stopped.
#[derive(Debug, thiserror::Error)]
pub enum FileTailError {
    /// The sink's checkpoint for this file cannot be read; the tail will
    /// not guess where to start (it could lose or repeat lines).
    #[error(transparent)]
    BadCheckpoint(#[from] BadPosition),
    /// A read failed (counted in [`FileTailStats::io_errors`] and retried,
    /// so only ever seen in `last_error`).
    #[error("{path}: {source}")]
    Io {
        /// The file being read.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The tail thread panicked.
    #[error("file tail thread panicked")]
    Panicked,
}

/// Counters of one file tail (monotonic since start).
#[derive(Debug, Default)]
pub struct FileTailStats {
    /// Lines read (blank ones included).
    pub lines: AtomicU64,
    /// Bytes of those lines, newlines included.
    pub bytes: AtomicU64,
    /// Good rows delivered (`gateway_requests` or `spans`).
    pub rows: AtomicU64,
    /// Rejected records delivered (see [`FileTailStats::rejected_by_reason`]).
    pub rejected: AtomicU64,
    /// Successful sink writes.
    pub batches: AtomicU64,
    /// Times the sink answered `Full`.
    pub backpressure_waits: AtomicU64,
    /// The total wait those answers caused, in milliseconds.
    pub backpressure_ms: AtomicU64,
    /// Sink writes that failed (retried with backoff).
    pub sink_errors: AtomicU64,
    /// Rotations by rename followed.
    pub rotations: AtomicU64,
    /// Truncations (copytruncate) seen.
    pub truncations: AtomicU64,
    /// Restarts whose checkpoint matched neither the file nor `<path>.1`
    /// (the file was rotated more than once while the tail was down).
    pub lost_positions: AtomicU64,
    /// Unfinished last lines delivered when their file was left.
    pub partial_lines: AtomicU64,
    /// Lines longer than 16 MiB, cut and delivered in pieces (each piece
    /// usually rejected).
    pub cut_lines: AtomicU64,
    /// Read errors (retried).
    pub io_errors: AtomicU64,
    rejected_by_reason: Mutex<BTreeMap<String, u64>>,
    last_error: Mutex<Option<String>>,
}

impl FileTailStats {
    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.lines.load(Relaxed)
    }

    /// Rejections by reason code (`format_mismatch`, `bad_json`…).
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        self.rejected_by_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The last read error, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A running file tail.
pub struct FileTail {
    stats: Arc<FileTailStats>,
    thread: JoinHandle<Result<(), FileTailError>>,
}

impl FileTail {
    /// The tail's counters.
    pub fn stats(&self) -> &Arc<FileTailStats> {
        &self.stats
    }

    /// Has the thread ended (shutdown or a bad checkpoint)?
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the thread to end (cancel the token first).
    pub fn join(self) -> Result<(), FileTailError> {
        self.thread.join().unwrap_or(Err(FileTailError::Panicked))
    }
}

/// Starts tailing `cfg.path` on its own thread, from the sink's checkpoint
/// for `file:<path>` (or from the start of the file when there is none),
/// until `shutdown` is cancelled. A missing file is waited for.
///
/// Panics only if the OS cannot start a thread.
pub fn spawn_file_tail(
    cfg: FileSourceConfig,
    sink: Arc<dyn RecordSink>,
    shutdown: CancellationToken,
) -> FileTail {
    let stats = Arc::new(FileTailStats::default());
    let path = cfg.path.display().to_string();
    let checkpoint = sink.checkpoint(&source_name(&cfg.path));
    let batcher = batcher::Batcher::new(&cfg.format, &path, sink, stats.clone(), shutdown);
    let follower = follow::Follower::new(cfg, stats.clone(), batcher);
    let thread = std::thread::Builder::new()
        .name(format!("tail {path}"))
        .spawn(move || follower.run(checkpoint))
        .expect("spawning a thread");
    FileTail { stats, thread }
}
