//! Model breaker conditions (docs/metrics.md, seed incident 000):
//! - L1: `breaker_consecutive_timeouts` (3) timed-out calls in a row on one
//!   model. A call that did not time out ends the run; so do 5 minutes
//!   (scaled) without any call to the model, so that an idle model does not
//!   page forever.
//! - L2: the model's P99 over the last `breaker_p99_window_s` (2 min) above
//!   `breaker_p99_factor` (2) × its baseline P99. The baseline is the P99
//!   over the `breaker_baseline_window_s` (1 h) that ends where the 2-min
//!   window starts — recent calls never raise their own baseline — and
//!   needs `breaker_baseline_min_calls` (100) calls. While the condition
//!   holds the baseline is frozen at its value when the condition began,
//!   so a long outage never becomes its own baseline. Held 2 min by the
//!   evaluator.
//! - L3 is global (error ratio over 1 min) and lives with the windows.
//!
//! Calls of stage `llm` and `judge` count: a judge runs on a model too.

use crate::SloConfig;
use crate::ring::Ring;
use crate::windows::{CallStats, CallTally, sum_calls};
use overtime_model::CallObservation;
use serde::Serialize;
use std::collections::BTreeMap;

/// Buckets in the L2 window (2 min → 10 s buckets).
const RECENT_BUCKETS: usize = 12;
/// L1 runs end after this long (nominal seconds) without a call.
const L1_IDLE_S: f64 = 300.0;

#[derive(Debug, Clone)]
struct ModelState {
    run: u32,
    last_timeout_us: i64,
    last_call_us: i64,
    ring: Ring<CallTally>,
}

/// The breaker view of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelStats {
    /// The model's name (or `other` past the label cap).
    pub model: String,
    /// Current run of timed-out calls.
    pub consecutive_timeouts: u32,
    /// P99 over the L2 window, seconds.
    pub p99_seconds: Option<f64>,
    /// Calls in the L2 window.
    pub recent_calls: u64,
    /// Baseline P99, seconds (`None` below the minimum number of calls).
    pub baseline_p99_seconds: Option<f64>,
    /// Calls in the baseline window.
    pub baseline_calls: u64,
    /// L1 condition holds now.
    pub l1: bool,
    /// L2 condition holds now (before its hold duration).
    pub l2: bool,
    /// Calls and timeouts over the breakdown window (5 min).
    pub breakdown: CallStats,
}

/// Per-model state, bounded by the model label's bound.
#[derive(Debug, Clone)]
pub(crate) struct Breakers {
    models: BTreeMap<String, ModelState>,
    /// Baseline (P99 s, calls) frozen while a model's L2 condition holds.
    frozen: BTreeMap<String, (f64, u64)>,
    width_us: i64,
    slots: usize,
    recent: usize,
    breakdown: usize,
    idle_us: i64,
}

impl Breakers {
    pub fn new(cfg: &SloConfig) -> Self {
        let recent_us = cfg.scaled_us(cfg.breaker_p99_window_s);
        let width_us = (recent_us / RECENT_BUCKETS as i64).max(1);
        let base_us = cfg.scaled_us(cfg.breaker_baseline_window_s);
        let probe: Ring<CallTally> = Ring::new(width_us, 1);
        let recent = probe.slots_for(recent_us);
        let breakdown = probe.slots_for(cfg.scaled_us(crate::windows::BREAKDOWN_S));
        let slots = (recent + probe.slots_for(base_us)).max(breakdown) + 1;
        Breakers {
            models: BTreeMap::new(),
            frozen: BTreeMap::new(),
            width_us,
            slots,
            recent,
            breakdown,
            idle_us: cfg.scaled_us(L1_IDLE_S),
        }
    }

    /// Adds one LLM call of `model` (already bounded). Calls must come in
    /// end-time order for L1 runs to mean "consecutive".
    pub fn add(&mut self, model: &str, c: &CallObservation, end_us: i64, now_us: i64) {
        let (w, n) = (self.width_us, self.slots);
        let m = self
            .models
            .entry(model.to_string())
            .or_insert_with(|| ModelState {
                run: 0,
                last_timeout_us: 0,
                last_call_us: 0,
                ring: Ring::new(w, n),
            });
        if c.timed_out() {
            m.run += 1;
            m.last_timeout_us = m.last_timeout_us.max(end_us);
        } else {
            m.run = 0;
        }
        m.last_call_us = m.last_call_us.max(end_us);
        if let Some(b) = m.ring.at(end_us, now_us) {
            b.add(c);
        }
    }

    /// Freezes the baseline of models whose L2 condition starts to hold at
    /// `now_us`, thaws those where it stopped.
    pub fn update_frozen(&mut self, now_us: i64, cfg: &SloConfig) {
        for m in self.stats(now_us, cfg) {
            match (m.l2, m.baseline_p99_seconds) {
                (true, Some(b)) => {
                    self.frozen.entry(m.model).or_insert((b, m.baseline_calls));
                }
                _ => {
                    self.frozen.remove(&m.model);
                }
            }
        }
    }

    /// Every model's breaker view at `now_us`.
    pub fn stats(&self, now_us: i64, cfg: &SloConfig) -> Vec<ModelStats> {
        self.models
            .iter()
            .map(|(name, m)| {
                let recent = sum_calls(m.ring.last(now_us, self.recent));
                let base = sum_calls(m.ring.range(now_us, self.recent, self.slots));
                let recent_p99 = recent.latency.quantile(0.99).map(|ms| ms / 1000.0);
                let (baseline, baseline_calls) = match self.frozen.get(name) {
                    Some((p, n)) => (Some(*p), *n),
                    None => (
                        (base.calls >= cfg.breaker_baseline_min_calls)
                            .then(|| base.latency.quantile(0.99).map(|ms| ms / 1000.0))
                            .flatten(),
                        base.calls,
                    ),
                };
                let run = if now_us - m.last_call_us > self.idle_us {
                    0
                } else {
                    m.run
                };
                let bd = sum_calls(m.ring.last(now_us, self.breakdown));
                ModelStats {
                    model: name.clone(),
                    consecutive_timeouts: run,
                    p99_seconds: recent_p99,
                    recent_calls: recent.calls,
                    baseline_p99_seconds: baseline,
                    baseline_calls,
                    l1: run >= cfg.breaker_consecutive_timeouts,
                    l2: matches!((recent_p99, baseline), (Some(p), Some(b)) if p > cfg.breaker_p99_factor * b),
                    breakdown: CallStats {
                        name: name.clone(),
                        calls: bd.calls,
                        timeouts: bd.timeouts,
                        p99_seconds: bd.latency.quantile(0.99).map(|ms| ms / 1000.0),
                    },
                }
            })
            .collect()
    }
}
