//! `serial_budget_exhaustion`: several calls in series, none dominant.

use super::shared::critical_spans;
use super::{Decision, Facts, Rule, contributing};
use crate::calls::CallKind;
use crate::cause_stats::{Run, Stats};
use crate::fmt::{dur, pct};
use crate::report::med_dur;
use overtime_model::{RootCause, RootCauseKind as K};

/// At least two calls on the critical path and none holding
/// [`dominant_share`](super::RuleThresholds::dominant_share) of the
/// elapsed time: the chain as a whole ran out of budget, and blaming its
/// largest call would mislead.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ search 8.0 s ├ llm 9.0 s ├ rerank 7.0 s ├ llm 6.0 s
/// → serial_budget_exhaustion on agent-api: "4 calls in series used up the
///   30.0 s budget; none alone was slow enough to blame"
/// ```
pub struct SerialBudgetExhaustion;

impl Rule for SerialBudgetExhaustion {
    fn kind(&self) -> K {
        K::SerialBudgetExhaustion
    }
    fn label(&self) -> &'static str {
        "calls in series ran out the budget"
    }
    fn checks(&self) -> &'static str {
        "no single call holds 40 % of the elapsed time and at least two calls are on the critical path: the chain as a whole ran out"
    }
    fn color(&self) -> &'static str {
        "#5f3dc4"
    }

    fn decide(&self, f: &Facts) -> Option<Decision> {
        let dominant = f.calls.first()?;
        let share = f.share(dominant);
        let n = critical_spans(f).count();
        if share >= f.thresholds.dominant_share || n < 2 {
            return None;
        }
        let top: Vec<String> = f
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Span)
            .take(3)
            .map(|c| format!("{} {}", c.component, dur(c.critical_us as f64 / 1000.0)))
            .collect();
        let ev = f.with_gateway(vec![
            format!(
                "no single call dominates: the largest, {}, holds {} of {}",
                dominant.component,
                pct(share),
                dur(f.elapsed_ms)
            ),
            format!("{n} calls on the critical path: {}", top.join(", ")),
        ]);
        Some((
            RootCause {
                kind: K::SerialBudgetExhaustion,
                component: f.service.clone(),
                share,
                summary: format!(
                    "{n} calls in series used up the {} budget; none alone was slow enough to blame",
                    dur(f.elapsed_ms)
                ),
                evidence: ev,
            },
            contributing(f, dominant, None),
        ))
    }

    fn stats(&self, run: &Run, _s: &mut Stats) -> Option<String> {
        Some(format!(
            "median request {} with no dominant call",
            med_dur(&run.elapsed())
        ))
    }
}
