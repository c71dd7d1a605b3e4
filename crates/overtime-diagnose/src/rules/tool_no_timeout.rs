//! `tool_no_timeout`: a tool call with no timeout held the time.

use super::shared::{tool_like, tool_stats};
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::dur;
use overtime_model::RootCauseKind as K;

/// The dominant call is a tool, memory or network call that ran with no
/// timeout: nothing would have stopped it before the request's budget ran
/// out. The component is the tool (or store).
///
/// ```text
/// edge answered 504 after 60.0 s (read timeout 60.0 s)
/// agent-api ├ llm 1.2 s ├ search_api 58.0 s… (no timeout)
/// → tool_no_timeout on search_api: "search_api ran 58.0 s with no timeout
///   while the request's 60.0 s ran out"
/// ```
pub struct ToolNoTimeout;

impl Rule for ToolNoTimeout {
    fn kind(&self) -> K {
        K::ToolNoTimeout
    }
    fn label(&self) -> &'static str {
        "tool call with no timeout"
    }
    fn checks(&self) -> &'static str {
        "the dominant call is a tool, memory or network call with no timeout"
    }
    fn color(&self) -> &'static str {
        "#d9730d"
    }

    fn holds_for(&self, c: &Call, _f: &Facts) -> bool {
        tool_like(c) && c.timeout_ms.is_none()
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        format!(
            "{component} ran {} with no timeout while the request's {} ran out",
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        tool_stats(run, s)
    }
}
