//! Whole lines → Arrow batches → the sink, with the checkpoint and
//! backpressure.
//!
//! Design rules:
//! - Decoding is `overtime_parse::record::Decoder`'s job, the same for
//!   every source; this file only numbers lines and hands batches over.
//! - One flush is one delivery: `rejected` first (no checkpoint), then the
//!   good rows carrying the checkpoint, so the position is durable only
//!   with the good rows. A crash between the two can repeat rejections on
//!   restart, never good rows.
//! - `Full` waits and retries the same batch; `Failed` backs off and
//!   retries too: nothing is dropped and nothing is re-read. Only shutdown
//!   stops a retry, and then the checkpoint was not written, so the lines
//!   are read again after the restart.

use super::FileTailStats;
use arrow::record_batch::RecordBatch;
use overtime_model::{Checkpoint, RecordSink, SinkError, Table};
use overtime_parse::record::{Decoder, RecordFormat};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest wait between retries of a failed (not full) write.
const MAX_FAILED_BACKOFF_MS: u64 = 5_000;

/// Decodes the lines of one file and delivers them.
pub(crate) struct Batcher {
    decoder: Decoder,
    sink: Arc<dyn RecordSink>,
    stats: Arc<FileTailStats>,
    shutdown: CancellationToken,
    source: String,
    pending_lines: usize,
}

/// Delivery stopped because the tail is shutting down.
#[derive(Debug)]
pub(crate) struct Cancelled;

impl Batcher {
    pub(crate) fn new(
        format: &RecordFormat,
        path: &str,
        sink: Arc<dyn RecordSink>,
        stats: Arc<FileTailStats>,
        shutdown: CancellationToken,
    ) -> Self {
        Batcher {
            decoder: Decoder::new(format, path),
            sink,
            stats,
            shutdown,
            source: super::source_name(path),
            pending_lines: 0,
        }
    }

    /// Decodes one whole line (without its `\n`) numbered `line_no`.
    pub(crate) fn push(&mut self, line: &[u8], line_no: u64) {
        self.decoder.push_record(line, line_no);
        self.pending_lines += 1;
        self.stats.lines.fetch_add(1, Relaxed);
        self.stats.bytes.fetch_add(line.len() as u64 + 1, Relaxed);
    }

    /// Lines pushed since the last flush.
    pub(crate) fn pending_lines(&self) -> usize {
        self.pending_lines
    }

    /// Delivers everything pushed so far with `position` as the
    /// checkpoint; returns once it is durable (or on shutdown).
    pub(crate) fn flush(&mut self, position: String) -> Result<(), Cancelled> {
        let decoded = self.decoder.finish();
        if !decoded.rejected.is_empty() {
            self.count_rejected(&decoded.rejected);
        }
        let (good_table, good, rejected) = decoded.into_batches();
        self.pending_lines = 0;
        let checkpoint = Checkpoint {
            source: self.source.clone(),
            position,
        };
        if rejected.num_rows() > 0 {
            let cp = (good.num_rows() == 0).then(|| checkpoint.clone());
            self.deliver(Table::Rejected, rejected, cp.clone())?;
            if cp.is_some() {
                return Ok(());
            }
        }
        self.stats.rows.fetch_add(good.num_rows() as u64, Relaxed);
        self.deliver(good_table, good, Some(checkpoint))
    }

    fn count_rejected(&self, rejected: &[overtime_model::RejectedRecord]) {
        self.stats
            .rejected
            .fetch_add(rejected.len() as u64, Relaxed);
        let mut by_reason = self
            .stats
            .rejected_by_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for r in rejected {
            *by_reason.entry(r.reason.clone()).or_default() += 1;
        }
    }

    /// Writes one batch until the sink takes it.
    fn deliver(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), Cancelled> {
        let mut failed_backoff = 100;
        loop {
            match self.sink.write(table, batch.clone(), checkpoint.clone()) {
                Ok(()) => {
                    self.stats.batches.fetch_add(1, Relaxed);
                    return Ok(());
                }
                Err(SinkError::Full { retry_after_ms }) => {
                    let wait = retry_after_ms.clamp(1, 60_000);
                    self.stats.backpressure_waits.fetch_add(1, Relaxed);
                    self.stats.backpressure_ms.fetch_add(wait, Relaxed);
                    self.sleep(wait)?;
                }
                Err(SinkError::Failed(_)) => {
                    self.stats.sink_errors.fetch_add(1, Relaxed);
                    self.sleep(failed_backoff)?;
                    failed_backoff = (failed_backoff * 2).min(MAX_FAILED_BACKOFF_MS);
                }
            }
        }
    }

    /// Sleeps `ms`, waking early (with `Err`) on shutdown.
    pub(crate) fn sleep(&self, ms: u64) -> Result<(), Cancelled> {
        sleep_unless_cancelled(&self.shutdown, ms)
    }
}

/// Sleeps in slices of at most 20 ms so shutdown is noticed quickly.
pub(crate) fn sleep_unless_cancelled(token: &CancellationToken, ms: u64) -> Result<(), Cancelled> {
    let mut left = ms;
    loop {
        if token.is_cancelled() {
            return Err(Cancelled);
        }
        if left == 0 {
            return Ok(());
        }
        let step = left.min(20);
        std::thread::sleep(Duration::from_millis(step));
        left -= step;
    }
}
