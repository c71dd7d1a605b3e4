//! `spans`: one row per span, whatever format it arrived in (JSONL span
//! logs, OTLP JSON or protobuf). Span parsers build [`SpanRecord`]s and
//! append them to [`SpanColumns`]; the diagnosis reads them back with
//! [`span_records`].
//!
//! Columns follow docs/inputs.md#spans field for field (`start_time`/`end_time` as
//! Timestamp(µs, UTC), durations in ms as Float64), plus:
//! `kind` (OTLP span kind), `http_status`, `error_type`, `max_wait_ms`,
//! `peer` (the remote host of a client call), the parsed `X-LLM-Reason`
//! phases (`queue_ms`, `prefill_ms`, `decode_ms`, `io_ms`, `other_phases`,
//! `llm_reason_malformed`), `events` as List<Struct<name, time, duration_ms>>,
//! `source` and `line` (where the span was read), `attributes` (every
//! attribute not mapped to a column, as a Map<Utf8, Utf8>), and from OTLP
//! the instrumentation scope (`scope_name`, `scope_version`) and the span's
//! `links` as List<Struct<trace_id, span_id, trace_state, attributes>>.
//! Columns are only ever added at the end: a table written before a
//! column existed reads it as null (see the store's schema upgrade).

use crate::{SpanStatus, Stage};
use serde::{Deserialize, Serialize};

/// A model server's own phase timings (`X-LLM-Reason`, docs/inputs.md#x-llm-reason), in ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmPhases {
    pub queue_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    pub decode_ms: Option<f64>,
    pub io_ms: Option<f64>,
    /// Phases with other names, kept by name.
    pub other: Vec<(String, f64)>,
    /// The raw value could not be read completely.
    pub malformed: bool,
}

impl LlmPhases {
    pub fn is_empty(&self) -> bool {
        self.queue_ms.is_none()
            && self.prefill_ms.is_none()
            && self.decode_ms.is_none()
            && self.io_ms.is_none()
            && self.other.is_empty()
    }
    /// Known phases as (name, ms), standard ones first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        [
            ("queue", self.queue_ms),
            ("prefill", self.prefill_ms),
            ("decode", self.decode_ms),
            ("io", self.io_ms),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .chain(self.other.iter().map(|(n, v)| (n.as_str(), *v)))
    }
}

/// A span event: stream `chunk`, `heartbeat`, `dns`, `connect`, or any other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanEvent {
    pub name: String,
    pub time_us: i64,
    /// A duration the event carried (`duration_ms`, `dns_ms`…), if any.
    pub duration_ms: Option<f64>,
}

/// A link from a span to another span (OTLP `Span.links`): a batch job's
/// inputs, a retried request's first attempt, a fan-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanLink {
    pub trace_id: String,
    pub span_id: String,
    pub trace_state: Option<String>,
    pub attributes: Vec<(String, String)>,
}

/// One span as a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub service: String,
    pub name: String,
    pub stage: Stage,
    pub kind: Option<String>,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub status_message: Option<String>,
    pub http_status: Option<u16>,
    pub error_type: Option<String>,
    pub timeout_ms: Option<f64>,
    pub budget_ms: Option<f64>,
    pub remaining_budget_ms: Option<f64>,
    pub attempt: Option<u32>,
    pub request_id: Option<String>,
    pub max_wait_ms: Option<f64>,
    pub model: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub gpu_load: Option<f64>,
    pub llm_reason: Option<String>,
    pub llm_duration_ms: Option<f64>,
    pub phases: LlmPhases,
    pub tool: Option<String>,
    pub peer: Option<String>,
    pub judge_score: Option<f64>,
    pub fallback: Option<String>,
    pub fallback_accepted: Option<bool>,
    pub dns_ms: Option<f64>,
    pub connect_ms: Option<f64>,
    pub events: Vec<SpanEvent>,
    pub source: String,
    pub line: u64,
    pub attributes: Vec<(String, String)>,
    /// OTLP instrumentation scope (`InstrumentationScope.name`/`.version`).
    pub scope_name: Option<String>,
    pub scope_version: Option<String>,
    pub links: Vec<SpanLink>,
}

impl SpanRecord {
    /// A span with the required fields and everything else empty.
    pub fn new(
        trace_id: &str,
        span_id: &str,
        service: &str,
        name: &str,
        start_us: i64,
        end_us: i64,
    ) -> Self {
        SpanRecord {
            trace_id: trace_id.into(),
            span_id: span_id.into(),
            parent_span_id: None,
            service: service.into(),
            name: name.into(),
            stage: Stage::Other,
            kind: None,
            start_us,
            end_us,
            status: SpanStatus::Unset,
            status_message: None,
            http_status: None,
            error_type: None,
            timeout_ms: None,
            budget_ms: None,
            remaining_budget_ms: None,
            attempt: None,
            request_id: None,
            max_wait_ms: None,
            model: None,
            input_tokens: None,
            output_tokens: None,
            max_tokens: None,
            temperature: None,
            ttft_ms: None,
            gpu_load: None,
            llm_reason: None,
            llm_duration_ms: None,
            phases: LlmPhases::default(),
            tool: None,
            peer: None,
            judge_score: None,
            fallback: None,
            fallback_accepted: None,
            dns_ms: None,
            connect_ms: None,
            events: Vec::new(),
            source: String::new(),
            line: 0,
            attributes: Vec::new(),
            scope_name: None,
            scope_version: None,
            links: Vec::new(),
        }
    }

    pub fn duration_ms(&self) -> f64 {
        // In f64: far-apart hostile times must not overflow i64.
        (self.end_us as f64 - self.start_us as f64) / 1000.0
    }
}
