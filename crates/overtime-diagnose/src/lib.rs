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
//!
//! What other crates use is re-exported here: [`diagnose`] and its
//! variants over rows or Arrow batches with a [`DiagnoseConfig`] (built
//! from the TOML's [`DiagnoseSettings`], its layers numbered by
//! [`layer_index`], its thresholds a [`RuleThresholds`], the rules it
//! switches off a [`DisabledRules`]); the root-cause kinds as people see
//! them, from their rules, in rule order ([`root_cause_kinds`]); the
//! [`IncidentReport`]s and the latency table's [`BucketRow`]s with its
//! input-token [`BUCKETS`]; [`assemble_tables`] for the assembled
//! [`Trace`]s; the gateway layers' [`layer_timeouts`]. The modules that stay public are
//! the ones other crates reach into as a whole: the pieces every engine
//! runs — [`join`] (request ids to traces), [`assemble`] (records to
//! requests), [`passes`] (the two passes that judge them) and [`tally`]
//! (their results) — which the batch engine of `overtime diagnose`
//! (crate `overtime-batch`) runs partition by partition and
//! [`diagnose_tables`] runs in memory; [`live`] (of `serve`), [`markdown`] (the
//! reports), [`outcome`], [`tree`] and [`calls`] (one trace's analysis, for
//! `advise`), [`verdict`] (timestamps as reports print them) and [`fmt`].
//! No file, thread or clock in here: the storage and threads of a run
//! that outgrows memory are `overtime-batch`'s.
//! The modules of configuration, rules, findings, SLI
//! observations, reports, timeouts and settings are private.

#![warn(missing_docs)]

pub mod answers;
pub mod assemble;
pub mod calls;
mod cause_stats;
mod config;
pub mod costs;
mod findings;
pub mod fmt;
mod in_memory;
pub mod join;
pub mod live;
pub mod markdown;
mod naming;
mod observe;
pub mod outcome;
pub mod passes;
pub mod phasebook;
mod report;
mod rules;
pub mod server_metrics;
mod settings;
mod shape;
pub mod tally;
mod timeouts;
pub mod tree;
pub mod verdict;

pub use assemble::{Assembled, AssemblyStats, Trace, assemble_tables};
pub use config::{DiagnoseConfig, LayerConfig, layer_index};
pub use report::{BUCKETS, BucketRow, IncidentReport, SummaryLite, bucket_of};
pub use rules::{DisabledRules, KindInfo, RuleNameError, RuleThresholds, root_cause_kinds};
pub use settings::DiagnoseSettings;
pub use timeouts::{LayerTimeout, layer_timeouts};

use arrow::record_batch::RecordBatch;
use overtime_model::{GatewayRecord, SpanRecord, Verdict};

/// The result of a diagnosis run.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    /// One per failed trace (every trace with `all_verdicts`), by start time.
    pub verdicts: Vec<Verdict>,
    /// Failing traces grouped by (kind, component), with their reports.
    pub incidents: Vec<IncidentReport>,
    /// LLM latency by input-token bucket over all traces.
    pub latency: Vec<BucketRow>,
    /// How the records were joined into traces: spans read and duplicated, gateway records joined by each key or left unjoined.
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
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    diagnose_tables(&[cols.finish()], spans, cfg).expect("our own batch has every column")
}

/// [`diagnose`] with the model servers' metrics beside the records
/// ([`server_metrics`]): `overtime diagnose --metrics`.
pub fn diagnose_with_server_metrics(
    gateway: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
    metrics: server_metrics::ServerMetrics,
) -> Diagnosis {
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    in_memory::diagnose(&[cols.finish()], spans, cfg, Some(&metrics))
        .expect("our own batch has every column")
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

/// The diagnosis proper: `gateway_requests` batches and span rows in, in
/// memory — the join, assembly and passes the batch engine of `overtime
/// diagnose` runs on each partition, with nothing encoded or spilled
/// (the same bytes out: `overtime-batch`'s parity tests).
pub fn diagnose_tables(
    gateway: &[RecordBatch],
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
) -> Result<Diagnosis, overtime_model::ModelError> {
    in_memory::diagnose(gateway, spans, cfg, None)
}
