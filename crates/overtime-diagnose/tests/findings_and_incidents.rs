//! One fixture per finding of docs/diagnosis.md#findings-configuration-not-one-call, and the incident grouping and
//! report of docs/diagnosis.md#incidents-and-their-reports

use crate::common;
use common::*;
use overtime_diagnose::DiagnoseConfig;
use overtime_model::{FindingKind as F, RootCauseKind as K, SpanStatus, Stage};

fn finding(v: &overtime_model::Verdict, k: F) -> Option<&str> {
    v.findings
        .iter()
        .find(|f| f.kind == k)
        .map(|f| f.summary.as_str())
}

/// Incident A's shape: the LLM call's 30 s timeout fires, the service
/// answers 503 at 30.5 s, nginx answers 504 at 60 s.
fn black_hole(n: u32, at_ms: i64, tokens: i64) -> Builder {
    let mut b = Builder::new(n).at(at_ms);
    b.gateway(504, 60_004.0);
    let r = b.root("agent-api", 2.0, 30_500.0);
    r.budget_ms = Some(30_000.0);
    r.http_status = Some(503);
    r.status = SpanStatus::Error;
    let l = b.child("2", "agent-api", Stage::Llm, 300.0, 30_300.0);
    l.model = Some("deepseek-v4-pro".into());
    l.timeout_ms = Some(30_000.0);
    l.status = SpanStatus::Timeout;
    l.input_tokens = Some(tokens);
    l.phases =
        overtime_parse::llm_reason::parse_llm_reason("kv_cache_build=24.1s,decode_loop=5.2s");
    b
}

#[test]
fn semantic_mask_and_timeout_misaligned() {
    let v = verdict(black_hole(1, 0, 412), 60_000.0);
    let mask = finding(&v, F::SemanticMask).expect("semantic_mask");
    assert!(
        mask.contains("answered 503 at 30.5 s") && mask.contains("saw 504"),
        "{mask}"
    );
    let mis = finding(&v, F::TimeoutMisaligned).expect("timeout_misaligned");
    assert!(
        mis.contains("30.0 s") && mis.contains("≥ the agent-api budget of 30.0 s"),
        "{mis}"
    );
    assert_eq!(v.budget.total_ms, Some(30_000.0));
    assert_eq!(v.budget.source.as_deref(), Some("span"));
}

#[test]
fn a_misalignment_over_many_calls_names_a_few_and_counts_the_rest() {
    // 40 sequential tool calls of 1 s, each with a 2 s timeout: 80 s of
    // timeouts against a 30 s budget.
    let mut b = Builder::new(3);
    b.gateway(504, 60_004.0);
    b.root("agent-api", 1.0, 45_000.0).budget_ms = Some(30_000.0);
    for i in 0..40 {
        let id = format!("{}", 100 + i);
        let start = 10.0 + i as f64 * 1_000.0;
        let t = b.tool(&id, "agent-api", &format!("tool_{i}"), start, start + 990.0);
        t.timeout_ms = Some(2_000.0);
    }
    let v = verdict(b, 60_000.0);
    let mis = finding(&v, F::TimeoutMisaligned).expect("timeout_misaligned");
    assert!(mis.contains("sum to 80.0 s"), "{mis}");
    assert!(mis.contains("and 32 more calls"), "{mis}");
    assert!(mis.len() < 600, "{} bytes: {mis}", mis.len());
}

#[test]
fn aligned_timeouts_give_no_finding() {
    let mut b = Builder::new(2);
    b.gateway(504, 120_002.0);
    b.root("agent-api", 2.0, 130_000.0).budget_ms = Some(90_000.0);
    let t = b.tool("2", "agent-api", "crm", 10.0, 125_000.0);
    t.timeout_ms = Some(15_000.0);
    let v = verdict(b, 120_000.0);
    assert_eq!(finding(&v, F::TimeoutMisaligned), None, "{:?}", v.findings);
    assert_eq!(finding(&v, F::NoTimeout), None);
}

#[test]
fn no_timeout_names_the_call() {
    let mut b = Builder::new(3);
    b.gateway(504, 60_000.0);
    b.root("runtime", 1.0, 70_000.0);
    b.child("2", "runtime", Stage::Memory, 10.0, 65_000.0).tool = Some("vector_store".into());
    let v = verdict(b, 60_000.0);
    let f = finding(&v, F::NoTimeout).expect("no_timeout");
    assert!(f.contains("vector_store") && f.contains("65.0 s"), "{f}");
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout);
}

#[test]
fn gateway_timeout_inferred_from_clustered_504s() {
    let traces: Vec<Builder> = (0..5)
        .map(|i| black_hole(10 + i, i as i64 * 10_000, 400))
        .collect();
    let d = run(traces, &DiagnoseConfig::default());
    assert_eq!(d.verdicts.len(), 5);
    for v in &d.verdicts {
        let f = finding(v, F::GatewayTimeoutInferred).expect("inferred");
        assert!(f.contains("60.0 s") && f.contains("5 of 5"), "{f}");
        assert_eq!(v.gateway.as_ref().unwrap().timeout_ms, Some(60_000.0));
    }
    // Configured: no inference finding.
    let d = run(vec![black_hole(20, 0, 400)], &cfg_with_timeout(60_000.0));
    assert_eq!(finding(&d.verdicts[0], F::GatewayTimeoutInferred), None);
}

#[test]
fn incidents_group_by_fingerprint_and_close_after_quiet() {
    let mut all = Vec::new();
    // 8 prefill failures in the first 4 minutes, 3 decode failures among them.
    for i in 0..8 {
        all.push(black_hole(100 + i, i as i64 * 30_000, 380 + 10 * i as i64));
    }
    for i in 0..3 {
        let mut b = black_hole(200 + i, 15_000 + i as i64 * 40_000, 420);
        b.spans[1].phases =
            overtime_parse::llm_reason::parse_llm_reason("kv_cache_build=2s,decode_loop=27s");
        b.spans[1].output_tokens = Some(1024);
        all.push(b);
    }
    // Healthy traffic in the same window, short inputs.
    for i in 0..20 {
        let mut b = Builder::new(300 + i).at(i as i64 * 12_000);
        b.gateway(200, 1_300.0);
        b.root("agent-api", 1.0, 1_290.0);
        let l = b.child("2", "agent-api", Stage::Llm, 10.0, 1_200.0);
        l.input_tokens = Some(30);
        l.model = Some("deepseek-v4-pro".into());
        all.push(b);
    }
    // The prefill fingerprint comes back 20 minutes later: a new incident.
    all.push(black_hole(400, 20 * 60_000, 450));
    all.push(black_hole(401, 20 * 60_000 + 5_000, 460));
    let d = run(all, &cfg_with_timeout(60_000.0));
    let prefill: Vec<_> = d
        .incidents
        .iter()
        .filter(|i| i.kind == K::LlmPrefillSlow)
        .collect();
    assert_eq!(
        prefill.len(),
        2,
        "recurrence after the quiet period is a new incident"
    );
    let first = prefill[0];
    assert_eq!(first.trace_count, 8);
    assert_eq!(first.status, "closed");
    assert_eq!(prefill[1].status, "open");
    assert_eq!(first.fingerprint, "llm_prefill_slow:deepseek-v4-pro");
    assert_eq!(first.totals.gateway_504, 11);
    assert!(first.totals.requests >= 29, "{:?}", first.totals);
    // 8 of the 11 504s in the window: 73 %.
    assert!(
        first
            .headline
            .starts_with("73 % of 504s came from llm_prefill_slow on deepseek-v4-pro"),
        "{}",
        first.headline
    );
    assert!(
        first.headline.contains("median input 410 tokens > 300"),
        "{}",
        first.headline
    );
    let causes: Vec<_> = first.causes.iter().map(|c| (c.kind, c.count)).collect();
    assert_eq!(causes, vec![(K::LlmPrefillSlow, 8), (K::LlmDecodeSlow, 3)]);
    let rows = &first.llm_latency_by_input_tokens;
    assert_eq!(
        rows.iter().map(|r| r.bucket.as_str()).collect::<Vec<_>>(),
        vec!["<50", "50-200", "200-500", ">500"]
    );
    assert_eq!(rows[0].share_504, 0.0);
    assert!(rows[0].calls >= 15);
    assert_eq!(rows[2].share_504, 1.0);
    assert!((rows[2].p50_ms.unwrap() - 30_000.0).abs() < 1.0);
    assert!(
        first
            .findings
            .iter()
            .any(|f| f.kind == F::SemanticMask && f.traces == 8)
    );
    assert!(first.example_trace_ids.len() <= 5 && !first.example_trace_ids.is_empty());
    let md = overtime_diagnose::markdown::render(&d);
    assert!(md.contains(&first.headline));
    assert!(md.contains("| 200-500 |"));
}
