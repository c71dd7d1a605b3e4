//! The root-cause rules (docs/diagnosis.md, "Root-cause kinds"): one
//! registry of named rules in priority order, the first that holds
//! decides.
//!
//! Design rules:
//! - **A rule owns its kind.** Each root-cause kind is one struct in a file
//!   of its own implementing [`Rule`]: its name (the kind's), its label and
//!   description for people, its condition, the words of its verdict
//!   (summary and evidence), its component and its incident statistics.
//!   Nothing else in the crate matches on a kind to word or count it.
//! - **One list, in order.** [`RULES`] is every rule, the rules over the
//!   whole trace first, then the rules over the dominant call; the first
//!   whose [`Rule::decide`] holds names the root cause, and the same list
//!   names the kind of each contributing call ([`Rule::holds_for`]). A rule
//!   switched off in `[diagnose] disabled_rules` ([`DisabledRules`]) is
//!   skipped as if it were not listed.
//! - **Every kind has its rule.** `RootCauseKind` stays an enum in
//!   `overtime-model` (the JSON contract of docs/diagnosis.md); the test
//!   `every_kind_has_exactly_one_rule` fails when a kind has no rule here,
//!   so a kind cannot be added and silently never be decided, worded or
//!   counted.
//! - **Thresholds are named settings.** Every number a rule compares with
//!   is a field of [`RuleThresholds`] (`[diagnose.rules]` in the config),
//!   documented there, its default written once.
//!
//! Adding a kind: its variant in `overtime-model/src/enums.rs`, one file
//! here with its struct (a doc comment with an example trace), its place in
//! [`RULES`], and its test in `tests/root_cause_kinds.rs`.

mod disabled;
mod evidence;
mod facts;
mod shared;

mod gateway_timeout_mismatch;
mod judge_slow;
mod llm_decode_slow;
mod llm_prefill_slow;
mod llm_queueing;
mod llm_slow;
mod pool_saturation;
mod retry_amplification;
mod serial_budget_exhaustion;
mod stream_idle_gap;
mod tool_no_timeout;
mod tool_slow;
mod unknown;
mod upstream_connect_slow;

pub use disabled::{DisabledRules, RuleNameError};
pub use facts::{Facts, RuleThresholds};

use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use overtime_model::{Contributing, RootCause, RootCauseKind as K};
use serde::Serialize;

/// Every rule, in priority order: the first that decides wins. The rules
/// over the whole trace come first; the others look at the dominant call
/// (and name the kind of each contributing call) in this order.
pub static RULES: &[&dyn Rule] = &[
    &stream_idle_gap::StreamIdleGap,
    &gateway_timeout_mismatch::GatewayTimeoutMismatch,
    &serial_budget_exhaustion::SerialBudgetExhaustion,
    &pool_saturation::PoolSaturation,
    &upstream_connect_slow::UpstreamConnectSlow,
    &unknown::Unknown,
    &judge_slow::JudgeSlow,
    &retry_amplification::RetryAmplification,
    &llm_queueing::LlmQueueing,
    &llm_prefill_slow::LlmPrefillSlow,
    &llm_decode_slow::LlmDecodeSlow,
    &llm_slow::LlmSlow,
    &tool_no_timeout::ToolNoTimeout,
    &tool_slow::ToolSlow,
];

/// What a rule decided: the root cause and the causes that contributed.
pub type Decision = (RootCause, Vec<Contributing>);

/// One root-cause kind: when it holds, how it is worded and what its
/// incidents count. A rule over the whole trace overrides [`Rule::decide`];
/// a rule over one call says when a call is of its kind
/// ([`Rule::holds_for`]) and words it, and the default `decide` applies it
/// to the dominant call.
pub trait Rule: Sync {
    /// The kind this rule decides.
    fn kind(&self) -> K;

    /// The rule's name, what `[diagnose] disabled_rules` takes: the kind's.
    fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The kind for people, a few words (the UI's menus and legends).
    fn label(&self) -> &'static str;

    /// What the rule checks, one sentence (docs/diagnosis.md's table, held
    /// equal to it by a test; `GET /api/kinds`).
    fn checks(&self) -> &'static str;

    /// The kind's colour in the UI's charts (CSS).
    fn color(&self) -> &'static str;

    /// Whether a call is of this kind: the dominant call, and each
    /// contributing one. Rules over the whole trace keep the default: no
    /// call is.
    fn holds_for(&self, _c: &Call, _f: &Facts) -> bool {
        false
    }

    /// The decision, when the rule holds for this trace. The default: when
    /// the dominant call is of this kind, the root cause in this rule's
    /// words ([`Rule::component`], [`Rule::evidence`], [`Rule::summary`]).
    fn decide(&self, f: &Facts) -> Option<Decision> {
        on_dominant(self, f)
    }

    /// The component a person would name for a call of this kind.
    fn component(&self, c: &Call, _f: &Facts) -> String {
        c.component.clone()
    }

    /// The evidence lines about the dominant call (the gateway's line is
    /// put first by the caller).
    fn evidence(&self, c: &Call, f: &Facts) -> Vec<String> {
        evidence::call_evidence(c, f, None)
    }

    /// The verdict's one-line summary for the dominant call.
    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        evidence::held(c, f, component)
    }

    /// The statistics of an incident of this kind, added to `s` (which
    /// already has `elapsed_ms`), and the phrase its headline ends with.
    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String>;
}

/// [`Rule::decide`] for a rule over one call: the dominant call, when it is
/// of the rule's kind.
fn on_dominant<R: Rule + ?Sized>(rule: &R, f: &Facts) -> Option<Decision> {
    let dominant = f.calls.first()?;
    if !rule.holds_for(dominant, f) {
        return None;
    }
    let kind = rule.kind();
    let component = rule.component(dominant, f);
    let evidence = f.with_gateway(rule.evidence(dominant, f));
    let summary = rule.summary(dominant, f, &component);
    Some((
        RootCause {
            kind,
            component,
            share: f.share(dominant),
            summary,
            evidence,
        },
        contributing(f, dominant, Some(kind)),
    ))
}

/// Applies the rules in order ([`RULES`] less the switched-off ones);
/// returns the root cause and the contributing causes. When none holds the
/// cause is `unknown`, saying what is missing.
pub fn root_cause(f: &Facts) -> Decision {
    f.rules()
        .find_map(|r| r.decide(f))
        .unwrap_or_else(|| unknown::nothing_holds(f))
}

/// The rule that names the kind of one call: the first (switched on) that
/// holds for it.
fn call_rule(c: &Call, f: &Facts) -> Option<&'static dyn Rule> {
    f.rules().find(|r| r.holds_for(c, f))
}

/// The rule of `kind`, switched on or not (for the statistics of an
/// incident of that kind).
pub fn rule_of(kind: K) -> Option<&'static dyn Rule> {
    RULES.iter().copied().find(|r| r.kind() == kind)
}

/// Other calls that held at least [`RuleThresholds::contributing_share`] of
/// the request, and the retries of the dominant call.
fn contributing(f: &Facts, dominant: &Call, root: Option<K>) -> Vec<Contributing> {
    let mut out = Vec::new();
    let retries_listed = !f.disabled.contains(K::RetryAmplification.as_str());
    if dominant.attempts() >= 2 && root != Some(K::RetryAmplification) && retries_listed {
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
        let Some(rule) = call_rule(c, f) else {
            continue;
        };
        let k = rule.kind();
        if k == K::Unknown || (root == Some(k) && c.component == dominant.component) {
            continue;
        }
        out.push(Contributing {
            kind: k,
            component: rule.component(c, f),
            share: s,
        });
    }
    out
}

/// A root-cause kind as people and the UI see it (`GET /api/kinds`):
/// from its rule, in rule order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindInfo {
    /// The kind (and its rule's) contract name, e.g. `tool_no_timeout`.
    pub name: &'static str,
    /// The kind as an enum.
    #[serde(skip)]
    pub kind: K,
    /// A few words for people.
    pub label: &'static str,
    /// What the rule checks.
    pub description: &'static str,
    /// Its colour in charts (CSS).
    pub color: &'static str,
}

/// Every root-cause kind, in the order the rules are tried.
///
/// ```
/// let kinds = overtime_diagnose::root_cause_kinds();
/// assert_eq!(kinds[0].name, "stream_idle_gap");
/// assert!(kinds.iter().any(|k| k.name == "unknown"));
/// ```
pub fn root_cause_kinds() -> Vec<KindInfo> {
    RULES
        .iter()
        .map(|r| KindInfo {
            name: r.name(),
            kind: r.kind(),
            label: r.label(),
            description: r.checks(),
            color: r.color(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_exactly_one_rule() {
        for k in K::ALL {
            let n = RULES.iter().filter(|r| r.kind() == *k).count();
            assert_eq!(n, 1, "the kind {k} has {n} rules in RULES (one is wanted)");
        }
        assert_eq!(RULES.len(), K::ALL.len());
    }

    #[test]
    fn rules_are_named_after_their_kinds_and_described() {
        for r in RULES {
            assert_eq!(r.name(), r.kind().as_str());
            assert!(
                !r.label().is_empty() && !r.checks().is_empty(),
                "{}",
                r.name()
            );
            assert!(r.color().starts_with('#'), "{}", r.name());
        }
    }

    #[test]
    fn the_rules_run_in_this_order() {
        let names: Vec<&str> = RULES.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "stream_idle_gap",
                "gateway_timeout_mismatch",
                "serial_budget_exhaustion",
                "pool_saturation",
                "upstream_connect_slow",
                "unknown",
                "judge_slow",
                "retry_amplification",
                "llm_queueing",
                "llm_prefill_slow",
                "llm_decode_slow",
                "llm_slow",
                "tool_no_timeout",
                "tool_slow",
            ]
        );
    }
}
