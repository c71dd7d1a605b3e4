//! Spans exactly as off-the-shelf instrumentation writes them: a FastAPI
//! agent service under `opentelemetry-instrument` (FastAPI, httpx and
//! requests instrumentations, the OTLP/HTTP exporter), calling an
//! OpenAI-compatible server through the official `openai` client, with
//! each of the three OpenAI instrumentations. The fixtures are the
//! exporter's own requests, recorded by a receiver and written as OTLP
//! JSON lines (ids in base64, as protobuf's JSON mapping writes them):
//! - `openai_v2_http_dup.jsonl`: opentelemetry-instrumentation-openai-v2,
//!   tool calls in opentelemetry-util-genai's `execute_tool` spans, HTTP
//!   attributes old and stable at once (`OTEL_SEMCONV_STABILITY_OPT_IN=http/dup`);
//! - `openinference.jsonl`: openinference-instrumentation-openai, tools in
//!   OpenInference TOOL spans;
//! - `traceloop.jsonl`: Traceloop's opentelemetry-instrumentation-openai,
//!   tools as bare HTTP client spans.
//!
//! Captured headers: the server's `X-Request-ID`, the model server's
//! `X-LLM-Reason` / `X-LLM-Duration` (Python writes them with `_`, and
//! one array element per comma-separated item).

use crate::common::parse_file;
use overtime_model::{SpanRecord, SpanStatus, Stage};
use overtime_parse::spans::{ParsedSpans, SpanFormat};

fn fixture(name: &str) -> ParsedSpans {
    let path = format!(
        "{}/tests/fixtures/spans/real_instrumentation/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let p = parse_file(SpanFormat::OtlpJson, &path, name);
    assert!(p.rejected.is_empty(), "{:#?}", p.rejected);
    p
}

/// The spans of the request that carried `X-Request-ID: rid`.
fn request<'a>(p: &'a ParsedSpans, rid: &str) -> Vec<&'a SpanRecord> {
    let root = p
        .spans
        .iter()
        .find(|s| s.request_id.as_deref() == Some(rid))
        .unwrap_or_else(|| panic!("no span recorded request id {rid}"));
    p.spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .collect()
}

fn one<'a>(spans: &[&'a SpanRecord], what: impl Fn(&SpanRecord) -> bool) -> &'a SpanRecord {
    let found: Vec<&&SpanRecord> = spans.iter().filter(|s| what(s)).collect();
    assert_eq!(found.len(), 1, "{:#?}", spans);
    found[0]
}

#[test]
fn a_captured_request_id_in_pythons_underscore_spelling_is_the_request_id() {
    for f in [
        "openai_v2_http_dup.jsonl",
        "openinference.jsonl",
        "traceloop.jsonl",
    ] {
        let p = fixture(f);
        let server = one(&request(&p, "rid-0001"), |s| {
            s.kind.as_deref() == Some("server")
        });
        assert_eq!(server.stage, Stage::Service, "{f}");
        assert_eq!(server.http_status, Some(200), "{f}");
    }
}

#[test]
fn an_x_llm_reason_array_split_per_phase_gives_every_phase() {
    let p = fixture("openai_v2_http_dup.jsonl");
    let spans = request(&p, "rid-0001");
    let post = one(&spans, |s| {
        s.name == "POST" && s.phases.prefill_ms.is_some_and(|ms| ms >= 300.0)
    });
    assert_eq!(post.stage, Stage::Network);
    let ph = &post.phases;
    assert!(!ph.malformed, "{:?}", post.llm_reason);
    assert!(ph.queue_ms.is_some() && ph.decode_ms.is_some() && ph.io_ms.is_some());
    assert_eq!(post.llm_duration_ms, Some(350.0));
    assert!(
        post.llm_reason
            .as_deref()
            .unwrap()
            .contains(",kv_cache_build=")
    );
}

#[test]
fn genai_chat_spans_are_llm_calls_with_model_and_tokens() {
    let p = fixture("openai_v2_http_dup.jsonl");
    let spans = request(&p, "rid-0001");
    let chat = one(&spans, |s| s.name == "chat deepseek-v4");
    assert_eq!(chat.stage, Stage::Llm);
    assert_eq!(chat.model.as_deref(), Some("deepseek-v4"));
    assert_eq!(
        (chat.input_tokens, chat.output_tokens),
        (Some(50), Some(20))
    );
    assert_eq!(chat.max_tokens, Some(20));
    let tool = one(&spans, |s| s.name == "execute_tool weather_api");
    assert_eq!(tool.stage, Stage::Tool);
    assert_eq!(tool.tool.as_deref(), Some("weather_api"));
}

#[test]
fn http_dup_attributes_old_and_stable_fill_each_column_once() {
    let p = fixture("openai_v2_http_dup.jsonl");
    let spans = request(&p, "rid-0001");
    let get = one(&spans, |s| s.name == "GET");
    assert_eq!(get.stage, Stage::Network);
    assert_eq!(get.http_status, Some(200));
    assert!(get.peer.as_deref().unwrap().starts_with("127.0.0.1:"));
}

#[test]
fn an_openai_timeout_written_as_a_python_class_is_a_timeout() {
    let p = fixture("openai_v2_http_dup.jsonl");
    let spans = request(&p, "rid-0003");
    let chat = one(&spans, |s| s.stage == Stage::Llm);
    assert_eq!(chat.status, SpanStatus::Timeout);
    assert_eq!(chat.error_type.as_deref(), Some("openai.APITimeoutError"));
    // The client's own retries: three HTTP attempts under the one call,
    // each ended by httpx's read timeout.
    let attempts: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id.as_deref() == Some(chat.span_id.as_str()))
        .collect();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|a| a.status == SpanStatus::Timeout));
}

#[test]
fn openinference_llm_spans_name_their_model_and_tokens() {
    let p = fixture("openinference.jsonl");
    let spans = request(&p, "rid-0001");
    let chat = one(&spans, |s| {
        s.name == "ChatCompletion" && s.model.as_deref() == Some("deepseek-v4")
    });
    assert_eq!(chat.stage, Stage::Llm);
    assert_eq!(
        (chat.input_tokens, chat.output_tokens),
        (Some(50), Some(20))
    );
    assert_eq!(chat.max_tokens, Some(20), "from llm.invocation_parameters");
    let tool = one(&spans, |s| s.tool.as_deref() == Some("weather_api"));
    assert_eq!(
        (tool.stage, tool.name.as_str()),
        (Stage::Tool, "weather_api")
    );
    let judge = one(&spans, |s| s.name == "answer_judge");
    assert_eq!(judge.stage, Stage::Judge, "an EVALUATOR span");
    // A call that failed before any answer has no llm.model_name: the
    // model comes from its invocation parameters.
    let failed = request(&p, "rid-0003");
    let chat = one(&failed, |s| s.name == "ChatCompletion");
    assert_eq!(chat.model.as_deref(), Some("deepseek-v4"));
    assert_eq!(chat.status, SpanStatus::Timeout);
}

#[test]
fn openinference_first_token_event_is_the_time_to_first_token() {
    let p = fixture("openinference.jsonl");
    let spans = request(&p, "rid-0005");
    let chat = one(&spans, |s| s.name == "ChatCompletion");
    let ttft = chat.ttft_ms.expect("First Token Stream Event");
    assert!(ttft > 0.0 && ttft < chat.duration_ms(), "{ttft}");
}

#[test]
fn traceloop_chat_spans_are_llm_calls_and_bare_tools_are_network_calls() {
    let p = fixture("traceloop.jsonl");
    let spans = request(&p, "rid-0001");
    let chats: Vec<_> = spans.iter().filter(|s| s.name == "openai.chat").collect();
    let seen: Vec<_> = chats
        .iter()
        .map(|c| (c.model.as_deref().unwrap(), c.stage))
        .collect();
    assert_eq!(
        seen,
        [("deepseek-v4", Stage::Llm), ("qwen-judge", Stage::Judge)],
        "a model named a judge is the judge"
    );
    let get = one(&spans, |s| s.name == "GET");
    assert_eq!(get.stage, Stage::Network);
    let failed = request(&p, "rid-0003");
    let chat = one(&failed, |s| s.name == "openai.chat");
    assert_eq!(chat.status, SpanStatus::Timeout);
    assert_eq!(chat.error_type.as_deref(), Some("APITimeoutError"));
}

#[test]
fn traceloop_tool_and_task_spans_and_old_names() {
    use overtime_parse::spans::{ParsedSpans, parse_otlp_json_line};
    let span = |id: &str, name: &str, attrs: serde_json::Value| {
        serde_json::json!({"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": id, "name": name,
            "parentSpanId": "00f067aa0ba902b7", "kind": 1,
            "startTimeUnixNano": "1714561200000000000", "endTimeUnixNano": "1714561201000000000",
            "attributes": attrs})
    };
    let kv = |k: &str, v: &str| serde_json::json!({"key": k, "value": {"stringValue": v}});
    let line = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        span("b7ad6b7169203331", "weather.tool", serde_json::json!([
            kv("traceloop.span.kind", "tool"), kv("traceloop.entity.name", "weather")])),
        span("b7ad6b7169203332", "plan.task", serde_json::json!([
            kv("traceloop.span.kind", "task"), kv("traceloop.entity.name", "plan"),
            kv("gen_ai.request.model", "gpt-4o")])),
        span("b7ad6b7169203333", "openai.chat", serde_json::json!([
            kv("llm.request.type", "chat"), kv("gen_ai.system", "openai"),
            kv("gen_ai.request.model", "gpt-4o"),
            {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "412"}},
            {"key": "llm.usage.completion_tokens", "value": {"intValue": "9"}}])),
    ]}]}]});
    let mut out = ParsedSpans::default();
    parse_otlp_json_line(line.to_string().as_bytes(), "t", 1, &mut out);
    assert!(out.rejected.is_empty(), "{:#?}", out.rejected);
    let s = &out.spans;
    assert_eq!(
        (s[0].stage, s[0].tool.as_deref()),
        (Stage::Tool, Some("weather"))
    );
    assert_eq!(
        s[1].stage,
        Stage::Other,
        "a task is the application's own span"
    );
    assert_eq!(s[1].tool, None);
    assert_eq!(s[2].stage, Stage::Llm);
    assert_eq!(
        (s[2].input_tokens, s[2].output_tokens),
        (Some(412), Some(9))
    );
}
