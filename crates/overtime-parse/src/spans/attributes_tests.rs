//! Unit tests of [`super`]: fields, attributes and events into columns.
use super::*;
use crate::spans::value::plain_json_to_any;
use overtime_model::Stage;
use serde_json::json;

fn span() -> SpanBuilder {
    let mut r = SpanRecord::new(
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
        "agent",
        "chat",
        0,
        1000,
    );
    r.parent_span_id = Some("00f067aa0ba902b7".into());
    SpanBuilder::new(r)
}

fn a(v: serde_json::Value) -> AnyValue {
    plain_json_to_any(&v)
}

#[test]
fn gen_ai_attributes_fill_columns() {
    let mut b = span();
    b.attribute("gen_ai.operation.name", &a(json!("chat")));
    b.attribute("gen_ai.request.model", &a(json!("deepseek-v4-pro")));
    b.attribute("gen_ai.response.model", &a(json!("deepseek-v4-pro-0501")));
    b.attribute("gen_ai.usage.input_tokens", &a(json!(412)));
    b.attribute("gen_ai.response.time_to_first_chunk", &a(json!(0.75)));
    b.attribute(
        "http.response.header.x-llm-reason",
        &a(json!(["kv_cache_build=3.2s"])),
    );
    b.attribute("http.request.header.x-max-wait", &a(json!(["60"])));
    b.attribute("agent.timeout_ms", &a(json!(30000)));
    b.attribute("agent.attempt", &a(json!("1")));
    b.attribute("customer.tier", &a(json!("gold")));
    let r = b.finish();
    assert_eq!(r.stage, Stage::Llm);
    assert_eq!(r.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!(r.input_tokens, Some(412));
    assert_eq!(r.ttft_ms, Some(750.0));
    assert_eq!(r.phases.prefill_ms, Some(3200.0));
    assert_eq!(r.max_wait_ms, Some(60000.0));
    assert_eq!(r.timeout_ms, Some(30000.0));
    assert_eq!(r.attempt, Some(1));
    assert!(
        r.attributes
            .contains(&("customer.tier".into(), "gold".into()))
    );
    assert!(r.attributes.contains(&(
        "gen_ai.response.model".into(),
        "deepseek-v4-pro-0501".into()
    )));
    assert!(
        r.attributes
            .contains(&("gen_ai.operation.name".into(), "chat".into()))
    );
}

#[test]
fn unreadable_values_are_kept_not_lost() {
    let mut b = span();
    b.attribute("agent.attempt", &a(json!("first")));
    assert!(!b.field("input_tokens", &a(json!("many"))));
    assert!(b.field("timeout_ms", &a(json!(null))));
    assert!(b.field("timeout_ms", &a(json!(0))));
    let r = b.finish();
    assert_eq!(r.attempt, None);
    assert_eq!(r.timeout_ms, None);
    assert!(
        r.attributes
            .contains(&("agent.attempt".into(), "first".into()))
    );
}

#[test]
fn peer_status_and_events() {
    let mut b = span();
    b.set_kind(Some("client"));
    b.attribute("http.request.method", &a(json!("GET")));
    b.attribute("url.full", &a(json!("https://api.weather.com/v1/now")));
    b.attribute("http.response.status_code", &a(json!(504)));
    b.event(
        "dns",
        10,
        &[KeyValue {
            key: "duration_ms".into(),
            value: Some(a(json!(12.5))),
            ..Default::default()
        }],
    );
    b.event("chunk", 20, &[]);
    let r = b.finish();
    assert_eq!(r.stage, Stage::Network);
    assert_eq!(r.peer.as_deref(), Some("api.weather.com"));
    assert_eq!(r.status, SpanStatus::Error);
    assert_eq!(r.dns_ms, Some(12.5));
    assert_eq!(r.events.len(), 2);
    assert_eq!(r.events[0].duration_ms, Some(12.5));

    let mut b = span();
    b.attribute("server.address", &a(json!("10.0.0.7")));
    b.attribute("server.port", &a(json!(8000)));
    b.set_status(SpanStatus::Error);
    let exc = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(a(json!(v))),
        ..Default::default()
    };
    b.event(
        "exception",
        30,
        &[
            exc("exception.type", "httpx.ReadTimeout"),
            exc("exception.message", "timed out"),
        ],
    );
    b.event(
        "gen_ai.evaluation.result",
        40,
        &[KeyValue {
            key: "gen_ai.evaluation.score.value".into(),
            value: Some(a(json!(0.4))),
            ..Default::default()
        }],
    );
    let r = b.finish();
    assert_eq!(r.peer.as_deref(), Some("10.0.0.7:8000"));
    assert_eq!(r.status, SpanStatus::Timeout);
    assert_eq!(r.error_type.as_deref(), Some("httpx.ReadTimeout"));
    assert_eq!(r.judge_score, Some(0.4));
}

#[test]
fn judge_hint_from_agent_attribute() {
    let mut b = span();
    b.attribute("gen_ai.operation.name", &a(json!("chat")));
    b.attribute("agent.role", &a(json!("llm-as-judge")));
    assert_eq!(b.finish().stage, Stage::Judge);
    let mut b = span();
    b.field("stage", &a(json!("warp")));
    let r = b.finish();
    assert_eq!(r.stage, Stage::Other);
    assert!(r.attributes.contains(&("stage".into(), "warp".into())));
}

#[test]
fn a_vllm_request_spans_latencies_are_its_phases_in_ms() {
    // vLLM's `llm_request` SERVER span (vllm/tracing.py SpanAttributes):
    // every latency in seconds.
    let mut b = span();
    b.set_kind(Some("server"));
    for (k, v) in [
        ("gen_ai.latency.time_in_queue", 4.1),
        ("gen_ai.latency.time_in_model_prefill", 0.3),
        ("gen_ai.latency.time_in_model_decode", 0.6),
        ("gen_ai.latency.time_to_first_token", 4.4),
        ("gen_ai.latency.e2e", 5.0),
    ] {
        b.attribute(k, &a(json!(v)));
    }
    b.attribute("gen_ai.usage.prompt_tokens", &a(json!(812)));
    b.attribute("gen_ai.response.model", &a(json!("Qwen/Qwen2.5-7B")));
    let r = b.finish();
    assert_eq!(r.phases.queue_ms, Some(4100.0));
    assert_eq!(r.phases.prefill_ms, Some(300.0));
    assert_eq!(r.phases.decode_ms, Some(600.0));
    assert_eq!(r.phases.other, vec![("total".to_string(), 5000.0)]);
    assert_eq!(r.ttft_ms, Some(4400.0));
    assert_eq!(
        (r.input_tokens, r.model.as_deref()),
        (Some(812), Some("Qwen/Qwen2.5-7B"))
    );
    // Kept as written too: the diagnosis names where the phases came from.
    assert!(
        r.attributes
            .iter()
            .any(|(k, _)| k == "gen_ai.latency.time_in_queue")
    );
}

#[test]
fn tgi_headers_captured_in_any_spelling_give_queue_inference_and_tokens() {
    // TGI answers `x-queue-time` etc. in ms; Python's instrumentations
    // capture them as `x_queue_time`, a one-element array of strings.
    let mut b = span();
    b.attribute("http.response.header.x_queue_time", &a(json!(["2310"])));
    b.attribute("http.response.header.x-inference-time", &a(json!("1450")));
    b.attribute("http.response.header.x_prompt_tokens", &a(json!(["3100"])));
    b.attribute("http.response.header.x-generated-tokens", &a(json!("40")));
    let r = b.finish();
    assert_eq!(r.phases.queue_ms, Some(2310.0));
    assert_eq!(r.phases.other, vec![("inference".to_string(), 1450.0)]);
    assert_eq!((r.input_tokens, r.output_tokens), (Some(3100), Some(40)));
    // An X-LLM-Reason on the same span keeps its own phases.
    let mut b = span();
    b.attribute(
        "http.response.header.x-llm-reason",
        &a(json!("queue_wait=1s")),
    );
    b.attribute("http.response.header.x-queue-time", &a(json!("2310")));
    assert_eq!(b.finish().phases.queue_ms, Some(1000.0));
}
