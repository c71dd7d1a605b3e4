//! `tool_slow`: a tool call with a timeout held the time.

use super::shared::{tool_like, tool_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::{dur, dur_or_none};
use overtime_model::RootCauseKind as K;

/// The dominant call is a tool, memory or network call that had a
/// timeout: it was slow within it, or its timeout fired (the summary says
/// which). The component is the tool (or store).
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ llm 1.0 s ├ search_api 25.0 s (timeout 25.0 s, fired)
/// → tool_slow on search_api: "search_api held 25.0 s of 30.0 s; its
///   timeout fired after 25.0 s"
/// ```
pub struct ToolSlow;

impl Rule for ToolSlow {
    fn kind(&self) -> K {
        K::ToolSlow
    }
    fn label(&self) -> &'static str {
        "slow tool call"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is a tool, memory or network call that had a timeout"
    }
    fn color(&self) -> &'static str {
        "#b35c00"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        tool_like(c) && c.timeout_ms.is_some()
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        let (d, of) = (dur(c.critical_us as f64 / 1000.0), dur(f.elapsed_ms));
        if c.timed_out {
            format!(
                "{component} held {d} of {of}; its timeout fired after {}",
                dur_or_none(c.timeout_ms)
            )
        } else {
            format!(
                "{component} held {d} of {of} within its timeout of {}",
                dur_or_none(c.timeout_ms)
            )
        }
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        tool_stats(run, s)
    }
}
