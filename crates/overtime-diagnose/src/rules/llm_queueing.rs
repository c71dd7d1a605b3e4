//! `llm_queueing`: the model call waited in the model server's queue.

use super::evidence::call_evidence;
use super::shared::{llm_phase_is, llm_phase_summary, llm_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::{median, pct};
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The GPU load as a share (servers report 0–1 or a percentage).
fn gpu_share(g: f64) -> f64 {
    if g > 1.0 { g / 100.0 } else { g }
}

/// The dominant call is a model call whose largest phase, as the model
/// server reported it (`X-LLM-Reason`, a vLLM/SGLang span, TGI's headers),
/// is the queue: the server had no room for it. The evidence adds the GPU
/// load when the server gave it. The component is the model.
///
/// ```text
/// edge answered 504 after 60.0 s
/// agent-api ├ llm qwen-72b 58.0 s: queue 41.0 s, prefill 2.0 s, decode 15.0 s
/// → llm_queueing on qwen-72b: "the LLM call to qwen-72b spent 41.0 s in
///   queue, holding 58.0 s of 60.0 s"
/// ```
pub struct LlmQueueing;

impl Rule for LlmQueueing {
    fn kind(&self) -> K {
        K::LlmQueueing
    }
    fn label(&self) -> &'static str {
        "LLM queued at the model server"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is an LLM call whose largest phase is the queue"
    }
    fn color(&self) -> &'static str {
        "#c99700"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        llm_phase_is(c, K::LlmQueueing)
    }

    fn evidence(&self, c: &Call, f: &Facts) -> Vec<String> {
        let gpu = c
            .gpu_load
            .map(|g| format!("GPU load {}", pct(gpu_share(g))));
        call_evidence(c, f, gpu)
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        llm_phase_summary(K::LlmQueueing, c, f, component)
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let n = llm_stats(run, s);
        let gpu = run.of_calls(|c| c.gpu_load.map(gpu_share));
        s.insert("gpu_load".into(), dist(&gpu));
        Some(match median(&gpu) {
            Some(g) => format!(
                "median queue wait {} at GPU load {:.0} %",
                med_dur(&n.queue),
                g * 100.0
            ),
            None => format!("median queue wait {}", med_dur(&n.queue)),
        })
    }
}
