//! `judge_slow`: an LLM-as-judge call held the time.

use super::shared::llm_stats;
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::{dur, median};
use crate::report::med_dur;
use overtime_model::{RootCauseKind as K, Stage};

/// The dominant call is an LLM-as-judge call (stage `judge`), whatever its
/// phases: grading an answer is a choice the service made, not the model
/// server's trouble. The component is the judge's model.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ llm qwen-72b 4.0 s ├ judge gpt-judge 25.0 s
/// → judge_slow on gpt-judge: "the LLM-as-judge call on gpt-judge took
///   25.0 s of 30.0 s"
/// ```
pub struct JudgeSlow;

impl Rule for JudgeSlow {
    fn kind(&self) -> K {
        K::JudgeSlow
    }
    fn label(&self) -> &'static str {
        "slow LLM-as-judge call"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is an LLM-as-judge call"
    }
    fn color(&self) -> &'static str {
        "#c2185b"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        c.stage == Stage::Judge
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        format!(
            "the LLM-as-judge call on {component} took {} of {}",
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let n = llm_stats(run, s);
        Some(match median(&n.tokens) {
            Some(t) => format!(
                "median judge latency {} for {t:.0} input tokens",
                med_dur(&n.latency)
            ),
            None => format!("median judge latency {}", med_dur(&n.latency)),
        })
    }
}
