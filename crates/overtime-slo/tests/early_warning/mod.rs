//! The early-warning signals and alerts (docs/advice.md) on synthetic traffic in
//! data time: a steady platform with its everyday noise stays quiet; each
//! signal, turned on its own, raises its own alert saying by how much.

use overtime_model::{Outcome, SpanStatus, Stage};
use overtime_slo::{
    CHAIN_HEALTH_FALLING, CallObservation, LLM_WAIT_RISING, NEAR_TIMEOUT_RISING,
    RequestObservation, SEMANTIC_SUCCESS_FALLING, Slo, SloConfig,
};

mod fast_keys;

const T0: i64 = 1_794_960_000_000_000;
const EARLY: [&str; 4] = [
    CHAIN_HEALTH_FALLING,
    NEAR_TIMEOUT_RISING,
    LLM_WAIT_RISING,
    SEMANTIC_SUCCESS_FALLING,
];

/// A small seeded generator (xorshift64*): the tests need no crate for it.
struct Rng(u64);

impl Rng {
    fn with_seed(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What can go wrong in one request, each with its probability.
#[derive(Clone, Copy, Default)]
struct Odds {
    retry: f64,
    fallback: f64,
    near: f64,
    /// Queue + prefill of the LLM call, as a share of it.
    wait: f64,
    judged_low: f64,
    /// The request's share of its gateway timeout used (median; ×0.7–1.3).
    used: f64,
}

const EVERYDAY: Odds = Odds {
    retry: 0.04,
    fallback: 0.03,
    near: 0.01,
    wait: 0.3,
    judged_low: 0.02,
    used: 0.3,
};

fn request(t_us: i64, odds: Odds, rng: &mut Rng) -> RequestObservation {
    let mut o = RequestObservation::new("/v1/agent/run", Outcome::Ok, t_us);
    let mut tool = CallObservation::new(Stage::Tool, SpanStatus::Ok, 2_000.0, t_us);
    tool.tool = Some("weather_api".into());
    tool.timeout_ms = Some(5_000.0);
    if rng.f64() < odds.near {
        tool.duration_ms = 4_500.0;
    }
    let mut calls = vec![];
    if rng.f64() < odds.retry {
        let mut first = tool.clone();
        first.status = SpanStatus::Timeout;
        first.duration_ms = 5_000.0;
        calls.push(first);
        tool.attempt = 1;
    }
    calls.push(tool);
    let mut llm = CallObservation::new(Stage::Llm, SpanStatus::Ok, 10_000.0, t_us);
    llm.model = Some("deepseek-v4-pro".into());
    llm.timeout_ms = Some(60_000.0);
    let wait = (odds.wait + 0.05 * (rng.f64() - 0.5)).clamp(0.0, 1.0);
    llm.queue_ms = Some(10_000.0 * wait / 3.0);
    llm.prefill_ms = Some(10_000.0 * wait * 2.0 / 3.0);
    calls.push(llm);
    o.calls = calls;
    if rng.f64() < odds.fallback {
        o.fallback = Some("cache".into());
    }
    o.judge_score = Some(if rng.f64() < odds.judged_low {
        0.5
    } else {
        0.9
    });
    o.timeout_used = Some((odds.used * (0.7 + 0.6 * rng.f64())).min(1.0));
    o
}

/// An early warning raised: alert, `signal` label, minute, summary.
type Raised = (String, String, f64, String);

/// 40 requests a minute for `minutes`, odds by minute; returns the early
/// warnings raised, in order.
fn play(minutes: usize, odds: impl Fn(usize) -> Odds, seed: u64) -> Vec<Raised> {
    let mut slo = Slo::new(SloConfig::default());
    play_on(&mut slo, 0..minutes, odds, seed)
}

/// [`play`] on `slo`, over the minutes `range` (from the same T0).
fn play_on(
    slo: &mut Slo,
    range: std::ops::Range<usize>,
    odds: impl Fn(usize) -> Odds,
    seed: u64,
) -> Vec<Raised> {
    let mut rng = Rng::with_seed(seed);
    let mut raised = Vec::new();
    let key = |a: &overtime_slo::Alert| {
        (
            a.name().to_string(),
            a.label("signal").unwrap_or("").to_string(),
        )
    };
    let mut was: Vec<(String, String)> = Vec::new();
    for m in range {
        for k in 0..40 {
            let t = T0 + (m as i64 * 60 + k * 3 / 2) * 1_000_000;
            slo.observe(&request(t, odds(m), &mut rng));
            let early: Vec<&overtime_slo::Alert> = slo
                .alerts()
                .iter()
                .filter(|a| EARLY.contains(&a.name()))
                .collect();
            for a in &early {
                if !was.contains(&key(a)) {
                    raised.push((
                        a.name().to_string(),
                        a.label("signal").unwrap_or("").to_string(),
                        m as f64 + k as f64 / 40.0,
                        a.summary().to_string(),
                    ));
                    assert_eq!(a.severity(), "warning");
                    assert!(a.label("signal").is_some(), "{a:?}");
                }
            }
            was = early.iter().map(|a| key(a)).collect();
        }
    }
    raised
}

/// The warnings of the window tests (not the fast CUSUM's).
fn windowed(raised: &[Raised]) -> Vec<Raised> {
    let window_signals = [
        "chain_health",
        "near_timeout",
        "llm_queue_prefill",
        "semantic_success",
    ];
    raised
        .iter()
        .filter(|r| window_signals.contains(&r.1.as_str()))
        .cloned()
        .collect()
}

#[test]
fn a_steady_platform_with_its_everyday_noise_raises_no_early_warning() {
    for seed in 1..=5 {
        let raised = play(90, |_| EVERYDAY, seed);
        assert!(raised.is_empty(), "seed {seed}: {raised:?}");
    }
}

#[test]
fn retries_and_timeouts_rising_warn_that_chain_health_is_falling_and_say_by_how_much() {
    let raised = play(
        40,
        |m| Odds {
            retry: if m >= 30 { 0.2 } else { EVERYDAY.retry },
            ..EVERYDAY
        },
        7,
    );
    let (name, _, at, summary) = raised
        .iter()
        .find(|r| r.0 == CHAIN_HEALTH_FALLING)
        .unwrap_or_else(|| panic!("{raised:?}"));
    assert!((30.0..36.0).contains(at), "{name} at {at}");
    assert!(summary.starts_with("chain health falling: "), "{summary}");
    assert!(summary.contains("points from"), "{summary}");
    assert!(summary.contains("retried"), "{summary}");
}

#[test]
fn calls_using_most_of_their_timeout_warn() {
    let raised = play(
        40,
        |m| Odds {
            near: if m >= 30 { 0.25 } else { EVERYDAY.near },
            ..EVERYDAY
        },
        3,
    );
    let raised = windowed(&raised);
    assert_eq!(raised.len(), 1, "{raised:?}");
    let (name, _, at, summary) = &raised[0];
    assert_eq!(name, NEAR_TIMEOUT_RISING);
    assert!((30.0..36.0).contains(at), "{at}");
    // A tool call, an LLM call and the request itself are timed: 25 % of
    // the tool calls is about 9 % of all of them.
    assert!(summary.contains("by stage: tool"), "{summary}");
}

#[test]
fn a_growing_queue_and_prefill_share_of_llm_time_warns() {
    let raised = play(
        40,
        |m| Odds {
            wait: if m >= 30 { 0.55 } else { EVERYDAY.wait },
            ..EVERYDAY
        },
        4,
    );
    // The fast warning on each call's share comes first.
    assert_eq!(raised[0].1, "llm_queue_prefill_per_call", "{raised:?}");
    assert!((30.0..31.5).contains(&raised[0].2), "{raised:?}");
    let raised = windowed(&raised);
    assert_eq!(raised.len(), 1, "{raised:?}");
    let (name, _, _, summary) = &raised[0];
    assert_eq!(name, LLM_WAIT_RISING);
    let up: f64 = summary
        .split("up ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        (10.0..=26.0).contains(&up),
        "a rise of 10 to 25 points: {summary}"
    );
    assert!(summary.contains("points from 30"), "{summary}");
}

#[test]
fn fallback_answers_behind_200s_warn_that_semantic_success_is_falling() {
    let raised = play(
        40,
        |m| Odds {
            fallback: if m >= 30 { 0.2 } else { EVERYDAY.fallback },
            ..EVERYDAY
        },
        5,
    );
    let names: Vec<&str> = raised.iter().map(|r| r.0.as_str()).collect();
    assert!(names.contains(&SEMANTIC_SUCCESS_FALLING), "{raised:?}");
    let (_, _, _, summary) = raised
        .iter()
        .find(|r| r.0 == SEMANTIC_SUCCESS_FALLING)
        .unwrap();
    assert!(summary.contains("fell back"), "{summary}");
}

#[test]
fn without_a_baseline_nothing_warns() {
    // Bad from the first minute: no normal to compare with.
    let bad = Odds {
        retry: 0.3,
        fallback: 0.3,
        near: 0.3,
        wait: 0.7,
        judged_low: 0.3,
        used: 0.9,
    };
    assert!(play(5, |_| bad, 1).is_empty());
}

#[test]
fn the_signals_are_exported_with_their_baseline_and_z() {
    let mut slo = Slo::new(SloConfig::default());
    let mut rng = Rng::with_seed(9);
    for m in 0..40 {
        let odds = Odds {
            retry: if m >= 35 { 0.25 } else { 0.0 },
            ..Odds::default()
        };
        for k in 0..40 {
            let t = T0 + (m * 60 + k * 3 / 2) * 1_000_000;
            slo.observe(&request(t, odds, &mut rng));
        }
    }
    let v = slo.early_warning();
    // 40 minutes seen: the baseline says it had 35, not 55.
    assert_eq!(
        (v.window.as_str(), v.baseline_window.as_str()),
        ("5m", "35m (all the history held)")
    );
    let c = &v.chain_healthy;
    assert_eq!(c.baseline, Some(1.0));
    assert!((c.value.unwrap() - 0.75).abs() < 0.08, "{c:?}");
    assert!(c.z.unwrap() > 3.0, "{c:?}");
    assert!(v.chain_healthy_slope_per_min.unwrap() < 0.0);
    let t = slo.early_totals();
    assert_eq!(t.chains.iter().sum::<u64>(), 1600);
    assert_eq!(t.answers[0], 1600 - t.answers[1]);
    assert_eq!(t.llm_calls, 1600);
}

/// The baseline a warning's summary states ("… up from 38.0 % over …").
fn up_from(summary: &str) -> f64 {
    summary
        .split("up from ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no baseline in {summary}"))
}

/// The first fast warning of `signal`: (minute, summary).
fn first_of(raised: &[Raised], signal: &str) -> (f64, String) {
    raised
        .iter()
        .find(|r| r.1 == signal)
        .map(|r| (r.2, r.3.clone()))
        .unwrap_or_else(|| panic!("no {signal} warning: {raised:?}"))
}

#[test]
fn requests_jumping_toward_their_timeout_warn_within_a_minute_and_a_half() {
    // 30 % of the gateway timeout for half an hour, then 50 %.
    let raised = play(
        34,
        |m| Odds {
            used: if m >= 30 { 0.5 } else { 0.3 },
            ..EVERYDAY
        },
        11,
    );
    let (at, summary) = first_of(&raised, "request_timeout_use");
    assert!((30.0..31.5).contains(&at), "{at}: {summary}");
    assert_eq!(raised[0].0, NEAR_TIMEOUT_RISING, "{raised:?}");
    assert!(
        summary.starts_with("requests creeping toward their gateway timeout: "),
        "{summary}"
    );
    let from = up_from(&summary);
    assert!((28.0..32.0).contains(&from), "{summary}");
    assert!(
        // The history before the CUSUM's last 4 minutes.
        summary.contains("over the 27m before (all the history held"),
        "{summary}"
    );
}

#[test]
fn a_slow_creep_toward_the_timeout_warns_within_three_minutes_of_its_start() {
    // From minute 30 the requests use 4 more points of their timeout a
    // minute: 30 % → 70 % in 10 minutes.
    let raised = play(
        40,
        |m| Odds {
            used: 0.3 + 0.04 * (m.saturating_sub(29)) as f64,
            ..EVERYDAY
        },
        12,
    );
    let (at, summary) = first_of(&raised, "request_timeout_use");
    assert!((30.0..33.5).contains(&at), "{at}: {summary}");
}

#[test]
fn a_restarted_collector_is_armed_by_the_history_it_replays_and_says_how_long_it_was() {
    // The old collector saw 30 minutes; the new one gets the store's last
    // 7 (as `overtime serve` replays its keep_ms), then live traffic that
    // jumps at minute 32.
    let mut slo = Slo::new(SloConfig::default());
    let quiet = play_on(&mut slo, 23..30, |_| EVERYDAY, 21);
    assert!(quiet.is_empty(), "{quiet:?}");
    let raised = play_on(
        &mut slo,
        30..35,
        |m| Odds {
            used: if m >= 32 { 0.5 } else { 0.3 },
            ..EVERYDAY
        },
        22,
    );
    let (at, summary) = first_of(&raised, "request_timeout_use");
    assert!((32.0..33.5).contains(&at), "{at}: {summary}");
    assert!(
        summary.contains("before (all the history held, since the collector's first data)"),
        "{summary}"
    );
    // The window tests say how much history they really had, too.
    assert_eq!(
        slo.early_warning().baseline_window,
        "7m (all the history held)"
    );
}

#[test]
fn a_restarted_collector_on_steady_traffic_stays_quiet() {
    for seed in 1..=3 {
        let mut slo = Slo::new(SloConfig::default());
        let raised = play_on(&mut slo, 50..80, |_| EVERYDAY, seed);
        assert!(raised.is_empty(), "seed {seed}: {raised:?}");
    }
}

#[test]
fn a_model_server_queue_growing_warns_from_its_own_metrics() {
    use overtime_slo::ServerLoad;
    let mut slo = Slo::new(SloConfig::default());
    let mut rng = Rng::with_seed(5);
    let mut first = None;
    // A sample every 15 s: 0–2 waiting for 20 minutes, then 2 more a minute.
    for i in 0..(26 * 4) {
        let m = i as f64 / 4.0;
        let waiting = (rng.f64() * 3.0).floor() + (2.0 * (m - 20.0)).max(0.0);
        slo.observe_server(&[ServerLoad {
            at_us: T0 + i * 15_000_000,
            server: "vllm-a".into(),
            queue_depth: Some(waiting),
            kv_cache_use: Some(0.4 + 0.1 * rng.f64()),
        }]);
        slo.evaluate();
        first = first.or_else(|| warning_now(&slo, "queue_depth", m));
    }
    let (at, summary) = first.expect("a queue-depth warning");
    assert!((20.0..23.0).contains(&at), "{at}: {summary}");
    assert!(
        summary.starts_with("model server queue growing: "),
        "{summary}"
    );
    assert_eq!(
        slo.alerts()
            .iter()
            .filter(|a| a.label("signal") == Some("kv_cache_use"))
            .count(),
        0
    );
}

#[test]
fn a_queue_growing_on_one_of_two_model_servers_warns_naming_it() {
    use overtime_slo::ServerLoad;
    let mut slo = Slo::new(SloConfig::default());
    let mut rng = Rng::with_seed(6);
    let mut first = None;
    // Two servers scraped every 15 s, 0–2 waiting each; from minute 20 one
    // of them queues 2 more a minute: half that over both.
    for i in 0..(26 * 4) {
        let m = i as f64 / 4.0;
        for (server, rise) in [("vllm-a", 0.0), ("vllm-b", 2.0)] {
            slo.observe_server(&[ServerLoad {
                at_us: T0 + i * 15_000_000,
                server: server.into(),
                queue_depth: Some((rng.f64() * 3.0).floor() + (rise * (m - 20.0)).max(0.0)),
                kv_cache_use: None,
            }]);
        }
        slo.evaluate();
        first = first.or_else(|| warning_now(&slo, "queue_depth", m));
    }
    let (at, summary) = first.expect("a queue-depth warning");
    assert!((20.0..23.0).contains(&at), "{at}: {summary}");
    assert!(
        summary.starts_with("model server queue growing (vllm-b): "),
        "{summary}"
    );
}

#[test]
fn a_provisional_observation_feeds_only_the_fast_series_and_its_final_one_adds_only_later_calls() {
    use overtime_slo::early::Signal;
    let mut slo = Slo::new(SloConfig::default());
    let mut rng = Rng::with_seed(7);
    let mut o = request(T0, EVERYDAY, &mut rng);
    o.timeout_used = Some(0.5);
    let until = o.calls.iter().map(|c| c.end_us).max();
    let mut p = o.clone();
    p.provisional = true;
    slo.observe_all(vec![p]);
    let n = |slo: &Slo, s: Signal| slo.early_totals().series[s.index()].n;
    let calls = n(&slo, Signal::CallTimeoutUse);
    assert_eq!(n(&slo, Signal::RequestTimeoutUse), 1.0);
    assert!(calls >= 1.0);
    assert_eq!(
        slo.early_totals().chains.iter().sum::<u64>(),
        0,
        "no SLI yet"
    );
    // The final one: counted in the SLIs; in the fast series only the call
    // that ended after the provisional one (work a gateway cut left going).
    let mut late = CallObservation::new(Stage::Tool, SpanStatus::Ok, 2_000.0, T0 + 1);
    late.tool = Some("weather_api".into());
    late.timeout_ms = Some(5_000.0);
    late.end_us = until.unwrap_or(T0) + 1;
    o.calls.push(late);
    o.provisional_calls_until_us = until;
    slo.observe_all(vec![o]);
    assert_eq!(slo.early_totals().chains.iter().sum::<u64>(), 1);
    assert_eq!(n(&slo, Signal::RequestTimeoutUse), 1.0);
    assert_eq!(n(&slo, Signal::CallTimeoutUse), calls + 1.0);
}

/// At minute `m`, the summary of an early warning of `signal` the SLO
/// engine holds, if any.
fn warning_now(slo: &Slo, signal: &str, m: f64) -> Option<(f64, String)> {
    slo.alerts()
        .iter()
        .find(|a| a.label("signal") == Some(signal))
        .map(|a| (m, a.summary().to_string()))
}
