//! The batch engine fed records already in memory: the parity tests hold
//! its answer (in memory and spilling) equal to the in-memory run of
//! [`overtime_diagnose::diagnose_tables`].

use super::*;

/// Routes in-memory inputs as the in-memory run places them: batches in
/// order, row by row, then spans in order.
pub fn ingest_in_memory(
    engine: &Engine,
    gateway: &[arrow::record_batch::RecordBatch],
    spans: &[SpanRecord],
) -> Result<(), BatchError> {
    let mut ing = engine.ingest();
    for (i, b) in gateway.iter().enumerate() {
        ing.gateway_in_row_order(b, i as u32)?;
    }
    let file = gateway.len() as u32;
    for (i, s) in spans.iter().enumerate() {
        ing.span(s, seq(file, i as u64, 0))?;
    }
    ing.flush()
}
