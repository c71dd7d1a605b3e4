//! # overtime-diagnose
//!
//! Where did the time budget of each failed request go, and why? Pure
//! logic over overtime's tables: traces are assembled (each span once,
//! joined to the gateway records of every layer), their critical path is
//! rebuilt, a verdict names the root cause with evidence (SPEC §4), and
//! failing traces are grouped into incidents with reports (SPEC §5).
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
pub mod markdown;
pub mod outcome;
pub mod report;
pub mod rules;
pub mod timeouts;
pub mod tree;
pub mod verdict;

pub use assemble::{assemble, AssemblyStats, Trace};
pub use config::{DiagnoseConfig, LayerConfig};
pub use report::{BucketRow, IncidentReport};

use overtime_model::{GatewayRecord, SpanRecord, Verdict};

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
}

/// Diagnoses every trace in the records given.
pub fn diagnose(
    gateway: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
) -> Diagnosis {
    let timeouts = timeouts::layer_timeouts(gateway.iter(), cfg);
    let (traces, assembly) = assemble(gateway, spans);
    let mut summaries = Vec::with_capacity(traces.len());
    let mut verdicts = Vec::new();
    for t in &traces {
        let (s, v) = verdict::diagnose_trace(t, &timeouts, cfg);
        summaries.push(s);
        verdicts.extend(v);
    }
    verdicts.sort_by(|a, b| {
        a.started_at
            .cmp(&b.started_at)
            .then(a.trace_id.cmp(&b.trace_id))
    });
    let incidents = report::incidents(&verdicts, &summaries, cfg);
    Diagnosis {
        latency: report::latency_table(summaries.iter()),
        verdicts,
        incidents,
        assembly,
        summaries_len: summaries.len(),
    }
}

/// [`diagnose`] over Arrow batches of `gateway_requests` and `spans`.
pub fn diagnose_batches(
    gateway: &[arrow::record_batch::RecordBatch],
    spans: &[arrow::record_batch::RecordBatch],
    cfg: &DiagnoseConfig,
) -> Result<Diagnosis, overtime_model::ModelError> {
    let mut g = Vec::new();
    for b in gateway {
        g.extend(overtime_model::gateway_records(b)?);
    }
    let mut s = Vec::new();
    for b in spans {
        s.extend(overtime_model::span_records(b)?);
    }
    Ok(diagnose(g, s, cfg))
}
