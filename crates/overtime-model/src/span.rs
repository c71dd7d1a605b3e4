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
    /// Time queued at the model server before work began, ms.
    pub queue_ms: Option<f64>,
    /// Time reading the prompt (prefill), ms.
    pub prefill_ms: Option<f64>,
    /// Time generating tokens (decode), ms.
    pub decode_ms: Option<f64>,
    /// Time sending the response, ms.
    pub io_ms: Option<f64>,
    /// Phases with other names, kept by name.
    pub other: Vec<(String, f64)>,
    /// The raw value could not be read completely.
    pub malformed: bool,
}

impl LlmPhases {
    /// No phase known?
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
    /// `chunk`, `heartbeat`, `dns`, `connect`, or the name the span gave.
    pub name: String,
    /// When it happened, µs since the Unix epoch.
    pub time_us: i64,
    /// A duration the event carried (`duration_ms`, `dns_ms`…), if any.
    pub duration_ms: Option<f64>,
}

/// A link from a span to another span (OTLP `Span.links`): a batch job's
/// inputs, a retried request's first attempt, a fan-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanLink {
    /// The linked span's trace id (32 hex).
    pub trace_id: String,
    /// The linked span's id (16 hex).
    pub span_id: String,
    /// The W3C `tracestate` of the link, when given.
    pub trace_state: Option<String>,
    /// The link's attributes as strings, by name.
    pub attributes: Vec<(String, String)>,
}

/// One span as a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// W3C trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// Span id, 16 lowercase hex digits.
    pub span_id: String,
    /// Parent's span id; `None` for the root span.
    pub parent_span_id: Option<String>,
    /// The service that emitted it (`service.name`).
    pub service: String,
    /// The span's name.
    pub name: String,
    /// What kind of call it is: given, or derived from the other fields.
    pub stage: Stage,
    /// OTLP span kind (`server`, `client`, `internal`…), when known.
    pub kind: Option<String>,
    /// Start, µs since the Unix epoch.
    pub start_us: i64,
    /// End, µs since the Unix epoch.
    pub end_us: i64,
    /// How it ended.
    pub status: SpanStatus,
    /// The status's message, when the span gave one.
    pub status_message: Option<String>,
    /// HTTP status of the call, when it was HTTP.
    pub http_status: Option<u16>,
    /// Error type (`error.type`), when it failed.
    pub error_type: Option<String>,
    /// The timeout this call was given, ms; `None`: none known.
    pub timeout_ms: Option<f64>,
    /// The request's whole budget, ms (on the root span).
    pub budget_ms: Option<f64>,
    /// Budget left when this call started, ms.
    pub remaining_budget_ms: Option<f64>,
    /// 0 for the first try, 1 for the first retry, …
    pub attempt: Option<u32>,
    /// The gateway's `$request_id`, when propagated: how spans join a gateway record without `traceparent`.
    pub request_id: Option<String>,
    /// The client's budget from `X-Max-Wait`, ms, when recorded.
    pub max_wait_ms: Option<f64>,
    /// The model called, for LLM calls.
    pub model: Option<String>,
    /// Prompt tokens, for LLM calls.
    pub input_tokens: Option<i64>,
    /// Generated tokens, for LLM calls.
    pub output_tokens: Option<i64>,
    /// The generation limit asked for, for LLM calls.
    pub max_tokens: Option<i64>,
    /// Sampling temperature, for LLM calls.
    pub temperature: Option<f64>,
    /// Time to the first token, ms, for LLM calls.
    pub ttft_ms: Option<f64>,
    /// The model server's reported GPU load, 0–1.
    pub gpu_load: Option<f64>,
    /// The model server's `X-LLM-Reason` value as received.
    pub llm_reason: Option<String>,
    /// The model server's `X-LLM-Duration`, ms.
    pub llm_duration_ms: Option<f64>,
    /// `llm_reason` parsed into phases.
    pub phases: LlmPhases,
    /// The tool's name, for tool calls.
    pub tool: Option<String>,
    /// The remote host of a client call (`server.address:port`, `net.peer.name`…).
    pub peer: Option<String>,
    /// An LLM-as-judge score of the request's answer, 0–1.
    pub judge_score: Option<f64>,
    /// The fallback used (a cheaper model, a cached answer), when one was.
    pub fallback: Option<String>,
    /// Whether the caller accepted that fallback.
    pub fallback_accepted: Option<bool>,
    /// DNS lookup time, ms, when the span gave it.
    pub dns_ms: Option<f64>,
    /// Connect time, ms, when the span gave it.
    pub connect_ms: Option<f64>,
    /// Stream chunks, heartbeats, DNS/connect phases and other events, in time order.
    pub events: Vec<SpanEvent>,
    /// Where the span was read (a file, `otlp-http`, a Kafka topic).
    pub source: String,
    /// Line or message number in `source` (0 when not applicable).
    pub line: u64,
    /// Every attribute not mapped to a field, as strings, by name.
    pub attributes: Vec<(String, String)>,
    /// OTLP instrumentation scope (`InstrumentationScope.name`/`.version`).
    pub scope_name: Option<String>,
    /// The instrumentation scope's version.
    pub scope_version: Option<String>,
    /// Links to other spans (OTLP `Span.links`).
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

    /// End − start, ms.
    pub fn duration_ms(&self) -> f64 {
        // In f64: far-apart hostile times must not overflow i64.
        (self.end_us as f64 - self.start_us as f64) / 1000.0
    }
}
