//! The root-cause rules (docs/diagnosis.md, "Root-cause kinds"): an ordered
//! list of named rules, the first that matches decides.
//!
//! Design rules:
//! - **One list, in order.** [`TRACE_RULES`] is every rule that looks at the
//!   whole trace; the last of them, [`DominantCall`], hands the dominant call
//!   to [`CALL_RULES`], the rules that name the kind of one call. A new
//!   root-cause kind is one struct implementing [`TraceRule`] or
//!   [`CallRule`], placed in its list where it should win — nothing else.
//! - **Decisions apart from words.** A rule decides a kind, a component and
//!   a share; the evidence lines and the one-line summary for a kind are
//!   written in [`evidence`], the same for every rule that reaches it.
//! - **Thresholds are named settings.** Every number a rule compares with
//!   is a field of [`RuleThresholds`] (`[diagnose.rules]` in the config),
//!   documented there, its default written once.

mod call_rules;
mod evidence;
mod trace_rules;

pub use call_rules::{call_kind, component_for};
pub use trace_rules::TRACE_RULES;

use crate::calls::Call;
use crate::fmt::dur;
use crate::outcome::StreamGap;
use overtime_model::{Contributing, Outcome, RootCause, RootCauseKind as K};
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
}

impl Facts<'_> {
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
    fn with_gateway(&self, mut ev: Vec<String>) -> Vec<String> {
        if let Some(g) = self.gateway_line() {
            ev.insert(0, g);
        }
        ev
    }
}

/// What a rule decided: the root cause and the causes that contributed.
pub type Decision = (RootCause, Vec<Contributing>);

/// A rule over the whole trace.
pub trait TraceRule: Sync {
    /// The rule's name, as the kind it decides or what it looks for.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "the rules' order is tested by name")
    )]
    fn name(&self) -> &'static str;
    /// The decision, when the rule holds for this trace.
    fn decide(&self, f: &Facts) -> Option<Decision>;
}

/// A rule naming the kind of one call, for the dominant call and for the
/// contributing ones.
pub trait CallRule: Sync {
    /// The rule's name.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "the rules' order is tested by name")
    )]
    fn name(&self) -> &'static str;
    /// The call's kind, when this rule recognises the call.
    fn kind(&self, c: &Call, f: &Facts) -> Option<K>;
}

/// Applies [`TRACE_RULES`] in order; returns the root cause and the
/// contributing causes.
pub fn root_cause(f: &Facts) -> Decision {
    TRACE_RULES
        .iter()
        .find_map(|r| r.decide(f))
        .unwrap_or_else(|| {
            (
                evidence::unknown(f, "no rule matched", f.with_gateway(vec![])),
                vec![],
            )
        })
}

/// Other calls that held at least [`RuleThresholds::contributing_share`] of
/// the request, and the retries of the dominant call.
fn contributing(f: &Facts, dominant: &Call, root: Option<K>) -> Vec<Contributing> {
    let mut out = Vec::new();
    if dominant.attempts() >= 2 && root != Some(K::RetryAmplification) {
        let retries: i64 = dominant.attempt_critical_us.iter().skip(1).sum();
        out.push(Contributing {
            kind: K::RetryAmplification,
            component: dominant.component.clone(),
            share: (retries as f64 / 1000.0 / f.elapsed_ms.max(1.0)).min(1.0),
        });
    }
    for c in f.calls.iter().skip(usize::from(root.is_some())) {
        let s = f.share(c);
        if s < f.thresholds.contributing_share {
            break;
        }
        let k = call_kind(c, f);
        if k == K::Unknown || (root == Some(k) && c.component == dominant.component) {
            continue;
        }
        out.push(Contributing {
            kind: k,
            component: component_for(k, c, f),
            share: s,
        });
    }
    out
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn rules_run_in_this_order() {
        use super::TRACE_RULES;
        use super::call_rules::CALL_RULES;
        let names: Vec<&str> = TRACE_RULES.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "stream_idle_gap",
                "no_critical_path",
                "gateway_timeout_mismatch",
                "serial_budget_exhaustion",
                "dominant_call"
            ]
        );
        assert_eq!(CALL_RULES.first().unwrap().name(), "pool_wait");
    }
}
