//! What the rules look at for one trace ([`Facts`]) and the numbers they
//! compare with ([`RuleThresholds`]).

use super::{DisabledRules, RULES, Rule};
use crate::calls::Call;
use crate::fmt::dur;
use crate::outcome::StreamGap;
use overtime_model::Outcome;
use serde::{Deserialize, Serialize};

/// The numbers the rules compare with. Defaults are the values the rules
/// were calibrated with on the incidents in `tests/fixtures/incidents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleThresholds {
    /// `stream_idle_gap`: the silence at the end of a stream must reach this
    /// share of the gateway's read timeout (0.9: a gap of 54 s under a 60 s
    /// `proxy_read_timeout` is the cut, allowing for clock skew).
    pub stream_gap_of_read_timeout: f64,
    /// `stream_idle_gap` when the read timeout is unknown: the silence must
    /// reach this share of the whole request (0.5).
    pub stream_gap_of_elapsed: f64,
    /// `serial_budget_exhaustion`: below this share of the elapsed time no
    /// call dominates (0.4).
    pub dominant_share: f64,
    /// `upstream_connect_slow`: DNS and connect took at least this share of
    /// the call's running time (0.5).
    pub connect_share: f64,
    /// `retry_amplification`: every attempt held less than this share of the
    /// elapsed time (0.5), so the retries, not one attempt, ran it out.
    pub attempt_share: f64,
    /// A call is listed as contributing when it held at least this share of
    /// the request (0.1).
    pub contributing_share: f64,
}

impl Default for RuleThresholds {
    fn default() -> Self {
        RuleThresholds {
            stream_gap_of_read_timeout: 0.9,
            stream_gap_of_elapsed: 0.5,
            dominant_share: 0.4,
            connect_share: 0.5,
            attempt_share: 0.5,
            contributing_share: 0.1,
        }
    }
}

/// What the rules look at for one trace.
pub struct Facts<'a> {
    pub outcome: Outcome,
    /// The calls on the critical path, the dominant first.
    pub calls: &'a [Call],
    pub elapsed_ms: f64,
    /// The service that owns the request (top span), or the gateway layer.
    pub service: String,
    pub has_spans: bool,
    pub gateway_status: Option<u16>,
    pub gateway_source: Option<String>,
    /// The deciding layer's read timeout, known or inferred.
    pub gateway_timeout_ms: Option<f64>,
    pub service_budget_ms: Option<f64>,
    pub stream: Option<StreamGap>,
    pub stream_component: Option<String>,
    pub threshold_tokens: u32,
    pub thresholds: &'a RuleThresholds,
    /// The rules switched off (`[diagnose] disabled_rules`).
    pub disabled: &'a DisabledRules,
}

impl Facts<'_> {
    /// The rules in force, in order: [`RULES`] less the switched-off ones.
    pub fn rules(&self) -> impl Iterator<Item = &'static dyn Rule> + '_ {
        RULES
            .iter()
            .copied()
            .filter(|r| !self.disabled.contains(r.name()))
    }

    /// A call's critical-path time over the request's elapsed time.
    pub fn share(&self, c: &Call) -> f64 {
        if self.elapsed_ms <= 0.0 {
            return 0.0;
        }
        (c.critical_us as f64 / 1000.0 / self.elapsed_ms).min(1.0)
    }

    /// Where the gateway gave up, as evidence.
    fn gateway_line(&self) -> Option<String> {
        let status = self.gateway_status?;
        let src = self
            .gateway_source
            .clone()
            .unwrap_or_else(|| "gateway".into());
        let t = self
            .gateway_timeout_ms
            .map(|t| format!(" (read timeout {})", dur(t)))
            .unwrap_or_default();
        Some(format!(
            "gateway {src} answered {status} after {}{t}",
            dur(self.elapsed_ms)
        ))
    }

    /// Evidence with the gateway's line first, when there is one.
    pub fn with_gateway(&self, mut ev: Vec<String>) -> Vec<String> {
        if let Some(g) = self.gateway_line() {
            ev.insert(0, g);
        }
        ev
    }
}
