//! # overtime-slo
//!
//! The agent-level signals of docs/metrics.md, live: semantic success, timeout
//! budget burn, TTFT, chain health, fallback acceptance, error ratio and
//! the model breakers L1–L3, over sliding windows keyed by the requests'
//! end times (data time: a replay gives the same numbers as live traffic),
//! plus the alerts of docs/metrics.md that hold now and the cumulative
//! counters and histograms `/metrics` exposes.
//!
//! Design rules:
//! - Pure: observations in, numbers out; no I/O, no clock. "Now" is the
//!   latest end time seen (the watermark), or what the caller advances it to.
//! - Bounded: windows are rings of buckets (60 per window), percentiles
//!   come from log-binned sketches (±1 %), label values are capped at
//!   `max_label_values` (the rest read `other`). Three days of traffic cost
//!   what five minutes do.
//! - Alerts are evaluated every `eval_interval_s` of data time as the data
//!   passes, and a hold (`for:`) counts data time, as Prometheus would.
//!
//! ```
//! use overtime_slo::{RequestObservation, Slo};
//! use overtime_model::Outcome;
//! let mut slo = Slo::new(Default::default());
//! let t0 = 1_764_000_000_000_000; // µs
//! for i in 0..100 {
//!     let outcome = if i % 10 < 2 { Outcome::Error } else { Outcome::Ok };
//!     slo.observe(&RequestObservation::new("/chat", outcome, t0 + i * 1_200_000));
//! }
//! slo.evaluate();
//! let w = slo.window("1m").unwrap();
//! assert!((w.error_ratio.unwrap() - 0.2).abs() < 0.03);
//! // 20 % errors held for over a minute: L3.
//! assert!(slo.alerts().iter().any(|a| a.name() == "OvertimeModelBreakerL3"));
//! ```

#![warn(missing_docs)]

pub mod alert_names;
mod alerts;
mod breakers;
mod config;
pub mod early;
mod history;
mod labels;
mod ring;
mod sketch;
mod totals;
mod windows;

pub use alerts::{
    ALERT_NAMES, Alert, BREAKER_L1, BREAKER_L2, BREAKER_L3, BURN_FAST, BURN_SLOW, BURN_TICKET,
    CHAIN_HEALTH_FALLING, CHAIN_HEALTH_LOW, LLM_WAIT_RISING, NEAR_TIMEOUT_RISING,
    SEMANTIC_SUCCESS_FALLING, SEMANTIC_SUCCESS_LOW, TTFT_SLO_BREACH,
};
pub use breakers::ModelStats;
pub use early::{
    Detection, EarlyTotals, EarlyWarningView, Moments, ServerLoad, Signal, SignalView,
};
pub use history::{AlertSpan, EARLY_WARNINGS};
// The live diagnosis writes them (overtime-model holds the type both share).
pub use config::{ChainWeights, EarlyWarningConfig, SloConfig};
pub use overtime_model::{CallObservation, GatewayStatus, RequestObservation, input_bucket};
pub use sketch::{LogSketch, MAX_BINS};
pub use totals::{CounterVec, Histogram, HistogramVec, Totals};
pub use windows::{
    CHAIN_HEALTH_MINUTES, CallStats, ChainHealth, RouteStats, StageHealth, WINDOWS, WindowStats,
    window_name,
};

use alerts::{Condition, Holds, pct, secs};
use breakers::Breakers;
use early::Early;
use history::AlertLog;
use overtime_model::Outcome;
use serde::Serialize;
use totals::Labels;
use windows::Windows;

/// Grid evaluations done at most when data time jumps.
const MAX_CATCH_UP: i64 = 200;

/// A breaker level of one model, for `overtime_model_breaker`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerState {
    /// The model, or `*` for L3 (global).
    pub model: String,
    /// `L1`, `L2` or `L3` (docs/metrics.md#model-breakers).
    pub level: &'static str,
    /// The breaker's alert is firing (its condition held for its hold).
    pub open: bool,
}

/// Everything the collector knows about its SLOs now (`GET /api/slo`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloSnapshot {
    /// Data time of the view (µs).
    pub watermark_us: i64,
    /// The settings the numbers were computed with.
    pub config: SloConfig,
    /// Global windows, shortest first.
    pub windows: Vec<WindowStats>,
    /// Chain health of the last complete minute; `None` before one is complete.
    pub chain_health: Option<ChainHealth>,
    /// Breaker view of every model seen.
    pub models: Vec<ModelStats>,
    /// Calls of every tool over the breakdown window.
    pub tools: Vec<CallStats>,
    /// Requests of every route over the breakdown window.
    pub routes: Vec<RouteStats>,
    /// Every breaker level of every model, open or not.
    pub breakers: Vec<BreakerState>,
    /// The alerts firing now.
    pub alerts: Vec<Alert>,
    /// The leading signals (docs/advice.md), short window against baseline.
    pub early_warning: EarlyWarningView,
    /// Requests observed since start.
    pub observed: u64,
    /// Observations older than a window's memory (counted in the totals only).
    pub late: u64,
}

/// The live SLO state of one collector.
#[derive(Debug, Clone)]
pub struct Slo {
    cfg: SloConfig,
    labels: Labels,
    totals: Totals,
    windows: Windows,
    breakers: Breakers,
    early: Early,
    holds: Holds,
    firing: Vec<Alert>,
    alert_log: AlertLog,
    watermark_us: i64,
    next_eval_us: Option<i64>,
    eval_us: i64,
    observed: u64,
    late: u64,
}

impl Slo {
    /// Empty state with these settings; call [`SloConfig::validate`] first.
    pub fn new(cfg: SloConfig) -> Self {
        Slo {
            labels: Labels::new(cfg.max_label_values),
            totals: Totals::default(),
            windows: Windows::new(&cfg),
            breakers: Breakers::new(&cfg),
            early: Early::new(&cfg),
            holds: Holds::default(),
            firing: Vec::new(),
            alert_log: AlertLog::default(),
            watermark_us: 0,
            next_eval_us: None,
            eval_us: cfg.scaled_us(cfg.eval_interval_s),
            observed: 0,
            late: 0,
            cfg,
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &SloConfig {
        &self.cfg
    }

    /// The latest data time seen (µs).
    pub fn watermark_us(&self) -> i64 {
        self.watermark_us
    }

    /// The cumulative counters and histograms.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The cumulative counters of the early-warning signals.
    pub fn early_totals(&self) -> &EarlyTotals {
        self.early.totals()
    }

    /// The early-warning signals at the watermark.
    pub fn early_warning(&self) -> EarlyWarningView {
        self.early.view(self.watermark_us, &self.cfg)
    }

    /// Adds one completed request. Requests should come in end-time order
    /// (see [`Slo::observe_all`]); one that ends before the watermark still
    /// lands in its bucket if the windows remember it.
    ///
    /// A provisional observation (made when the request ended, before its
    /// trace's grace period) feeds only the fast early-warning series.
    pub fn observe(&mut self, o: &RequestObservation) {
        self.step_to(o.end_us);
        if o.provisional {
            self.early.add_provisional(o, self.watermark_us, &self.cfg);
            return;
        }
        self.observed += 1;
        let route = self.labels.route.get(&o.route);
        self.totals
            .add(o, &route, &mut self.labels, self.cfg.semantic_success_score);
        let tools: Vec<Option<String>> = o
            .calls
            .iter()
            .map(|c| {
                (!c.is_llm() && c.tool.is_some())
                    .then(|| self.labels.tool.get(c.tool.as_deref().unwrap_or("")))
            })
            .collect();
        self.early.add(o, self.watermark_us, &self.cfg);
        if !self
            .windows
            .add(o, &route, &tools, self.watermark_us, &self.cfg)
        {
            self.late += 1;
        }
        let mut calls: Vec<&CallObservation> = o.calls.iter().filter(|c| c.is_llm()).collect();
        calls.sort_by_key(|c| c.end_us);
        for c in calls {
            let model = self.labels.model.get(c.model.as_deref().unwrap_or(""));
            let end = if c.end_us > 0 { c.end_us } else { o.end_us };
            self.breakers.add(&model, c, end, self.watermark_us);
        }
    }

    /// Adds model-server load samples (queue depth, KV cache use; see
    /// [`ServerLoad`]) for the fast early warning. Samples move data time
    /// as requests do.
    pub fn observe_server(&mut self, samples: &[ServerLoad]) {
        for l in samples {
            self.step_to(l.at_us);
            self.early.add_server(l, self.watermark_us);
        }
    }

    /// Adds requests in end-time order, then evaluates at the watermark.
    pub fn observe_all(&mut self, mut v: Vec<RequestObservation>) {
        v.sort_by_key(|o| o.end_us);
        for o in &v {
            self.observe(o);
        }
        self.evaluate();
    }

    /// Counts a verdict of the live diagnosis (first verdict of a failing
    /// trace by root cause; later ones as revisions).
    pub fn record_verdict(&mut self, kind: &str, component: &str, outcome: Outcome, revision: u32) {
        self.totals
            .add_verdict(kind, component, outcome, revision, &mut self.labels);
    }

    /// Moves data time forward with no data (an idle collector's windows
    /// empty and its alerts resolve). Never moves it back.
    pub fn advance_to(&mut self, now_us: i64) {
        self.step_to(now_us);
        self.evaluate();
    }

    /// Evaluates every grid point before `t_us`, then moves the watermark.
    fn step_to(&mut self, t_us: i64) {
        if t_us <= self.watermark_us {
            return;
        }
        let eval = self.eval_us;
        let mut next = self
            .next_eval_us
            .unwrap_or_else(|| (t_us.div_euclid(eval) + 1) * eval);
        if next < t_us && (t_us - next) / eval > MAX_CATCH_UP {
            self.evaluate_at(next);
            next = (t_us.div_euclid(eval) - MAX_CATCH_UP) * eval;
        }
        while next < t_us {
            self.evaluate_at(next);
            next += eval;
        }
        self.next_eval_us = Some(next);
        self.watermark_us = t_us;
    }

    /// Evaluates the alerts at the watermark; returns those firing.
    pub fn evaluate(&mut self) -> &[Alert] {
        self.evaluate_at(self.watermark_us);
        &self.firing
    }

    /// The alerts firing at the last evaluation.
    pub fn alerts(&self) -> &[Alert] {
        &self.firing
    }

    fn evaluate_at(&mut self, now_us: i64) {
        self.breakers.update_frozen(now_us, &self.cfg);
        let mut conditions = self.conditions(now_us);
        conditions.extend(self.early.evaluate(now_us, &self.cfg));
        self.firing = self.holds.apply(now_us, conditions);
        self.alert_log.update(now_us, &self.firing);
    }

    /// One window's SLIs at the watermark (`5m`, `30m`, `1h`, `6h`, `3d`,
    /// and the L3 window, `1m` by default).
    pub fn window(&self, name: &str) -> Option<WindowStats> {
        self.windows.stats(name, self.watermark_us, &self.cfg)
    }

    /// Chain health of the last complete minute.
    pub fn chain_health(&self) -> Option<ChainHealth> {
        self.windows.chain_health(self.watermark_us, &self.cfg)
    }

    /// Chain health of every complete minute of the last
    /// [`CHAIN_HEALTH_MINUTES`] before the watermark that had a weighted
    /// call, oldest first (the UI's overview chart).
    pub fn chain_health_history(&self) -> Vec<ChainHealth> {
        self.windows
            .chain_health_history(self.watermark_us, &self.cfg)
    }

    /// Every alert's firing spans, oldest first (the last
    /// [`history::MAX_SPANS`]).
    pub fn alert_history(&self) -> Vec<AlertSpan> {
        self.alert_log.spans()
    }

    /// Breaker view of every model.
    pub fn models(&self) -> Vec<ModelStats> {
        self.breakers.stats(self.watermark_us, &self.cfg)
    }

    /// The whole view, for `GET /api/slo`.
    pub fn snapshot(&self) -> SloSnapshot {
        let now = self.watermark_us;
        let models = self.models();
        let open = |name: &str, model: &str| {
            self.firing
                .iter()
                .any(|a| a.name() == name && a.label("model").unwrap_or("*") == model)
        };
        let mut breakers = Vec::new();
        for m in &models {
            breakers.push(BreakerState {
                model: m.model.clone(),
                level: "L1",
                open: open(BREAKER_L1, &m.model),
            });
            breakers.push(BreakerState {
                model: m.model.clone(),
                level: "L2",
                open: open(BREAKER_L2, &m.model),
            });
        }
        breakers.push(BreakerState {
            model: "*".into(),
            level: "L3",
            open: open(BREAKER_L3, "*"),
        });
        SloSnapshot {
            watermark_us: now,
            config: self.cfg.clone(),
            windows: self
                .windows
                .names()
                .filter_map(|n| self.windows.stats(n, now, &self.cfg))
                .collect(),
            chain_health: self.chain_health(),
            models,
            tools: self.windows.tools(now),
            routes: self.windows.routes(now),
            breakers,
            alerts: self.firing.clone(),
            early_warning: self.early.view(now, &self.cfg),
            observed: self.observed,
            late: self.late,
        }
    }

    /// Label values reported as `other` since start, per label.
    pub fn labels_overflowed(&self) -> Vec<(&'static str, u64)> {
        let l = &self.labels;
        vec![
            ("route", l.route.overflowed),
            ("model", l.model.overflowed),
            ("tool", l.tool.overflowed),
            ("layer", l.layer.overflowed),
            ("component", l.component.overflowed),
            ("fallback", l.fallback.overflowed),
        ]
    }

    /// The conditions that hold at `now_us`.
    fn conditions(&self, now_us: i64) -> Vec<Condition> {
        let cfg = &self.cfg;
        let w = |n: &str| self.windows.stats(n, now_us, cfg);
        let mut out = Vec::new();
        let burn = [
            (BURN_FAST, "page", "1h", "5m", cfg.burn_rate_fast),
            (BURN_SLOW, "page", "6h", "30m", cfg.burn_rate_slow),
            (BURN_TICKET, "ticket", "3d", "6h", cfg.burn_rate_ticket),
        ];
        for (name, severity, long, short, factor) in burn {
            let (Some(l), Some(s)) = (w(long), w(short)) else {
                continue;
            };
            let (Some(bl), Some(bs)) = (l.timeout_budget_burn_rate, s.timeout_budget_burn_rate)
            else {
                continue;
            };
            if bl > factor && bs > factor {
                out.push(Condition {
                    name,
                    severity,
                    labels: vec![],
                    value: bs,
                    summary: format!(
                        "timeout budget burning {bl:.1}x over {long} and {bs:.1}x over {short} (threshold {factor}x): {} of {} requests timed out over {long} ({}), SLO {}",
                        l.timed_out, l.requests, pct(l.timeout_ratio.unwrap_or(0.0)), pct(cfg.timeout_objective)
                    ),
                    description: format!("timeout burn rate > {factor} over {long} and over {short}"),
                    hold_us: 0,
                });
            }
        }
        if let Some(s) = w("5m") {
            if let Some(r) = s.semantic_success_ratio
                && r < cfg.semantic_success_alert_below
            {
                out.push(Condition {
                        name: SEMANTIC_SUCCESS_LOW,
                        severity: "page",
                        labels: vec![],
                        value: r,
                        summary: format!(
                            "semantic success {r:.2} over 5m < {}: {} of {} judged requests scored >= {}",
                            cfg.semantic_success_alert_below, s.semantic_ok, s.judged, cfg.semantic_success_score
                        ),
                        description: format!(
                            "semantic success < {} for {}",
                            cfg.semantic_success_alert_below,
                            window_name(cfg.semantic_success_for_s)
                        ),
                        hold_us: cfg.scaled_us(cfg.semantic_success_for_s),
                    });
            }
            let within = s
                .ttft_within_target_ratio
                .filter(|r| *r < cfg.ttft_target_ratio);
            let p99 = s.ttft_p99_seconds.filter(|p| *p * 1000.0 > cfg.ttft_p99_ms);
            if within.is_some() || p99.is_some() {
                let mut why = Vec::new();
                if let Some(r) = within {
                    why.push(format!(
                        "{} of LLM calls had TTFT <= {} ms (target {})",
                        pct(r),
                        cfg.ttft_target_ms,
                        pct(cfg.ttft_target_ratio)
                    ));
                }
                if let Some(p) = p99 {
                    why.push(format!(
                        "P99 TTFT {} > {}",
                        secs(p),
                        secs(cfg.ttft_p99_ms / 1000.0)
                    ));
                }
                out.push(Condition {
                    name: TTFT_SLO_BREACH,
                    severity: "page",
                    labels: vec![],
                    value: within.or(s.ttft_within_target_ratio).unwrap_or(0.0),
                    summary: format!("TTFT SLO missed over 5m: {}", why.join("; ")),
                    description: format!(
                        "TTFT <= {} ms for < {}, or P99 > {}",
                        cfg.ttft_target_ms,
                        pct(cfg.ttft_target_ratio),
                        secs(cfg.ttft_p99_ms / 1000.0)
                    ),
                    hold_us: if cfg.ttft_for_s > 0.0 {
                        cfg.scaled_us(cfg.ttft_for_s)
                    } else {
                        0
                    },
                });
            }
        }
        if let Some(h) = self.windows.chain_health(now_us, cfg)
            && h.value < cfg.chain_health_alert_below
        {
            let parts: Vec<String> = h
                .stages
                .iter()
                .filter(|s| s.timeouts > 0)
                .map(|s| format!("{} {} of {} calls timed out", s.stage, s.timeouts, s.calls))
                .collect();
            out.push(Condition {
                name: CHAIN_HEALTH_LOW,
                severity: "page",
                labels: vec![],
                value: h.value,
                summary: format!(
                    "chain health {:.2} < {} in the last complete minute: {}",
                    h.value,
                    cfg.chain_health_alert_below,
                    parts.join(", ")
                ),
                description: format!("chain health < {}", cfg.chain_health_alert_below),
                hold_us: 0,
            });
        }
        for m in self.breakers.stats(now_us, cfg) {
            if m.l1 {
                out.push(Condition {
                    name: BREAKER_L1,
                    severity: "page",
                    labels: vec![("model", m.model.clone())],
                    value: m.consecutive_timeouts as f64,
                    summary: format!(
                        "{}: {} consecutive LLM calls timed out (L1 at {})",
                        m.model, m.consecutive_timeouts, cfg.breaker_consecutive_timeouts
                    ),
                    description: format!(
                        "{} consecutive timeouts on one model",
                        cfg.breaker_consecutive_timeouts
                    ),
                    hold_us: 0,
                });
            }
            if m.l2 {
                let (p, b) = (
                    m.p99_seconds.unwrap_or(0.0),
                    m.baseline_p99_seconds.unwrap_or(0.0),
                );
                out.push(Condition {
                    name: BREAKER_L2,
                    severity: "page",
                    labels: vec![("model", m.model.clone())],
                    value: p,
                    summary: format!(
                        "{}: P99 {} over the last {} ({} calls) > {} x baseline P99 {} ({} calls)",
                        m.model,
                        secs(p),
                        window_name(cfg.breaker_p99_window_s),
                        m.recent_calls,
                        cfg.breaker_p99_factor,
                        secs(b),
                        m.baseline_calls
                    ),
                    description: format!(
                        "model P99 > {}x its baseline for {}",
                        cfg.breaker_p99_factor,
                        window_name(cfg.breaker_p99_for_s)
                    ),
                    hold_us: cfg.scaled_us(cfg.breaker_p99_for_s),
                });
            }
        }
        let l3 = window_name(cfg.breaker_error_window_s);
        if let Some(s) = w(&l3)
            && let Some(r) = s.error_ratio.filter(|r| *r > cfg.breaker_error_ratio)
        {
            out.push(Condition {
                name: BREAKER_L3,
                severity: "page",
                labels: vec![("model", "*".to_string())],
                value: r,
                summary: format!(
                    "error ratio {} over the last {l3} > {}: {} of {} requests failed",
                    pct(r),
                    pct(cfg.breaker_error_ratio),
                    s.errors,
                    s.requests
                ),
                description: format!(
                    "global error ratio > {} for {}",
                    pct(cfg.breaker_error_ratio),
                    window_name(cfg.breaker_error_for_s)
                ),
                hold_us: cfg.scaled_us(cfg.breaker_error_for_s),
            });
        }
        out
    }
}
