//! From sources to verdicts: a [`RecordSink`] that stores a batch durably
//! and then shows it to the live diagnosis, and the periodic jobs (tick,
//! flush, retention). The store decides durability; the diagnosis only
//! sees what the store accepted.

use crate::AppState;
use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use overtime_model::{
    Checkpoint, CommitPoints, RecordSink, SinkError, Table, gateway_records, metric_samples,
    span_records,
};
use overtime_store::PeerSource;
use std::sync::Arc;

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The sink every source writes to.
pub struct DiagnosingSink {
    /// What it writes to (the store), shows batches to (the live
    /// diagnosis) and counts in (the metrics, each write under the source
    /// label its checkpoint or `source` column implies).
    pub state: Arc<AppState>,
}

impl DiagnosingSink {
    /// Shows an accepted batch to the live diagnosis. A batch that does not
    /// decode back into records is counted
    /// (`overtime_live_decode_failures_total`) and logged, never dropped
    /// unseen: its rows stay stored and queryable.
    pub fn observe(state: &AppState, table: Table, batch: &RecordBatch, now: i64) {
        let decoded = match table {
            Table::GatewayRequests => gateway_records(batch).map(|rows| {
                state
                    .live
                    .lock()
                    .expect("live state lock")
                    .add_gateway(rows, now)
            }),
            Table::Spans => span_records(batch).map(|rows| {
                state
                    .live
                    .lock()
                    .expect("live state lock")
                    .add_spans(rows, now)
            }),
            Table::ModelServerMetrics => metric_samples(batch).map(|rows| {
                state.metrics.observe_server_metrics(&rows);
                state
                    .live
                    .lock()
                    .expect("live state lock")
                    .add_server_metrics(&rows)
            }),
            Table::Rejected => Ok(()),
        };
        if let Err(e) = decoded {
            let name = table.as_str();
            state.metrics.count_live_decode_failure(name);
            tracing::error!(
                "overtime: a stored {name} batch of {} rows could not be decoded for the live diagnosis: {e}",
                batch.num_rows()
            );
        }
    }
}

/// The source label of an unlabelled write: `file` or `kafka` from the
/// checkpoint's name, `otlp_http` / `otlp_grpc` from the batch's `source`
/// column, else `other`.
fn infer_source(batch: &RecordBatch, checkpoint: Option<&Checkpoint>) -> &'static str {
    if let Some(cp) = checkpoint {
        if cp.source.starts_with("file:") {
            return "file";
        }
        if cp.source.starts_with("kafka:") {
            return "kafka";
        }
    }
    let first = batch
        .column_by_name("source")
        .and_then(|c| c.as_any().downcast_ref::<arrow::array::StringArray>())
        .filter(|c| !c.is_empty() && c.is_valid(0))
        .map(|c| c.value(0).to_string());
    match first.as_deref() {
        Some("otlp-http") => "otlp_http",
        Some("otlp-grpc") => "otlp_grpc",
        _ => "other",
    }
}

/// Stores, counts (under `source`) and shows a batch to the live diagnosis.
fn write_counted(
    state: &AppState,
    source: &str,
    table: Table,
    batch: RecordBatch,
    checkpoint: Option<Checkpoint>,
    replayable: bool,
) -> Result<(), SinkError> {
    let result = if replayable {
        state
            .store
            .write_replayable(table, batch.clone(), checkpoint)
    } else {
        state.store.write(table, batch.clone(), checkpoint)
    };
    state.metrics.count_write(source, table, &batch, &result);
    result?;
    DiagnosingSink::observe(state, table, &batch, now_us());
    Ok(())
}

impl RecordSink for DiagnosingSink {
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        let source = infer_source(&batch, checkpoint.as_ref());
        write_counted(&self.state, source, table, batch, checkpoint, false)
    }

    fn write_replayable(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        let source = infer_source(&batch, checkpoint.as_ref());
        write_counted(&self.state, source, table, batch, checkpoint, true)
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.state.store.checkpoint(source)
    }

    fn backpressure(&self) -> Option<u64> {
        self.state.store.backpressure()
    }
}

/// The store's commit semantics, as they are.
impl CommitPoints for DiagnosingSink {
    fn commit_point(&self, source: &str) -> Option<String> {
        self.state.store.commit_point(source)
    }

    fn publish(&self) -> Result<(), SinkError> {
        self.state.store.publish()
    }

    fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, SinkError> {
        self.state.store.shared_checkpoints()
    }

    fn replay_window_ms(&self) -> u64 {
        crate::replay::window_ms(&self.state)
    }

    fn replay(&self, table: Table, batch: RecordBatch) {
        crate::replay::hold(&self.state, table, batch)
    }
}

/// A [`DiagnosingSink`] whose writes are counted under a fixed source
/// label (`file`, `otlp_http`, `otlp_grpc`, `kafka`): give one to each
/// source so `/metrics` tells them apart.
pub struct SourceSink {
    /// What it writes to, shows batches to and counts in, as
    /// [`DiagnosingSink::state`].
    pub state: Arc<AppState>,
    /// The `source` label of its writes in `/metrics`.
    pub source: &'static str,
}

impl RecordSink for SourceSink {
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        write_counted(&self.state, self.source, table, batch, checkpoint, false)
    }

    fn write_replayable(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        write_counted(&self.state, self.source, table, batch, checkpoint, true)
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.state.store.checkpoint(source)
    }

    /// The store's early push-back, counted as backpressure of this source.
    fn backpressure(&self) -> Option<u64> {
        let retry = self.state.store.backpressure()?;
        self.state.metrics.count_backpressure(self.source);
        Some(retry)
    }
}

/// The store's commit semantics, as they are.
impl CommitPoints for SourceSink {
    fn commit_point(&self, source: &str) -> Option<String> {
        self.state.store.commit_point(source)
    }

    fn publish(&self) -> Result<(), SinkError> {
        self.state.store.publish()
    }

    fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, SinkError> {
        self.state.store.shared_checkpoints()
    }

    fn replay_window_ms(&self) -> u64 {
        crate::replay::window_ms(&self.state)
    }

    fn replay(&self, table: Table, batch: RecordBatch) {
        crate::replay::hold(&self.state, table, batch)
    }
}

/// After a restart: what the WAL brought back into the memtable goes to the
/// live diagnosis again, so pending traces get their verdicts (the model
/// servers' metrics first, as they came before the calls they explain, and
/// from a day back: the phase book's span). `since_us`
/// (µs since the epoch): the oldest rows replayed. Only this collector's
/// own rows: in a shared bucket the others' are theirs to judge and count
/// (replayed here too, their 504s counted twice in the timeout inference
/// and their traces held twice). An error is the store's scan failing, as
/// text.
pub fn replay_recent(state: &AppState, since_us: i64) -> Result<(), String> {
    for table in [
        Table::ModelServerMetrics,
        Table::GatewayRequests,
        Table::Spans,
    ] {
        let from = match table {
            Table::ModelServerMetrics => {
                since_us.min(now_us() - overtime_diagnose::server_metrics::MAX_AGE_US)
            }
            _ => since_us,
        };
        let batches = state
            .store
            .scan_own(table, Some(from), None)
            .map_err(|e| e.to_string())?;
        for b in &batches {
            DiagnosingSink::observe(state, table, b, now_us());
        }
    }
    Ok(())
}

/// One tick of the live diagnosis: returns how many verdicts were new or
/// revised. The verdicts and the completed requests feed the metrics and
/// SLOs (outside the live lock).
pub fn tick(state: &AppState) -> usize {
    crate::store_health::log_changes(&state.store);
    crate::replay::release_due(state);
    crate::cluster_join::join_requests(state);
    if state.store.shared() {
        complete_from_store(state);
    }
    let (verdicts, settled, observations) = {
        let mut live = state.live.lock().expect("live state lock");
        let v = live.tick(now_us());
        // Requests just over (for the fast early warning), then the final
        // observations of the traces whose grace period ended.
        let mut observed = live.drain_provisional();
        observed.extend(live.drain_observations());
        (v, live.drain_settled(), observed)
    };
    state.metrics.record(&verdicts, &settled, observations);
    verdicts.len()
}

/// Traces due for their verdict that may be split between collectors
/// (failing ones, and those a peer holds part of), completed first from
/// the shared store and the peers' unflushed rows (rows a previous owner
/// of their partitions flushed, or another collector read; see
/// overtime-diagnose's `live/complete.rs`). The lookups run outside the
/// live lock.
fn complete_from_store(state: &AppState) {
    let due = state
        .live
        .lock()
        .expect("live state lock")
        .to_complete(now_us());
    for id in due {
        let (gateway, spans) = match trace_rows(state, &id) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(
                    "overtime: looking up trace {id} in the store before its verdict: {e}"
                );
                continue;
            }
        };
        let (Some(gateway), Some(spans)) = (
            decode_found(
                state,
                &id,
                Table::GatewayRequests,
                &gateway,
                gateway_records,
            ),
            decode_found(state, &id, Table::Spans, &spans, span_records),
        ) else {
            continue;
        };
        state
            .live
            .lock()
            .expect("live state lock")
            .complete(&id, gateway, spans, now_us());
    }
}

/// Trace `id`'s rows in the store and, with peers, in their unflushed
/// rows (each row once: `Store::trace_with`).
fn trace_rows(
    state: &AppState,
    id: &str,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>), overtime_store::StoreError> {
    let rt = tokio::runtime::Handle::try_current();
    let (false, Ok(rt)) = (state.peers.is_empty(), rt) else {
        return state.store.trace(id);
    };
    let pq = state.peers.query();
    // (On a runtime's worker, as when an embedder ticks from a task, the
    // worker is handed over while this thread waits.)
    let (gw_peers, span_peers) = tokio::task::block_in_place(|| {
        rt.block_on(async {
            futures::join!(
                pq.unflushed(Table::GatewayRequests, None, None, Some(id)),
                pq.unflushed(Table::Spans, None, None, Some(id))
            )
        })
    });
    state.store.trace_with(id, &gw_peers, &span_peers)
}

/// The rows of trace `id` found in the store, decoded; `None` (counted and
/// logged) when a batch cannot be.
fn decode_found<T, E: std::fmt::Display>(
    state: &AppState,
    id: &str,
    table: Table,
    batches: &[RecordBatch],
    decode: impl Fn(&RecordBatch) -> Result<Vec<T>, E>,
) -> Option<Vec<T>> {
    let mut rows = Vec::new();
    for b in batches {
        match decode(b) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                state.metrics.count_live_decode_failure(table.as_str());
                tracing::warn!("overtime: trace {id}'s {table} rows from the store: {e}");
                return None;
            }
        }
    }
    Some(rows)
}
