//! Inputs built to break the diagnosis: it must finish, without a panic,
//! and keep its invariants (critical-path time never exceeds the request).

use crate::common;
use common::*;
use overtime_diagnose::{DiagnoseConfig, diagnose};
use overtime_model::{GatewayRecord, SpanRecord, SpanStatus, Stage};
use overtime_parse::fuzz::Rng;

#[test]
fn a_chain_of_two_hundred_thousand_spans() {
    let t = trace_id(1);
    let spans: Vec<SpanRecord> = (0..200_000u64)
        .map(|i| {
            let mut s = SpanRecord::new(
                &t,
                &format!("{:016x}", i + 1),
                "svc",
                "hop",
                1_000_000 + i as i64,
                500_000_000,
            );
            s.parent_span_id = (i > 0).then(|| format!("{:016x}", i));
            s.stage = if i % 2 == 0 {
                Stage::Service
            } else {
                Stage::Network
            };
            s.status = if i == 0 {
                SpanStatus::Error
            } else {
                SpanStatus::Ok
            };
            s
        })
        .collect();
    let d = diagnose(vec![], spans, &DiagnoseConfig::default());
    assert_eq!(d.verdicts.len(), 1);
    let total: f64 = d.verdicts[0].timeline.iter().map(|e| e.critical_ms).sum();
    assert!(total <= d.verdicts[0].budget.consumed_ms + 1.0);
}

#[test]
fn absurd_times_and_durations_are_clamped_not_fatal() {
    let t = trace_id(2);
    let mut a = SpanRecord::new(&t, "00000000000000a1", "svc", "root", i64::MIN, i64::MAX);
    a.status = SpanStatus::Timeout;
    let mut b = SpanRecord::new(&t, "00000000000000a2", "svc", "child", i64::MAX, i64::MIN);
    b.parent_span_id = Some("00000000000000a1".into());
    b.stage = Stage::Tool;
    let g = GatewayRecord {
        trace_id: Some(t.clone()),
        status: Some(504),
        time_us: i64::MAX,
        time_precision_us: i64::MAX,
        request_time_ms: Some(1e300),
        upstream_connect_ms: vec![Some(f64::INFINITY), Some(-5.0), None],
        max_wait_ms: Some(f64::NAN),
        ..Default::default()
    };
    let g2 = GatewayRecord {
        time_us: i64::MIN,
        request_time_ms: Some(-1.0),
        status: Some(502),
        ..Default::default()
    };
    let d = diagnose(vec![g, g2], vec![a, b], &DiagnoseConfig::default());
    assert_eq!(d.verdicts.len(), 2);
    serde_json::to_string(&d.verdicts).expect("verdicts serialise");
}

#[test]
fn random_forests_keep_the_critical_path_within_the_request() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let stages = [
        Stage::Service,
        Stage::Llm,
        Stage::Tool,
        Stage::Memory,
        Stage::Network,
        Stage::Queue,
        Stage::Judge,
        Stage::Other,
    ];
    for n in 0..300u32 {
        let mut b = Builder::new(n);
        let rt = rng.below(120_000) as f64;
        if rng.below(4) > 0 {
            let g = b.gateway([200, 504, 502, 499][rng.below(4)], rt);
            g.time_precision_us = [1000, 1_000_000][rng.below(2)];
        }
        let count = 1 + rng.below(40);
        for i in 0..count {
            let parent = (i > 0 && rng.below(10) > 0).then(|| format!("{}", rng.below(i) + 1));
            let start = rng.below(130_000) as f64 - 5_000.0;
            let end = start + rng.below(90_000) as f64;
            let stage = stages[rng.below(stages.len())];
            let s = b.span(
                &format!("{}", i + 1),
                parent.as_deref(),
                ["a", "b", "c"][rng.below(3)],
                stage,
                start,
                end,
            );
            s.attempt = Some(rng.below(3) as u32);
            s.timeout_ms = (rng.below(2) == 0).then(|| rng.below(60_000) as f64);
            s.status = [
                SpanStatus::Ok,
                SpanStatus::Error,
                SpanStatus::Timeout,
                SpanStatus::Cancelled,
            ][rng.below(4)];
            s.tool = Some(["x", "y"][rng.below(2)].into());
            s.dns_ms = (rng.below(3) == 0).then(|| rng.below(5_000) as f64);
            if rng.below(3) == 0 {
                s.llm_reason = Some("kv_cache_build=2s,decode_loop=1s".into());
            }
        }
        for i in 0..rng.below(5) {
            let at = rng.below(100_000) as f64;
            b.event(
                &format!("{}", 1 + (i % count)),
                ["chunk", "heartbeat", "dns", "connect"][rng.below(4)],
                at,
            );
        }
        let d = run(
            vec![b],
            &DiagnoseConfig {
                all_verdicts: true,
                ..Default::default()
            },
        );
        for v in &d.verdicts {
            let crit: f64 = v.timeline.iter().map(|e| e.critical_ms).sum();
            assert!(
                crit <= v.budget.consumed_ms + 0.01,
                "trace {n}: critical {crit} > elapsed {}",
                v.budget.consumed_ms
            );
            assert!(
                v.root_cause.share >= 0.0 && v.root_cause.share <= 1.0,
                "trace {n}: share {}",
                v.root_cause.share
            );
        }
    }
}
