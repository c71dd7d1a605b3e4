//! The families computed by the SLO engine: request, call and verdict
//! totals, and the live gauges of the windows, chain health and models,
//! encoded at each scrape from the engine's state.

use super::encode::{Result, count, counter, counter_vec, gauge, histogram_vec, set};
use overtime_slo::{CounterVec, HistogramVec, Slo, SloSnapshot};
use prometheus_client::encoding::DescriptorEncoder;

/// The request, call and verdict totals.
pub(super) fn requests(e: &mut DescriptorEncoder, slo: &Slo) -> Result {
    let t = slo.totals();
    let counters: [(&str, &str, &CounterVec); 12] = [
        (
            "overtime_requests_total",
            "completed requests by route and outcome (ok, gateway_timeout, service_timeout, error)",
            &t.requests,
        ),
        (
            "overtime_requests_timed_out_total",
            "requests with outcome gateway_timeout or service_timeout",
            &t.requests_timed_out,
        ),
        (
            "overtime_gateway_responses_total",
            "gateway records by layer and HTTP status",
            &t.gateway_responses,
        ),
        (
            "overtime_judged_requests_total",
            "requests with a judge score",
            &t.judged,
        ),
        (
            "overtime_semantic_success_total",
            "judged requests with a score at or above slo.semantic_success_score",
            &t.semantic_success,
        ),
        (
            "overtime_stage_calls_total",
            "calls by stage, each attempt counted",
            &t.stage_calls,
        ),
        (
            "overtime_stage_timeouts_total",
            "calls of that stage that ended in timeout",
            &t.stage_timeouts,
        ),
        (
            "overtime_fallbacks_total",
            "requests that fell back, by the fallback used",
            &t.fallbacks,
        ),
        (
            "overtime_fallbacks_accepted_total",
            "of those, the fallback answer was accepted",
            &t.fallbacks_accepted,
        ),
        (
            "overtime_llm_calls_total",
            "LLM calls (stages llm and judge) by model and span status",
            &t.llm_calls,
        ),
        (
            "overtime_tool_calls_total",
            "tool, memory and network calls by target and status",
            &t.tool_calls,
        ),
        (
            "overtime_root_causes_total",
            "failing verdicts by root cause (first verdict of a trace)",
            &t.root_causes,
        ),
    ];
    for (name, help, cv) in counters {
        counter_vec(e, name, help, cv)?;
    }
    let mut m = counter(
        e,
        "overtime_verdict_revisions_total",
        "verdicts revised by late spans",
    )?;
    count(&mut m, &[], t.verdict_revisions)?;
    let hists: [(&str, &str, &HistogramVec); 4] = [
        (
            "overtime_ttft_seconds",
            "time to first token of LLM calls",
            &t.ttft,
        ),
        (
            "overtime_llm_call_duration_seconds",
            "LLM call latency by model and input-token bucket",
            &t.llm_duration,
        ),
        (
            "overtime_tool_call_duration_seconds",
            "tool call latency",
            &t.tool_duration,
        ),
        (
            "overtime_budget_left_seconds",
            "budget left when a call started",
            &t.budget_left,
        ),
    ];
    for (name, help, hv) in hists {
        histogram_vec(e, name, help, hv)?;
    }
    Ok(())
}

/// The live SLO gauges (windows, chain health, models, breakers).
pub(super) fn slo_gauges(e: &mut DescriptorEncoder, slo: &Slo, snap: &SloSnapshot) -> Result {
    let l3 = overtime_slo::window_name(slo.config().breaker_error_window_s);
    type Pick = fn(&overtime_slo::WindowStats) -> Option<f64>;
    let per_window: [(&str, &str, Pick); 7] = [
        (
            "overtime_semantic_success_ratio",
            "judged requests with score >= 0.8 / judged requests",
            |w| w.semantic_success_ratio,
        ),
        ("overtime_timeout_ratio", "timed-out / all requests", |w| {
            w.timeout_ratio
        }),
        (
            "overtime_timeout_budget_burn_rate",
            "timeout ratio / (1 - slo.timeout_objective)",
            |w| w.timeout_budget_burn_rate,
        ),
        (
            "overtime_ttft_within_target_ratio",
            "LLM calls with TTFT <= 800 ms / LLM calls with a TTFT",
            |w| w.ttft_within_target_ratio,
        ),
        ("overtime_ttft_p99_seconds", "P99 TTFT", |w| {
            w.ttft_p99_seconds
        }),
        (
            "overtime_fallback_acceptance_ratio",
            "accepted / fallen back",
            |w| w.fallback_acceptance_ratio,
        ),
        (
            "overtime_error_ratio",
            "non-ok / all requests (L3 uses its own window, 1m by default)",
            |w| w.error_ratio,
        ),
    ];
    for (name, help, pick) in per_window {
        let mut m = gauge(e, name, help)?;
        for w in &snap.windows {
            let named = overtime_slo::WINDOWS.iter().any(|(n, _)| *n == w.window);
            let l3_error = name == "overtime_error_ratio" && w.window == l3;
            if !(named || l3_error) {
                continue;
            }
            if let Some(v) = pick(w) {
                set(&mut m, &[("window", &w.window)], v)?;
            }
        }
    }
    for name in ["overtime_chain_health", "overtime_health_score"] {
        let mut m = gauge(
            e,
            name,
            "last complete minute: 1 - sum(stage timeout ratio x weight)",
        )?;
        if let Some(h) = &snap.chain_health {
            set(&mut m, &[], h.value)?;
        }
    }
    let mut g = gauge(
        e,
        "overtime_model_consecutive_timeouts",
        "current run of timed-out calls (L1 at 3)",
    )?;
    for m in &snap.models {
        set(
            &mut g,
            &[("model", &m.model)],
            m.consecutive_timeouts as u64,
        )?;
    }
    let mut g = gauge(
        e,
        "overtime_model_p99_seconds",
        "P99 LLM latency over the L2 window (2 min)",
    )?;
    for m in &snap.models {
        if let Some(p) = m.p99_seconds {
            set(&mut g, &[("model", &m.model)], p)?;
        }
    }
    let mut g = gauge(
        e,
        "overtime_model_baseline_p99_seconds",
        "the model's baseline P99 (frozen while L2 holds)",
    )?;
    for m in &snap.models {
        if let Some(b) = m.baseline_p99_seconds {
            set(&mut g, &[("model", &m.model)], b)?;
        }
    }
    let mut g = gauge(
        e,
        "overtime_model_breaker",
        "1 while breaker L1/L2/L3 holds (L3 is global: model=\"*\")",
    )?;
    for b in &snap.breakers {
        set(
            &mut g,
            &[("model", &b.model), ("level", b.level)],
            b.open as u64,
        )?;
    }
    Ok(())
}

/// The early-warning counters and live signals (docs/advice.md).
pub(super) fn early_warning(e: &mut DescriptorEncoder, slo: &Slo, snap: &SloSnapshot) -> Result {
    use overtime_slo::early::{Answer, Chain, LLM_PHASES, TIMED_STAGES};
    let t = slo.early_totals();
    let mut m = counter(
        e,
        "overtime_chains_total",
        "requests by what became of their chain of calls: healthy, degraded (answered ok after a failed, timed-out or retried call, or a fallback), failed (not answered ok)",
    )?;
    for (c, n) in Chain::ALL.iter().zip(t.chains) {
        count(&mut m, &[("result", c.as_str())], n)?;
    }
    let mut m = counter(
        e,
        "overtime_answers_total",
        "answers by result: success (a real one), masked (answered ok but fell back, lost a call or was judged below slo.semantic_success_score), failed",
    )?;
    for (a, n) in Answer::ALL.iter().zip(t.answers) {
        count(&mut m, &[("result", a.as_str())], n)?;
    }
    for (name, help, v) in [
        (
            "overtime_timed_calls_total",
            "calls with a known timeout (configured or observed), and requests with a known gateway read timeout or budget (stage=\"request\")",
            &t.timed,
        ),
        (
            "overtime_near_timeout_calls_total",
            "of those, the ones that used slo.early_warning.near_timeout_share (80 %) of their timeout or more",
            &t.near,
        ),
    ] {
        let mut m = counter(e, name, help)?;
        for (st, n) in TIMED_STAGES.iter().zip(v) {
            count(&mut m, &[("stage", st)], *n)?;
        }
    }
    let mut m = counter(
        e,
        "overtime_llm_time_seconds_total",
        "time of LLM calls whose wait is known, by phase: queue, prefill, first_token (the TTFT when phases are unknown), rest",
    )?;
    for (p, v) in LLM_PHASES.iter().zip(t.llm_seconds) {
        count(&mut m, &[("phase", p)], v)?;
    }
    let mut m = counter(
        e,
        "overtime_llm_wait_calls_total",
        "LLM calls whose wait (queue + prefill, or first token) is known",
    )?;
    count(&mut m, &[], t.llm_calls)?;
    for (name, help, v) in [
        (
            "overtime_llm_wait_seconds_squared_total",
            "sum over those calls of their wait squared (s^2), for the z-test of the wait share",
            t.llm_wait_squared,
        ),
        (
            "overtime_llm_wait_by_time_seconds_squared_total",
            "sum over those calls of wait × duration (s^2), for the z-test of the wait share",
            t.llm_wait_by_time,
        ),
        (
            "overtime_llm_time_seconds_squared_total",
            "sum over those calls of their duration squared (s^2), for the z-test of the wait share",
            t.llm_time_squared,
        ),
    ] {
        count(&mut counter(e, name, help)?, &[], v)?;
    }
    let ew = &snap.early_warning;
    let gauges: [(&str, &str, &overtime_slo::SignalView); 4] = [
        (
            "overtime_chain_healthy_ratio",
            "share of requests whose chain completed healthily",
            &ew.chain_healthy,
        ),
        (
            "overtime_near_timeout_ratio",
            "share of timed calls and requests that used 80 % of their timeout or more",
            &ew.near_timeout,
        ),
        (
            "overtime_llm_wait_share",
            "queue + prefill (or first-token) share of LLM time",
            &ew.llm_wait_share,
        ),
        (
            "overtime_answer_success_ratio",
            "semantic success: real successes / answers",
            &ew.semantic_success,
        ),
    ];
    for (name, help, v) in gauges {
        let mut m = gauge(e, name, help)?;
        if let Some(x) = v.value {
            set(&mut m, &[("window", &ew.window)], x)?;
        }
        if let Some(x) = v.baseline {
            set(&mut m, &[("window", "baseline")], x)?;
        }
    }
    let mut m = gauge(
        e,
        "overtime_chain_healthy_slope",
        "slope of the per-minute healthy-chain share over the last 10 minutes, per minute",
    )?;
    if let Some(x) = ew.chain_healthy_slope_per_min {
        set(&mut m, &[], x)?;
    }
    let mut m = gauge(
        e,
        "overtime_early_warning_z",
        "how many standard errors each signal moved the wrong way from its baseline (z-test)",
    )?;
    for (signal, v) in [
        ("chain_health", &ew.chain_healthy),
        ("near_timeout", &ew.near_timeout),
        ("llm_queue_prefill", &ew.llm_wait_share),
        ("semantic_success", &ew.semantic_success),
    ] {
        if let Some(z) = v.z {
            set(&mut m, &[("signal", signal)], z)?;
        }
    }
    fast_signals(e, t, ew)
}

/// The fast early warning's series (count, Σ, Σ² per signal, and per
/// signal and key: the Prometheus rules' CUSUM reads them) and the
/// collector's own statistic.
fn fast_signals(
    e: &mut DescriptorEncoder,
    t: &overtime_slo::EarlyTotals,
    ew: &overtime_slo::EarlyWarningView,
) -> Result {
    use overtime_slo::Signal;
    for (name, help, pick) in [
        (
            "overtime_early_signal_items_total",
            "items (requests, calls, model-server samples) behind each fast early-warning signal",
            (|m: &overtime_slo::Moments| m.n) as fn(&overtime_slo::Moments) -> f64,
        ),
        (
            "overtime_early_signal_sum_total",
            "sum of each fast signal's values (timeout use 0-1, ln seconds, shares, waiting requests; llm_in_flight: call seconds / 30, so its 30 s increase is the calls in flight)",
            |m| m.sum,
        ),
        (
            "overtime_early_signal_squares_total",
            "sum of each fast signal's values squared",
            |m| m.sq,
        ),
    ] {
        let mut m = counter(e, name, help)?;
        for s in Signal::ALL {
            count(
                &mut m,
                &[("signal", s.as_str())],
                pick(&t.series[s.index()]),
            )?;
        }
    }
    // Per key in families of their own, so that a sum by signal over the
    // families above never counts an item twice (a request feeds its
    // route's and its flow's series).
    for (name, help, pick) in [
        (
            "overtime_early_signal_keyed_items_total",
            "items behind each fast signal per key (route, flow, call target, model, model server; the first 64 keys of each signal)",
            (|m: &overtime_slo::Moments| m.n) as fn(&overtime_slo::Moments) -> f64,
        ),
        (
            "overtime_early_signal_keyed_sum_total",
            "sum of each fast signal's values per key (as overtime_early_signal_sum_total)",
            |m| m.sum,
        ),
        (
            "overtime_early_signal_keyed_squares_total",
            "sum of each fast signal's values squared per key",
            |m| m.sq,
        ),
    ] {
        let mut m = counter(e, name, help)?;
        for ((s, key), v) in &t.keyed.totals {
            count(
                &mut m,
                &[("signal", s.as_str()), ("key", key.as_str())],
                pick(v),
            )?;
        }
    }
    let mut m = gauge(
        e,
        "overtime_early_warning_cusum",
        "each armed fast signal's one-sided CUSUM on 30 s buckets (fires at slo.early_warning.cusum_threshold)",
    )?;
    for d in &ew.fast {
        set(&mut m, &[("signal", d.signal.as_str())], d.stat)?;
    }
    Ok(())
}
