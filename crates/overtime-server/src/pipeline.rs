//! From sources to verdicts: a [`RecordSink`] that stores a batch durably
//! and then shows it to the live diagnosis, and the periodic jobs (tick,
//! flush, retention). The store decides durability; the diagnosis only
//! sees what the store accepted.

use crate::AppState;
use arrow::record_batch::RecordBatch;
use overtime_model::{gateway_records, span_records, Checkpoint, RecordSink, SinkError, Table};
use std::sync::Arc;

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The sink every source writes to.
pub struct DiagnosingSink {
    pub state: Arc<AppState>,
}

impl DiagnosingSink {
    /// Shows an accepted batch to the live diagnosis.
    pub fn observe(state: &AppState, table: Table, batch: &RecordBatch, now: i64) {
        match table {
            Table::GatewayRequests => {
                if let Ok(rows) = gateway_records(batch) {
                    state
                        .live
                        .lock()
                        .expect("live state lock")
                        .add_gateway(rows, now);
                }
            }
            Table::Spans => {
                if let Ok(rows) = span_records(batch) {
                    state
                        .live
                        .lock()
                        .expect("live state lock")
                        .add_spans(rows, now);
                }
            }
            Table::Rejected => {}
        }
    }
}

impl RecordSink for DiagnosingSink {
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        self.state.store.write(table, batch.clone(), checkpoint)?;
        Self::observe(&self.state, table, &batch, now_us());
        Ok(())
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.state.store.checkpoint(source)
    }
}

/// After a restart: what the WAL brought back into the memtable goes to the
/// live diagnosis again, so pending traces get their verdicts.
pub fn replay_recent(state: &AppState, since_us: i64) -> Result<(), String> {
    for table in [Table::GatewayRequests, Table::Spans] {
        let batches = state
            .store
            .scan(table, Some(since_us), None)
            .map_err(|e| e.to_string())?;
        for b in &batches {
            DiagnosingSink::observe(state, table, b, now_us());
        }
    }
    Ok(())
}

/// One tick of the live diagnosis: returns how many verdicts were new or revised.
pub fn tick(state: &AppState) -> usize {
    state
        .live
        .lock()
        .expect("live state lock")
        .tick(now_us())
        .len()
}
