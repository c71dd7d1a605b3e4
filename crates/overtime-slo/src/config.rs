//! `[slo]`: the SLIs, SLOs, breaker conditions and alert thresholds of
//! docs/metrics.md, computed live by `overtime-slo` and exposed on `/metrics`.
//!
//! Every duration is in seconds of *data time* (the end times of the
//! requests, not the wall clock) and is multiplied by `window_scale`:
//! tests replay an hour of traffic with `window_scale = 0.01` in 36 s.
//!
//! The config file's `[slo]` section is this type (overtime-config
//! composes it); every field has a serde default.
//!
//! ```
//! let slo: overtime_slo::SloConfig = serde_json::from_str(r#"{"window_scale": 0.01}"#).unwrap();
//! assert_eq!(slo.window_scale, 0.01);
//! assert_eq!(slo.semantic_success_score, 0.8); // defaulted
//! assert_eq!(slo.scaled_us(3600.0), 36_000_000);
//! ```

use serde::{Deserialize, Serialize};

/// Chain-health weights per stage (docs/metrics.md: llm 0.4, tool 0.3, memory 0.2,
/// network 0.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChainWeights {
    /// Weight of LLM calls (default 0.4).
    pub llm: f64,
    /// Weight of tool calls (default 0.3).
    pub tool: f64,
    /// Weight of memory calls (default 0.2).
    pub memory: f64,
    /// Weight of network calls (default 0.1).
    pub network: f64,
}

/// `[slo.early_warning]`: the leading signals of docs/advice.md and the alerts on
/// them. Each signal compares its last `short_window_s` with a baseline:
/// the `baseline_window_s` before that short window. An alert needs both a
/// large change and a significant one (a two-sample z-test on the counts,
/// so a quiet platform's noise does not page), over at least
/// `min_requests` (or `min_calls`) in the short window and five times as
/// many in the baseline, held for `for_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EarlyWarningConfig {
    /// Evaluate the early-warning alerts (the signals are always exported).
    pub enabled: bool,
    /// The window a signal is judged over (nominal seconds).
    pub short_window_s: f64,
    /// The baseline: this long, ending where the short window begins.
    pub baseline_window_s: f64,
    /// Fewest requests (chain health, semantic success) in the short
    /// window for an alert (the baseline needs five times as many).
    pub min_requests: u64,
    /// Fewest calls (near timeout, LLM wait share), likewise.
    pub min_calls: u64,
    /// The change must be at least this many standard errors (z-test).
    pub min_z: f64,
    /// A call or request "uses most of its timeout" at this share of it.
    pub near_timeout_share: f64,
    /// Chain health: alert when the healthy share fell at least this much
    /// below its baseline and is below `chain_healthy_below`.
    pub chain_healthy_drop: f64,
    /// …and is below this share.
    pub chain_healthy_below: f64,
    /// Near timeout: alert when the share of calls using most of their
    /// timeout is at least `near_timeout_above` and rose at least
    /// `near_timeout_rise` above its baseline.
    pub near_timeout_above: f64,
    /// …rose at least this much above its baseline.
    pub near_timeout_rise: f64,
    /// LLM wait: alert when the queue + prefill share of LLM time rose at
    /// least this much above its baseline and is at least `llm_wait_above`.
    pub llm_wait_rise: f64,
    /// …and is at least this share.
    pub llm_wait_above: f64,
    /// Semantic success (real answers / answers): alert when it fell at
    /// least this much below its baseline and is below
    /// `semantic_success_below`.
    pub semantic_success_drop: f64,
    /// …and is below this share.
    pub semantic_success_below: f64,
    /// Every early-warning condition must hold this long (the window
    /// tests; the fast CUSUM warnings fire at once and are kept this long).
    pub for_s: f64,
    /// The fast warnings' CUSUM threshold `h`, in standard errors
    /// (docs/alerts.md#early-warning).
    pub cusum_threshold: f64,
}

impl Default for EarlyWarningConfig {
    fn default() -> Self {
        EarlyWarningConfig {
            enabled: true,
            short_window_s: 300.0,
            baseline_window_s: 3300.0,
            min_requests: 20,
            min_calls: 20,
            min_z: 4.5,
            near_timeout_share: 0.8,
            chain_healthy_drop: 0.05,
            chain_healthy_below: 0.95,
            near_timeout_above: 0.05,
            near_timeout_rise: 0.03,
            llm_wait_rise: 0.10,
            llm_wait_above: 0.35,
            semantic_success_drop: 0.05,
            semantic_success_below: 0.95,
            for_s: 60.0,
            cusum_threshold: 5.0,
        }
    }
}

impl EarlyWarningConfig {
    fn validate(&self) -> Result<(), String> {
        for (n, v) in [
            ("short_window_s", self.short_window_s),
            ("baseline_window_s", self.baseline_window_s),
            ("min_z", self.min_z),
            ("cusum_threshold", self.cusum_threshold),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "slo.early_warning.{n} must be a positive number, not {v}"
                ));
            }
        }
        for (n, v) in [
            ("near_timeout_share", self.near_timeout_share),
            ("chain_healthy_drop", self.chain_healthy_drop),
            ("chain_healthy_below", self.chain_healthy_below),
            ("near_timeout_above", self.near_timeout_above),
            ("near_timeout_rise", self.near_timeout_rise),
            ("llm_wait_rise", self.llm_wait_rise),
            ("llm_wait_above", self.llm_wait_above),
            ("semantic_success_drop", self.semantic_success_drop),
            ("semantic_success_below", self.semantic_success_below),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!(
                    "slo.early_warning.{n} must be within 0..1, not {v}"
                ));
            }
        }
        if !(self.for_s.is_finite() && self.for_s >= 0.0) {
            return Err(format!(
                "slo.early_warning.for_s must be ≥ 0, not {}",
                self.for_s
            ));
        }
        if self.short_window_s >= self.baseline_window_s {
            return Err(
                "slo.early_warning.short_window_s must be shorter than baseline_window_s".into(),
            );
        }
        Ok(())
    }
}

impl Default for ChainWeights {
    fn default() -> Self {
        ChainWeights {
            llm: 0.4,
            tool: 0.3,
            memory: 0.2,
            network: 0.1,
        }
    }
}

/// The `[slo]` section: objectives, alert thresholds and holds, window scale and label caps (docs/metrics.md). Durations in seconds of data time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SloConfig {
    /// Multiplies every window, hold (`*_for_s`) and evaluation interval.
    pub window_scale: f64,
    /// Alerts are evaluated every this many seconds of data time.
    pub eval_interval_s: f64,
    /// Distinct values kept per metric label (route, model, tool…); the
    /// rest are reported as `other`.
    pub max_label_values: usize,
    /// A judged request succeeded semantically at this score or above.
    pub semantic_success_score: f64,
    /// SLO-1: this share of judged requests succeed semantically.
    pub semantic_success_objective: f64,
    /// Page when semantic success (5 min window) stays below this…
    pub semantic_success_alert_below: f64,
    /// …for this long.
    pub semantic_success_for_s: f64,
    /// At most 1 − this share of requests time out (0.995: 0.5 %).
    pub timeout_objective: f64,
    /// Burn-rate thresholds: page over 1 h and 5 min, page over 6 h and
    /// 30 min, ticket over 3 d and 6 h.
    pub burn_rate_fast: f64,
    /// Page when the timeout budget burns this many times too fast over 6 h and 30 min.
    pub burn_rate_slow: f64,
    /// Ticket when it burns this many times too fast over 3 d and 6 h.
    pub burn_rate_ticket: f64,
    /// SLO-3: `ttft_target_ratio` of LLM calls have TTFT ≤ `ttft_target_ms`
    /// and the P99 TTFT is ≤ `ttft_p99_ms` (5 min window).
    pub ttft_target_ms: f64,
    /// The share of LLM calls that must meet `ttft_target_ms`.
    pub ttft_target_ratio: f64,
    /// The highest acceptable P99 TTFT, ms.
    pub ttft_p99_ms: f64,
    /// Page when SLO-3 stays broken this long, s.
    pub ttft_for_s: f64,
    /// Each stage's weight in chain health.
    pub chain_health_weights: ChainWeights,
    /// Page when the last complete minute's chain health is below this.
    pub chain_health_alert_below: f64,
    /// L1: this many consecutive timed-out calls on one model.
    pub breaker_consecutive_timeouts: u32,
    /// L2: a model's P99 over `breaker_p99_window_s` above this factor × its
    /// baseline P99 (the P99 over `breaker_baseline_window_s` before that
    /// window), for `breaker_p99_for_s`.
    pub breaker_p99_factor: f64,
    /// L2's recent window, s.
    pub breaker_p99_window_s: f64,
    /// L2's baseline window (before the recent one), s.
    pub breaker_baseline_window_s: f64,
    /// Fewer calls than this in the baseline window: no baseline, no L2.
    pub breaker_baseline_min_calls: u64,
    /// L2 must hold this long, s.
    pub breaker_p99_for_s: f64,
    /// L3: error ratio over `breaker_error_window_s` above this, for
    /// `breaker_error_for_s`.
    pub breaker_error_ratio: f64,
    /// L3's window, s.
    pub breaker_error_window_s: f64,
    /// L3 must hold this long, s.
    pub breaker_error_for_s: f64,
    /// The leading signals and their alerts (docs/advice.md).
    pub early_warning: EarlyWarningConfig,
}

impl Default for SloConfig {
    fn default() -> Self {
        SloConfig {
            window_scale: 1.0,
            eval_interval_s: 5.0,
            max_label_values: 50,
            semantic_success_score: 0.8,
            semantic_success_objective: 0.95,
            semantic_success_alert_below: 0.75,
            semantic_success_for_s: 120.0,
            timeout_objective: 0.995,
            burn_rate_fast: 14.4,
            burn_rate_slow: 6.0,
            burn_rate_ticket: 1.0,
            ttft_target_ms: 800.0,
            ttft_target_ratio: 0.9,
            ttft_p99_ms: 2500.0,
            ttft_for_s: 0.0,
            chain_health_weights: ChainWeights::default(),
            chain_health_alert_below: 0.8,
            breaker_consecutive_timeouts: 3,
            breaker_p99_factor: 2.0,
            breaker_p99_window_s: 120.0,
            breaker_baseline_window_s: 3600.0,
            breaker_baseline_min_calls: 100,
            breaker_p99_for_s: 120.0,
            breaker_error_ratio: 0.15,
            breaker_error_window_s: 60.0,
            breaker_error_for_s: 60.0,
            early_warning: EarlyWarningConfig::default(),
        }
    }
}

impl SloConfig {
    /// `seconds` of nominal time, scaled, in µs (at least 1 µs).
    pub fn scaled_us(&self, seconds: f64) -> i64 {
        ((seconds * self.window_scale * 1e6).round() as i64).max(1)
    }

    /// Checks ranges; the message names the option.
    pub fn validate(&self) -> Result<(), String> {
        let finite_pos = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("slo.{name} must be a positive number, not {v}"))
            }
        };
        let unit = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("slo.{name} must be within 0..1, not {v}"))
            }
        };
        let non_neg = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("slo.{name} must be ≥ 0, not {v}"))
            }
        };
        finite_pos("window_scale", self.window_scale)?;
        finite_pos("eval_interval_s", self.eval_interval_s)?;
        if self.max_label_values == 0 {
            return Err("slo.max_label_values must be at least 1".into());
        }
        unit("semantic_success_score", self.semantic_success_score)?;
        unit(
            "semantic_success_objective",
            self.semantic_success_objective,
        )?;
        unit(
            "semantic_success_alert_below",
            self.semantic_success_alert_below,
        )?;
        unit("timeout_objective", self.timeout_objective)?;
        if self.timeout_objective >= 1.0 {
            return Err("slo.timeout_objective must be below 1 (it leaves no error budget)".into());
        }
        unit("ttft_target_ratio", self.ttft_target_ratio)?;
        unit("chain_health_alert_below", self.chain_health_alert_below)?;
        unit("breaker_error_ratio", self.breaker_error_ratio)?;
        for (n, v) in [
            ("burn_rate_fast", self.burn_rate_fast),
            ("burn_rate_slow", self.burn_rate_slow),
            ("burn_rate_ticket", self.burn_rate_ticket),
            ("ttft_target_ms", self.ttft_target_ms),
            ("ttft_p99_ms", self.ttft_p99_ms),
            ("breaker_p99_factor", self.breaker_p99_factor),
            ("breaker_p99_window_s", self.breaker_p99_window_s),
            ("breaker_baseline_window_s", self.breaker_baseline_window_s),
            ("breaker_error_window_s", self.breaker_error_window_s),
        ] {
            finite_pos(n, v)?;
        }
        for (n, v) in [
            ("semantic_success_for_s", self.semantic_success_for_s),
            ("ttft_for_s", self.ttft_for_s),
            ("breaker_p99_for_s", self.breaker_p99_for_s),
            ("breaker_error_for_s", self.breaker_error_for_s),
        ] {
            non_neg(n, v)?;
        }
        let w = &self.chain_health_weights;
        for (n, v) in [
            ("llm", w.llm),
            ("tool", w.tool),
            ("memory", w.memory),
            ("network", w.network),
        ] {
            unit(&format!("chain_health_weights.{n}"), v)?;
        }
        if self.breaker_consecutive_timeouts == 0 {
            return Err("slo.breaker_consecutive_timeouts must be at least 1".into());
        }
        self.early_warning.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        let c = SloConfig {
            window_scale: 0.0,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("slo.window_scale"));
        let c = SloConfig {
            timeout_objective: 1.0,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("timeout_objective"));
        let mut c = SloConfig::default();
        c.chain_health_weights.tool = 1.5;
        assert!(
            c.validate()
                .unwrap_err()
                .contains("chain_health_weights.tool")
        );
        assert!(SloConfig::default().validate().is_ok());
        let mut c = SloConfig::default();
        c.early_warning.short_window_s = 4000.0;
        assert!(c.validate().unwrap_err().contains("short_window_s"));
        c.early_warning = EarlyWarningConfig {
            llm_wait_rise: 2.0,
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .contains("slo.early_warning.llm_wait_rise")
        );
    }

    #[test]
    fn scaling() {
        let c = SloConfig {
            window_scale: 0.001,
            ..Default::default()
        };
        assert_eq!(c.scaled_us(300.0), 300_000);
        assert_eq!(c.scaled_us(0.0), 1);
    }
}
