//! The verdict of one trace (docs/diagnosis.md), with its stable JSON field names.

use crate::{FindingKind, Outcome, RootCauseKind, SpanStatus, Stage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The diagnosis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The W3C trace id (32 lowercase hex digits), or the request id a trace was synthesized from when the gateway record had no trace.
    pub trace_id: String,
    /// The gateway's `X-Request-ID` (or equivalent), when one was logged.
    pub request_id: Option<String>,
    /// When the trace started, to the millisecond; written as RFC 3339 in
    /// UTC with milliseconds (`2026-11-29T10:00:00.250Z`).
    pub started_at: crate::Timestamp,
    /// What the user saw: a gateway timeout, a service timeout, an error, or ok.
    pub outcome: Outcome,
    /// The gateway layer that gave up first (else the outermost); `None` when no gateway record joined the trace.
    pub gateway: Option<GatewayView>,
    /// The request's time budget and how much of it was used.
    pub budget: BudgetView,
    /// Every span, in start order, with its share of the critical path.
    pub timeline: Vec<TimelineEntry>,
    /// The cause the first matching rule named, with its evidence.
    pub root_cause: RootCause,
    /// Other calls that held a notable share of the time but did not decide the cause.
    pub contributing: Vec<Contributing>,
    /// Configuration problems seen in this trace, apart from the cause.
    pub findings: Vec<Finding>,
}

/// The outermost gateway record that gave up first (or the outermost one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayView {
    /// The layer's source name.
    pub source: String,
    /// HTTP status this layer answered (`$status`); `None` when not logged.
    pub status: Option<u16>,
    /// Time this layer spent on the request, ms (`$request_time`).
    pub request_time_ms: Option<f64>,
    /// Time to connect to the upstream, ms, summed over tries (`$upstream_connect_time`).
    pub upstream_connect_ms: Option<f64>,
    /// Time until the upstream's response header, ms (`$upstream_header_time`); `None` when it never came.
    pub upstream_header_ms: Option<f64>,
    /// Time until the upstream's response ended, ms (`$upstream_response_time`).
    pub upstream_response_ms: Option<f64>,
    /// The upstream statuses as nginx logged them (`502, 504`), one per try.
    pub upstream_status: Option<String>,
    /// Servers tried.
    pub upstream_tries: u32,
    /// The read timeout of this layer, when known (configured or inferred).
    pub timeout_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// The request's time budget (docs/diagnosis.md).
pub struct BudgetView {
    /// The budget, ms; `None` when no source gave one.
    pub total_ms: Option<f64>,
    /// `x-max-wait | span | gateway | config`, or null when unknown.
    pub source: Option<String>,
    /// Time the request took, ms (the gateway's or the root span's).
    pub consumed_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// One span of the trace as the verdict shows it.
pub struct TimelineEntry {
    /// The span's id (16 hex digits).
    pub span_id: String,
    /// Its parent's span id; `None` for the root.
    pub parent_span_id: Option<String>,
    /// The span's name (`execute_tool weather`, `chat deepseek-v4-pro`).
    pub name: String,
    /// The service that emitted it (`service.name`).
    pub service: String,
    /// What kind of call it is.
    pub stage: Stage,
    /// What a person would call it: the model, the tool's name, else an address.
    pub component: String,
    /// When it started, ms after the trace started.
    pub start_offset_ms: f64,
    /// How long it ran, ms (clamped to its parent).
    pub duration_ms: f64,
    /// Its exclusive time on the critical path, ms: what the request waited on it alone.
    pub critical_ms: f64,
    /// Its timeout, ms, when configured or observed; `None` when it had none known.
    pub timeout_ms: Option<f64>,
    /// Budget left when it started, ms; `None` when the budget is unknown.
    pub remaining_budget_ms: Option<f64>,
    /// Which attempt of a retried call this is (0 for the first).
    pub attempt: u32,
    /// How the span ended.
    pub status: SpanStatus,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// The model server's own phases (`queue`, `prefill`, `decode`, `io`), ms, from `X-LLM-Reason`; empty when unknown.
    pub phases: BTreeMap<String, f64>,
    /// On the first span of an LLM call whose phases are known: the call's
    /// phases and where they came from (a vLLM span, TGI headers, or
    /// inferred from the same model's finished calls); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_phases: Option<CallPhases>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// An LLM call's phases as the diagnosis read them (docs/diagnosis.md,
/// "Phases of a cut call").
pub struct CallPhases {
    /// Where they came from, as the evidence names it (`vLLM span`,
    /// `TGI headers`, `X-LLM-Reason header`, `inferred: …`).
    pub source: String,
    /// Time in the server's queue, ms.
    pub queue_ms: Option<f64>,
    /// Prefill, ms.
    pub prefill_ms: Option<f64>,
    /// Decode, ms.
    pub decode_ms: Option<f64>,
    /// For phases inferred from the model's finished calls: those calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred: Option<PhaseNeighbours>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// The finished calls a cut call's phases were inferred from.
pub struct PhaseNeighbours {
    /// How many finished calls of the same model.
    pub calls: u32,
    /// Of them, how many the model server's metrics counted (not a span).
    pub metered: u32,
    /// They started within this many minutes of the cut call.
    pub window_min: i64,
    /// Their mean time in the queue, ms.
    pub queue_ms: f64,
    /// Their mean prefill, ms.
    pub prefill_ms: f64,
    /// Their mean decode, ms.
    pub decode_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// The cause of a failed request, as the first matching rule named it.
pub struct RootCause {
    /// Which kind of cause (docs/diagnosis.md#root-cause-kinds).
    pub kind: RootCauseKind,
    /// The model, tool, service or `gateway` at fault.
    pub component: String,
    /// The dominant call's critical time over the request's elapsed time, 0–1.
    pub share: f64,
    /// One sentence an SRE can act on.
    pub summary: String,
    /// The facts behind it, each with its numbers (durations, timeouts, budget left, attempts).
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A call that held a notable share of the time without being the cause.
pub struct Contributing {
    /// The cause it would have been, had it dominated.
    pub kind: RootCauseKind,
    /// The model, tool or service.
    pub component: String,
    /// Its critical time over the request's elapsed time, 0–1.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A configuration problem seen in a trace (docs/diagnosis.md#findings-configuration-not-one-call).
pub struct Finding {
    /// Which problem.
    pub kind: FindingKind,
    /// What is wrong, naming the layers and values.
    pub summary: String,
}
