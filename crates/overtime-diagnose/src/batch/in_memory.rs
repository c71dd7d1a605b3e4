//! The batch engine on records already in memory (`diagnose_tables`,
//! `serve`'s API, the tests): the same partitions and assembly, with an
//! unlimited budget.

use super::*;

/// Assembly alone, in memory, through the same partition code.
pub(crate) fn assemble_in_memory(
    gateway: &[arrow::record_batch::RecordBatch],
    spans: &[SpanRecord],
    all: bool,
) -> Result<Assembled, BatchError> {
    let cfg = DiagnoseConfig {
        all_verdicts: all,
        ..Default::default()
    };
    let opts = BatchOptions {
        threads: 1,
        ..Default::default()
    };
    let engine = Engine::new(cfg, opts);
    ingest_in_memory(&engine, gateway, spans)?;
    engine.resolve_request_ids()?;
    let mut out = Assembled::default();
    for p in 0..engine.n {
        let buf = engine.parts.take(p, &engine.spill)?;
        let (a, _) = assemble_partition(&buf, all)?;
        out.traces.extend(a.traces);
        out.light.extend(a.light);
        out.stats.spans_in += a.stats.spans_in;
        out.stats.duplicate_spans += a.stats.duplicate_spans;
    }
    let sh = engine.shared.lock().expect("engine lock");
    let s = &sh.stats;
    out.stats.gateway_records = s.gateway_records;
    out.stats.joined_by_traceparent = s.joined_by_traceparent;
    out.stats.joined_by_request_id = s.joined_by_request_id;
    out.stats.joined_by_request_id_as_trace = s.joined_by_request_id_as_trace;
    out.stats.unjoined_gateway_records = s.unjoined_gateway_records;
    Ok(out)
}

/// Routes in-memory inputs: batches in order, then spans in order.
pub(crate) fn ingest_in_memory(
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

impl BatchOutput {
    /// Everything in memory, as [`crate::Diagnosis`].
    pub(crate) fn into_diagnosis(self) -> Result<crate::Diagnosis, BatchError> {
        Ok(crate::Diagnosis {
            verdicts: self.verdicts.collect()?,
            incidents: self.incidents,
            latency: self.latency,
            assembly: self.stats,
            summaries_len: self.summaries_len,
            timings: self.timings,
        })
    }
}
