//! `llm_prefill_slow`: the model call spent its time reading the prompt.

use super::shared::{llm_phase_is, llm_phase_summary, llm_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::median;
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The dominant call is a model call whose largest phase is prefill:
/// reading the prompt, which grows with its tokens. The incident compares
/// the median input tokens with `threshold_tokens`. The component is the
/// model.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ llm deepseek-r1 with 2400 input tokens 28.0 s: queue 0.4 s, prefill 22.0 s, decode 5.6 s
/// → llm_prefill_slow on deepseek-r1: "the LLM call to deepseek-r1 with 2400
///   input tokens spent 22.0 s in prefill, holding 28.0 s of 30.0 s"
/// ```
pub struct LlmPrefillSlow;

impl Rule for LlmPrefillSlow {
    fn kind(&self) -> K {
        K::LlmPrefillSlow
    }
    fn label(&self) -> &'static str {
        "slow LLM prefill"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is an LLM call whose largest phase is prefill (reading the prompt)"
    }
    fn color(&self) -> &'static str {
        "#5b2bb5"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        llm_phase_is(c, K::LlmPrefillSlow)
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        llm_phase_summary(K::LlmPrefillSlow, c, f, component)
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let n = llm_stats(run, s);
        let threshold = run.cfg.threshold_tokens;
        median(&n.tokens)
            .map(|m| {
                let cmp = if m > threshold as f64 { ">" } else { "≤" };
                format!("median input {m:.0} tokens {cmp} {threshold}")
            })
            .or_else(|| Some(format!("median prefill {}", med_dur(&n.prefill))))
    }
}
