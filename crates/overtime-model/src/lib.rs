//! # overtime-model
//!
//! The data model every other overtime crate shares: the Arrow tables
//! `gateway_requests`, `spans` and `rejected` (schemas, builders and row
//! readers), the verdict types of docs/diagnosis.md, and the closed vocabularies
//! (stages, outcomes, root-cause kinds, findings), and the one duration
//! and one time type every reader parses ([`DurationMs`], [`Timestamp`]).
//! No I/O.
//!
//! ```
//! use overtime_model::{GatewayColumns, GatewayRecord, gateway_records};
//! let mut cols = GatewayColumns::new();
//! cols.append(&GatewayRecord { status: Some(504), request_time_ms: Some(60001.0), ..Default::default() });
//! let batch = cols.finish();
//! assert_eq!(gateway_records(&batch).unwrap()[0].status, Some(504));
//! ```

#![warn(missing_docs)]

mod arrow_util;
mod enums;
mod fired;
mod gateway;
mod gateway_rows;
mod metric;
mod observation;
mod rejected;
mod sink;
mod span;
mod span_columns;
mod span_links;
mod time;
mod verdict;

pub use enums::{FindingKind, Outcome, RootCauseKind, SpanStatus, Stage};
pub use fired::fired_cluster;
pub use gateway::{GatewayColumns, GatewayRecord, gateway_records, gateway_schema, sum_known};
pub use gateway_rows::GatewayRows;
pub use metric::{MetricColumns, MetricSample, metric_samples, metric_schema};
pub use observation::{CallObservation, GatewayStatus, RequestObservation, input_bucket};
pub use rejected::{RAW_KEEP, RejectedColumns, RejectedRecord, rejected_records, rejected_schema};
pub use sink::{Checkpoint, CommitPoints, RecordSink, SinkError, Table};
pub use span::{LlmPhases, SpanEvent, SpanLink, SpanRecord};
pub use span_columns::{SpanColumns, span_records, span_schema};
pub use time::{BadDuration, BadTime, DurationMs, Timestamp};
pub use verdict::{
    BudgetView, CallPhases, Contributing, Finding, GatewayView, PhaseNeighbours, RootCause,
    TimelineEntry, Verdict,
};

/// Errors reading rows back from a batch.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The batch lacks this column (named): it is not one of our tables.
    #[error("batch has no column `{0}`")]
    MissingColumn(String),
}

/// Is `s` a W3C trace id (32 hex digits, not all zero)?
pub fn is_trace_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) && s.bytes().any(|b| b != b'0')
}

/// Trace id from a W3C `traceparent` header (`00-<trace>-<span>-<flags>`),
/// lowercased; `None` when malformed.
pub fn trace_id_from_traceparent(tp: &str) -> Option<String> {
    let mut parts = tp.trim().split('-');
    let _version = parts.next()?;
    let trace = parts.next()?;
    is_trace_id(trace).then(|| trace.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn traceparent() {
        assert_eq!(
            trace_id_from_traceparent("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01")
                .as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        assert_eq!(trace_id_from_traceparent("-"), None);
        assert_eq!(
            trace_id_from_traceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
            None
        );
    }
}
