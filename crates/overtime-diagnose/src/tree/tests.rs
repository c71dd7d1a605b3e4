//! The span tree's unit tests.

use super::*;
use overtime_model::SpanRecord;

const T: &str = "0af7651916cd43dd8448eb211c80319c";

fn span(id: &str, parent: Option<&str>, svc: &str, s_ms: i64, e_ms: i64) -> SpanRecord {
    let mut s = SpanRecord::new(T, id, svc, id, s_ms * 1000, e_ms * 1000);
    s.parent_span_id = parent.map(String::from);
    s
}

fn crit_ms(tree: &TraceTree, trace: &Trace, id: &str) -> i64 {
    let i = trace.spans.iter().position(|s| s.span_id == id).unwrap();
    tree.nodes[tree.node_of_span(i).unwrap()].critical_us / 1000
}

#[test]
fn serial_and_parallel_children() {
    // root 0..100: a 0..30, then b and c in parallel 30..60 / 30..80, then d 80..95
    let trace = Trace {
        id: T.into(),
        gateway: vec![],
        spans: vec![
            span("root", None, "api", 0, 100),
            span("a", Some("root"), "api", 0, 30),
            span("b", Some("root"), "api", 30, 60),
            span("c", Some("root"), "api", 30, 80),
            span("d", Some("root"), "api", 80, 95),
        ],
    };
    let tree = build(&trace, None, 0.0);
    assert_eq!(crit_ms(&tree, &trace, "d"), 15);
    assert_eq!(crit_ms(&tree, &trace, "c"), 50);
    assert_eq!(crit_ms(&tree, &trace, "b"), 0);
    assert_eq!(crit_ms(&tree, &trace, "a"), 30);
    assert_eq!(crit_ms(&tree, &trace, "root"), 5);
    let total: i64 = tree.nodes.iter().map(|n| n.critical_us).sum();
    assert_eq!(total, 100_000);
}

#[test]
fn gateway_cut_clamps_spans_that_ran_on() {
    // nginx gave up at 60 s; the service and its tool ran to 75 s.
    let g = GatewayRecord {
        time_us: 60_000_000 + 5_000,
        time_precision_us: 1000,
        request_time_ms: Some(60_000.0),
        status: Some(504),
        ..Default::default()
    };
    let trace = Trace {
        id: T.into(),
        gateway: vec![g],
        spans: vec![
            span("svc", None, "api", 5, 75_000),
            span("tool", Some("svc"), "tools", 8_000, 75_000),
        ],
    };
    let tree = build(&trace, Some(0), 0.0);
    assert_eq!(tree.elapsed_us(), 60_000_000);
    assert_eq!(crit_ms(&tree, &trace, "tool"), 52_005);
    assert_eq!(tree.nodes[tree.root].critical_us / 1000, 0);
    let total: i64 = tree.nodes.iter().map(|n| n.critical_us).sum();
    assert_eq!(total, 60_000_000);
}

#[test]
fn second_resolution_gateway_is_anchored_to_spans() {
    // Line written at 10:00:07 (truncated), request_time 6.5 s: the true
    // start is within [0.5, 1.5) s; the span starts at 1.2 s.
    let g = GatewayRecord {
        time_us: 7_000_000,
        time_precision_us: 1_000_000,
        request_time_ms: Some(6_500.0),
        ..Default::default()
    };
    let trace = Trace {
        id: T.into(),
        gateway: vec![g],
        spans: vec![span("svc", None, "api", 1_200, 7_600)],
    };
    let tree = build(&trace, Some(0), 0.0);
    assert_eq!(tree.nodes[tree.root].start_us, 1_200_000);
    assert_eq!(crit_ms(&tree, &trace, "svc"), 6_400);
}

#[test]
fn skewed_child_is_shifted_into_parent() {
    let trace = Trace {
        id: T.into(),
        gateway: vec![],
        spans: vec![
            span("root", None, "api", 1_000, 2_000),
            span("llm", Some("root"), "model", 900, 1_900),
        ],
    };
    let tree = build(&trace, None, 500.0);
    let llm = tree.node_of_span(1).unwrap();
    assert_eq!(tree.nodes[llm].start_us, 1_000_000);
    assert_eq!(tree.nodes[llm].end_us, 2_000_000);
    assert_eq!(crit_ms(&tree, &trace, "llm"), 1_000);
}

#[test]
fn cycles_and_orphans_do_not_hang() {
    let trace = Trace {
        id: T.into(),
        gateway: vec![],
        spans: vec![
            span("a", Some("b"), "x", 0, 10),
            span("b", Some("a"), "x", 0, 10),
            span("c", Some("zz"), "x", 0, 5),
        ],
    };
    let tree = build(&trace, None, 0.0);
    assert!(tree.nodes.iter().filter(|n| n.span.is_some()).count() == 3);
}
