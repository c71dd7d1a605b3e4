//! Each scenario run at a high time scale behind the built-in gateway:
//! the access lines (read with overtime's `overtime` format parser) show
//! what the scenario does to the gateway, and the spans (read with
//! overtime's OTLP JSON parser) carry what its root cause needs.

use crate::common;

use common::run;
use overtime_model::{SpanRecord, SpanStatus, Stage};

fn named<'a>(spans: &[&'a SpanRecord], prefix: &str) -> Vec<&'a SpanRecord> {
    spans
        .iter()
        .copied()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

fn dur(s: &SpanRecord) -> f64 {
    (s.end_us - s.start_us) as f64 / 1000.0
}

#[test]
fn healthy_traffic_never_fails_and_shows_every_shape() {
    let r = run("healthy", 20.0, 46, &[]);
    let o = r.outcomes();
    assert_eq!(o.get("ok"), Some(&46), "{o:?}");
    let statuses: Vec<u16> = r.gateway.iter().filter_map(|g| g.status).collect();
    assert!(
        statuses.contains(&400),
        "the agent rejects a body without steps"
    );
    assert!(statuses.contains(&404), "the gateway answers /nope itself");
    // Every stage the platform has shows up.
    for stage in [
        Stage::Service,
        Stage::Llm,
        Stage::Tool,
        Stage::Memory,
        Stage::Judge,
        Stage::Queue,
        Stage::Network,
    ] {
        assert!(r.spans.iter().any(|s| s.stage == stage), "no {stage} span");
    }
    // The judge scores answers; a fallback to cache is accepted; a retry
    // that worked has attempt 1; streams record chunks and heartbeats.
    assert!(r.spans.iter().any(|s| s.judge_score == Some(0.91)));
    assert!(
        r.spans
            .iter()
            .any(|s| s.fallback.as_deref() == Some("cache") && s.fallback_accepted == Some(true))
    );
    assert!(
        r.spans
            .iter()
            .any(|s| s.tool.as_deref() == Some("crm_api") && s.attempt == Some(1))
    );
    assert!(
        r.spans
            .iter()
            .any(|s| s.events.iter().any(|e| e.name == "heartbeat"))
    );
    assert!(r.spans.iter().any(|s| s.ttft_ms.is_some()));
    // No span timed out in healthy traffic.
    assert!(r.spans.iter().all(|s| s.status != SpanStatus::Timeout));
    // The model server reports its phases, and they add up to its span.
    let model: Vec<_> = r
        .spans
        .iter()
        .filter(|s| s.service == "model-server" && s.phases.decode_ms.is_some())
        .collect();
    assert!(!model.is_empty());
    for s in model {
        let p = &s.phases;
        let sum =
            p.queue_ms.unwrap() + p.prefill_ms.unwrap() + p.decode_ms.unwrap() + p.io_ms.unwrap();
        assert!(
            sum <= dur(s) + 1.0 && sum >= 0.8 * dur(s),
            "{sum} vs {}",
            dur(s)
        );
        assert!(s.llm_duration_ms.is_some());
    }
}

#[test]
fn stream_idle_gap_streams_are_cut_and_logged_as_200() {
    let r = run("stream_idle_gap", 50.0, 8, &[]);
    let cut: Vec<_> = r.failed();
    assert_eq!(
        cut.len(),
        6,
        "6 faults, 2 heartbeat streams survive: {:?}",
        r.outcomes()
    );
    let mut checked = 0;
    for t in cut {
        assert_eq!(t["outcome"], "gateway_timeout");
        let g = r.line(t["request_id"].as_str().unwrap());
        assert_eq!(g.status, Some(200), "nginx logs a cut stream as 200");
        assert!(g.body_bytes_sent.unwrap() > 0);
        assert!(g.request_time_ms.unwrap() >= r.summary.read_timeout_ms);
        let Some(tid) = t["trace_id"].as_str() else {
            continue;
        };
        let spans = r.trace(tid);
        if spans.is_empty() {
            continue;
        }
        let server = spans
            .iter()
            .find(|s| s.service == "agent-api" && s.kind.as_deref() == Some("server"))
            .unwrap();
        assert!(server.events.iter().filter(|e| e.name == "chunk").count() >= 5);
        assert!(
            server.error_type.as_deref().unwrap_or("").contains("Reset"),
            "{server:?}"
        );
        // The service ran on after the gateway's cut.
        let cut_at = g.time_us;
        assert!(
            server.end_us > cut_at + 2_000_000,
            "ran on only {} us",
            server.end_us - cut_at
        );
        checked += 1;
    }
    assert_eq!(checked, 6, "every cut stream has its spans");
}

#[test]
fn gateway_timeout_mismatch_every_call_has_a_timeout_none_fires() {
    let r = run("gateway_timeout_mismatch", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let root = spans
            .iter()
            .find(|s| s.service == "agent-api" && s.kind.as_deref() == Some("server"))
            .unwrap();
        assert!(
            root.budget_ms.unwrap() > r.summary.read_timeout_ms,
            "budget outlives the gateway"
        );
        for s in spans.iter().filter(|s| {
            matches!(s.stage, Stage::Llm | Stage::Tool | Stage::Memory) && s.service == "agent-api"
        }) {
            assert!(s.timeout_ms.is_some(), "{} has no timeout", s.name);
            assert_ne!(s.status, SpanStatus::Timeout, "{}", s.name);
        }
    }
}

#[test]
fn serial_budget_exhaustion_no_call_dominates() {
    let r = run("serial_budget_exhaustion", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let calls = named(&spans, "execute_tool").len()
            + named(&spans, "chat ").len()
            + named(&spans, "search_memory").len();
        assert_eq!(calls, 10);
        let longest = spans
            .iter()
            .filter(|s| s.name.starts_with("chat ") || s.name.starts_with("execute_tool"))
            .map(|s| dur(s))
            .fold(0.0, f64::max);
        assert!(longest < 0.25 * r.summary.read_timeout_ms, "{longest}");
    }
}

#[test]
fn pool_saturation_later_jobs_wait_for_a_worker() {
    let r = run("pool_saturation", 50.0, 24, &[]);
    let failed = r.failed();
    assert!(failed.len() >= 6, "{:?}", r.outcomes());
    assert!(failed.iter().all(|t| t["outcome"] == "gateway_timeout"));
    let waits: Vec<_> = r
        .spans
        .iter()
        .filter(|s| s.name == "worker_pool.wait")
        .collect();
    assert_eq!(waits.len(), 12, "the first burst records its waits");
    assert!(waits.iter().all(|s| s.stage == Stage::Queue));
    assert!(
        waits
            .iter()
            .any(|s| dur(s) > 0.5 * r.summary.read_timeout_ms)
    );
    assert!(
        r.truth
            .iter()
            .any(|t| t["route"] == "/v1/agent/export" && t["outcome"] != "ok")
    );
}

#[test]
fn judge_slow_the_judge_is_a_judge() {
    let r = run("judge_slow", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let judge = spans
            .iter()
            .find(|s| s.stage == Stage::Judge)
            .expect("a judge span");
        assert_eq!(judge.model.as_deref(), Some("qwen2.5-72b-instruct"));
        assert!(dur(judge) > r.summary.read_timeout_ms);
        assert_eq!(judge.judge_score, Some(0.91));
    }
}

fn largest_phase(s: &SpanRecord) -> &'static str {
    let p = &s.phases;
    let all = [
        ("queue", p.queue_ms),
        ("prefill", p.prefill_ms),
        ("decode", p.decode_ms),
        ("io", p.io_ms),
    ];
    all.iter()
        .filter_map(|(k, v)| v.map(|v| (*k, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|x| x.0)
        .unwrap_or("none")
}

fn model_spans(r: &common::Run, tid: &str) -> Vec<SpanRecord> {
    r.trace(tid)
        .into_iter()
        .filter(|s| s.service == "model-server" && s.kind.as_deref() == Some("server"))
        .cloned()
        .collect()
}

#[test]
fn llm_queueing_waits_in_the_model_servers_queue() {
    let r = run("llm_queueing", 50.0, 48, &[]);
    assert!(r.failed().len() >= 12, "{:?}", r.outcomes());
    for tid in r.failed_traces() {
        let m = model_spans(&r, &tid);
        assert_eq!(m.len(), 1);
        assert_eq!(largest_phase(&m[0]), "queue", "{:?}", m[0].phases);
    }
}

#[test]
fn llm_prefill_slow_in_three_shapes() {
    let r = run("llm_prefill_slow", 50.0, 6, &[]);
    let o = r.outcomes();
    assert_eq!(o.get("gateway_timeout"), Some(&4), "{o:?}");
    assert_eq!(
        o.get("service_timeout"),
        Some(&2),
        "the aligned route's LLM timeout fires: {o:?}"
    );
    for tid in r.failed_traces() {
        let slow: Vec<_> = model_spans(&r, &tid)
            .into_iter()
            .filter(|s| s.input_tokens == Some(1500))
            .collect();
        assert_eq!(slow.len(), 1);
        assert_eq!(largest_phase(&slow[0]), "prefill", "{:?}", slow[0].phases);
    }
    // The plain-HTTP shape: `POST` with the captured X-LLM-Reason and a
    // timeout, no chat span.
    assert!(r.spans.iter().any(|s| {
        s.name == "POST"
            && s.service == "agent-api"
            && s.llm_reason
                .as_deref()
                .is_some_and(|v| v.contains("kv_cache_build"))
            && s.timeout_ms.is_some()
    }));
    // The aligned shape: the chat span timed out.
    assert!(
        r.spans
            .iter()
            .any(|s| s.name.starts_with("chat ") && s.status == SpanStatus::Timeout)
    );
}

#[test]
fn llm_decode_slow_runs_to_max_tokens() {
    let r = run("llm_decode_slow", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let m: Vec<_> = model_spans(&r, &tid)
            .into_iter()
            .filter(|s| s.output_tokens == Some(2048))
            .collect();
        assert_eq!(m.len(), 1);
        assert_eq!(largest_phase(&m[0]), "decode");
        let chat = r
            .trace(&tid)
            .into_iter()
            .find(|s| s.max_tokens == Some(2048))
            .unwrap();
        assert!(chat.llm_reason.is_some(), "X-LLM-Reason on the chat span");
    }
}

#[test]
fn llm_slow_has_no_phases() {
    let r = run("llm_slow", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let chat = spans
            .iter()
            .find(|s| s.model.as_deref() == Some("llama-3-8b-instruct") && s.stage == Stage::Llm)
            .unwrap();
        assert!(chat.phases.is_empty() && chat.llm_reason.is_none());
        assert!(dur(chat) > r.summary.read_timeout_ms);
    }
}

#[test]
fn upstream_connect_slow_spends_its_time_in_dns() {
    let r = run("upstream_connect_slow", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let gets: Vec<_> = spans
            .iter()
            .filter(|s| s.service == "tool-gateway" && s.name == "GET")
            .collect();
        assert!(!gets.is_empty());
        for g in gets {
            let dns = g.dns_ms.expect("a dns event");
            assert!(
                dns + g.connect_ms.unwrap_or(0.0) >= 0.5 * dur(g),
                "{dns} of {}",
                dur(g)
            );
        }
        let tools = named(&spans, "execute_tool");
        if tools[0].tool.as_deref() == Some("weather_api") {
            // Incident C: timed out at the tool gateway (500), retried
            // once, then the cache.
            assert_eq!(
                tools.iter().map(|s| s.attempt).collect::<Vec<_>>(),
                [Some(0), Some(1)]
            );
            assert!(spans.iter().any(|s| s.fallback.as_deref() == Some("cache")));
        }
    }
}

#[test]
fn retry_amplification_tries_five_times() {
    let r = run("retry_amplification", 50.0, 4, &[]);
    assert_eq!(r.outcomes().get("gateway_timeout"), Some(&4));
    for tid in r.failed_traces() {
        let tries = named(&r.trace(&tid), "execute_tool crm_api");
        assert_eq!(tries.len(), 5);
        assert!(
            tries
                .iter()
                .all(|s| s.status == SpanStatus::Error && s.timeout_ms.is_some())
        );
        assert!(
            tries
                .iter()
                .all(|s| dur(s) < 0.5 * r.summary.read_timeout_ms)
        );
    }
}

#[test]
fn tool_no_timeout_hangs_with_no_timeout_anywhere() {
    let r = run("tool_no_timeout", 50.0, 12, &[]);
    let o = r.outcomes();
    assert_eq!(o.get("gateway_timeout"), Some(&9), "{o:?}");
    assert_eq!(o.get("ok"), Some(&3), "the quick chats alongside: {o:?}");
    let unsampled: Vec<_> = r
        .truth
        .iter()
        .filter(|t| t["traceparent"] == "unsampled")
        .collect();
    assert_eq!(unsampled.len(), 1);
    assert_eq!(unsampled[0]["expected_kind"], "unknown");
    for tid in r.failed_traces() {
        let spans = r.trace(&tid);
        let hung: Vec<_> = spans
            .iter()
            .filter(|s| s.tool.as_deref() == Some("search_api"))
            .collect();
        assert!(!hung.is_empty());
        assert!(
            hung.iter().all(|s| s.timeout_ms.is_none()),
            "no timeout at any layer"
        );
        assert!(hung.iter().any(|s| dur(s) > r.summary.read_timeout_ms));
    }
}

#[test]
fn tool_slow_within_its_timeout_or_firing_it() {
    let r = run("tool_slow", 50.0, 10, &[]);
    let o = r.outcomes();
    assert_eq!(o.get("gateway_timeout"), Some(&4), "{o:?}");
    assert_eq!(o.get("service_timeout"), Some(&4), "{o:?}");
    assert_eq!(o.get("ok"), Some(&2), "{o:?}");
    for t in r.failed() {
        let tid = t["trace_id"].as_str().unwrap();
        let spans = r.trace(tid);
        let tool = named(&spans, "execute_tool crm_report")[0];
        assert!(tool.timeout_ms.is_some());
        if t["outcome"] == "service_timeout" {
            assert_eq!(tool.status, SpanStatus::Timeout);
            assert!(tool.remaining_budget_ms.is_some());
        }
    }
}
