//! The early-warning conditions: one named rule per signal, listed once
//! in [`RULES`], each its condition and its words; the thresholds are the
//! settings of `[slo.early_warning]`.

use super::*;

/// A signal's rule: the view and the short window's counts in, the alert's
/// value and words out when it holds.
type Rule = fn(&EarlyWarningView, &Tally, &SloConfig) -> Option<Found>;

/// The early-warning rules, in the order their alerts are listed.
const RULES: [Rule; 4] = [
    chain_health_falling,
    near_timeout_rising,
    llm_wait_rising,
    semantic_success_falling,
];

impl Early {
    /// The early-warning conditions that hold at `now_us`.
    pub fn conditions(&self, now_us: i64, cfg: &SloConfig) -> Vec<Condition> {
        let e = &cfg.early_warning;
        if !e.enabled {
            return Vec::new();
        }
        let v = self.view(now_us, cfg);
        let (s, _) = self.windows(now_us);
        let hold_us = cfg.scaled_us(e.for_s);
        let fast: Vec<Condition> = v
            .fast
            .iter()
            .filter_map(|d| super::fast::condition(d, cfg))
            .collect();
        RULES
            .iter()
            .filter_map(|rule| rule(&v, &s, cfg))
            .map(|f| Condition {
                name: f.name,
                severity: "warning",
                labels: vec![("signal", f.signal.to_string())],
                value: f.value,
                summary: f.summary,
                description: f.description,
                hold_us,
            })
            .chain(fast)
            .collect()
    }
}

/// What a rule found: the alert's name, its `signal` label, its value and
/// words.
struct Found {
    name: &'static str,
    signal: &'static str,
    value: f64,
    summary: String,
    description: String,
}

impl Found {
    fn new(
        name: &'static str,
        signal: &'static str,
        value: f64,
        summary: String,
        description: String,
    ) -> Found {
        Found {
            name,
            signal,
            value,
            summary,
            description,
        }
    }
}

/// A signal has a short window and a baseline big enough to compare: a
/// baseline of a few requests is no normal.
fn enough(sv: &SignalView, min: u64) -> bool {
    sv.count >= min && sv.baseline_count >= BASELINE_MULTIPLE * min
}

/// The change is significant (its z-score at least `min_z`).
fn significant(sv: &SignalView, cfg: &SloConfig) -> bool {
    sv.z.is_some_and(|z| z >= cfg.early_warning.min_z)
}

/// `chain_health_falling`: the share of requests whose whole chain
/// completed healthily dropped well below its baseline.
fn chain_health_falling(v: &EarlyWarningView, s: &Tally, cfg: &SloConfig) -> Option<Found> {
    let e = &cfg.early_warning;
    let (w, bw) = (&v.window, &v.baseline_window);
    let c = &v.chain_healthy;
    if let (Some(now), Some(base)) = (c.value, c.baseline)
        && enough(c, e.min_requests)
        && significant(c, cfg)
        && now < e.chain_healthy_below
        && base - now >= e.chain_healthy_drop
    {
        let slope = match v.chain_healthy_slope_per_min {
            Some(s) => format!("{:+.1} points/min over the last 10m", s * 100.0),
            None => "no slope yet".into(),
        };
        return Some(Found::new(
            CHAIN_HEALTH_FALLING,
            "chain_health",
            base - now,
            format!(
                "chain health falling: {} of requests completed healthily over the last {w} ({} of {}), down {:.1} points from {} over the {bw} before (z = {:.1}), {slope}; not healthy: {} failed, {} with a failed or timed-out call, {} retried, {} fell back",
                pct(now),
                s.healthy,
                s.requests,
                (base - now) * 100.0,
                pct(base),
                c.z.unwrap_or(0.0),
                s.failed,
                s.with_failed_call,
                s.retried,
                s.fell_back
            ),
            format!(
                "share of requests whose chain completed healthily {} or more below its baseline and below {}, for {}",
                pct(e.chain_healthy_drop),
                pct(e.chain_healthy_below),
                window_name(e.for_s)
            ),
        ));
    }
    None
}

/// `near_timeout_rising`: more calls than usual used most of their timeout.
fn near_timeout_rising(v: &EarlyWarningView, s: &Tally, cfg: &SloConfig) -> Option<Found> {
    let e = &cfg.early_warning;
    let (w, bw) = (&v.window, &v.baseline_window);
    let n = &v.near_timeout;
    if let (Some(now), Some(base)) = (n.value, n.baseline)
        && enough(n, e.min_calls)
        && significant(n, cfg)
        && now >= e.near_timeout_above
        && now - base >= e.near_timeout_rise
    {
        let mut by: Vec<(u64, &str)> = TIMED_STAGES
            .iter()
            .enumerate()
            .filter(|(i, _)| s.near[*i] > 0)
            .map(|(i, st)| (s.near[i], *st))
            .collect();
        by.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let by: Vec<String> = by.iter().map(|(k, st)| format!("{st} {k}")).collect();
        return Some(Found::new(
            NEAR_TIMEOUT_RISING,
            "near_timeout",
            now - base,
            format!(
                "calls near their timeout rising: {} of calls with a known timeout used {} of it or more over the last {w} ({} of {}), up {:.1} points from {} over the {bw} before (z = {:.1}); by stage: {}",
                pct(now),
                pct(e.near_timeout_share),
                s.near_total(),
                s.timed_total(),
                (now - base) * 100.0,
                pct(base),
                n.z.unwrap_or(0.0),
                by.join(", ")
            ),
            format!(
                "share of calls using {} or more of their timeout at least {} and {} above its baseline, for {}",
                pct(e.near_timeout_share),
                pct(e.near_timeout_above),
                pct(e.near_timeout_rise),
                window_name(e.for_s)
            ),
        ));
    }
    None
}

/// `llm_wait_rising`: queue + prefill took a growing share of LLM time.
fn llm_wait_rising(v: &EarlyWarningView, s: &Tally, cfg: &SloConfig) -> Option<Found> {
    let e = &cfg.early_warning;
    let (w, bw) = (&v.window, &v.baseline_window);
    let l = &v.llm_wait_share;
    if let (Some(now), Some(base)) = (l.value, l.baseline)
        && enough(l, e.min_calls)
        && significant(l, cfg)
        && now >= e.llm_wait_above
        && now - base >= e.llm_wait_rise
    {
        let secs = |ms: f64| format!("{:.0} s", ms / 1000.0);
        return Some(Found::new(
            LLM_WAIT_RISING,
            "llm_queue_prefill",
            now - base,
            format!(
                "LLM queue and prefill share rising: {} of LLM time over the last {w} (queue {}, prefill {}, first token {} of {} in {} calls), up {:.1} points from {} over the {bw} before (z = {:.1})",
                pct(now),
                secs(s.queue_ms),
                secs(s.prefill_ms),
                secs(s.first_token_ms),
                secs(s.llm_ms),
                s.llm_calls,
                (now - base) * 100.0,
                pct(base),
                l.z.unwrap_or(0.0)
            ),
            format!(
                "queue + prefill share of LLM time at least {} and {} above its baseline, for {}",
                pct(e.llm_wait_above),
                pct(e.llm_wait_rise),
                window_name(e.for_s)
            ),
        ));
    }
    None
}

/// `semantic_success_falling`: fewer answers were real successes (200s
/// that were fallbacks, lost a call or were judged low count against it).
fn semantic_success_falling(v: &EarlyWarningView, s: &Tally, cfg: &SloConfig) -> Option<Found> {
    let e = &cfg.early_warning;
    let (w, bw) = (&v.window, &v.baseline_window);
    let m = &v.semantic_success;
    if let (Some(now), Some(base)) = (m.value, m.baseline)
        && enough(m, e.min_requests)
        && significant(m, cfg)
        && now < e.semantic_success_below
        && base - now >= e.semantic_success_drop
    {
        return Some(Found::new(
            SEMANTIC_SUCCESS_FALLING,
            "semantic_success",
            base - now,
            format!(
                "semantic success falling: {} of answers were real successes over the last {w} ({} of {}), down {:.1} points from {} over the {bw} before (z = {:.1}); not real: {} failed, {} fell back, {} lost a call, {} judged below {}",
                pct(now),
                s.real,
                s.requests,
                (base - now) * 100.0,
                pct(base),
                m.z.unwrap_or(0.0),
                s.failed,
                s.fell_back,
                s.lost_call,
                s.judged_low,
                cfg.semantic_success_score
            ),
            format!(
                "real successes / answers {} or more below its baseline and below {}, for {}",
                pct(e.semantic_success_drop),
                pct(e.semantic_success_below),
                window_name(e.for_s)
            ),
        ));
    }
    None
}
