//! Sliding windows in data time: per-bucket tallies in [`Ring`]s, summed
//! over the window on demand. Global windows (5m … 3d) have 60 buckets
//! each; chain health keeps whole minutes; routes, models and tools keep
//! their own rings for the breakdowns and the L2 breaker.

use crate::SloConfig;
use crate::ring::Ring;
use crate::sketch::LogSketch;
use overtime_model::Stage;
use overtime_model::{CallObservation, RequestObservation};
use serde::Serialize;

/// Buckets per global window.
const WINDOW_BUCKETS: usize = 60;
/// The windows of `overtime_*{window=…}` gauges, nominal seconds.
pub const WINDOWS: [(&str, f64); 5] = [
    ("5m", 300.0),
    ("30m", 1800.0),
    ("1h", 3600.0),
    ("6h", 21_600.0),
    ("3d", 259_200.0),
];
/// The breakdown window of routes and tools (nominal seconds).
pub const BREAKDOWN_S: f64 = 300.0;
/// Minutes of chain health kept, for the history (6 hours).
pub const CHAIN_HEALTH_MINUTES: usize = 360;
/// Chain-health stages, in weight order.
pub const CHAIN_STAGES: [Stage; 4] = [Stage::Llm, Stage::Tool, Stage::Memory, Stage::Network];

/// A window's name from its nominal length: `90s`, `1m`, `5m`, `1h`, `3d`.
///
/// ```
/// assert_eq!(overtime_slo::window_name(60.0), "1m");
/// assert_eq!(overtime_slo::window_name(259_200.0), "3d");
/// assert_eq!(overtime_slo::window_name(90.0), "90s");
/// ```
pub fn window_name(seconds: f64) -> String {
    let s = seconds.round() as i64;
    if s > 0 && s % 86_400 == 0 {
        format!("{}d", s / 86_400)
    } else if s > 0 && s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else if s > 0 && s % 60 == 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Request counts of one bucket.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub requests: u64,
    pub errors: u64,
    pub timed_out: u64,
    pub judged: u64,
    pub semantic_ok: u64,
    pub ttft_calls: u64,
    pub ttft_within: u64,
    pub fallbacks: u64,
    pub fallbacks_accepted: u64,
    pub ttft: LogSketch,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.timed_out += o.timed_out;
        self.judged += o.judged;
        self.semantic_ok += o.semantic_ok;
        self.ttft_calls += o.ttft_calls;
        self.ttft_within += o.ttft_within;
        self.fallbacks += o.fallbacks;
        self.fallbacks_accepted += o.fallbacks_accepted;
        self.ttft.merge(&o.ttft);
    }
}

/// Calls and timeouts per chain stage in one minute.
#[derive(Debug, Clone, Default)]
pub(crate) struct StageTally {
    pub calls: [u64; 4],
    pub timeouts: [u64; 4],
}

/// Calls of one model or tool in one bucket.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallTally {
    pub calls: u64,
    pub timeouts: u64,
    pub latency: LogSketch,
}

impl CallTally {
    pub fn add(&mut self, c: &CallObservation) {
        self.calls += 1;
        self.timeouts += c.timed_out() as u64;
        self.latency.add(c.duration_ms);
    }
}

/// Sums of [`CallTally`]s over some buckets.
pub(crate) fn sum_calls<'a>(it: impl Iterator<Item = &'a CallTally>) -> CallTally {
    let mut out = CallTally::default();
    for t in it {
        out.calls += t.calls;
        out.timeouts += t.timeouts;
        out.latency.merge(&t.latency);
    }
    out
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// One window's SLIs (ratios are `None` when their denominator is 0).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowStats {
    /// The window's name (`1m`, `5m`, `1h`…).
    pub window: String,
    /// Its length in data-time seconds (after `window_scale`).
    pub seconds: f64,
    /// Requests that ended in the window.
    pub requests: u64,
    /// Of those, outcome `error`.
    pub errors: u64,
    /// Of those, outcome `gateway_timeout` or `service_timeout`.
    pub timed_out: u64,
    /// Of those, requests with a judge score.
    pub judged: u64,
    /// Judged requests scoring at least `semantic_success_score`.
    pub semantic_ok: u64,
    /// LLM calls with a known TTFT.
    pub ttft_calls: u64,
    /// Of those, calls within `ttft_target_ms`.
    pub ttft_within_target: u64,
    /// Requests that fell back.
    pub fallbacks: u64,
    /// Of those, fallbacks the caller accepted.
    pub fallbacks_accepted: u64,
    /// `semantic_ok / judged` (SLO-1).
    pub semantic_success_ratio: Option<f64>,
    /// `timed_out / requests`.
    pub timeout_ratio: Option<f64>,
    /// The timeout ratio over the error budget `1 − timeout_objective` (1: burning exactly on budget).
    pub timeout_budget_burn_rate: Option<f64>,
    /// `errors / requests`.
    pub error_ratio: Option<f64>,
    /// `ttft_within_target / ttft_calls` (SLO-3).
    pub ttft_within_target_ratio: Option<f64>,
    /// P99 time to first token, seconds (±1 %).
    pub ttft_p99_seconds: Option<f64>,
    /// `fallbacks_accepted / fallbacks`.
    pub fallback_acceptance_ratio: Option<f64>,
}

/// Chain health of one complete minute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainHealth {
    /// 1 − Σ(stage timeout ratio × weight).
    pub value: f64,
    /// Start of the minute (data time, µs).
    pub minute_start_us: i64,
    /// Each weighted stage's part in it.
    pub stages: Vec<StageHealth>,
}

/// One stage's part in chain health over the minute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageHealth {
    /// `llm`, `tool`, `memory` or `network`.
    pub stage: &'static str,
    /// Calls of the stage in the minute.
    pub calls: u64,
    /// Of those, calls that ended in their own timeout.
    pub timeouts: u64,
    /// `timeouts / calls`; `None` without calls.
    pub timeout_ratio: Option<f64>,
    /// The stage's weight from [`ChainWeights`](crate::ChainWeights).
    pub weight: f64,
}

/// Calls of one model or tool over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallStats {
    /// The model or tool (`other` past the label cap).
    pub name: String,
    /// Calls in the window.
    pub calls: u64,
    /// Of those, calls that ended in their own timeout.
    pub timeouts: u64,
    /// P99 duration, seconds (±1 %); `None` without calls.
    pub p99_seconds: Option<f64>,
}

/// Requests of one route over the breakdown window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteStats {
    /// The request path (`other` past the label cap).
    pub route: String,
    /// Requests that ended in the window.
    pub requests: u64,
    /// Of those, outcome `error`.
    pub errors: u64,
    /// Of those, a gateway or service timeout.
    pub timed_out: u64,
    /// `errors / requests`.
    pub error_ratio: Option<f64>,
    /// `timed_out / requests`.
    pub timeout_ratio: Option<f64>,
}

/// Every window of one collector.
#[derive(Debug, Clone)]
pub(crate) struct Windows {
    /// (name, scaled length µs, ring).
    pub global: Vec<(String, i64, Ring<Tally>)>,
    pub minutes: Ring<StageTally>,
    pub routes: std::collections::BTreeMap<String, Ring<Tally>>,
    pub tools: std::collections::BTreeMap<String, Ring<CallTally>>,
    breakdown_us: i64,
}

impl Windows {
    pub fn new(cfg: &SloConfig) -> Self {
        let mut global: Vec<(String, i64, Ring<Tally>)> = Vec::new();
        let mut specs: Vec<(String, f64)> =
            WINDOWS.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        specs.push((
            window_name(cfg.breaker_error_window_s),
            cfg.breaker_error_window_s,
        ));
        for (name, s) in specs {
            if global.iter().any(|g| g.0 == name) {
                continue;
            }
            let len = cfg.scaled_us(s);
            let width = (len / WINDOW_BUCKETS as i64).max(1);
            global.push((name, len, Ring::new(width, WINDOW_BUCKETS)));
        }
        global.sort_by_key(|g| g.1);
        Windows {
            global,
            minutes: Ring::new(cfg.scaled_us(60.0), CHAIN_HEALTH_MINUTES),
            routes: Default::default(),
            tools: Default::default(),
            breakdown_us: cfg.scaled_us(BREAKDOWN_S),
        }
    }

    fn new_breakdown_ring<T: Default>(&self) -> Ring<T> {
        Ring::new(
            (self.breakdown_us / WINDOW_BUCKETS as i64).max(1),
            WINDOW_BUCKETS,
        )
    }

    /// Adds a request (route and tool names already bounded); returns
    /// whether it was recent enough for every window.
    pub fn add(
        &mut self,
        o: &RequestObservation,
        route: &str,
        tools: &[Option<String>],
        now_us: i64,
        cfg: &SloConfig,
    ) -> bool {
        let mut t = Tally {
            requests: 1,
            errors: (!o.is_ok()) as u64,
            timed_out: o.timed_out() as u64,
            ..Default::default()
        };
        if let Some(s) = o.judge_score.filter(|s| s.is_finite()) {
            t.judged = 1;
            t.semantic_ok = (s >= cfg.semantic_success_score) as u64;
        }
        if o.fallback.is_some() {
            t.fallbacks = 1;
            t.fallbacks_accepted = (o.fallback_accepted == Some(true)) as u64;
        }
        for c in o.calls.iter().filter(|c| c.is_llm()) {
            if let Some(ms) = c.ttft_ms.filter(|m| m.is_finite() && *m >= 0.0) {
                t.ttft_calls += 1;
                t.ttft_within += (ms <= cfg.ttft_target_ms) as u64;
                t.ttft.add(ms);
            }
        }
        let mut in_time = true;
        for (_, _, ring) in &mut self.global {
            match ring.at(o.end_us, now_us) {
                Some(b) => b.merge(&t),
                None => in_time = false,
            }
        }
        let ring = match self.routes.get_mut(route) {
            Some(r) => r,
            None => {
                let r = self.new_breakdown_ring();
                self.routes.entry(route.to_string()).or_insert(r)
            }
        };
        if let Some(b) = ring.at(o.end_us, now_us) {
            b.merge(&t);
        }
        for (c, tool) in o.calls.iter().zip(tools) {
            let end = if c.end_us > 0 { c.end_us } else { o.end_us };
            if let Some(i) = CHAIN_STAGES.iter().position(|s| *s == c.stage)
                && let Some(m) = self.minutes.at(end, now_us)
            {
                m.calls[i] += 1;
                m.timeouts[i] += c.timed_out() as u64;
            }
            if let Some(tool) = tool {
                if !self.tools.contains_key(tool) {
                    let r = self.new_breakdown_ring();
                    self.tools.insert(tool.clone(), r);
                }
                if let Some(b) = self.tools.get_mut(tool).and_then(|r| r.at(end, now_us)) {
                    b.add(c);
                }
            }
        }
        in_time
    }

    /// The SLIs of the window named `name` at `now_us`.
    pub fn stats(&self, name: &str, now_us: i64, cfg: &SloConfig) -> Option<WindowStats> {
        let (n, len, ring) = self.global.iter().find(|g| g.0 == name)?;
        let mut t = Tally::default();
        for b in ring.last(now_us, ring.len()) {
            t.merge(b);
        }
        let budget = 1.0 - cfg.timeout_objective;
        let timeout_ratio = ratio(t.timed_out, t.requests);
        Some(WindowStats {
            window: n.clone(),
            seconds: *len as f64 / 1e6,
            requests: t.requests,
            errors: t.errors,
            timed_out: t.timed_out,
            judged: t.judged,
            semantic_ok: t.semantic_ok,
            ttft_calls: t.ttft_calls,
            ttft_within_target: t.ttft_within,
            fallbacks: t.fallbacks,
            fallbacks_accepted: t.fallbacks_accepted,
            semantic_success_ratio: ratio(t.semantic_ok, t.judged),
            timeout_ratio,
            timeout_budget_burn_rate: timeout_ratio.map(|r| r / budget),
            error_ratio: ratio(t.errors, t.requests),
            ttft_within_target_ratio: ratio(t.ttft_within, t.ttft_calls),
            ttft_p99_seconds: t.ttft.quantile(0.99).map(|ms| ms / 1000.0),
            fallback_acceptance_ratio: ratio(t.fallbacks_accepted, t.fallbacks),
        })
    }

    /// Names of the global windows, shortest first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.global.iter().map(|g| g.0.as_str())
    }

    /// Chain health of the last complete minute before `now_us`; `None`
    /// when that minute had no call of a weighted stage.
    pub fn chain_health(&self, now_us: i64, cfg: &SloConfig) -> Option<ChainHealth> {
        let m = self.minutes.range(now_us, 1, 2).next()?;
        let width = self.minutes.width_us();
        health(m, (self.minutes.index_of(now_us) - 1) * width, cfg)
    }

    /// Chain health of every complete minute before `now_us` still held
    /// (the last [`CHAIN_HEALTH_MINUTES`]) that had a call of a weighted
    /// stage, oldest first.
    pub fn chain_health_history(&self, now_us: i64, cfg: &SloConfig) -> Vec<ChainHealth> {
        let (cur, width) = (self.minutes.index_of(now_us), self.minutes.width_us());
        let oldest = cur - CHAIN_HEALTH_MINUTES as i64;
        self.minutes
            .entries()
            .into_iter()
            .filter(|(i, _)| *i < cur && *i > oldest)
            .filter_map(|(i, m)| health(m, i * width, cfg))
            .collect()
    }

    /// Requests per route over the breakdown window, busiest first.
    pub fn routes(&self, now_us: i64) -> Vec<RouteStats> {
        let mut out: Vec<RouteStats> = self
            .routes
            .iter()
            .map(|(route, ring)| {
                let mut t = Tally::default();
                for b in ring.last(now_us, ring.len()) {
                    t.merge(b);
                }
                RouteStats {
                    route: route.clone(),
                    requests: t.requests,
                    errors: t.errors,
                    timed_out: t.timed_out,
                    error_ratio: ratio(t.errors, t.requests),
                    timeout_ratio: ratio(t.timed_out, t.requests),
                }
            })
            .filter(|r| r.requests > 0)
            .collect();
        out.sort_by(|a, b| b.requests.cmp(&a.requests).then(a.route.cmp(&b.route)));
        out
    }

    /// Calls per tool over the breakdown window, busiest first.
    pub fn tools(&self, now_us: i64) -> Vec<CallStats> {
        let mut out: Vec<CallStats> = self
            .tools
            .iter()
            .map(|(name, ring)| {
                let t = sum_calls(ring.last(now_us, ring.len()));
                CallStats {
                    name: name.clone(),
                    calls: t.calls,
                    timeouts: t.timeouts,
                    p99_seconds: t.latency.quantile(0.99).map(|ms| ms / 1000.0),
                }
            })
            .filter(|t| t.calls > 0)
            .collect();
        out.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
        out
    }
}

/// Chain health of one minute's tally; `None` without a weighted call.
fn health(m: &StageTally, minute_start_us: i64, cfg: &SloConfig) -> Option<ChainHealth> {
    if m.calls.iter().all(|c| *c == 0) {
        return None;
    }
    let w = &cfg.chain_health_weights;
    let weights = [w.llm, w.tool, w.memory, w.network];
    let mut value = 1.0;
    let mut stages = Vec::new();
    for (i, stage) in CHAIN_STAGES.iter().enumerate() {
        let r = ratio(m.timeouts[i], m.calls[i]);
        value -= r.unwrap_or(0.0) * weights[i];
        stages.push(StageHealth {
            stage: stage.as_str(),
            calls: m.calls[i],
            timeouts: m.timeouts[i],
            timeout_ratio: r,
            weight: weights[i],
        });
    }
    Some(ChainHealth {
        value,
        minute_start_us,
        stages,
    })
}
