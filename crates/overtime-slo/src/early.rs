//! Early warning (docs/advice.md): the signals that turned red minutes before the
//! seeds' outages while every infrastructure panel stayed green, and the
//! alerts on them.
//!
//! Every completed request is classified once ([`classify`]):
//! - its **chain**: `healthy` (answered ok; no call failed, timed out or
//!   was retried; no fallback), `degraded` (answered ok, but not so) or
//!   `failed` (not answered ok);
//! - its **answer**: `success` (a real one), `masked` (answered ok but not
//!   a real success: a fallback, a call whose last attempt failed, a judge
//!   score below `slo.semantic_success_score`) or `failed` — the 200s and
//!   503s a status-code dashboard counts as fine or as plain errors;
//! - each call with a known timeout (configured, else observed: the time at
//!   which calls of the same target were cut), and the request itself
//!   against its gateway's read timeout or its budget: did it use
//!   `near_timeout_share` (80 %) of that timeout or more?
//! - each LLM call's wait: queue + prefill (`X-LLM-Reason` or phase
//!   spans), else its time to first token.
//!
//! Counts go to 30 s buckets of data time; each signal compares its short
//! window with the baseline right before it. An alert needs a large change
//! (the thresholds of `[slo.early_warning]`) that is also significant: a
//! two-sample z-test (proportions; for the LLM wait, a ratio of sums whose
//! variance comes from the delta method, so a call counts for its length
//! as it does in the share), so noise on a quiet platform does not page.

use crate::SloConfig;
use crate::alerts::{Condition, pct};
use crate::ring::Ring;
use crate::windows::window_name;
use significance::{RatioSums, z_prop, z_ratio};

mod classify;
mod conditions;
pub mod cusum;
mod fast;
pub mod series;
mod significance;
use crate::alerts::secs;
pub use classify::{Answer, Chain};
pub(crate) use classify::{ObservedTimeouts, Signals, classify};
pub use cusum::Detection;
use overtime_model::RequestObservation;
use serde::Serialize;
pub use series::{Moments, ServerLoad, Signal};
use std::collections::BTreeMap;

pub use crate::alert_names::{
    CHAIN_HEALTH_FALLING, LLM_WAIT_RISING, NEAR_TIMEOUT_RISING, SEMANTIC_SUCCESS_FALLING,
};

/// Width of a bucket (nominal seconds).
const BUCKET_S: f64 = 30.0;
/// Minutes the chain-health slope is fitted over.
pub const SLOPE_MINUTES: f64 = 10.0;
/// The baseline needs this many times the short window's minimum count.
pub const BASELINE_MULTIPLE: u64 = 5;
/// Targets whose observed timeouts are remembered.
const MAX_LEARNED: usize = 500;
/// Timed-out durations remembered per target.
const LEARNED_SAMPLES: usize = 5;

/// The `stage` labels of the near-timeout counters: the request itself,
/// then the call stages.
pub const TIMED_STAGES: [&str; 7] = [
    "request", "llm", "judge", "tool", "memory", "network", "queue",
];

/// Counts of one bucket (or summed over a window).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub requests: u64,
    pub healthy: u64,
    pub failed: u64,
    pub with_failed_call: u64,
    pub retried: u64,
    pub fell_back: u64,
    pub real: u64,
    pub lost_call: u64,
    pub judged_low: u64,
    pub timed: [u64; 7],
    pub near: [u64; 7],
    pub llm_calls: u64,
    pub llm_ms: f64,
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub first_token_ms: f64,
    /// Σ wait², Σ wait × duration, Σ duration² (ms²): the variance of the
    /// wait share of LLM time (a ratio of sums), see [`z_ratio`].
    pub wait_sq: f64,
    pub wait_time: f64,
    pub time_sq: f64,
    /// The fast detector's series ([`cusum`]).
    pub series: series::Series,
    /// The same per route, call target, model and model server.
    pub keyed: series::Keyed,
}

impl Tally {
    fn add(&mut self, s: &Signals) {
        self.requests += 1;
        self.healthy += (s.chain == Chain::Healthy) as u64;
        self.failed += (s.chain == Chain::Failed) as u64;
        self.real += (s.answer == Answer::Success) as u64;
        let ok = s.chain != Chain::Failed;
        self.with_failed_call += (ok && s.failed_call) as u64;
        self.retried += (ok && s.retried) as u64;
        self.fell_back += (ok && s.fell_back) as u64;
        self.lost_call += (ok && s.lost_call) as u64;
        self.judged_low += (ok && s.judged_low) as u64;
        for (i, near) in &s.timed {
            self.timed[*i] += 1;
            self.near[*i] += *near as u64;
        }
        for w in &s.llm {
            self.llm_calls += 1;
            self.llm_ms += w.total_ms;
            self.queue_ms += w.queue_ms;
            self.prefill_ms += w.prefill_ms;
            self.first_token_ms += w.first_token_ms;
            let (wait, t) = (w.wait_ms().min(w.total_ms), w.total_ms);
            self.wait_sq += wait * wait;
            self.wait_time += wait * t;
            self.time_sq += t * t;
        }
    }

    fn merge(&mut self, o: &Tally) {
        self.requests += o.requests;
        self.healthy += o.healthy;
        self.failed += o.failed;
        self.with_failed_call += o.with_failed_call;
        self.retried += o.retried;
        self.fell_back += o.fell_back;
        self.real += o.real;
        self.lost_call += o.lost_call;
        self.judged_low += o.judged_low;
        for i in 0..7 {
            self.timed[i] += o.timed[i];
            self.near[i] += o.near[i];
        }
        self.llm_calls += o.llm_calls;
        self.llm_ms += o.llm_ms;
        self.queue_ms += o.queue_ms;
        self.prefill_ms += o.prefill_ms;
        self.first_token_ms += o.first_token_ms;
        self.wait_sq += o.wait_sq;
        self.wait_time += o.wait_time;
        self.time_sq += o.time_sq;
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            a.merge(b);
        }
    }

    fn timed_total(&self) -> u64 {
        self.timed.iter().sum()
    }

    fn near_total(&self) -> u64 {
        self.near.iter().sum()
    }

    fn wait_ms(&self) -> f64 {
        self.queue_ms + self.prefill_ms + self.first_token_ms
    }
}

/// The cumulative counters the Prometheus rules recompute the signals from.
/// Cumulative counts behind the early-warning signals, for `/metrics` (the shipped Prometheus rules recompute the signals from them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EarlyTotals {
    /// By [`Chain`], in `Chain::ALL` order.
    pub chains: [u64; 3],
    /// By [`Answer`], in `Answer::ALL` order.
    pub answers: [u64; 3],
    /// By [`TIMED_STAGES`].
    pub timed: [u64; 7],
    /// By [`TIMED_STAGES`]: calls that used at least the near-timeout share of their timeout.
    pub near: [u64; 7],
    /// LLM time in seconds: queue, prefill, first token (phases unknown),
    /// the rest.
    pub llm_seconds: [f64; 4],
    /// LLM calls counted in `llm_seconds`.
    pub llm_calls: u64,
    /// Σ wait², Σ wait × duration and Σ duration² over those calls (s²):
    /// what the shipped rules need for the wait share's z-test.
    pub llm_wait_squared: f64,
    /// Σ wait × duration, s².
    pub llm_wait_by_time: f64,
    /// Σ duration², s².
    pub llm_time_squared: f64,
    /// Per fast signal ([`Signal::ALL`] order): count, Σ value, Σ value²
    /// (the Prometheus rules' CUSUM reads them).
    pub series: series::Series,
    /// The same per (signal, key), for the first
    /// [`series::MAX_TOTAL_KEYS`] keys of each signal: the rules' per-key
    /// CUSUM, as the collector's ([`cusum`]). The buckets' keyed series
    /// are the detector's; these only feed `/metrics`.
    pub keyed: series::KeyedTotals,
}

/// The `phase` labels of [`EarlyTotals::llm_seconds`].
pub const LLM_PHASES: [&str; 4] = ["queue", "prefill", "first_token", "rest"];

impl EarlyTotals {
    fn add(&mut self, s: &Signals) {
        self.chains[Chain::ALL.iter().position(|c| *c == s.chain).unwrap_or(2)] += 1;
        self.answers[Answer::ALL.iter().position(|a| *a == s.answer).unwrap_or(2)] += 1;
        for (i, near) in &s.timed {
            self.timed[*i] += 1;
            self.near[*i] += *near as u64;
        }
        for w in &s.llm {
            self.llm_seconds[0] += w.queue_ms / 1000.0;
            self.llm_seconds[1] += w.prefill_ms / 1000.0;
            self.llm_seconds[2] += w.first_token_ms / 1000.0;
            self.llm_seconds[3] += (w.total_ms - w.wait_ms()).max(0.0) / 1000.0;
            self.llm_calls += 1;
            let (wait, t) = (w.wait_ms().min(w.total_ms) / 1000.0, w.total_ms / 1000.0);
            self.llm_wait_squared += wait * wait;
            self.llm_wait_by_time += wait * t;
            self.llm_time_squared += t * t;
        }
    }
}

/// One signal over the short window and its baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalView {
    /// The value over the short window (`None`: nothing to measure).
    pub value: Option<f64>,
    /// The value over the baseline window (`None`: nothing to measure).
    pub baseline: Option<f64>,
    /// Requests or calls behind `value`.
    pub count: u64,
    /// Requests or calls behind `baseline`.
    pub baseline_count: u64,
    /// Standard errors between the two, signed so that positive is worse.
    pub z: Option<f64>,
}

/// The early-warning view at the watermark (`GET /api/slo`, `/metrics`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EarlyWarningView {
    /// `5m`: the short window's name; the baseline is the window before it.
    pub window: String,
    /// The baseline window's name: the window before `window`.
    pub baseline_window: String,
    /// Share of requests whose chain completed healthily.
    pub chain_healthy: SignalView,
    /// Least-squares slope of the per-minute healthy share over the last
    /// 10 minutes, per minute (nominal).
    pub chain_healthy_slope_per_min: Option<f64>,
    /// Share of timed calls (and requests) that used most of their timeout.
    pub near_timeout: SignalView,
    /// Queue + prefill (or first-token) share of LLM time.
    pub llm_wait_share: SignalView,
    /// Real successes / answers.
    pub semantic_success: SignalView,
    /// The fast detectors of the armed signals ([`cusum`]).
    pub fast: Vec<Detection>,
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// The early-warning state: buckets, learned timeouts, totals.
#[derive(Debug, Clone)]
pub(crate) struct Early {
    /// Each warning's condition as last seen holding, and when: a warning
    /// keeps firing until its condition has been false for `for_s`, so a
    /// signal hovering at its threshold does not page again and again.
    kept: BTreeMap<(&'static str, String), (i64, Condition)>,
    ring: Ring<Tally>,
    learned: ObservedTimeouts,
    totals: EarlyTotals,
    short: usize,
    baseline: usize,
    per_minute: usize,
}

impl Early {
    pub fn new(cfg: &SloConfig) -> Self {
        let e = &cfg.early_warning;
        let width = cfg.scaled_us(BUCKET_S);
        let short = ((e.short_window_s / BUCKET_S).round() as usize).max(1);
        let baseline = ((e.baseline_window_s / BUCKET_S).round() as usize).max(1);
        let slope = (SLOPE_MINUTES * 60.0 / BUCKET_S).round() as usize;
        Early {
            kept: BTreeMap::new(),
            ring: Ring::new(
                width,
                (short + baseline)
                    .max(slope)
                    .max(baseline + cusum::CUSUM_BUCKETS)
                    + 1,
            ),
            learned: ObservedTimeouts::default(),
            totals: EarlyTotals::default(),
            short,
            baseline,
            per_minute: (60.0 / BUCKET_S).round() as usize,
        }
    }

    pub fn totals(&self) -> &EarlyTotals {
        &self.totals
    }

    /// Adds a completed request at data time `now_us`.
    pub fn add(&mut self, o: &RequestObservation, now_us: i64, cfg: &SloConfig) {
        self.learned.learn_request(o);
        let Some(s) = classify(o, &self.learned, cfg) else {
            return;
        };
        self.totals.add(&s);
        let items = series::request_items(o, &s, o.provisional_calls_until_us);
        series::add_totals(&mut self.totals.series, &mut self.totals.keyed, &items);
        if let Some(b) = self.ring.at(o.end_us, now_us) {
            b.add(&s);
            series::add_items(&mut b.series, Some(&mut b.keyed), &items);
        }
    }

    /// Adds a provisional observation (the request just ended; its final
    /// one comes after the grace period): its fast series' items only.
    pub fn add_provisional(&mut self, o: &RequestObservation, now_us: i64, cfg: &SloConfig) {
        let Some(s) = classify(o, &self.learned, cfg) else {
            return;
        };
        let items = series::request_items(o, &s, None);
        series::add_totals(&mut self.totals.series, &mut self.totals.keyed, &items);
        if let Some(b) = self.ring.at(o.end_us, now_us) {
            series::add_items(&mut b.series, Some(&mut b.keyed), &items);
        }
    }

    /// Adds a model server's load sample at data time `now_us`.
    pub fn add_server(&mut self, l: &ServerLoad, now_us: i64) {
        let items = series::server_items(l);
        series::add_totals(&mut self.totals.series, &mut self.totals.keyed, &items);
        if let Some(b) = self.ring.at(l.at_us, now_us) {
            series::add_items(&mut b.series, Some(&mut b.keyed), &items);
        }
    }

    fn windows(&self, now_us: i64) -> (Tally, Tally) {
        let mut short = Tally::default();
        for b in self.ring.last(now_us, self.short) {
            short.merge(b);
        }
        let mut base = Tally::default();
        for b in self
            .ring
            .range(now_us, self.short, self.short + self.baseline)
        {
            base.merge(b);
        }
        (short, base)
    }

    /// Weighted least-squares slope of the healthy share per minute over
    /// the last [`SLOPE_MINUTES`].
    fn slope(&self, now_us: i64) -> Option<f64> {
        let n = (SLOPE_MINUTES * 60.0 / BUCKET_S).round() as usize;
        let mut pts = Vec::new();
        for back in 0..n {
            let mut it = self.ring.range(now_us, back, back + 1);
            if let Some(t) = it.next().filter(|t| t.requests > 0) {
                let x = -(back as f64) / self.per_minute as f64;
                pts.push((x, t.healthy as f64 / t.requests as f64, t.requests as f64));
            }
        }
        if pts.len() < 3 {
            return None;
        }
        let w: f64 = pts.iter().map(|p| p.2).sum();
        let mx = pts.iter().map(|p| p.0 * p.2).sum::<f64>() / w;
        let my = pts.iter().map(|p| p.1 * p.2).sum::<f64>() / w;
        let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }

    /// The baseline window's words: its configured length, or the history
    /// really held before the short window when that is shorter (a
    /// collector that started recently): "7m (all the history held)".
    fn baseline_held(&self, now_us: i64, configured_s: f64) -> String {
        let cur = self.ring.index_of(now_us);
        let end = cur - self.short as i64;
        let oldest = self
            .ring
            .entries()
            .into_iter()
            .filter(|(i, t)| *i <= end && end - *i < self.baseline as i64 && t.requests > 0)
            .map(|(i, _)| i)
            .min();
        match oldest {
            Some(i) if ((end - i + 1) as usize) < self.baseline => format!(
                "{} (all the history held)",
                window_name((end - i + 1) as f64 * BUCKET_S)
            ),
            _ => window_name(configured_s),
        }
    }

    pub fn view(&self, now_us: i64, cfg: &SloConfig) -> EarlyWarningView {
        let e = &cfg.early_warning;
        let (s, b) = self.windows(now_us);
        let prop = |ks: u64, ns: u64, kb: u64, nb: u64, worse_up: bool| SignalView {
            value: ratio(ks, ns),
            baseline: ratio(kb, nb),
            count: ns,
            baseline_count: nb,
            z: if worse_up {
                z_prop(ks, ns, kb, nb)
            } else {
                z_prop(kb, nb, ks, ns)
            },
        };
        let share = |t: &Tally| (t.llm_ms > 0.0).then(|| t.wait_ms() / t.llm_ms);
        EarlyWarningView {
            window: window_name(e.short_window_s),
            baseline_window: self.baseline_held(now_us, e.baseline_window_s),
            chain_healthy: prop(s.healthy, s.requests, b.healthy, b.requests, false),
            chain_healthy_slope_per_min: self.slope(now_us),
            near_timeout: prop(
                s.near_total(),
                s.timed_total(),
                b.near_total(),
                b.timed_total(),
                true,
            ),
            llm_wait_share: SignalView {
                value: share(&s),
                baseline: share(&b),
                count: s.llm_calls,
                baseline_count: b.llm_calls,
                z: z_ratio(RatioSums::of(&s), RatioSums::of(&b)),
            },
            semantic_success: prop(s.real, s.requests, b.real, b.requests, false),
            fast: self.detections(now_us, self.baseline),
        }
    }

    /// The early-warning conditions at `now_us`: those that hold, and those
    /// that held within the last `for_s` (kept firing).
    pub fn evaluate(&mut self, now_us: i64, cfg: &SloConfig) -> Vec<Condition> {
        let keep = cfg.scaled_us(cfg.early_warning.for_s);
        for c in self.conditions(now_us, cfg) {
            let signal = c.labels.iter().find(|l| l.0 == "signal");
            let key = (c.name, signal.map_or(String::new(), |l| l.1.clone()));
            self.kept.insert(key, (now_us, c));
        }
        self.kept
            .retain(|_, (at, _)| now_us - *at <= keep && *at <= now_us);
        self.kept.values().map(|(_, c)| c.clone()).collect()
    }
}
