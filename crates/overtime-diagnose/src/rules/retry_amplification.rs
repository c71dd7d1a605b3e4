//! `retry_amplification`: the attempts added up; no single one was the
//! problem.

use super::shared::retried;
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::{dur, median};
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The dominant call was tried at least twice and no attempt held
/// [`attempt_share`](super::RuleThresholds::attempt_share) of the elapsed
/// time: the retries, not one slow attempt, ran the request out. Tried
/// before the model's phases (a retried model call is this kind) and
/// after slow DNS/connect (which retries only repeat). The component is the
/// call's tool or model; an LLM gateway's own retries and fallbacks are
/// named in the summary.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ search_api 9.0 s (timeout) ├ 9.0 s (timeout) ├ 9.0 s
/// → retry_amplification on search_api: "3 attempts at search_api held
///   27.0 s of 30.0 s; no single attempt was the problem"
/// ```
pub struct RetryAmplification;

impl Rule for RetryAmplification {
    fn kind(&self) -> K {
        K::RetryAmplification
    }
    fn label(&self) -> &'static str {
        "retries added up"
    }
    fn checks(&self) -> &'static str {
        "the dominant call had ≥ 2 attempts and no single attempt held ≥ 50 % of the elapsed time"
    }
    fn color(&self) -> &'static str {
        "#e8590c"
    }

    fn holds_for(&self, c: &Call, f: &Facts) -> bool {
        retried(c, f)
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        let by = match (&c.gateway, c.models_tried.split_first()) {
            (Some(g), Some((from, to))) if !to.is_empty() => format!(
                " by the LLM gateway {g}, falling back from {from} to {},",
                to.join(", then ")
            ),
            (Some(g), _) => format!(" by the LLM gateway {g}"),
            (None, _) => String::new(),
        };
        format!(
            "{} attempts at {component}{by} held {} of {}; no single attempt was the problem",
            c.attempts(),
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let attempts = run.of_calls(|c| Some(c.attempts() as f64));
        s.insert("attempts".into(), dist(&attempts));
        Some(format!(
            "median {:.0} attempts, {} in all",
            median(&attempts).unwrap_or(0.0),
            med_dur(&run.latency())
        ))
    }
}
