//! An LLM gateway as a layer of the call (docs/diagnosis.md, "Calls"): a
//! model call whose one HTTP attempt reached a gateway — a server naming
//! the call's operation again, as the LiteLLM proxy's `litellm_request`
//! does — gets the gateway's own attempts as its attempts and the models
//! it tried as a fallback; a plain HTTP hop does not.

use crate::common;
use common::*;
use overtime_model::{RootCauseKind as K, SpanStatus, Stage};

/// The agent's `chat` on `model`, its one POST to the gateway, and the
/// gateway's server span `4` (the gateway's spans go under it).
fn through_gateway(n: u32, model: &str) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(504, 3_000.0);
    let r = b.root("agent-api", 1.0, 8_100.0);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/run".into();
    let chat = b.child("2", "agent-api", Stage::Llm, 2.0, 8_090.0);
    chat.model = Some(model.into());
    chat.name = format!("chat {model}");
    let post = b.span("3", Some("2"), "agent-api", Stage::Network, 4.0, 8_085.0);
    post.name = "POST".into();
    post.kind = Some("client".into());
    post.peer = Some("10.0.0.7:4000".into());
    let server = b.span(
        "4",
        Some("3"),
        "litellm-proxy",
        Stage::Service,
        7.0,
        8_080.0,
    );
    server.name = "Received Proxy Server Request".into();
    server.kind = Some("server".into());
    b
}

/// One `litellm_request` (an operation on `model`) under the gateway.
fn gateway_op(b: &mut Builder, id: &str, model: &str, start: f64, end: f64, timed_out: bool) {
    let op = b.span(id, Some("4"), "litellm-proxy", Stage::Llm, start, end);
    op.name = "litellm_request".into();
    op.model = Some(model.into());
    if timed_out {
        op.status = SpanStatus::Timeout;
        op.error_type = Some("Timeout".into());
    }
}

/// One provider request the gateway timed (LiteLLM's `self` span).
fn gateway_attempt(b: &mut Builder, id: &str, start: f64, end: f64) {
    let a = b.span(id, Some("4"), "litellm-proxy", Stage::Network, start, end);
    a.name = "self".into();
    a.kind = Some("internal".into());
}

#[test]
fn a_gateways_own_retries_behind_one_attempt_are_the_calls_retries() {
    let mut b = through_gateway(700, "deepseek-v4-flash");
    gateway_op(&mut b, "5", "deepseek-v4-flash", 13.0, 1_027.0, true);
    gateway_attempt(&mut b, "6", 25.0, 1_026.0);
    gateway_attempt(&mut b, "7", 2_175.0, 3_177.0);
    gateway_attempt(&mut b, "8", 4_885.0, 5_920.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_eq!(v.root_cause.component, "deepseek-v4-flash");
    assert!(
        v.root_cause
            .summary
            .contains("3 attempts at deepseek-v4-flash by the LLM gateway litellm-proxy"),
        "{}",
        v.root_cause.summary
    );
    assert_evidence(
        &v,
        "the LLM gateway litellm-proxy made the 3 attempts on the call's behalf",
    );
    // The gateway's per-attempt timeout is the one that fired, not the
    // agent's whole wait.
    assert_evidence(&v, "its timeout fired after 1.0 s");
}

#[test]
fn the_timeout_a_gateways_error_states_is_taken_as_configured() {
    let mut b = through_gateway(704, "deepseek-v4-flash");
    gateway_op(&mut b, "5", "deepseek-v4-flash", 13.0, 1_057.0, true);
    b.spans.last_mut().unwrap().attributes.push((
        "error.message".into(),
        "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out. - timeout value=1.0, time taken=1.04 seconds".into(),
    ));
    gateway_attempt(&mut b, "6", 25.0, 1_056.0);
    gateway_attempt(&mut b, "7", 2_175.0, 3_177.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_evidence(&v, "its timeout of 1.0 s fired");
}

#[test]
fn a_gateways_fallback_to_another_model_is_named_in_the_verdict() {
    let mut b = through_gateway(701, "gpt-oss-120b");
    gateway_op(&mut b, "5", "gpt-oss-120b", 40.0, 1_554.0, true);
    gateway_attempt(&mut b, "6", 65.0, 1_554.0);
    gateway_op(&mut b, "7", "qwen3-32b", 1_611.0, 4_237.0, false);
    gateway_attempt(&mut b, "8", 1_629.0, 4_236.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_eq!(v.root_cause.component, "gpt-oss-120b");
    assert!(
        v.root_cause
            .summary
            .contains("falling back from gpt-oss-120b to qwen3-32b"),
        "{}",
        v.root_cause.summary
    );
}

#[test]
fn one_provider_request_behind_a_gateway_is_one_attempt_through_it() {
    let mut b = through_gateway(702, "mixtral-8x22b");
    gateway_op(&mut b, "5", "mixtral-8x22b", 12.0, 8_070.0, false);
    gateway_attempt(&mut b, "6", 14.0, 8_068.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "mixtral-8x22b");
    assert_evidence(&v, "through the LLM gateway litellm-proxy");
}

#[test]
fn two_calls_made_behind_a_plain_http_hop_are_not_retries_of_the_call() {
    // The server behind the attempt names no model operation: it is a
    // service of the platform (say a prompt router fetching context), not
    // an LLM gateway, and its two requests are its own business.
    let mut b = through_gateway(703, "qwen2.5-72b");
    for (id, start, end) in [("5", 20.0, 1_500.0), ("6", 1_510.0, 8_070.0)] {
        let a = b.span(id, Some("4"), "litellm-proxy", Stage::Network, start, end);
        a.name = "GET".into();
        a.kind = Some("client".into());
        a.peer = Some("context-store:80".into());
    }
    let v = verdict(b, 3_000.0);
    assert_ne!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert!(!evidence(&v).contains("LLM gateway"), "{}", evidence(&v));
}

/// The recorded run of the real LiteLLM proxy 1.106.12 in front of a
/// vLLM-style server (tests/fixtures/e2e_otel/litellm): the server's
/// `llm_request` spans arrive in traces of their own, joined to the call by
/// the completion's id.
fn recorded_litellm_run() -> crate::invariance::incident::Incident {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    crate::invariance::incident::load(&root, &root.join("e2e_otel/litellm"))
}

#[test]
fn a_model_servers_answer_in_a_trace_of_its_own_gives_the_call_its_phases() {
    let run = recorded_litellm_run();
    let failing = run
        .failing
        .as_ref()
        .expect("the run's truth lists its failing requests");
    let decode: Vec<&String> = failing
        .iter()
        .filter(|(_, e)| e.kind == "llm_decode_slow")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(decode.len(), 4);
    for id in decode {
        let v = &run.original[id];
        assert_eq!(
            v.root_cause.kind,
            K::LlmDecodeSlow,
            "{id}: {:?}",
            v.root_cause
        );
        assert!(
            evidence(v).contains("vLLM span, a trace of its own joined by response id chatcmpl-"),
            "{id}: {}",
            evidence(v)
        );
    }
    // Every failing request of the run as its truth says.
    for (id, e) in failing {
        let v = &run.original[id];
        assert_eq!(
            (v.root_cause.kind.as_str(), v.root_cause.component.as_str()),
            (e.kind.as_str(), e.component.as_str()),
            "{id}"
        );
    }
}

#[test]
fn the_live_engine_joins_a_late_answer_in_a_trace_of_its_own_as_the_batch_does() {
    let run = recorded_litellm_run();
    // The model server's spans arrive last: the calls are judged blind
    // first, then again when their answers come.
    let gateway = run
        .gateway
        .iter()
        .flat_map(|b| overtime_model::gateway_records(b).expect("the run's gateway rows read back"))
        .collect();
    crate::live_parity::live_equals_batch("litellm", gateway, run.spans, run.config, |s| {
        s.service == "vllm"
    });
}
