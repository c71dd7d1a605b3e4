//! Early verdicts: a trace whose gateway already answered 5xx is diagnosed
//! after the short failure grace, not the full grace period, so a page can
//! go out seconds after the 504; late spans still revise it, the full grace
//! period still ends in a final diagnosis, and the SLIs count the request
//! once, with its spans.

use crate::common;

use common::{Builder, cfg_with_timeout, llm_timeout_trace};
use overtime_diagnose::live::LiveDiagnoser;
use overtime_model::{RootCauseKind as K, SpanStatus, Stage};

const GRACE_MS: u64 = 30_000;
const FAILURE_GRACE_MS: u64 = 2_000;
const S: i64 = 1_000_000;

fn live() -> LiveDiagnoser {
    LiveDiagnoser::new(cfg_with_timeout(60_000.0), GRACE_MS, 600_000, 10_000)
        .with_failure_grace(FAILURE_GRACE_MS)
}

/// A 504 whose LLM call timed out in its queue phase.
fn llm_504(n: u32) -> Builder {
    llm_timeout_trace(
        n,
        Some("queue_wait=18.2s,kv_cache_build=1.1s,decode_loop=9.0s"),
    )
}

#[test]
fn a_504_gets_its_verdict_after_the_failure_grace_not_the_full_grace() {
    let b = llm_504(1);
    let mut live = live();
    live.add_spans(b.spans.clone(), 0);
    live.add_gateway(b.gateway.clone(), 0);

    assert!(live.tick(FAILURE_GRACE_MS as i64 * 1000 - 1).is_empty());
    let first = live.tick(FAILURE_GRACE_MS as i64 * 1000);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0].revision, 0);
    assert_eq!(first[0].verdict.root_cause.kind, K::LlmQueueing);
    assert_eq!(
        live.incidents().len(),
        1,
        "the incident opens on the early verdict"
    );
    // Not counted in the SLIs yet: its stragglers may still come.
    assert!(live.drain_observations().is_empty());
    assert_eq!(live.pending_len(), 1);

    // No second early verdict for the same records.
    assert!(live.tick(10 * S).is_empty());
    // The full grace period ends: same verdict, so nothing new to report,
    // and now the request is counted, once.
    assert!(live.tick(30 * S).is_empty());
    assert_eq!(live.pending_len(), 0);
    let obs = live.drain_observations();
    assert_eq!(obs.len(), 1);
    assert!(live.tick(40 * S).is_empty());
    assert!(live.drain_observations().is_empty());
    assert_eq!(live.verdict(&b.trace).unwrap().0, 0);
}

#[test]
fn spans_arriving_after_the_early_verdict_revise_it() {
    let b = llm_504(2);
    let mut live = live();
    // The gateway line first: the agent's spans are still being exported.
    live.add_gateway(b.gateway.clone(), 0);
    let early = live.tick(2 * S);
    assert_eq!(early.len(), 1);
    assert_eq!(early[0].verdict.root_cause.kind, K::Unknown);
    assert!(
        live.incidents().is_empty(),
        "no incident from an unknown cause"
    );

    live.add_spans(b.spans.clone(), 5 * S);
    assert!(
        live.tick(6 * S).is_empty(),
        "quiet for less than the failure grace"
    );
    let revised = live.tick(7 * S);
    assert_eq!(revised.len(), 1, "{revised:#?}");
    assert_eq!(revised[0].revision, 1);
    assert_eq!(revised[0].verdict.root_cause.kind, K::LlmQueueing);
    assert_eq!(live.incidents().len(), 1);
    assert!(
        live.drain_settled().is_empty(),
        "root causes are counted when the grace period ends, not before"
    );

    assert!(live.tick(35 * S).is_empty());
    let settled = live.drain_settled();
    assert_eq!(settled.len(), 1, "counted once, as what it settled on");
    assert_eq!(settled[0].root_cause.kind, K::LlmQueueing);
    let obs = live.drain_observations();
    assert_eq!(obs.len(), 1, "one request, counted once with its spans");
    assert!(
        !obs[0].calls.is_empty(),
        "the observation carries the call that arrived late: {:?}",
        obs[0]
    );
}

#[test]
fn healthy_and_span_only_traces_wait_for_the_full_grace() {
    let mut ok = Builder::new(3);
    ok.gateway(200, 800.0);
    ok.span("1", None, "agent-api", Stage::Service, 1.0, 790.0);
    // Spans with an error but no gateway answer yet: the request may still
    // be running (a retry), so no early verdict.
    let mut running = Builder::new(4);
    let s = running.span("1", None, "agent-api", Stage::Tool, 1.0, 5_000.0);
    s.status = SpanStatus::Error;
    let mut live = live();
    live.add_gateway(ok.gateway.clone(), 0);
    live.add_spans(ok.spans.clone(), 0);
    live.add_spans(running.spans.clone(), 0);
    assert!(live.tick(2 * S).is_empty());
    assert!(live.tick(29 * S).is_empty());
    assert_eq!(live.pending_len(), 2);
    let done = live.tick(30 * S);
    assert_eq!(done.len(), 1, "the failed span's trace: {done:#?}");
    assert_eq!(done[0].verdict.trace_id, running.trace);
    assert_eq!(live.drain_observations().len(), 2);
}

#[test]
fn without_a_failure_grace_the_full_grace_applies() {
    let b = llm_504(5);
    let mut live = LiveDiagnoser::new(cfg_with_timeout(60_000.0), GRACE_MS, 600_000, 10_000);
    live.add_spans(b.spans.clone(), 0);
    live.add_gateway(b.gateway.clone(), 0);
    assert!(live.tick(29 * S).is_empty());
    assert_eq!(live.tick(30 * S).len(), 1);
}

#[test]
fn a_request_is_observed_provisionally_once_it_is_over_and_its_final_observation_says_so() {
    let b = llm_504(7);
    let mut live = live();
    // The spans first: without its gateway line nothing says it is over.
    live.add_spans(b.spans.clone(), 0);
    live.tick(5 * S);
    assert!(live.drain_provisional().is_empty());
    live.add_gateway(b.gateway.clone(), 6 * S);
    live.tick(6 * S + FAILURE_GRACE_MS as i64 * 1000 - 1);
    assert!(live.drain_provisional().is_empty(), "not quiet long enough");
    live.tick(8 * S);
    let first = live.drain_provisional();
    assert_eq!(first.len(), 1);
    let p = &first[0];
    assert!(p.provisional && !p.calls.is_empty(), "{p:#?}");
    assert!(p.timeout_used.is_some(), "its time against the gateway's");
    assert!(live.drain_observations().is_empty(), "the SLIs still wait");
    live.tick(20 * S);
    assert!(live.drain_provisional().is_empty(), "once per trace");
    live.tick(40 * S);
    let last = live.drain_observations();
    assert_eq!(last.len(), 1);
    assert!(!last[0].provisional);
    let until = p.calls.iter().map(|c| c.end_us).max();
    assert_eq!(last[0].provisional_calls_until_us, until);
}
