//! Trace shapes of off-the-shelf instrumentation (FastAPI + httpx + one of
//! the OpenAI instrumentations, no `agent.*` attribute anywhere): the LLM
//! call is a `chat` span with HTTP client spans under it that carry the
//! model server's headers, timeouts are only seen when they fire, a
//! cancelled stream's spans arrive as orphans.

use crate::common;
use common::*;
use overtime_model::{FindingKind, Outcome, RootCauseKind as K, SpanStatus, Stage};
use overtime_parse::llm_reason::parse_llm_reason;

/// A FastAPI server span `1` (kind server) under a gateway answering
/// `status` after `rt_ms`.
fn served(n: u32, status: u16, rt_ms: f64, end_ms: f64) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(status, rt_ms);
    let r = b.root("agent-api", 1.0, end_ms);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/run".into();
    b
}

/// An HTTP client span `id` under `parent`, to the model server.
fn http_post<'a>(
    b: &'a mut Builder,
    id: &str,
    parent: &str,
    start: f64,
    end: f64,
) -> &'a mut overtime_model::SpanRecord {
    let s = b.span(id, Some(parent), "agent-api", Stage::Network, start, end);
    s.name = "POST".into();
    s.kind = Some("client".into());
    s.peer = Some("127.0.0.1:41829".into());
    s
}

#[test]
fn phases_captured_on_the_http_child_belong_to_the_llm_call() {
    let mut b = served(40, 504, 3_000.0, 3_600.0);
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_500.0);
    chat.name = "chat deepseek-v4".into();
    chat.model = Some("deepseek-v4".into());
    chat.input_tokens = Some(2_400);
    let post = http_post(&mut b, "3", "2", 8.0, 3_490.0);
    let r = "queue_wait=0.010s,kv_cache_build=3.200s,decode_loop=0.250s,io_wait=0.001s";
    post.llm_reason = Some(r.into());
    post.phases = parse_llm_reason(r);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmPrefillSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "deepseek-v4");
    assert_evidence(&v, "prefill 3.2 s");
}

#[test]
fn a_call_that_finished_is_not_said_to_have_had_no_timeout() {
    // Off-the-shelf spans record no configured timeout: a call that ended
    // without one firing may well have had one.
    let mut b = served(53, 504, 3_000.0, 3_500.0);
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 2_900.0);
    chat.model = Some("deepseek-v4".into());
    let post = http_post(&mut b, "3", "2", 8.0, 2_890.0);
    let r = "queue_wait=0.010s,kv_cache_build=2.500s,decode_loop=0.300s";
    post.llm_reason = Some(r.into());
    post.phases = parse_llm_reason(r);
    b.tool("4", "agent-api", "calc", 2_950.0, 2_990.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmPrefillSlow, "{:?}", v.root_cause);
    assert_evidence(
        &v,
        "no timeout is recorded for deepseek-v4 (it did not fire)",
    );
    assert!(
        v.findings.iter().all(|f| f.kind != FindingKind::NoTimeout),
        "{:#?}",
        v.findings
    );
}

#[test]
fn an_llm_clients_own_retries_are_attempts_of_one_call() {
    let mut b = served(41, 504, 3_000.0, 3_400.0);
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_300.0);
    chat.model = Some("deepseek-v4".into());
    chat.status = SpanStatus::Timeout;
    chat.error_type = Some("openai.APITimeoutError".into());
    for (i, start) in [10.0, 1_100.0, 2_250.0].into_iter().enumerate() {
        let a = http_post(&mut b, &format!("{}", 3 + i), "2", start, start + 1_000.0);
        a.status = SpanStatus::Timeout;
        a.error_type = Some("ReadTimeout".into());
    }
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_eq!(v.root_cause.component, "deepseek-v4");
    assert_evidence(&v, "3 attempts");
    assert_evidence(&v, "observed");
}

#[test]
fn a_tool_whose_httpx_timeout_fired_had_an_observed_timeout() {
    let mut b = served(42, 503, 2_600.0, 2_590.0);
    b.spans[0].http_status = Some(503);
    let tool = b.tool("2", "agent-api", "crm_api", 10.0, 2_510.0);
    tool.name = "execute_tool crm_api".into();
    tool.status = SpanStatus::Timeout;
    tool.error_type = Some("httpx.ReadTimeout".into());
    let get = http_post(&mut b, "3", "2", 12.0, 2_509.0);
    get.name = "GET".into();
    get.status = SpanStatus::Timeout;
    get.error_type = Some("ReadTimeout".into());
    let v = verdict(b, 3_000.0);
    assert_eq!(v.outcome, Outcome::ServiceTimeout);
    assert_eq!(v.root_cause.kind, K::ToolSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "crm_api");
    assert_evidence(
        &v,
        "its timeout fired after 2.5 s (observed: it ended in httpx.ReadTimeout",
    );
}

#[test]
fn a_tool_still_running_at_the_cut_with_no_timeout_anywhere_had_none() {
    let mut b = served(43, 504, 3_000.0, 5_100.0);
    let tool = b.tool("2", "agent-api", "web_search", 10.0, 5_050.0);
    tool.name = "execute_tool web_search".into();
    http_post(&mut b, "3", "2", 12.0, 5_049.0).name = "GET".into();
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "web_search");
    assert_evidence(&v, "still running when the request ended");
}

/// A stream cut by nginx after `read_ms` of silence: the server span ends
/// at the cut, its `http send` body spans are the chunks, the `chat` span
/// was never exported (its `POST` child is an orphan).
fn cut_stream(n: u32, with_server_span: bool) -> Builder {
    let read_ms = 3_000.0;
    let last_chunk = 400.0;
    let cut = last_chunk + read_ms + 2.0;
    let mut b = Builder::new(n);
    b.gateway(200, cut).body_bytes_sent = Some(310);
    let r = b.root("agent-api", 1.0, cut + 3.0);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/stream".into();
    r.http_status = Some(200);
    for (i, t) in [60.0, 120.0, 200.0, 300.0, last_chunk]
        .into_iter()
        .enumerate()
    {
        let s = b.child(
            &format!("{}", 10 + i),
            "agent-api",
            Stage::Other,
            t,
            t + 0.2,
        );
        s.name = "POST /v1/agent/stream http send".into();
        s.attributes
            .push(("asgi.event.type".into(), "http.response.body".into()));
    }
    let d = b.child("9", "agent-api", Stage::Other, 2.0, cut + 2.0);
    d.name = "POST /v1/agent/stream http receive".into();
    d.attributes
        .push(("asgi.event.type".into(), "http.disconnect".into()));
    // The POST runs while the first chunks go out.
    let post = b.span("20", Some("99"), "agent-api", Stage::Network, 5.0, 130.0);
    post.name = "POST".into();
    post.kind = Some("client".into());
    if !with_server_span {
        b.spans.retain(|s| s.parent_span_id.is_some());
    }
    b
}

#[test]
fn a_stream_cut_with_its_chat_span_never_exported_is_a_stream_idle_gap() {
    let v = verdict(cut_stream(44, true), 3_000.0);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
    assert_evidence(&v, "silent for 3.0 s");
    assert_evidence(&v, "1 span(s) arrived without their parent");
}

#[test]
fn a_cut_stream_whose_server_span_never_arrived_still_gets_its_verdict() {
    let v = verdict(cut_stream(45, false), 3_000.0);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
    assert_evidence(&v, "placed");
    // Every chunk is the request's own, also those sent while the orphan
    // POST was running.
    assert_evidence(&v, "after 5 events");
}

#[test]
fn a_stream_that_finished_is_not_a_cut() {
    let mut b = cut_stream(46, true);
    // The last body chunk went out just before the end: no silence.
    let end = b.spans[0].end_us;
    let last = b
        .spans
        .iter_mut()
        .find(|s| s.name.ends_with("http send"))
        .unwrap();
    last.start_us = end - 5_000;
    last.end_us = end - 4_000;
    let d = run(vec![b], &cfg_with_timeout(3_000.0));
    assert!(d.verdicts.is_empty(), "{:#?}", d.verdicts);
}

#[test]
fn a_503_sent_after_the_gateways_504_is_a_semantic_mask() {
    let mut b = served(47, 504, 3_000.0, 4_000.0);
    b.spans[0].http_status = Some(503);
    b.spans[0].status = SpanStatus::Error;
    b.tool("2", "agent-api", "crm_api", 10.0, 3_990.0).status = SpanStatus::Cancelled;
    let v = verdict(b, 3_000.0);
    let mask = v
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::SemanticMask);
    let mask = mask.unwrap_or_else(|| panic!("{:#?}", v.findings));
    assert!(mask.summary.contains("answered 503"), "{}", mask.summary);
    assert!(
        mask.summary.contains("closed connection"),
        "{}",
        mask.summary
    );
}

#[test]
fn a_503_the_service_sent_before_the_gateways_504_is_a_semantic_mask() {
    // The reverse order of the test above: the service gave up first and
    // answered 503 in time, yet the client saw 504 (nginx's
    // `error_page 503 =504`, or an intercepting gateway).
    let mut b = served(54, 504, 3_000.0, 2_500.0);
    b.spans[0].http_status = Some(503);
    b.spans[0].status = SpanStatus::Error;
    b.tool("2", "agent-api", "crm_api", 10.0, 2_490.0).status = SpanStatus::Cancelled;
    let v = verdict(b, 3_000.0);
    let mask = v
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::SemanticMask)
        .unwrap_or_else(|| panic!("{:#?}", v.findings));
    assert!(mask.summary.contains("answered 503"), "{}", mask.summary);
    assert!(mask.summary.contains("client saw 504"), "{}", mask.summary);
    assert!(
        !mask.summary.contains("closed connection"),
        "it answered before the gateway did: {}",
        mask.summary
    );
}

#[test]
fn a_504_the_service_sent_that_the_client_saw_as_a_503_is_a_semantic_mask() {
    // The reverse statuses: the service's own upstream timed out and it
    // answered 504; the gateway in front turned that into a 503.
    for (service_end, late) in [(2_500.0, false), (4_000.0, true)] {
        let mut b = served(55, 503, 3_000.0, service_end);
        b.spans[0].http_status = Some(504);
        b.spans[0].status = SpanStatus::Error;
        b.tool("2", "agent-api", "crm_api", 10.0, service_end - 10.0)
            .status = SpanStatus::Timeout;
        let v = verdict(b, 3_000.0);
        let mask = v
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::SemanticMask)
            .unwrap_or_else(|| panic!("service at {service_end} ms: {:#?}", v.findings));
        assert!(mask.summary.contains("answered 504"), "{}", mask.summary);
        assert!(mask.summary.contains("client saw 503"), "{}", mask.summary);
        assert_eq!(
            mask.summary.contains("closed connection"),
            late,
            "{}",
            mask.summary
        );
    }
}

#[test]
fn no_semantic_mask_when_the_service_answered_what_the_client_saw_or_no_timeout_late() {
    // Same status; a late success; a late failure that was no timeout.
    for (gateway, service) in [(503, 503), (504, 200), (504, 502)] {
        let mut b = served(48, gateway, 3_000.0, 4_000.0);
        b.spans[0].http_status = Some(service);
        b.tool("2", "agent-api", "crm_api", 10.0, 3_990.0);
        let v = verdict(b, 3_000.0);
        assert!(
            v.findings
                .iter()
                .all(|f| f.kind != FindingKind::SemanticMask),
            "{gateway}/{service}: {:#?}",
            v.findings
        );
    }
}

#[test]
fn an_orphan_is_placed_under_the_span_that_was_running_and_counted() {
    let mut b = served(49, 504, 3_000.0, 3_500.0);
    b.tool("2", "agent-api", "crm_api", 10.0, 400.0);
    // A tool call whose execute_tool span never arrived.
    let get = b.span("5", Some("77"), "agent-api", Stage::Network, 500.0, 3_400.0);
    get.name = "GET".into();
    get.peer = Some("crm.internal:8443".into());
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "crm.internal:8443");
    assert_evidence(
        &v,
        "1 span(s) arrived without their parent (never exported): placed 1 under POST /v1/agent/run (agent-api)",
    );
}

#[test]
fn asgi_event_spans_are_moments_not_work_on_the_critical_path() {
    // A report job waited 2.4 s for one of the service's workers: the
    // ASGI instrumentation's `http receive` at the start and its
    // `http.disconnect` receive over the whole request are no work.
    let mut b = served(50, 504, 3_000.0, 3_700.0);
    let r = b.child("8", "agent-api", Stage::Other, 1.0, 1.5);
    r.name = "POST /v1/agent/report http receive".into();
    r.attributes
        .push(("asgi.event.type".into(), "http.request".into()));
    let d = b.child("9", "agent-api", Stage::Other, 1.0, 3_690.0);
    d.name = "POST /v1/agent/report http receive".into();
    d.attributes
        .push(("asgi.event.type".into(), "http.disconnect".into()));
    let l = b.child("2", "agent-api", Stage::Llm, 2_400.0, 3_000.0);
    l.model = Some("deepseek-v4".into());
    b.tool("3", "agent-api", "crm_api", 3_000.0, 3_600.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::PoolSaturation, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
}

#[test]
fn a_cut_stream_seen_only_on_the_llm_spans_chunk_events_names_the_model_that_stalled() {
    // Traceloop writes one `gen_ai.content.completion.chunk` event per
    // chunk on its `openai.chat` span; no `http send` spans arrived. The
    // model's stream is what went silent (docs/diagnosis.md, "Names").
    let mut b = Builder::new(51);
    b.gateway(200, 3_500.0);
    b.root("agent-api", 1.0, 3_503.0).kind = Some("server".into());
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_502.0);
    chat.name = "openai.chat".into();
    chat.model = Some("deepseek-v4-pro".into());
    for t in [100.0, 250.0, 400.0] {
        b.event("2", "gen_ai.content.completion.chunk", t);
    }
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "deepseek-v4-pro");
    assert_evidence(&v, "silent for 3.1 s");
}

#[test]
fn a_service_whose_own_budget_timed_out_after_the_cut_is_a_semantic_mask() {
    // An unhandled TimeoutError: FastAPI answers 500, its span records
    // the exception — the service's timeout, hidden behind nginx's 504.
    let mut b = served(52, 504, 3_000.0, 4_000.0);
    b.spans[0].http_status = Some(500);
    b.spans[0].status = SpanStatus::Timeout;
    b.spans[0].error_type = Some("TimeoutError".into());
    b.tool("2", "agent-api", "crm_api", 10.0, 3_990.0);
    let v = verdict(b, 3_000.0);
    assert!(
        v.findings
            .iter()
            .any(|f| f.kind == FindingKind::SemanticMask),
        "{:#?}",
        v.findings
    );
}
