//! `llm_slow`: a model call held the time and the server said not where.

use super::evidence::call_evidence;
use super::shared::{largest_llm_phase, llm_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::dur;
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The dominant call is a model call with no phase to name: the model
/// server reported none (a hosted API), or only prefill and decode together
/// without a queue that outweighs them. The component is the model.
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ llm gpt-4o 29.0 s (no X-LLM-Reason, no server span)
/// → llm_slow on gpt-4o: "the LLM call to gpt-4o held 29.0 s of 30.0 s;
///   the model server reported no phases"
/// ```
pub struct LlmSlow;

impl Rule for LlmSlow {
    fn kind(&self) -> K {
        K::LlmSlow
    }
    fn label(&self) -> &'static str {
        "slow LLM call"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is an LLM call with no phases known"
    }
    fn color(&self) -> &'static str {
        "#7b3fe4"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        c.is_llm() && largest_llm_phase(c).is_none()
    }

    fn evidence(&self, c: &Call, f: &Facts) -> Vec<String> {
        let mut ev = call_evidence(c, f, None);
        if c.phases.is_empty() {
            ev.push(
                "the model server reported no phases (no X-LLM-Reason, no vLLM/SGLang span, no TGI headers)"
                    .into(),
            );
        }
        ev
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        format!(
            "the LLM call to {component} held {} of {}; the model server reported no phases",
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let n = llm_stats(run, s);
        Some(format!("median LLM latency {}", med_dur(&n.latency)))
    }
}
