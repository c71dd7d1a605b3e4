//! The fast early warning's keys and newer signals on synthetic traffic:
//! a creep into one flow of a busy route, the calls in flight growing
//! with the load alone, requests slowing with no timeout known.

use super::*;

/// A request ending at `t` in minute `m`: lookups (a tool, then the
/// model) and quick answers (memory, then the model) mixed at random on
/// one route: the lookups use 40 %
/// of the gateway timeout, the answers 10 %, each ×0.7–1.3; from minute
/// 30 the lookups creep up `creep` points a minute.
fn two_flows(t: i64, m: i64, creep: f64, rng: &mut Rng) -> RequestObservation {
    let lookup = rng.f64() < 0.5;
    let mut o = RequestObservation::new("/v1/agent/run", Outcome::Ok, t);
    let (stage, target) = if lookup {
        (Stage::Tool, "poi_search")
    } else {
        (Stage::Memory, "session_memory")
    };
    let mut first = CallObservation::new(stage, SpanStatus::Ok, 500.0, t);
    first.tool = Some(target.into());
    let mut llm = CallObservation::new(Stage::Llm, SpanStatus::Ok, 2_000.0, t);
    llm.model = Some("deepseek-v4-pro".into());
    o.calls = vec![first, llm];
    let used = if lookup {
        0.4 + creep * (m - 29).max(0) as f64
    } else {
        0.1
    };
    o.timeout_used = Some(used * (0.7 + 0.6 * rng.f64()));
    o
}

/// Plays 40 minutes of `per_min(m)` requests a minute, made by
/// `make(t_us, m, rng)` for a request ending at `t_us` in minute `m`, and
/// returns the first early warning: (minute, `signal`, summary). Each
/// test's change begins at minute 30: nothing may warn before.
fn first_warning(
    seed: u64,
    per_min: impl Fn(i64) -> i64,
    mut make: impl FnMut(i64, i64, &mut Rng) -> RequestObservation,
) -> (f64, String, String) {
    let mut slo = Slo::new(SloConfig::default());
    let mut rng = Rng::with_seed(seed);
    for m in 0..40i64 {
        let n = per_min(m);
        for k in 0..n {
            let t = T0 + m * 60_000_000 + k * 60_000_000 / n;
            slo.observe(&make(t, m, &mut rng));
            let early = slo.alerts().iter().find(|a| EARLY.contains(&a.name()));
            if let Some(a) = early {
                let w = (
                    m as f64 + k as f64 / n as f64,
                    a.label("signal").unwrap_or("").to_string(),
                    a.summary().to_string(),
                );
                assert!(m >= 30, "a warning before the change: {w:?}");
                return w;
            }
        }
    }
    panic!("the change raised no early warning")
}

#[test]
fn a_creep_into_one_flow_of_a_busy_route_warns_naming_the_flow_within_three_minutes() {
    // The route's mean moves by half the lookups' creep and swings with
    // each bucket's mix of the two; the lookups' own series does neither.
    let (at, signal, summary) = first_warning(31, |_| 40, |t, m, rng| two_flows(t, m, 0.04, rng));
    assert_eq!(signal, "request_timeout_use", "{summary}");
    assert!(at < 33.0, "{at}: {summary}");
    assert!(
        summary.starts_with(
            "requests creeping toward their gateway timeout (calls deepseek-v4-pro + poi_search): "
        ),
        "{summary}"
    );
}

#[test]
fn llm_calls_piling_up_warn_against_the_most_the_model_served_when_only_the_load_grows() {
    // 40 requests a minute, each with a 10 s LLM call: ~6.7 calls in
    // flight. From minute 30, twice the requests, each exactly as before:
    // no latency, share or timeout moves — only the calls in flight.
    let per_min = |m| if m >= 30 { 80 } else { 40 };
    let (at, signal, summary) = first_warning(41, per_min, |t, _, rng| request(t, EVERYDAY, rng));
    assert_eq!(signal, "llm_in_flight", "{summary}");
    assert!(at < 32.0, "{at}: {summary}");
    assert!(summary.starts_with("LLM calls piling up: 1"), "{summary}");
    assert!(summary.contains("up from 6."), "{summary}");
    assert!(
        summary.contains("half the most in flight in a bucket of the baseline, "),
        "{summary}"
    );
}

#[test]
fn requests_with_no_timeout_known_yet_warn_as_they_slow_down() {
    // No gateway timeout configured and no 504 seen to infer it: the
    // requests' own time creeps 15 % a minute from minute 30 (3 s at
    // first, ×0.7–1.3), and the warning needs no timeout to come before
    // the first 504.
    let (at, signal, summary) = first_warning(
        51,
        |_| 40,
        |t, m, rng| {
            let mut o = request(t, EVERYDAY, rng);
            o.timeout_used = None;
            let secs = 3.0 * 1.15f64.powi((m - 29).max(0) as i32) * (0.7 + 0.6 * rng.f64());
            o.start_us = t - (secs * 1e6) as i64;
            o
        },
    );
    assert_eq!(signal, "request_latency", "{summary}");
    assert!(at < 33.0, "{at}: {summary}");
    assert!(summary.starts_with("requests slowing down: "), "{summary}");
    // The geometric mean of 3 s ×0.7–1.3.
    let from = up_from(&summary);
    assert!((2.8..3.1).contains(&from), "{summary}");
}
