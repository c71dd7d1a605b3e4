//! The four ways a rewrite nests a call's spans (docs/diagnosis.md's
//! pictures of a call), and which one a call can be written in.
//!
//! - `children`: the HTTP attempts under the operation span;
//! - `siblings`: the attempts beside the operation, under its parent,
//!   overlapping it in time, to its endpoint;
//! - `repeated`: one operation span per attempt, each with its HTTP span,
//!   under one parent;
//! - `orphans`: the operation span never arrived; its attempts keep its id
//!   as their parent.

use super::model::Call;
use overtime_model::SpanStatus;

/// How a call's spans are nested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Nesting {
    Children,
    Siblings,
    Repeated,
    Orphans,
}

impl Nesting {
    pub const ALL: [Nesting; 4] = [
        Nesting::Children,
        Nesting::Siblings,
        Nesting::Repeated,
        Nesting::Orphans,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Nesting::Children => "children",
            Nesting::Siblings => "siblings",
            Nesting::Repeated => "repeated",
            Nesting::Orphans => "orphans",
        }
    }
}

/// The nesting call `c` is written in when `asked`, and whether that is
/// another (a fallback): siblings and repeated operations need one
/// endpoint (else nothing ties the attempts to the operation); repeated
/// operations and orphans need attempts one after the other (side by side
/// only their operation ties them together), repeated operations a sign
/// of a retry (a number, or every earlier try failed); several attempts with no
/// operation span and no sign of a retry (a number, every earlier one
/// failed) are one call only as orphans of their one lost parent. A call
/// with one attempt is the same repeated as it is as children.
pub fn nesting_for(c: &Call, writes_op: bool, asked: Nesting) -> (Nesting, Option<&'static str>) {
    let n = c.attempts.len();
    // The rewrite numbers the tries where the original numbered them.
    let looks_retried = n > 1
        && (c.numbered
            || c.attempts[..n - 1]
                .iter()
                .all(|a| matches!(a.status, SpanStatus::Error | SpanStatus::Timeout)));
    let mut nest = asked;
    let mut why = None;
    if matches!(nest, Nesting::Siblings | Nesting::Repeated) && !c.one_endpoint() {
        nest = Nesting::Children;
        why = Some("attempts to several addresses: written as children");
    }
    if matches!(nest, Nesting::Repeated | Nesting::Orphans) && n > 1 && !c.sequential {
        nest = Nesting::Children;
        why = Some("attempts side by side: written as children");
    }
    // One operation per try says "retried" only by a number or by the
    // earlier tries failing (Node's undici leaves a timed-out try unset).
    if nest == Nesting::Repeated && n > 1 && !looks_retried {
        nest = Nesting::Children;
        why = Some("tries with no number and no failure before the last: written as children");
    }
    if !writes_op && n > 1 && c.sequential && !looks_retried && nest != Nesting::Orphans {
        nest = Nesting::Orphans;
        why = Some(
            "tries with no operation written, no number and no failure before the last: written as orphans",
        );
    }
    if nest == Nesting::Repeated && n < 2 {
        return (Nesting::Children, None);
    }
    (nest, why.filter(|_| nest != asked))
}
