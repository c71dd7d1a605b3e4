//! Shapes that real instrumentation produces and the rules must see
//! through: retries with no `attempt` attribute, an LLM reached through a
//! bare HTTP client span, a log format without `$request_time`, ASGI's
//! `http send` spans as stream chunks.

use crate::common;
use common::*;
use overtime_model::{Outcome, RootCauseKind as K, SpanStatus, Stage};

#[test]
fn sequential_failed_calls_are_retries_without_attempt_attributes() {
    let v = verdict(three_attempts(1, SpanStatus::Timeout, false), 10_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_evidence(&v, "3 attempts");
}

#[test]
fn parallel_calls_of_one_tool_are_not_retries() {
    let mut b = Builder::new(2);
    b.gateway(504, 10_000.0);
    b.root("orchestrator", 1.0, 12_000.0);
    for a in 0..3u32 {
        let (id, end) = ((a + 2).to_string(), 11_000.0 - a as f64);
        b.tool(&id, "orchestrator", "search_api", 10.0, end).status = SpanStatus::Error;
    }
    let v = verdict(b, 10_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout);
    assert!(!evidence(&v).contains("attempts"), "{}", evidence(&v));
}

#[test]
fn an_http_client_span_that_reached_a_model_server_is_an_llm_call() {
    let mut b = Builder::new(3);
    b.gateway(504, 60_000.0);
    b.root("agent-api", 1.0, 70_000.0);
    let c = b.child("2", "agent-api", Stage::Network, 10.0, 70_000.0);
    c.peer = Some("model-server:8000".into());
    c.timeout_ms = Some(120_000.0);
    let srv = b.span(
        "3",
        Some("2"),
        "model-server",
        Stage::Service,
        15.0,
        69_000.0,
    );
    srv.model = Some("qwen-72b".into());
    srv.llm_reason = Some("queue_wait=41.0s,kv_cache_build=2.0s,decode_loop=25.0s".into());
    let v = verdict(b, 60_000.0);
    assert_eq!(v.root_cause.kind, K::LlmQueueing, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "qwen-72b");
    assert_evidence(&v, "queue 41.0 s");
}

#[test]
fn a_format_without_request_time_still_has_a_timeline() {
    let mut b = Builder::new(4);
    let g = b.gateway(504, 30_000.0);
    g.request_time_ms = None;
    b.root("runtime", 1.0, 40_000.0);
    b.tool("2", "runtime", "crm", 100.0, 40_000.0);
    let v = verdict(b, 30_000.0);
    assert!(
        (v.budget.consumed_ms - 30_000.0).abs() < 1.0,
        "upstream_response_time stands in: {}",
        v.budget.consumed_ms
    );
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout);
}

#[test]
fn asgi_http_send_spans_are_stream_chunks() {
    let mut b = Builder::new(5);
    b.gateway(200, 61_000.0);
    b.root("agent-api", 2.0, 80_000.0).status = SpanStatus::Cancelled;
    for (i, t) in [500.0, 900.0].into_iter().enumerate() {
        let s = b.child(
            &format!("{}", 10 + i),
            "agent-api",
            Stage::Other,
            t,
            t + 1.0,
        );
        s.name = "POST /v1/agent/chat http send".into();
        s.attributes
            .push(("asgi.event.type".into(), "http.response.body".into()));
    }
    let v = verdict(b, 60_000.0);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
}

#[test]
fn a_job_that_never_got_a_worker_before_the_cut_is_pool_saturation() {
    let mut b = Builder::new(6);
    b.gateway(504, 3_000.0);
    b.root("export-api", 1.0, 4_500.0);
    let t = b.tool("2", "export-api", "report_builder", 3_300.0, 4_400.0);
    t.timeout_ms = Some(2_000.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::PoolSaturation, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "export-api");
}

#[test]
fn an_llm_call_inside_a_judge_span_is_the_judge() {
    let mut b = Builder::new(7);
    b.gateway(504, 30_000.0);
    b.root("agent-api", 1.0, 35_000.0);
    b.child("2", "agent-api", Stage::Other, 500.0, 34_000.0)
        .name = "judge_answer".into();
    let l = b.span("3", Some("2"), "agent-api", Stage::Llm, 510.0, 33_900.0);
    l.model = Some("qwen2.5-72b-instruct".into());
    l.llm_reason = Some("kv_cache_build=1s,decode_loop=30s".into());
    let v = verdict(b, 30_000.0);
    assert_eq!(v.root_cause.kind, K::JudgeSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "qwen2.5-72b-instruct");
}

#[test]
fn the_inner_layer_that_gave_up_first_is_named_when_both_log_the_same_time() {
    let mut b = Builder::new(8);
    b.gateway(504, 3_001.0).source = "edge".into();
    let inner = b.gateway(504, 3_001.0);
    inner.source = "internal".into();
    inner.layer = 1;
    b.root("agent-api", 2.0, 9_000.0);
    b.tool("2", "agent-api", "web_browse", 10.0, 9_000.0);
    let cfg = overtime_diagnose::DiagnoseConfig {
        layers: vec![
            overtime_diagnose::LayerConfig {
                name: "edge".into(),
                read_timeout_ms: Some(4_000.0),
            },
            overtime_diagnose::LayerConfig {
                name: "internal".into(),
                read_timeout_ms: Some(3_000.0),
            },
        ],
        ..Default::default()
    };
    let v = only(&run(vec![b], &cfg)).clone();
    let g = v.gateway.as_ref().unwrap();
    assert_eq!(
        (g.source.as_str(), g.timeout_ms),
        ("internal", Some(3_000.0))
    );
}

#[test]
fn a_span_timeout_is_a_failure_even_when_a_fallback_answered() {
    let mut b = Builder::new(9);
    b.gateway(200, 5_600.0);
    b.root("orchestrator", 1.0, 5_590.0);
    let t = b.tool("2", "tool-service", "weather_api", 10.0, 5_010.0);
    t.timeout_ms = Some(5_000.0);
    t.status = SpanStatus::Timeout;
    b.child("3", "orchestrator", Stage::Memory, 5_010.0, 5_200.0)
        .fallback = Some("cache".into());
    let v = verdict(b, 10_000.0);
    assert_eq!(v.outcome, Outcome::ServiceTimeout);
    assert_eq!(v.root_cause.kind, K::ToolSlow);
    assert_eq!(v.root_cause.component, "weather_api");
}
