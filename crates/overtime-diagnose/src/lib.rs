//! # overtime-diagnose
//!
//! Where did the time budget of each failed request go, and why? Pure
//! logic over overtime's tables: traces are assembled (each span once,
//! joined to the gateway records of every layer), their critical path is
//! rebuilt, a verdict names the root cause with evidence (docs/diagnosis.md), and
//! failing traces are grouped into incidents with reports (docs/diagnosis.md#incidents-and-their-reports).
//!
//! ```
//! use overtime_diagnose::{diagnose, DiagnoseConfig};
//! use overtime_model::{GatewayRecord, Outcome};
//! let g = GatewayRecord { source: "edge".into(), status: Some(504), request_time_ms: Some(60000.0),
//!                         request_id: Some("r1".into()), time_us: 60_000_000, ..Default::default() };
//! let d = diagnose(vec![g], vec![], &DiagnoseConfig::default());
//! assert_eq!(d.verdicts[0].outcome, Outcome::GatewayTimeout);
//! // No spans: the verdict says what is missing instead of guessing.
//! assert!(d.verdicts[0].root_cause.summary.contains("no spans"));
//! ```

pub mod assemble;
pub mod calls;
mod cause_stats;
pub mod config;
pub mod findings;
pub mod fmt;
pub mod live;
pub mod markdown;
pub mod observe;
pub mod outcome;
pub mod report;
pub mod rules;
pub mod timeouts;
pub mod tree;
pub mod verdict;

pub use assemble::{assemble, AssemblyStats, Trace};
pub use config::{DiagnoseConfig, LayerConfig};
pub use report::{BucketRow, IncidentReport};

use arrow::record_batch::RecordBatch;
use overtime_model::{GatewayRecord, GatewayRows, SpanRecord, Verdict};

/// The result of a diagnosis run.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    /// One per failed trace (every trace with `all_verdicts`), by start time.
    pub verdicts: Vec<Verdict>,
    pub incidents: Vec<IncidentReport>,
    /// LLM latency by input-token bucket over all traces.
    pub latency: Vec<BucketRow>,
    pub assembly: AssemblyStats,
    /// Number of traces seen.
    pub summaries_len: usize,
    /// Wall time of each phase, for `OVERTIME_PROFILE`.
    pub timings: Vec<(&'static str, std::time::Duration)>,
}

/// Diagnoses every trace in the records given.
pub fn diagnose(
    gateway: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
) -> Diagnosis {
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    diagnose_tables(&[cols.finish()], spans, cfg).expect("our own batch has every column")
}

/// [`diagnose`] over Arrow batches of `gateway_requests` and `spans`.
pub fn diagnose_batches(
    gateway: &[RecordBatch],
    spans: &[RecordBatch],
    cfg: &DiagnoseConfig,
) -> Result<Diagnosis, overtime_model::ModelError> {
    let mut s = Vec::new();
    for b in spans {
        s.extend(overtime_model::span_records(b)?);
    }
    diagnose_tables(gateway, s, cfg)
}

/// The diagnosis proper: `gateway_requests` batches and span rows in.
pub fn diagnose_tables(
    gateway: &[RecordBatch],
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
) -> Result<Diagnosis, overtime_model::ModelError> {
    let mut timings = Vec::new();
    let mut clock = std::time::Instant::now();
    let mut lap = |name: &'static str, timings: &mut Vec<(&'static str, std::time::Duration)>| {
        timings.push((name, clock.elapsed()));
        clock = std::time::Instant::now();
    };
    let readers: Vec<GatewayRows> = gateway
        .iter()
        .map(GatewayRows::new)
        .collect::<Result<_, _>>()?;
    let timeouts = timeouts::layer_timeouts(
        readers.iter().flat_map(|r| {
            (0..r.len()).map(move |i| (r.source(i), r.status(i), r.request_time_ms(i)))
        }),
        cfg,
    );
    drop(readers);
    let assembled = assemble::assemble_tables(gateway, spans, cfg.all_verdicts)?;
    lap("assemble", &mut timings);
    let traces = assembled.traces;
    // Traces are independent: diagnose them on every core.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let per = traces.len().div_ceil(threads).max(1);
    let parts: Vec<(Vec<verdict::TraceSummary>, Vec<Verdict>)> = std::thread::scope(|s| {
        let handles: Vec<_> = traces
            .chunks(per)
            .map(|chunk| {
                let timeouts = &timeouts;
                s.spawn(move || {
                    let mut sums = Vec::with_capacity(chunk.len());
                    let mut vs = Vec::new();
                    for t in chunk {
                        let (s, v) = verdict::diagnose_trace(t, timeouts, cfg);
                        sums.push(s);
                        vs.extend(v);
                    }
                    (sums, vs)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("diagnosis thread panicked"))
            .collect()
    });
    drop(traces);
    let mut summaries: Vec<verdict::TraceSummary> = assembled
        .light
        .iter()
        .map(verdict::TraceSummary::light)
        .collect();
    let mut verdicts = Vec::new();
    for (s, v) in parts {
        summaries.extend(s);
        verdicts.extend(v);
    }
    lap("verdicts", &mut timings);
    verdicts.sort_by(|a, b| {
        a.started_at
            .cmp(&b.started_at)
            .then(a.trace_id.cmp(&b.trace_id))
    });
    let incidents = report::incidents(&verdicts, &summaries, cfg);
    lap("incidents", &mut timings);
    Ok(Diagnosis {
        timings,
        latency: report::latency_table(summaries.iter()),
        verdicts,
        incidents,
        assembly: assembled.stats,
        summaries_len: summaries.len(),
    })
}
