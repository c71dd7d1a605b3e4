//! One call model and one naming rule (docs/diagnosis.md, "Calls" and
//! "Names"): the shapes that instrumentations other than ours write for
//! the same call — attempts beside their operation, retries written as
//! repeated operations, framework spans named for a tool, memory stores,
//! agent loops — each give the verdict the call would get written in the
//! canonical shape, named by what a person calls it.

use crate::common;
use common::*;
use overtime_model::{RootCauseKind as K, SpanRecord, SpanStatus, Stage};
use overtime_parse::llm_reason::parse_llm_reason;

/// A server span `1` under a 504 after `rt_ms`.
fn served(n: u32, rt_ms: f64, end_ms: f64) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(504, rt_ms);
    let r = b.root("agent-api", 1.0, end_ms);
    r.kind = Some("server".into());
    r.name = "POST /v1/agent/run".into();
    b
}

fn client<'a>(
    b: &'a mut Builder,
    id: &str,
    parent: &str,
    start: f64,
    end: f64,
    peer: &str,
) -> &'a mut SpanRecord {
    let s = b.span(id, Some(parent), "agent-api", Stage::Network, start, end);
    s.name = "POST".into();
    s.kind = Some("client".into());
    s.peer = Some(peer.into());
    s
}

fn with_phases(s: &mut SpanRecord, reason: &str) {
    s.llm_reason = Some(reason.into());
    s.phases = parse_llm_reason(reason);
}

#[test]
fn a_bare_tool_span_names_the_tool_not_its_attempts_address() {
    let mut b = served(300, 3_000.0, 3_500.0);
    let op = b.child("2", "agent-api", Stage::Other, 10.0, 3_400.0);
    op.name = "tool.carrier_rates".into();
    // What the parser makes of such a span: the name names the tool.
    op.tool = overtime_parse::spans::names::tool_in_name(&op.name).map(String::from);
    op.stage = Stage::Tool;
    client(&mut b, "3", "2", 12.0, 3_390.0, "127.0.0.1:50655");
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "carrier_rates");
}

#[test]
fn an_llm_attempt_beside_its_langchain_run_belongs_to_it() {
    let mut b = served(301, 3_000.0, 3_500.0);
    let chain = b.child("2", "agent-api", Stage::Other, 5.0, 3_450.0);
    chain.name = "RunnableSequence.workflow".into();
    let chat = b.span("3", Some("2"), "agent-api", Stage::Llm, 10.0, 3_400.0);
    chat.name = "ChatOpenAI.chat".into();
    chat.model = Some("qwen2.5-72b-instruct".into());
    // The HTTP attempt is the chat run's sibling, under the chain.
    let post = client(&mut b, "4", "2", 12.0, 3_395.0, "127.0.0.1:41829");
    with_phases(
        post,
        "queue_wait=0.01s,kv_cache_build=2.9s,decode_loop=0.3s",
    );
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmPrefillSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "qwen2.5-72b-instruct");
    let post = v.timeline.iter().find(|t| t.name == "POST").unwrap();
    assert_eq!(
        post.component, "qwen2.5-72b-instruct",
        "the attempt is the model's"
    );
}

#[test]
fn a_memory_call_is_named_by_its_store_not_its_address() {
    let mut b = served(302, 3_000.0, 3_500.0);
    let op = b.child("2", "agent-api", Stage::Memory, 10.0, 3_400.0);
    op.name = "search_memory".into();
    op.peer = Some("redis-memory.research.internal:6379".into());
    op.attributes
        .push(("gen_ai.memory.store.name".into(), "session-memory".into()));
    op.attributes
        .push(("gen_ai.operation.name".into(), "search_memory".into()));
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "session-memory");
}

#[test]
fn retries_written_as_repeated_operations_are_one_call_retried() {
    let mut b = served(303, 3_000.0, 3_500.0);
    for (i, start) in [10.0, 1_010.0, 2_010.0].into_iter().enumerate() {
        let s = b.child(
            &format!("{}", 2 + i),
            "agent-api",
            Stage::Llm,
            start,
            start + 980.0,
        );
        s.name = "chat gpt-4o".into();
        s.model = Some("gpt-4o".into());
        if i < 2 {
            s.status = SpanStatus::Error;
            s.error_type = Some("openai.InternalServerError".into());
        }
    }
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_eq!(v.root_cause.component, "gpt-4o");
    assert_evidence(&v, "3 attempts");
}

#[test]
fn retries_as_operations_under_one_operation_are_one_call_retried() {
    // The AI SDK: `ai.generateText` over one `doGenerate` per attempt.
    let mut b = served(304, 3_000.0, 3_500.0);
    let outer = b.child("2", "agent-api", Stage::Llm, 5.0, 3_400.0);
    outer.name = "ai.generateText".into();
    outer.model = Some("gpt-4o-mini".into());
    for (i, start) in [10.0, 1_010.0, 2_010.0].into_iter().enumerate() {
        let s = b.span(
            &format!("{}", 3 + i),
            Some("2"),
            "agent-api",
            Stage::Llm,
            start,
            start + 980.0,
        );
        s.name = "ai.generateText.doGenerate".into();
        s.model = Some("gpt-4o-mini".into());
        if i < 2 {
            s.status = SpanStatus::Error;
        }
    }
    let v = verdict(b, 3_000.0);
    assert_eq!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
    assert_eq!(v.root_cause.component, "gpt-4o-mini");
    assert_evidence(&v, "3 attempts");
}

#[test]
fn the_same_model_called_twice_in_a_row_is_two_calls() {
    let mut b = served(305, 3_000.0, 3_500.0);
    for (i, start) in [10.0, 1_510.0].into_iter().enumerate() {
        let s = b.child(
            &format!("{}", 2 + i),
            "agent-api",
            Stage::Llm,
            start,
            start + 1_450.0,
        );
        s.name = "chat gpt-4o".into();
        s.model = Some("gpt-4o".into());
    }
    let v = verdict(b, 3_000.0);
    assert_ne!(
        v.root_cause.kind,
        K::RetryAmplification,
        "{:?}",
        v.root_cause
    );
}

#[test]
fn an_agent_loop_is_not_a_call_its_tool_is() {
    // `ai.generateText` names a model but runs a tool between its steps.
    let mut b = served(306, 3_000.0, 3_500.0);
    let outer = b.child("2", "agent-api", Stage::Llm, 5.0, 3_400.0);
    outer.name = "ai.generateText".into();
    outer.model = Some("gpt-4o-mini".into());
    let step = b.span("3", Some("2"), "agent-api", Stage::Llm, 10.0, 400.0);
    step.name = "ai.generateText.doGenerate".into();
    step.model = Some("gpt-4o-mini".into());
    let tool = b.span("4", Some("2"), "agent-api", Stage::Tool, 410.0, 3_390.0);
    tool.name = "ai.toolCall".into();
    tool.tool = Some("carrier_rates".into());
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "carrier_rates");
}

#[test]
fn a_stalled_model_stream_names_the_model_a_silent_wait_names_the_service() {
    // The service relays the model's chunks, then the model stalls.
    let mut b = Builder::new(307);
    b.gateway(200, 3_400.0);
    let r = b.root("agent-api", 1.0, 3_400.0);
    r.kind = Some("server".into());
    r.status = SpanStatus::Cancelled;
    let chat = b.child("2", "agent-api", Stage::Llm, 10.0, 3_400.0);
    chat.name = "chat gpt-4o".into();
    chat.model = Some("gpt-4o".into());
    for t in [100.0, 200.0, 300.0, 400.0] {
        b.event("1", "chunk", t);
    }
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "gpt-4o");

    // The service streamed the model's answer, then waited on a tool that
    // does not stream, sending nothing.
    let mut b = Builder::new(308);
    b.gateway(200, 3_400.0);
    let r = b.root("agent-api", 1.0, 3_400.0);
    r.kind = Some("server".into());
    r.status = SpanStatus::Cancelled;
    let chat = b.child("2", "agent-api", Stage::Llm, 10.0, 390.0);
    chat.model = Some("gpt-4o".into());
    for t in [100.0, 200.0, 300.0, 380.0] {
        b.event("1", "chunk", t);
    }
    b.tool("3", "agent-api", "web_browse", 395.0, 3_400.0);
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "agent-api");
}

#[test]
fn an_orphaned_attempt_is_not_given_to_another_call_running_beside_it() {
    // The chat span of attempt 3 never arrived; a tool ran beside it.
    let mut b = served(309, 3_000.0, 3_500.0);
    b.tool("2", "agent-api", "calc", 5.0, 900.0);
    let post = client(&mut b, "3", "9", 10.0, 3_390.0, "127.0.0.1:41829");
    post.parent_span_id = Some(format!("{:0>16}", "99"));
    with_phases(post, "queue_wait=2.9s,kv_cache_build=0.1s");
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmQueueing, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "127.0.0.1:41829");
}

/// OpenInference's LangChain shape: the judge's model run sits under the
/// app's `answer_judge` span while its HTTP attempt hangs off the request.
#[test]
fn a_judge_run_whose_attempt_hangs_off_the_request_is_the_judge() {
    let mut b = Builder::new(399);
    b.gateway(504, 3_000.0);
    let r = b.root("agent-api", 1.8, 3_637.1);
    r.kind = Some("server".into());
    let c1 = b.child("2", "agent-api", Stage::Llm, 4.1, 112.4);
    c1.model = Some("deepseek-v4-pro".into());
    client(&mut b, "3", "1", 7.2, 109.4, "127.0.0.1:46047");
    b.child("4", "agent-api", Stage::Other, 113.6, 3_636.1).name = "answer_judge".into();
    let c2 = b.span("5", Some("4"), "agent-api", Stage::Llm, 115.8, 3_634.9);
    c2.model = Some("qwen2.5-72b-instruct".into());
    let p = client(&mut b, "6", "1", 118.3, 3_592.7, "127.0.0.1:46047");
    with_phases(p, "queue_wait=0.0s,kv_cache_build=0.07s,decode_loop=3.4s");
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::JudgeSlow, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "qwen2.5-72b-instruct");
}

/// A chat span whose HTTP attempt reached a model server that wrote a
/// span of its own under it (vLLM continues the caller's trace).
fn with_server_span(n: u32, server: impl FnOnce(&mut SpanRecord)) -> Builder {
    let mut b = served(n, 3_000.0, 3_500.0);
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_400.0);
    chat.model = Some("qwen2.5-7b".into());
    client(&mut b, "3", "2", 8.0, 3_390.0, "10.0.0.9:8000");
    let s = b.span("4", Some("3"), "vllm", Stage::Service, 10.0, 3_380.0);
    s.kind = Some("server".into());
    s.name = "llm_request".into();
    server(s);
    b
}

#[test]
fn a_vllm_request_span_under_the_attempt_names_the_phase_and_says_so() {
    let b = with_server_span(320, |s| {
        s.phases.queue_ms = Some(2_900.0);
        s.phases.prefill_ms = Some(200.0);
        s.phases.decode_ms = Some(250.0);
        s.attributes
            .push(("gen_ai.latency.time_in_queue".into(), "2.9".into()));
    });
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmQueueing, "{:?}", v.root_cause);
    assert_eq!(v.root_cause.component, "qwen2.5-7b");
    assert_evidence(&v, "model server phases (vLLM span): queue 2.9 s");
}

#[test]
fn tgi_inference_time_is_split_only_where_the_first_token_says() {
    let tgi = |n: u32, queue: f64, ttft: Option<f64>| {
        let mut b = served(n, 3_000.0, 3_500.0);
        let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_400.0);
        chat.model = Some("llama-3-8b".into());
        chat.ttft_ms = ttft;
        let post = client(&mut b, "3", "2", 8.0, 3_390.0, "10.0.0.9:8080");
        post.phases.queue_ms = Some(queue);
        post.phases
            .other
            .push(("inference".into(), 3_200.0 - queue));
        post.attributes.push((
            "http.response.header.x-inference-time".into(),
            format!("{}", 3_200.0 - queue),
        ));
        post.input_tokens = Some(12_000);
        post.output_tokens = Some(8);
        verdict(b, 3_000.0)
    };
    // Prefill and decode together, and the queue short: nothing decides.
    let v = tgi(321, 100.0, None);
    assert_eq!(v.root_cause.kind, K::LlmSlow, "{:?}", v.root_cause);
    // The queue outweighs them: queueing, whatever their split.
    let v = tgi(323, 2_400.0, None);
    assert_eq!(v.root_cause.kind, K::LlmQueueing, "{:?}", v.root_cause);
    // A first token at 2.9 s: prefill until it.
    let v = tgi(324, 100.0, Some(2_900.0));
    assert_eq!(v.root_cause.kind, K::LlmPrefillSlow, "{:?}", v.root_cause);
    assert_evidence(
        &v,
        "TGI headers, inference split at the first token (2.9 s)",
    );
}

#[test]
fn a_hosted_apis_own_time_is_evidence_and_the_verdict_stays_llm_slow() {
    let mut b = served(322, 3_000.0, 3_500.0);
    let chat = b.child("2", "agent-api", Stage::Llm, 5.0, 3_400.0);
    chat.model = Some("gpt-4o".into());
    let post = client(&mut b, "3", "2", 8.0, 3_390.0, "api.openai.com:443");
    post.phases.other.push(("total".into(), 3_250.0));
    post.attributes.push((
        "http.response.header.openai-processing-ms".into(),
        "3250".into(),
    ));
    let v = verdict(b, 3_000.0);
    assert_eq!(v.root_cause.kind, K::LlmSlow, "{:?}", v.root_cause);
    assert_evidence(
        &v,
        "the model server's own time (openai-processing-ms header): 3.2 s",
    );
}

/// `n` requests a minute apart calling `qwen2.5-7b` through vLLM: the
/// first `finished` ones get their answer in 1.2 s with the server's span
/// (mostly queue), the others are cut by the gateway at 3 s with no span
/// from the server (vLLM writes none for an aborted request).
fn vllm_minute(finished: u32, cut: u32, streamed: bool) -> Vec<Builder> {
    (0..finished + cut)
        .map(|i| {
            let n = 340 + i;
            let done = i < finished;
            let mut b = Builder::new(n).at(i as i64 * 6_000);
            let (rt, end) = if done {
                (1_300.0, 1_250.0)
            } else {
                (3_000.0, 3_500.0)
            };
            b.gateway(if done { 200 } else { 504 }, rt);
            let r = b.root("agent-api", 1.0, end);
            r.kind = Some("server".into());
            let chat = b.child("2", "agent-api", Stage::Llm, 5.0, end - 10.0);
            chat.model = Some("qwen2.5-7b".into());
            if streamed {
                chat.attributes
                    .push(("llm.is_streaming".into(), "true".into()));
            }
            client(&mut b, "3", "2", 8.0, end - 20.0, "10.0.0.9:8000");
            if done {
                let s = b.span("4", Some("3"), "vllm", Stage::Service, 10.0, 1_200.0);
                s.kind = Some("server".into());
                s.name = "llm_request".into();
                s.phases.queue_ms = Some(900.0);
                s.phases.prefill_ms = Some(100.0);
                s.phases.decode_ms = Some(180.0);
                s.attributes
                    .push(("gen_ai.latency.time_in_queue".into(), "0.9".into()));
            }
            b
        })
        .collect()
}

#[test]
fn a_cut_call_with_no_server_span_gets_its_phase_from_the_same_models_finished_calls() {
    let d = run(vllm_minute(5, 3, true), &cfg_with_timeout(3_000.0));
    let failing: Vec<_> = d
        .verdicts
        .iter()
        .filter(|v| v.outcome != overtime_model::Outcome::Ok)
        .collect();
    assert_eq!(failing.len(), 3, "{:#?}", d.verdicts);
    for v in failing {
        assert_eq!(v.root_cause.kind, K::LlmQueueing, "{:?}", v.root_cause);
        assert_eq!(v.root_cause.component, "qwen2.5-7b");
        assert_evidence(
            v,
            "inferred: the server wrote nothing for this cut call; no token came in 3.5 s; 5 finished calls of qwen2.5-7b",
        );
    }
    // Too few neighbours decide nothing: llm_slow, saying what is missing.
    let d = run(vllm_minute(2, 1, true), &cfg_with_timeout(3_000.0));
    let v = d
        .verdicts
        .iter()
        .find(|v| v.outcome != overtime_model::Outcome::Ok)
        .unwrap();
    assert_eq!(v.root_cause.kind, K::LlmSlow, "{:?}", v.root_cause);
}

#[test]
fn the_live_engine_infers_a_cut_calls_phase_as_the_batch_does() {
    let (mut g, mut s) = (vec![], vec![]);
    for b in vllm_minute(5, 3, true) {
        g.extend(b.gateway);
        s.extend(b.spans);
    }
    // The attempts arrive late: every verdict is revised once they do.
    crate::live_parity::live_equals_batch("cut calls", g, s, cfg_with_timeout(3_000.0), |s| {
        s.name == "POST"
    });
}

/// vLLM's metrics over the minutes of [`vllm_minute`]: every 15 s, the
/// queue depth, KV-cache use and the phase histograms' sums and counts
/// of requests that queued 0.2 s, prefilled 2.5 s and decoded 0.3 s each.
fn vllm_metrics() -> Vec<overtime_model::MetricSample> {
    let mut out = vec![];
    for i in 0..12i64 {
        let t = (T0_MS - 60_000 + i * 15_000) * 1000;
        let mut s = |name: &str, v: f64| {
            out.push(overtime_model::MetricSample {
                name: name.into(),
                labels: vec![("model_name".into(), "qwen2.5-7b".into())],
                value: v,
                time_us: t,
            })
        };
        let n = 2.0 * i as f64;
        s("vllm:num_requests_waiting", (i % 5) as f64);
        s("vllm:kv_cache_usage_perc", 0.9 + 0.005 * i as f64);
        for (h, each) in [("queue", 0.2), ("prefill", 2.5), ("decode", 0.3)] {
            s(&format!("vllm:request_{h}_time_seconds_sum"), n * each);
            s(&format!("vllm:request_{h}_time_seconds_count"), n);
        }
    }
    out
}

#[test]
fn the_model_servers_metrics_decide_a_cut_calls_phase_and_show_its_load_in_the_incident() {
    let (mut g, mut s) = (vec![], vec![]);
    for b in vllm_minute(0, 3, false) {
        g.extend(b.gateway);
        s.extend(b.spans);
    }
    let run = |metrics: Option<Vec<overtime_model::MetricSample>>| match metrics {
        None => overtime_diagnose::diagnose(g.clone(), s.clone(), &cfg_with_timeout(3_000.0)),
        Some(m) => overtime_diagnose::diagnose_with_server_metrics(
            g.clone(),
            s.clone(),
            &cfg_with_timeout(3_000.0),
            overtime_diagnose::server_metrics::ServerMetrics::new(&m),
        ),
    };
    // Without them nothing decides: llm_slow.
    let d = run(None);
    assert!(d.verdicts.iter().all(|v| v.root_cause.kind == K::LlmSlow));
    let d = run(Some(vllm_metrics()));
    assert_eq!(d.verdicts.len(), 3);
    for v in &d.verdicts {
        assert_eq!(v.root_cause.kind, K::LlmPrefillSlow, "{:?}", v.root_cause);
        assert_evidence(v, "(counted by the model server's metrics)");
    }
    let inc = &d.incidents[0];
    let q = &inc.cause_stats["model_server_queue_depth (qwen2.5-7b)"];
    assert_eq!(q["max"], 4.0, "{:?}", inc.cause_stats);
    let kv = &inc.cause_stats["model_server_kv_cache_use (qwen2.5-7b)"];
    assert!(kv["max"].as_f64().unwrap() > 0.9, "{kv}");
}
