//! Each SLI, SLO alert and breaker against the numbers of the incidents in tests/fixtures/incidents,
//! replayed in data time (no clock: the requests' end times drive it all).

use overtime_model::{Outcome, SpanStatus, Stage};
use overtime_slo::{
    BREAKER_L1, BREAKER_L2, BREAKER_L3, BURN_FAST, BURN_SLOW, BURN_TICKET, CHAIN_HEALTH_LOW,
    CallObservation, RequestObservation, SEMANTIC_SUCCESS_LOW, Slo, SloConfig, TTFT_SLO_BREACH,
};

const T0: i64 = 1_794_960_000_000_000; // 2026-11-18T00:00:00Z, µs
const S: i64 = 1_000_000;
const MODEL: &str = "deepseek-v4-pro";

fn req(t_s: f64, outcome: Outcome) -> RequestObservation {
    let mut o = RequestObservation::new("/v1/agent/chat", outcome, T0 + (t_s * 1e6) as i64);
    o.trace_id = format!("{t_s}");
    o
}

fn call(stage: Stage, status: SpanStatus, ms: f64, end_us: i64) -> CallObservation {
    CallObservation {
        stage,
        model: matches!(stage, Stage::Llm | Stage::Judge).then(|| MODEL.to_string()),
        tool: matches!(stage, Stage::Tool | Stage::Memory).then(|| "weather_api".to_string()),
        status,
        duration_ms: ms,
        ttft_ms: None,
        input_tokens: None,
        budget_left_ms: None,
        ..CallObservation::new(stage, status, ms, end_us)
    }
}

fn firing(slo: &Slo, name: &str) -> bool {
    slo.alerts().iter().any(|a| a.name() == name)
}

fn alert<'a>(slo: &'a Slo, name: &str) -> &'a overtime_slo::Alert {
    slo.alerts()
        .iter()
        .find(|a| a.name() == name)
        .unwrap_or_else(|| panic!("{name} not firing: {:?}", slo.alerts()))
}

/// seed incident 004: "semantic success < 0.75 for 2 min". 10 min healthy (97 %
/// of answers judged ≥ 0.8), then every answer judged 0.3. The 5-min ratio
/// crosses 0.75 after ~68 s of collapse; the page comes 2 min later.
#[test]
fn semantic_success_collapse_pages_after_two_minutes_below_075() {
    let mut slo = Slo::new(SloConfig::default());
    let mut crossed_at = None;
    for i in 0..1200 {
        let t = i as f64;
        let mut o = req(t, Outcome::Ok);
        o.judge_score = Some(if i >= 600 {
            0.3
        } else if i % 100 >= 97 {
            0.5
        } else {
            0.9
        });
        slo.observe(&o);
        slo.evaluate();
        let r = slo.window("5m").unwrap().semantic_success_ratio.unwrap();
        if i < 600 {
            assert!(r >= 0.95, "healthy: SLO-1 met, {r} at {t}");
        }
        if crossed_at.is_none() && r < 0.75 {
            crossed_at = Some(t);
        }
        let fired = firing(&slo, SEMANTIC_SUCCESS_LOW);
        if let Some(c) = crossed_at {
            assert_eq!(fired, t - c >= 120.0, "at {t}, below 0.75 since {c}");
        } else {
            assert!(!fired, "at {t}");
        }
    }
    let c = crossed_at.unwrap();
    assert!((660.0..=675.0).contains(&c), "crossed at {c}");
    let a = alert(&slo, SEMANTIC_SUCCESS_LOW);
    assert_eq!(a.severity(), "page");
    assert!(a.summary().contains("< 0.75"), "{}", a.summary());
    assert_eq!(a.active_since_us, T0 + (c * 1e6) as i64);
}

/// Timeout budget (seed incident 000: threshold 0.5 %). Burn = ratio / 0.005.
#[test]
fn timeout_ratio_burn_rate_and_the_multiwindow_alerts() {
    let mut slo = Slo::new(SloConfig::default());
    // One hour at 1 req/s with 0.2 % timeouts: burn 0.4, nothing fires.
    for i in 0..3600 {
        let out = if i % 500 == 0 {
            Outcome::GatewayTimeout
        } else {
            Outcome::Ok
        };
        slo.observe(&req(i as f64, out));
    }
    slo.evaluate();
    let h = slo.window("1h").unwrap();
    assert_eq!(h.requests, 3600);
    assert!(
        (h.timeout_budget_burn_rate.unwrap() - 0.4).abs() < 0.1,
        "{h:?}"
    );
    assert!(slo.alerts().is_empty(), "{:?}", slo.alerts());
    // Ten minutes at 10 % timeouts: the 5 min burn is 20 but the 1 h one
    // is only ~2: the fast alert needs both.
    for i in 3600..4200 {
        let out = if i % 10 == 0 {
            Outcome::ServiceTimeout
        } else {
            Outcome::Ok
        };
        slo.observe(&req(i as f64, out));
    }
    slo.evaluate();
    let short = slo.window("5m").unwrap();
    assert!(
        (short.timeout_ratio.unwrap() - 0.1).abs() < 0.005,
        "{short:?}"
    );
    assert!((short.timeout_budget_burn_rate.unwrap() - 20.0).abs() < 1.0);
    assert!(slo.window("1h").unwrap().timeout_budget_burn_rate.unwrap() < 14.4);
    assert!(!firing(&slo, BURN_FAST));
    // The outage goes on: 1 h at 10 % → 1 h burn 20 > 14.4 and 5 min burn 20.
    for i in 4200..7800 {
        let out = if i % 10 == 0 {
            Outcome::GatewayTimeout
        } else {
            Outcome::Ok
        };
        slo.observe(&req(i as f64, out));
    }
    slo.evaluate();
    let a = alert(&slo, BURN_FAST);
    assert_eq!(a.severity(), "page");
    assert!(
        a.summary().contains("over 1h") && a.summary().contains("14.4x"),
        "{}",
        a.summary()
    );
    // 6 h (2 h of data, ~10 % over its last 60 min): burn > 6 over 6 h and 30 min.
    assert!(firing(&slo, BURN_SLOW));
    // 3 d and 6 h above 1: the ticket.
    assert_eq!(alert(&slo, BURN_TICKET).severity(), "ticket");
    // Recovery: 30 min clean. The 5 and 30 min burns drop to 0: the pages
    // resolve.
    for i in 7800..9600 {
        slo.observe(&req(i as f64, Outcome::Ok));
    }
    slo.evaluate();
    assert!(!firing(&slo, BURN_FAST) && !firing(&slo, BURN_SLOW));
    assert!(firing(&slo, BURN_TICKET), "3 d and 6 h still burn");
}

/// SLO-3 (seed incident 004): 90 % of LLM calls with TTFT ≤ 800 ms, P99 ≤ 2.5 s;
/// a healthy model has a TTFT median of 320 ms.
#[test]
fn ttft_within_target_and_p99() {
    let feed = |slo: &mut Slo, from: i64, n: i64, ttft: &dyn Fn(i64) -> f64| {
        for i in from..from + n {
            let mut o = req(i as f64, Outcome::Ok);
            let mut c = call(Stage::Llm, SpanStatus::Ok, 1400.0, o.end_us);
            c.ttft_ms = Some(ttft(i));
            o.calls.push(c);
            slo.observe(&o);
        }
        slo.evaluate();
    };
    let mut slo = Slo::new(SloConfig::default());
    // Healthy: 320 ms, one call in 20 at 1.5 s.
    feed(&mut slo, 0, 300, &|i| {
        if i % 20 == 0 { 1500.0 } else { 320.0 }
    });
    let w = slo.window("5m").unwrap();
    assert!((w.ttft_within_target_ratio.unwrap() - 0.95).abs() < 1e-9);
    assert!((w.ttft_p99_seconds.unwrap() - 1.5).abs() < 0.015);
    assert!(!firing(&slo, TTFT_SLO_BREACH));
    // 15 % of calls at 900 ms: 85 % within target → breach.
    let mut slo = Slo::new(SloConfig::default());
    feed(&mut slo, 0, 300, &|i| {
        if i % 20 < 3 { 900.0 } else { 320.0 }
    });
    let a = alert(&slo, TTFT_SLO_BREACH);
    assert!(a.summary().contains("85.0 %"), "{}", a.summary());
    // 2 % of calls at 3 s: 98 % within target but P99 3 s > 2.5 s → breach.
    let mut slo = Slo::new(SloConfig::default());
    feed(&mut slo, 0, 300, &|i| {
        if i % 50 == 0 { 3000.0 } else { 320.0 }
    });
    let w = slo.window("5m").unwrap();
    assert!(w.ttft_within_target_ratio.unwrap() > 0.9);
    let a = alert(&slo, TTFT_SLO_BREACH);
    assert!(
        a.summary().contains("P99 TTFT 3.0") && a.summary().contains("> 2.50 s"),
        "{}",
        a.summary()
    );
}

/// seed incident 004: chain health = 1 − Σ(stage timeout ratio × weight) fell
/// 0.96 → 0.89 three minutes before the outage; the page is below 0.8.
#[test]
fn chain_health_per_minute_with_stage_weights() {
    let mut slo = Slo::new(SloConfig::default());
    // (llm timeouts, tool, memory, network) per 10 calls each, per minute.
    let minutes = [(1, 0, 0, 0), (1, 2, 0, 1), (2, 5, 0, 0), (0, 0, 0, 0)];
    let expected = [0.96, 0.89, 0.77, 1.0];
    for (m, (l, t, me, n)) in minutes.iter().enumerate() {
        for k in 0..10 {
            let t_s = (m * 60 + k * 5 + 1) as f64;
            let mut o = req(t_s, Outcome::Ok);
            let end = o.end_us;
            for (stage, bad) in [
                (Stage::Llm, *l),
                (Stage::Tool, *t),
                (Stage::Memory, *me),
                (Stage::Network, *n),
            ] {
                let st = if k < bad {
                    SpanStatus::Timeout
                } else {
                    SpanStatus::Ok
                };
                o.calls.push(call(stage, st, 100.0, end));
            }
            // A judge call is not weighted.
            o.calls
                .push(call(Stage::Judge, SpanStatus::Timeout, 100.0, end));
            slo.observe(&o);
        }
        // The minute is read once it is complete.
        assert!(
            slo.chain_health()
                .is_none_or(|h| h.minute_start_us < T0 + m as i64 * 60 * S)
        );
        let want = expected[m];
        slo.advance_to(T0 + ((m as i64 + 1) * 60 + 1) * S);
        let h = slo.chain_health().unwrap();
        assert!((h.value - want).abs() < 1e-9, "minute {m}: {h:?}");
        assert_eq!(h.minute_start_us, T0 + m as i64 * 60 * S);
        assert_eq!(firing(&slo, CHAIN_HEALTH_LOW), want < 0.8, "minute {m}");
        if want < 0.8 {
            let s = alert(&slo, CHAIN_HEALTH_LOW).summary().to_string();
            assert!(s.contains("0.77") && s.contains("tool 5 of 10"), "{s}");
        }
    }
    // The minutes stay, for the chart over time, and so does the page.
    let history: Vec<(i64, f64)> = slo
        .chain_health_history()
        .iter()
        .map(|h| {
            (
                (h.minute_start_us - T0) / (60 * S),
                (h.value * 100.0).round() / 100.0,
            )
        })
        .collect();
    assert_eq!(history, vec![(0, 0.96), (1, 0.89), (2, 0.77), (3, 1.0)]);
    let low: Vec<_> = slo
        .alert_history()
        .into_iter()
        .filter(|a| a.name == CHAIN_HEALTH_LOW)
        .collect();
    assert_eq!(low.len(), 1, "{low:?}");
    assert!(
        low[0].start_us >= T0 + 3 * 60 * S && low[0].end_us.is_some(),
        "{low:?}"
    );
}

/// Fallback acceptance (seed incident 004: 23 callers got the cache fallback).
#[test]
fn fallback_acceptance_ratio() {
    let mut slo = Slo::new(SloConfig::default());
    for i in 0..23 {
        let mut o = req(i as f64, Outcome::Ok);
        o.fallback = Some("cache".into());
        o.fallback_accepted = Some(i < 15);
        slo.observe(&o);
    }
    slo.observe(&req(30.0, Outcome::Ok));
    let w = slo.window("5m").unwrap();
    assert_eq!((w.fallbacks, w.fallbacks_accepted), (23, 15));
    assert!((w.fallback_acceptance_ratio.unwrap() - 15.0 / 23.0).abs() < 1e-9);
    assert_eq!(slo.totals().fallbacks.get(&["cache"]), 23);
    assert_eq!(slo.totals().fallbacks_accepted.get(&["cache"]), 15);
}

/// L3 (seed incident 000): global error ratio > 15 % for 1 min. 100 requests a
/// minute: 16 % errors page after a minute; 14 % never does.
#[test]
fn l3_pages_at_16_percent_for_a_minute_not_at_14() {
    for (per_100, should) in [(16, true), (14, false)] {
        let mut slo = Slo::new(SloConfig::default());
        let mut first_fire = None;
        // 5 minutes; requests every 0.6 s, errors spread evenly (Bresenham).
        for i in 0..500i64 {
            let bad = (i * per_100) / 100 != ((i + 1) * per_100) / 100;
            let out = if bad { Outcome::Error } else { Outcome::Ok };
            slo.observe(&req(i as f64 * 0.6, out));
            slo.evaluate();
            if first_fire.is_none() && firing(&slo, BREAKER_L3) {
                first_fire = Some(i as f64 * 0.6);
            }
        }
        let ratio = slo.window("1m").unwrap().error_ratio.unwrap();
        assert!((ratio - per_100 as f64 / 100.0).abs() < 0.02, "{ratio}");
        assert_eq!(first_fire.is_some(), should, "{per_100} %: {first_fire:?}");
        if let Some(t) = first_fire {
            // The 1 min window fills at ~60 s, then the 1 min hold.
            assert!((110.0..=135.0).contains(&t), "fired at {t}");
            let a = alert(&slo, BREAKER_L3);
            assert_eq!(a.label("model"), Some("*"));
            assert!(a.summary().contains("> 15.0 %"), "{}", a.summary());
            let b = slo.snapshot().breakers;
            assert!(b.iter().any(|b| b.level == "L3" && b.open));
        }
    }
}

/// L1 (seed incident 000): three consecutive timeouts on one model.
#[test]
fn l1_three_consecutive_timeouts_on_one_model() {
    let mut slo = Slo::new(SloConfig::default());
    let mut t = 0.0;
    let mut send = |slo: &mut Slo, status: SpanStatus| {
        t += 31.0;
        let mut o = req(
            t,
            if status == SpanStatus::Timeout {
                Outcome::ServiceTimeout
            } else {
                Outcome::Ok
            },
        );
        let end = o.end_us;
        o.calls.push(call(Stage::Llm, status, 30_000.0, end));
        slo.observe(&o);
        slo.evaluate();
    };
    send(&mut slo, SpanStatus::Timeout);
    send(&mut slo, SpanStatus::Timeout);
    assert!(!firing(&slo, BREAKER_L1));
    send(&mut slo, SpanStatus::Ok); // the run ends
    send(&mut slo, SpanStatus::Timeout);
    send(&mut slo, SpanStatus::Timeout);
    assert!(!firing(&slo, BREAKER_L1));
    assert_eq!(slo.models()[0].consecutive_timeouts, 2);
    send(&mut slo, SpanStatus::Timeout);
    let a = alert(&slo, BREAKER_L1);
    assert_eq!(a.label("model"), Some(MODEL));
    assert!(a.summary().contains("3 consecutive"), "{}", a.summary());
    // No calls to the model for 5 minutes: the breaker is no longer news.
    let w = slo.watermark_us();
    slo.advance_to(w + 301 * S);
    assert!(!firing(&slo, BREAKER_L1));
}

/// L2 (seed incident 000): P99 2.1 s → 117 s; a model P99 above 2× its baseline
/// held for 2 minutes. The baseline is the hour before the last 2 min.
#[test]
fn l2_model_p99_over_twice_its_baseline_for_two_minutes() {
    let mut slo = Slo::new(SloConfig::default());
    let mut fired_at = None;
    // An hour of healthy calls every 2 s: P99 2.1 s. Then the outage:
    // every call 117 s (they end 2 s apart), for 20 minutes.
    for i in 0..2400i64 {
        let t_s = i as f64 * 2.0;
        let ms = if i >= 1800 {
            117_000.0
        } else if i % 100 == 0 {
            2100.0
        } else {
            900.0 + (i % 7) as f64 * 100.0
        };
        let mut o = req(t_s, Outcome::Ok);
        let end = o.end_us;
        o.calls.push(call(Stage::Llm, SpanStatus::Ok, ms, end));
        slo.observe(&o);
        slo.evaluate();
        if i == 1799 {
            let m = &slo.models()[0];
            assert!(
                (m.baseline_p99_seconds.unwrap() - 2.1).abs() < 0.03,
                "{m:?}"
            );
            assert!(!m.l2);
        }
        let on = firing(&slo, BREAKER_L2);
        if fired_at.is_none() && on {
            fired_at = Some(t_s);
        }
        // Once firing it stays: the outage never becomes its own baseline.
        assert_eq!(on, fired_at.is_some(), "at {t_s}");
    }
    let outage = 3600.0;
    let fired = fired_at.expect("L2 fires");
    // The 2-min P99 exceeds 4.2 s as soon as ~2 % of its calls are slow,
    // then the condition must hold 2 min.
    assert!(
        (120.0..=140.0).contains(&(fired - outage)),
        "fired {} s into the outage",
        fired - outage
    );
    let m = &slo.models()[0];
    assert!((m.p99_seconds.unwrap() - 117.0).abs() < 1.2, "{m:?}");
    assert!(
        (m.baseline_p99_seconds.unwrap() - 2.1).abs() < 0.03,
        "frozen: {m:?}"
    );
    let a = alert(&slo, BREAKER_L2);
    assert!(a.summary().contains("baseline P99 2.1"), "{}", a.summary());
    // Recovery: 3 minutes of healthy calls, the 2-min P99 is back to normal.
    for i in 2400..2490i64 {
        let mut o = req(i as f64 * 2.0, Outcome::Ok);
        let end = o.end_us;
        o.calls.push(call(Stage::Llm, SpanStatus::Ok, 1000.0, end));
        slo.observe(&o);
        slo.evaluate();
    }
    assert!(!firing(&slo, BREAKER_L2));
}

/// Breakdowns an SRE asks for: which route, which model, which tool.
#[test]
fn breakdowns_by_route_model_and_tool() {
    let mut slo = Slo::new(SloConfig::default());
    for i in 0..100 {
        let mut o = req(
            i as f64,
            if i % 4 == 0 {
                Outcome::GatewayTimeout
            } else {
                Outcome::Ok
            },
        );
        if i % 2 == 0 {
            o.route = "/v1/agent/execute".into();
        }
        let end = o.end_us;
        let st = if i % 4 == 0 {
            SpanStatus::Timeout
        } else {
            SpanStatus::Ok
        };
        o.calls.push(call(Stage::Tool, st, 5100.0, end));
        o.calls.push(call(Stage::Llm, SpanStatus::Ok, 800.0, end));
        slo.observe(&o);
    }
    slo.evaluate();
    let snap = slo.snapshot();
    let exec = snap
        .routes
        .iter()
        .find(|r| r.route == "/v1/agent/execute")
        .unwrap();
    assert_eq!((exec.requests, exec.timed_out), (50, 25));
    let chat = snap
        .routes
        .iter()
        .find(|r| r.route == "/v1/agent/chat")
        .unwrap();
    assert_eq!((chat.requests, chat.timed_out), (50, 0));
    assert_eq!(snap.tools[0].name, "weather_api");
    assert_eq!((snap.tools[0].calls, snap.tools[0].timeouts), (100, 25));
    assert!((snap.tools[0].p99_seconds.unwrap() - 5.1).abs() < 0.06);
    assert_eq!(snap.models[0].breakdown.calls, 100);
    let json = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["windows"][0]["window"], "1m");
    assert_eq!(json["windows"][1]["window"], "5m");
}

/// Memory is bounded by labels, not by traffic.
#[test]
fn label_values_are_bounded() {
    let cfg = SloConfig {
        max_label_values: 5,
        ..Default::default()
    };
    let mut slo = Slo::new(cfg);
    for i in 0..1000 {
        let mut o = req(i as f64 * 0.1, Outcome::Ok);
        o.route = format!("/user/{i}");
        slo.observe(&o);
    }
    let routes: std::collections::BTreeSet<&str> = slo
        .totals()
        .requests
        .series
        .keys()
        .map(|k| k[0].as_str())
        .collect();
    assert_eq!(routes.len(), 6, "{routes:?}");
    assert!(routes.contains("other"));
    assert_eq!(slo.totals().requests.total(), 1000);
    assert_eq!(slo.snapshot().routes.len(), 6);
    assert_eq!(slo.labels_overflowed()[0], ("route", 995));
}

/// `window_scale` runs an hour in 36 s of data time, with the same result.
#[test]
fn scaled_windows_give_the_same_answer() {
    let run = |scale: f64| {
        let mut slo = Slo::new(SloConfig {
            window_scale: scale,
            ..Default::default()
        });
        for i in 0..2000i64 {
            let out = if i % 5 == 0 {
                Outcome::Error
            } else {
                Outcome::Ok
            };
            slo.observe(&req(i as f64 * 0.6 * scale, out));
            slo.evaluate();
        }
        (
            slo.window("1m").unwrap().error_ratio,
            firing(&slo, BREAKER_L3),
        )
    };
    let (a, fa) = run(1.0);
    let (b, fb) = run(0.01);
    assert_eq!(fa, fb);
    assert!((a.unwrap() - b.unwrap()).abs() < 0.02, "{a:?} {b:?}");
}

/// A request older than a window's memory still counts in the totals.
#[test]
fn late_requests_count_in_totals_only() {
    let mut slo = Slo::new(SloConfig::default());
    slo.observe(&req(4000.0, Outcome::Ok));
    slo.observe(&req(0.0, Outcome::Error)); // > 1 h late
    assert_eq!(slo.totals().requests.total(), 2);
    assert_eq!(slo.window("5m").unwrap().requests, 1);
    assert_eq!(slo.snapshot().late, 1);
}
