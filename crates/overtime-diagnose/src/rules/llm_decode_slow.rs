//! `llm_decode_slow`: the model call spent its time generating tokens.

use super::shared::{llm_phase_is, llm_phase_summary, llm_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::median;
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The dominant call is a model call whose largest phase is decode:
/// generating the answer, which grows with its output tokens. The
/// component is the model.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ llm qwen-72b 29.0 s: queue 0.2 s, prefill 0.8 s, decode 28.0 s; output 4000 tokens
/// → llm_decode_slow on qwen-72b: "the LLM call to qwen-72b spent 28.0 s in
///   decode, holding 29.0 s of 30.0 s"
/// ```
pub struct LlmDecodeSlow;

impl Rule for LlmDecodeSlow {
    fn kind(&self) -> K {
        K::LlmDecodeSlow
    }
    fn label(&self) -> &'static str {
        "slow LLM decode"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is an LLM call whose largest phase is decode (generating tokens)"
    }
    fn color(&self) -> &'static str {
        "#3f7be8"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        llm_phase_is(c, K::LlmDecodeSlow)
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        llm_phase_summary(K::LlmDecodeSlow, c, f, component)
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let n = llm_stats(run, s);
        Some(match median(&n.out_tokens) {
            Some(o) => format!(
                "median decode {}, median output {o:.0} tokens",
                med_dur(&n.decode)
            ),
            None => format!("median decode {}", med_dur(&n.decode)),
        })
    }
}
