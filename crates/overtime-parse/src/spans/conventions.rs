//! The one table of span attribute conventions → `spans` columns.
//!
//! Off-the-shelf instrumentation writes the same fact under different
//! names: the HTTP semantic conventions before and after their
//! stabilisation (both at once under `OTEL_SEMCONV_STABILITY_OPT_IN=http/dup`),
//! OpenTelemetry GenAI with its current and deprecated names, OpenInference
//! and OpenLLMetry (Traceloop). [`ATTRIBUTE_MAPPINGS`] lists every name
//! read, the column it fills and the family it comes from; where several
//! names fill one column, the one listed first wins whatever order they
//! arrive in. `docs/span-conventions.md` shows this table, and a test
//! keeps the two equal.
//!
//! Captured HTTP headers (`http.request.header.<name>`,
//! `http.response.header.<name>`) are looked up by their header name in
//! lowercase with `_` read as `-`: Python's instrumentations write
//! `x_request_id` where others write `x-request-id`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

/// What an attribute is read as. Several attributes may fill one slot;
/// the table's order ranks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The GenAI operation (`chat`, `execute_tool`…): a stage hint.
    Operation,
    /// OpenInference / Traceloop span kind (`LLM`, `TOOL`, `tool`…): a stage hint.
    ConventionKind,
    /// A name that is the tool's when the span kind says tool.
    EntityName,
    Model,
    /// A JSON object of request parameters: `model`, `max_tokens`, `temperature`.
    InvocationModel,
    InvocationMaxTokens,
    InvocationTemperature,
    InputTokens,
    OutputTokens,
    MaxTokens,
    Temperature,
    /// Seconds to the first chunk.
    TtftSeconds,
    /// Milliseconds to the first chunk.
    TtftMillis,
    /// A model server's phase, in seconds (vLLM's and SGLang's
    /// `gen_ai.latency.*`): which one is named by the phase.
    PhaseSeconds(Phase),
    /// A model server's phase, in milliseconds (TGI's response headers).
    PhaseMillis(Phase),
    Tool,
    JudgeScore,
    /// `X-LLM-Reason`, one string or one array element per phase.
    LlmReason,
    LlmDuration,
    MaxWait,
    RequestId,
    HttpStatus,
    ErrorType,
    ServerAddress,
    ServerPort,
    /// An outgoing HTTP request (method): a stage hint.
    HttpMethod,
    /// The URL of an outgoing request: a stage hint and the peer's host.
    Url,
    /// A database or vector store: a stage hint.
    DbSystem,
    /// An RPC system (`grpc`…): an outgoing call when the span is a client.
    RpcSystem,
    /// What an LLM gateway's service span timed (LiteLLM's `call_type`):
    /// `make_…_request` is one provider request on the wire.
    GatewayCallType,
}

/// A model server's phase, as the `spans` table keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Waiting in the server's queue (`queue_ms`).
    Queue,
    /// Reading the prompt (`prefill_ms`).
    Prefill,
    /// Generating tokens (`decode_ms`).
    Decode,
    /// Prefill and decode together (TGI's `x-inference-time`), kept by
    /// name among the other phases.
    Inference,
    /// The whole request as the server timed it (kept by name).
    Total,
}

/// One row of the table: an attribute name some instrumentation writes,
/// and the `spans` column overtime fills from it. `docs/span-conventions.md`
/// lists these rows, and a test holds the two equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeMapping {
    /// The attribute's name as written (captured headers in their dash
    /// spelling, e.g. `http.request.header.x-request-id`).
    pub attribute: &'static str,
    /// The `spans` column it fills (`stage` for the attributes that only
    /// hint at the stage).
    pub column: &'static str,
    /// The convention family that writes it, e.g. `OpenTelemetry GenAI` or
    /// `OpenInference`: where to look when a value is read wrongly.
    pub convention: &'static str,
    /// What the value is read as.
    pub(crate) slot: Slot,
    /// Also kept in `attributes` (hints that fill no column of their own).
    pub(crate) keep: bool,
}

const fn row(
    attribute: &'static str,
    column: &'static str,
    convention: &'static str,
    slot: Slot,
) -> AttributeMapping {
    AttributeMapping {
        attribute,
        column,
        convention,
        slot,
        keep: false,
    }
}

const fn hint(
    attribute: &'static str,
    column: &'static str,
    convention: &'static str,
    slot: Slot,
) -> AttributeMapping {
    AttributeMapping {
        attribute,
        column,
        convention,
        slot,
        keep: true,
    }
}

const GENAI: &str = "OpenTelemetry GenAI";
const GENAI_OLD: &str = "OpenTelemetry GenAI (deprecated)";
const OI: &str = "OpenInference";
const TRACELOOP: &str = "OpenLLMetry (Traceloop)";
const HTTP: &str = "HTTP semantic conventions";
const HTTP_OLD: &str = "HTTP semantic conventions (before 1.21)";
const HEADER: &str = "captured HTTP header";
const DB: &str = "database semantic conventions";
const RPC: &str = "RPC semantic conventions";
const AI_SDK: &str = "Vercel AI SDK";
const LANGCHAIN: &str = "LangChain (LangSmith metadata)";
const VLLM: &str = "vLLM / SGLang request span";
const TGI: &str = "TGI response header";
const OPENAI: &str = "OpenAI response header";
const LITELLM: &str = "LiteLLM proxy";

/// Every span attribute overtime reads into a `spans` column, ranked:
/// where several fill one column, the first listed wins whatever order
/// they arrive in. An attribute not listed here (nor `agent.<column>`) is
/// kept as is in the `attributes` column.
pub const ATTRIBUTE_MAPPINGS: &[AttributeMapping] = &[
    hint("gen_ai.operation.name", "stage", GENAI, Slot::Operation),
    hint("llm.request.type", "stage", TRACELOOP, Slot::Operation),
    hint("openinference.span.kind", "stage", OI, Slot::ConventionKind),
    hint(
        "traceloop.span.kind",
        "stage",
        TRACELOOP,
        Slot::ConventionKind,
    ),
    hint("db.system.name", "stage", DB, Slot::DbSystem),
    hint("db.system", "stage", DB, Slot::DbSystem),
    hint("rpc.system", "stage", RPC, Slot::RpcSystem),
    hint("http.request.method", "stage", HTTP, Slot::HttpMethod),
    hint("http.method", "stage", HTTP_OLD, Slot::HttpMethod),
    hint("call_type", "stage", LITELLM, Slot::GatewayCallType),
    row("gen_ai.request.model", "model", GENAI, Slot::Model),
    row("llm.model_name", "model", OI, Slot::Model),
    row("gen_ai.response.model", "model", GENAI, Slot::Model),
    row("ai.model.id", "model", AI_SDK, Slot::Model),
    row("ls_model_name", "model", LANGCHAIN, Slot::Model),
    row(
        "llm.invocation_parameters",
        "model",
        OI,
        Slot::InvocationModel,
    ),
    row(
        "gen_ai.usage.input_tokens",
        "input_tokens",
        GENAI,
        Slot::InputTokens,
    ),
    row(
        "gen_ai.usage.prompt_tokens",
        "input_tokens",
        GENAI_OLD,
        Slot::InputTokens,
    ),
    row(
        "llm.token_count.prompt",
        "input_tokens",
        OI,
        Slot::InputTokens,
    ),
    row(
        "llm.usage.prompt_tokens",
        "input_tokens",
        TRACELOOP,
        Slot::InputTokens,
    ),
    row(
        "http.response.header.x-prompt-tokens",
        "input_tokens",
        TGI,
        Slot::InputTokens,
    ),
    row(
        "ai.usage.inputTokens",
        "input_tokens",
        AI_SDK,
        Slot::InputTokens,
    ),
    row(
        "ai.usage.promptTokens",
        "input_tokens",
        AI_SDK,
        Slot::InputTokens,
    ),
    row(
        "gen_ai.usage.output_tokens",
        "output_tokens",
        GENAI,
        Slot::OutputTokens,
    ),
    row(
        "gen_ai.usage.completion_tokens",
        "output_tokens",
        GENAI_OLD,
        Slot::OutputTokens,
    ),
    row(
        "llm.token_count.completion",
        "output_tokens",
        OI,
        Slot::OutputTokens,
    ),
    row(
        "llm.usage.completion_tokens",
        "output_tokens",
        TRACELOOP,
        Slot::OutputTokens,
    ),
    row(
        "http.response.header.x-generated-tokens",
        "output_tokens",
        TGI,
        Slot::OutputTokens,
    ),
    row(
        "ai.usage.outputTokens",
        "output_tokens",
        AI_SDK,
        Slot::OutputTokens,
    ),
    row(
        "ai.usage.completionTokens",
        "output_tokens",
        AI_SDK,
        Slot::OutputTokens,
    ),
    row(
        "gen_ai.request.max_tokens",
        "max_tokens",
        GENAI,
        Slot::MaxTokens,
    ),
    row(
        "llm.request.max_tokens",
        "max_tokens",
        TRACELOOP,
        Slot::MaxTokens,
    ),
    row(
        "llm.invocation_parameters",
        "max_tokens",
        OI,
        Slot::InvocationMaxTokens,
    ),
    row(
        "gen_ai.request.temperature",
        "temperature",
        GENAI,
        Slot::Temperature,
    ),
    row(
        "llm.request.temperature",
        "temperature",
        TRACELOOP,
        Slot::Temperature,
    ),
    row(
        "llm.invocation_parameters",
        "temperature",
        OI,
        Slot::InvocationTemperature,
    ),
    row(
        "gen_ai.response.time_to_first_chunk",
        "ttft_ms",
        GENAI,
        Slot::TtftSeconds,
    ),
    row(
        "ai.response.msToFirstChunk",
        "ttft_ms",
        AI_SDK,
        Slot::TtftMillis,
    ),
    row(
        "gen_ai.latency.time_to_first_token",
        "ttft_ms",
        VLLM,
        Slot::TtftSeconds,
    ),
    hint(
        "gen_ai.latency.time_in_queue",
        "queue_ms",
        VLLM,
        Slot::PhaseSeconds(Phase::Queue),
    ),
    hint(
        "gen_ai.latency.time_in_model_prefill",
        "prefill_ms",
        VLLM,
        Slot::PhaseSeconds(Phase::Prefill),
    ),
    hint(
        "gen_ai.latency.time_in_model_decode",
        "decode_ms",
        VLLM,
        Slot::PhaseSeconds(Phase::Decode),
    ),
    hint(
        "gen_ai.latency.e2e",
        "other_phases",
        VLLM,
        Slot::PhaseSeconds(Phase::Total),
    ),
    hint(
        "http.response.header.x-queue-time",
        "queue_ms",
        TGI,
        Slot::PhaseMillis(Phase::Queue),
    ),
    hint(
        "http.response.header.x-inference-time",
        "other_phases",
        TGI,
        Slot::PhaseMillis(Phase::Inference),
    ),
    hint(
        "http.response.header.x-total-time",
        "other_phases",
        TGI,
        Slot::PhaseMillis(Phase::Total),
    ),
    hint(
        "http.response.header.openai-processing-ms",
        "other_phases",
        OPENAI,
        Slot::PhaseMillis(Phase::Total),
    ),
    row("gen_ai.tool.name", "tool", GENAI, Slot::Tool),
    row("tool.name", "tool", OI, Slot::Tool),
    row("ai.toolCall.name", "tool", AI_SDK, Slot::Tool),
    row("traceloop.entity.name", "tool", TRACELOOP, Slot::EntityName),
    row(
        "gen_ai.evaluation.score.value",
        "judge_score",
        GENAI,
        Slot::JudgeScore,
    ),
    row(
        "http.response.header.x-llm-reason",
        "llm_reason",
        HEADER,
        Slot::LlmReason,
    ),
    row(
        "http.response.header.x-llm-duration",
        "llm_duration_ms",
        HEADER,
        Slot::LlmDuration,
    ),
    row(
        "http.request.header.x-max-wait",
        "max_wait_ms",
        HEADER,
        Slot::MaxWait,
    ),
    row(
        "http.request.header.x-request-id",
        "request_id",
        HEADER,
        Slot::RequestId,
    ),
    row(
        "http.response.status_code",
        "http_status",
        HTTP,
        Slot::HttpStatus,
    ),
    row(
        "http.status_code",
        "http_status",
        HTTP_OLD,
        Slot::HttpStatus,
    ),
    row("error.type", "error_type", HTTP, Slot::ErrorType),
    row("server.address", "peer", HTTP, Slot::ServerAddress),
    row("net.peer.name", "peer", HTTP_OLD, Slot::ServerAddress),
    row("server.port", "peer", HTTP, Slot::ServerPort),
    row("net.peer.port", "peer", HTTP_OLD, Slot::ServerPort),
    hint("url.full", "peer", HTTP, Slot::Url),
    hint("http.url", "peer", HTTP_OLD, Slot::Url),
];

/// A header attribute's key with its header name in lowercase and `_`
/// read as `-`; any other key as it is.
pub fn normalize_key(key: &str) -> Cow<'_, str> {
    for prefix in ["http.request.header.", "http.response.header."] {
        if let Some(name) = key.strip_prefix(prefix)
            && name.bytes().any(|b| b == b'_' || b.is_ascii_uppercase())
        {
            return Cow::Owned(format!(
                "{prefix}{}",
                name.to_ascii_lowercase().replace('_', "-")
            ));
        }
    }
    Cow::Borrowed(key)
}

/// The slots that compete: names of one group fill one value, the first
/// listed winning. Hints of different kinds never compete.
pub fn group(slot: Slot) -> &'static str {
    match slot {
        Slot::Operation => "operation",
        Slot::ConventionKind => "convention_kind",
        Slot::EntityName => "entity_name",
        Slot::Model | Slot::InvocationModel => "model",
        Slot::InputTokens => "input_tokens",
        Slot::OutputTokens => "output_tokens",
        Slot::MaxTokens | Slot::InvocationMaxTokens => "max_tokens",
        Slot::Temperature | Slot::InvocationTemperature => "temperature",
        Slot::TtftSeconds | Slot::TtftMillis => "ttft_ms",
        Slot::PhaseSeconds(p) | Slot::PhaseMillis(p) => match p {
            Phase::Queue => "queue_ms",
            Phase::Prefill => "prefill_ms",
            Phase::Decode => "decode_ms",
            Phase::Inference => "inference_ms",
            Phase::Total => "total_ms",
        },
        Slot::Tool => "tool",
        Slot::JudgeScore => "judge_score",
        Slot::LlmReason => "llm_reason",
        Slot::LlmDuration => "llm_duration_ms",
        Slot::MaxWait => "max_wait_ms",
        Slot::RequestId => "request_id",
        Slot::HttpStatus => "http_status",
        Slot::ErrorType => "error_type",
        Slot::ServerAddress => "server_address",
        Slot::ServerPort => "server_port",
        Slot::HttpMethod => "http_method",
        Slot::Url => "url",
        Slot::DbSystem => "db_system",
        Slot::RpcSystem => "rpc_system",
        Slot::GatewayCallType => "gateway_call_type",
    }
}

type Index = HashMap<&'static str, Vec<(usize, &'static AttributeMapping)>>;

fn index() -> &'static Index {
    static I: OnceLock<Index> = OnceLock::new();
    I.get_or_init(|| {
        let mut m: Index = HashMap::new();
        let mut rank_in_group: HashMap<&str, usize> = HashMap::new();
        for r in ATTRIBUTE_MAPPINGS {
            let rank = rank_in_group.entry(group(r.slot)).or_insert(0);
            m.entry(r.attribute).or_default().push((*rank, r));
            *rank += 1;
        }
        m
    })
}

/// The rows of an attribute key (normalised first), empty when it maps to
/// no column.
#[cfg(test)]
pub fn lookup(key: &str) -> Vec<&'static AttributeMapping> {
    ranked(key).into_iter().map(|(_, r)| r).collect()
}

/// The rows of an attribute key with each one's rank within its group
/// (0 wins over 1; see [`group`]).
pub fn ranked(key: &str) -> Vec<(usize, &'static AttributeMapping)> {
    index()
        .get(normalize_key(key).as_ref())
        .cloned()
        .unwrap_or_default()
}

/// Reads a Python exception class as written into `error.type` by some
/// instrumentations, `<class 'openai.APITimeoutError'>`, as its name.
pub fn clean_error_type(s: &str) -> &str {
    let t = s.trim();
    t.strip_prefix("<class '")
        .and_then(|r| r.strip_suffix("'>"))
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_has_its_names_ranked_in_table_order() {
        let r = ranked("gen_ai.response.model");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, 2, "request model, OpenInference's, then response");
        let ip = lookup("llm.invocation_parameters");
        let cols: Vec<&str> = ip.iter().map(|r| r.column).collect();
        assert_eq!(cols, ["model", "max_tokens", "temperature"]);
        assert_eq!(
            lookup("http.request.header.X_Request_ID")[0].column,
            "request_id"
        );
        assert_eq!(normalize_key("gen_ai.tool.name"), "gen_ai.tool.name");
    }

    #[test]
    fn no_attribute_is_listed_twice_for_one_column() {
        let mut seen = std::collections::HashSet::new();
        for r in ATTRIBUTE_MAPPINGS {
            assert!(
                seen.insert((r.attribute, r.column)),
                "{} → {} twice",
                r.attribute,
                r.column
            );
            assert_eq!(normalize_key(r.attribute), r.attribute);
        }
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn module_example_example() {
        use crate::spans::conventions::{lookup, normalize_key};
        assert_eq!(
            normalize_key("http.response.header.X_LLM_Reason"),
            "http.response.header.x-llm-reason"
        );
        let m = lookup("llm.token_count.prompt");
        assert_eq!(m[0].column, "input_tokens");
        assert!(lookup("customer.tier").is_empty());
    }

    #[test]
    fn clean_error_type_example() {
        use crate::spans::conventions::clean_error_type;
        assert_eq!(
            clean_error_type("<class 'openai.APITimeoutError'>"),
            "openai.APITimeoutError"
        );
        assert_eq!(clean_error_type("ReadTimeout"), "ReadTimeout");
    }
}
