//! The verdict of one trace (docs/diagnosis.md), with its stable JSON field names.

use crate::{FindingKind, Outcome, RootCauseKind, SpanStatus, Stage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The diagnosis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub trace_id: String,
    pub request_id: Option<String>,
    /// RFC 3339.
    pub started_at: String,
    pub outcome: Outcome,
    pub gateway: Option<GatewayView>,
    pub budget: BudgetView,
    pub timeline: Vec<TimelineEntry>,
    pub root_cause: RootCause,
    pub contributing: Vec<Contributing>,
    pub findings: Vec<Finding>,
}

/// The outermost gateway record that gave up first (or the outermost one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayView {
    /// The layer's source name.
    pub source: String,
    pub status: Option<u16>,
    pub request_time_ms: Option<f64>,
    pub upstream_connect_ms: Option<f64>,
    pub upstream_header_ms: Option<f64>,
    pub upstream_response_ms: Option<f64>,
    pub upstream_status: Option<String>,
    /// Servers tried.
    pub upstream_tries: u32,
    /// The read timeout of this layer, when known (configured or inferred).
    pub timeout_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetView {
    pub total_ms: Option<f64>,
    /// `x-max-wait | span | gateway | config`, or null when unknown.
    pub source: Option<String>,
    pub consumed_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub name: String,
    pub service: String,
    pub stage: Stage,
    pub component: String,
    pub start_offset_ms: f64,
    pub duration_ms: f64,
    pub critical_ms: f64,
    pub timeout_ms: Option<f64>,
    pub remaining_budget_ms: Option<f64>,
    pub attempt: u32,
    pub status: SpanStatus,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootCause {
    pub kind: RootCauseKind,
    pub component: String,
    pub share: f64,
    pub summary: String,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contributing {
    pub kind: RootCauseKind,
    pub component: String,
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub summary: String,
}
