//! One fixture per root-cause kind of docs/diagnosis.md#root-cause-kinds: each asserts the kind,
//! the component and the numbers in the evidence.

use crate::common;
use common::*;
use overtime_diagnose::{DiagnoseConfig, DisabledRules};
use overtime_model::{Outcome, RootCauseKind as K, SpanStatus, Stage};

#[test]
fn stream_idle_gap_when_the_gateway_cuts_a_silent_stream() {
    let mut b = Builder::new(1);
    b.gateway(200, 62_000.0).body_bytes_sent = Some(512);
    let root = b.root("agent-api", 5.0, 95_000.0);
    root.status = SpanStatus::Cancelled;
    root.error_type = Some("client_reset".into());
    b.child("2", "agent-api", Stage::Llm, 10.0, 1_800.0).model = Some("qwen-72b".into());
    for t in [900.0, 1_400.0, 2_000.0] {
        b.event("1", "chunk", t);
    }
    let d = run(vec![b], &cfg_with_timeout(60_000.0));
    let v = only(&d);
    assert_eq!(v.outcome, Outcome::GatewayTimeout);
    assert_eq!(v.root_cause.kind, K::StreamIdleGap);
    assert_eq!(v.root_cause.component, "agent-api");
    assert_evidence(v, "60.0 s");
    assert_evidence(v, "silent for 60.0 s");
}

#[test]
fn gateway_timeout_mismatch_when_no_call_timed_out() {
    let mut b = Builder::new(2);
    b.gateway(504, 30_001.0);
    b.root("agent-api", 2.0, 41_000.0).budget_ms = Some(90_000.0);
    b.child("2", "agent-api", Stage::Llm, 5.0, 3_000.0)
        .timeout_ms = Some(10_000.0);
    let llm = b.child("3", "agent-api", Stage::Llm, 3_000.0, 40_000.0);
    llm.timeout_ms = Some(60_000.0);
    llm.model = Some("deepseek-v4-pro".into());
    let d = run(vec![b], &cfg_with_timeout(30_000.0));
    let v = only(&d);
    assert_eq!(v.root_cause.kind, K::GatewayTimeoutMismatch);
    assert_eq!(v.root_cause.component, "gateway");
    assert_evidence(v, "service budget 90.0 s > gateway timeout 30.0 s");
    assert!(
        v.findings
            .iter()
            .any(|f| f.kind == overtime_model::FindingKind::TimeoutMisaligned)
    );
}

#[test]
fn serial_budget_exhaustion_when_no_call_dominates() {
    let mut b = Builder::new(3);
    b.gateway(504, 10_000.0);
    b.root("orchestrator", 1.0, 12_000.0).budget_ms = Some(8_000.0);
    let mut t = 10.0;
    for (i, (stage, ms)) in [
        (Stage::Llm, 2_200.0),
        (Stage::Tool, 1_900.0),
        (Stage::Memory, 1_800.0),
        (Stage::Llm, 2_100.0),
        (Stage::Tool, 2_500.0),
    ]
    .into_iter()
    .enumerate()
    {
        let s = b.child(&format!("{}", i + 2), "orchestrator", stage, t, t + ms);
        s.timeout_ms = Some(5_000.0);
        s.tool = Some(format!("step{i}"));
        t += ms;
    }
    let v = verdict(b, 10_000.0);
    assert_eq!(v.root_cause.kind, K::SerialBudgetExhaustion);
    assert_eq!(v.root_cause.component, "orchestrator");
    assert!(v.root_cause.share < 0.4);
    assert_evidence(&v, "5 calls on the critical path");
}

#[test]
fn pool_saturation_when_the_service_waited_before_work_began() {
    let mut b = Builder::new(4);
    b.gateway(504, 10_000.0);
    b.root("tool-service", 1.0, 11_000.0);
    let t = b.tool("2", "tool-service", "weather_api", 7_500.0, 8_200.0);
    t.timeout_ms = Some(5_000.0);
    b.child("3", "tool-service", Stage::Llm, 8_200.0, 11_000.0)
        .timeout_ms = Some(5_000.0);
    let v = verdict(b, 10_000.0);
    assert_eq!(v.root_cause.kind, K::PoolSaturation);
    assert_eq!(v.root_cause.component, "tool-service");
    assert_evidence(&v, "7.5 s");
}

#[test]
fn judge_slow_when_the_judge_call_dominates() {
    let mut b = Builder::new(5);
    b.gateway(504, 30_000.0);
    b.root("agent-api", 1.0, 35_000.0);
    b.child("2", "agent-api", Stage::Llm, 10.0, 1_200.0).model = Some("deepseek-v4-pro".into());
    let j = b.child("3", "agent-api", Stage::Judge, 1_200.0, 30_900.0);
    j.model = Some("judge-7b".into());
    j.input_tokens = Some(183);
    j.timeout_ms = Some(60_000.0);
    let v = verdict(b, 30_000.0);
    assert_eq!(v.root_cause.kind, K::JudgeSlow);
    assert_eq!(v.root_cause.component, "judge-7b");
    assert_evidence(&v, "input 183 tokens");
}

#[test]
fn llm_phase_kinds_follow_the_largest_phase() {
    let cases = [
        (
            "queue_wait=18.2s,kv_cache_build=1.1s,decode_loop=9.0s",
            K::LlmQueueing,
            "queue 18.2 s",
        ),
        (
            "kv_cache_build=21.3s,decode_loop=7.1s,io_wait=1.4s",
            K::LlmPrefillSlow,
            "prefill 21.3 s",
        ),
        (
            "kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s",
            K::LlmDecodeSlow,
            "decode 28.1 s",
        ),
    ];
    for (i, (reason, kind, phase)) in cases.into_iter().enumerate() {
        let v = verdict(llm_timeout_trace(10 + i as u32, Some(reason)), 60_000.0);
        assert_eq!(v.root_cause.kind, kind, "{reason}");
        assert_eq!(v.root_cause.component, "deepseek-v4-pro");
        assert_evidence(&v, phase);
        assert_evidence(&v, "input 412 tokens > threshold 300");
        assert_evidence(&v, "its timeout of 30.0 s fired");
    }
}

#[test]
fn llm_slow_when_no_phases_are_known() {
    let v = verdict(llm_timeout_trace(20, None), 60_000.0);
    assert_eq!(v.root_cause.kind, K::LlmSlow);
    assert_evidence(&v, "no X-LLM-Reason");
}

#[test]
fn upstream_connect_slow_from_dns_events() {
    let mut b = Builder::new(21);
    b.gateway(504, 10_000.0);
    b.root("orchestrator", 1.0, 10_500.0);
    let t = b.tool("2", "tool-service", "weather_api", 10.0, 5_110.0);
    t.timeout_ms = Some(5_000.0);
    t.status = SpanStatus::Error;
    b.event("2", "dns", 2_810.0);
    b.child("3", "orchestrator", Stage::Llm, 5_110.0, 5_900.0)
        .model = Some("m".into());
    let v = verdict(b, 10_000.0);
    assert_eq!(v.root_cause.kind, K::UpstreamConnectSlow);
    assert_eq!(v.root_cause.component, "weather_api");
    assert_evidence(&v, "2.8 s of its 5.1 s went to DNS/connect");
}

#[test]
fn upstream_connect_slow_from_the_gateway_alone() {
    let mut b = Builder::new(22);
    let g = b.gateway(504, 10_000.0);
    g.upstream_connect_ms = vec![Some(6_000.0)];
    g.upstream_addr = vec![Some("10.1.1.1:443".into())];
    let v = verdict(b, 10_000.0);
    assert_eq!(v.root_cause.kind, K::UpstreamConnectSlow);
    assert_eq!(v.root_cause.component, "10.1.1.1:443");
}

#[test]
fn retry_amplification_when_attempts_add_up() {
    let v = verdict(three_attempts(23, SpanStatus::Error, true), 10_000.0);
    assert_eq!(v.root_cause.kind, K::RetryAmplification);
    assert_eq!(v.root_cause.component, "search_api");
    assert_evidence(&v, "3 attempts");
}

#[test]
fn a_switched_off_rule_leaves_the_trace_to_the_next_rule_that_holds() {
    let cfg = DiagnoseConfig {
        disabled_rules: DisabledRules::new(["retry_amplification"]).unwrap(),
        ..cfg_with_timeout(10_000.0)
    };
    let d = run(vec![three_attempts(24, SpanStatus::Error, true)], &cfg);
    let v = only(&d);
    assert_eq!(v.root_cause.kind, K::ToolSlow);
    assert_eq!(v.root_cause.component, "search_api");
    assert!(
        v.contributing
            .iter()
            .all(|c| c.kind != K::RetryAmplification),
        "a switched-off kind is not listed as contributing either: {:?}",
        v.contributing
    );
}

fn tool_trace(n: u32, timeout: Option<f64>) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(504, 60_000.0);
    b.root("runtime", 1.0, 70_000.0);
    b.child("2", "runtime", Stage::Llm, 10.0, 8_000.0).model = Some("m".into());
    let t = b.tool("3", "tool-gateway", "search_api", 8_000.0, 70_000.0);
    t.timeout_ms = timeout;
    t.remaining_budget_ms = Some(52_000.0);
    b
}

#[test]
fn tool_no_timeout_and_tool_slow() {
    let v = verdict(tool_trace(30, None), 60_000.0);
    assert_eq!(v.root_cause.kind, K::ToolNoTimeout);
    assert_eq!(v.root_cause.component, "search_api");
    assert!(v.root_cause.share > 0.8);
    assert_evidence(&v, "search_api ran with no timeout");
    assert_evidence(&v, "52.0 s of budget left");
    assert!(
        v.findings
            .iter()
            .any(|f| f.kind == overtime_model::FindingKind::NoTimeout)
    );

    let v = verdict(tool_trace(31, Some(90_000.0)), 60_000.0);
    assert_eq!(v.root_cause.kind, K::ToolSlow);
    assert!(
        evidence(&v).contains("its timeout was 1.5 s") || evidence(&v).contains("90.0 s"),
        "{}",
        evidence(&v)
    );
}

#[test]
fn unknown_says_what_is_missing() {
    let mut b = Builder::new(40);
    b.gateway(504, 60_000.0);
    let d = run(vec![b], &DiagnoseConfig::default());
    let v = only(&d);
    assert_eq!(v.root_cause.kind, K::Unknown);
    assert!(
        v.root_cause.summary.contains("no spans"),
        "{}",
        v.root_cause.summary
    );
    assert!(
        d.incidents.is_empty(),
        "unknown is never an incident's cause"
    );
}

#[test]
fn spans_only_service_timeout() {
    let mut b = Builder::new(41);
    let r = b.root("agent-api", 0.0, 30_500.0);
    r.status = SpanStatus::Error;
    r.http_status = Some(503);
    let l = b.child("2", "agent-api", Stage::Llm, 100.0, 30_100.0);
    l.status = SpanStatus::Timeout;
    l.timeout_ms = Some(30_000.0);
    l.model = Some("deepseek-v4-pro".into());
    l.llm_reason = Some("kv_cache_build=25s".into());
    let v = only(&run(vec![b], &DiagnoseConfig::default())).clone();
    assert_eq!(v.outcome, Outcome::ServiceTimeout);
    assert_eq!(v.root_cause.kind, K::LlmPrefillSlow);
    assert!(v.gateway.is_none());
}

#[test]
fn healthy_traffic_gives_no_verdict_and_no_incident() {
    let mut all = vec![];
    for n in 0..50 {
        let mut b = Builder::new(100 + n);
        b.gateway(200, 1_500.0);
        b.root("agent-api", 1.0, 1_490.0);
        b.child("2", "agent-api", Stage::Llm, 10.0, 1_400.0)
            .input_tokens = Some(40);
        all.push(b);
    }
    let d = run(all, &DiagnoseConfig::default());
    assert!(d.verdicts.is_empty());
    assert!(d.incidents.is_empty());
    assert_eq!(d.latency[0].calls, 50);
}
