//! The live state is bounded: past `max_records` records, diagnosed traces
//! are forgotten oldest first, then waiting traces are diagnosed early,
//! quietest first — each still observed once, nothing lost silently.

use crate::common;

use common::{Builder, cfg_with_timeout};
use overtime_diagnose::live::LiveDiagnoser;
use overtime_model::Stage;

const S: i64 = 1_000_000;

/// A healthy request: one gateway line and one span (two records).
fn ok(n: u32) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(200, 800.0);
    b.span("1", None, "agent-api", Stage::Service, 1.0, 790.0);
    b
}

fn add(live: &mut LiveDiagnoser, b: &Builder, now_us: i64) {
    live.add_gateway(b.gateway.clone(), now_us);
    live.add_spans(b.spans.clone(), now_us);
}

#[test]
fn past_the_bound_the_quietest_waiting_traces_are_diagnosed_early() {
    let mut live =
        LiveDiagnoser::new(cfg_with_timeout(60_000.0), 30_000, 600_000, 1_000).with_max_records(10);
    for n in 0..5 {
        add(&mut live, &ok(n), n as i64 * S);
    }
    live.tick(5 * S);
    assert_eq!(
        (live.pending_len(), live.forced()),
        (5, 0),
        "10 records fit"
    );
    add(&mut live, &ok(5), 6 * S);
    add(&mut live, &ok(6), 7 * S);
    live.tick(7 * S);
    assert_eq!(live.forced(), 2, "the two quietest were diagnosed early");
    assert_eq!(live.pending_len(), 5);
    let observed: Vec<String> = live
        .drain_observations()
        .into_iter()
        .map(|o| o.trace_id)
        .collect();
    assert_eq!(
        observed,
        vec![ok(0).trace, ok(1).trace],
        "observed once each"
    );
}

#[test]
fn diagnosed_traces_are_forgotten_before_waiting_ones_are_forced() {
    let mut live =
        LiveDiagnoser::new(cfg_with_timeout(60_000.0), 1_000, 600_000, 1_000).with_max_records(6);
    for n in 0..3 {
        add(&mut live, &ok(n), 0);
    }
    live.tick(2 * S);
    assert_eq!(live.pending_len(), 0);
    assert_eq!(live.drain_observations().len(), 3);
    // Three more waiting: 12 records; the three diagnosed ones go first.
    for n in 3..6 {
        add(&mut live, &ok(n), 3 * S);
    }
    live.tick(3 * S);
    assert_eq!((live.forced(), live.pending_len()), (0, 3));
    assert!(live.drain_observations().is_empty());
    // A late span of a forgotten trace starts afresh rather than growing
    // the state without bound.
    add(&mut live, &ok(0), 3 * S + S / 2);
    live.tick(3 * S + S / 2);
    assert_eq!(
        live.forced(),
        1,
        "the bound holds: the quietest waiting trace was forced"
    );
}
