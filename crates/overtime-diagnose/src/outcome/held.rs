//! A cut stream as nginx's own timings show it, for services whose spans
//! carry no chunks (Node's express writes neither chunk events nor a span
//! per write): nginx held the response open a whole read timeout after
//! the upstream's headers, and the service was still waiting on a call
//! when nginx wrote its line.
//!
//! Design rules:
//! - **Both signs, never one.** A long stream with heartbeats is held open
//!   too, but every call it waited on ended before its last byte; a call
//!   still running at the line without the long hold is a service doing
//!   work after it answered. Only the two together are a cut.
//! - **nginx's clock for the hold, the spans' for the waiting.** The hold
//!   is the answering try's `$upstream_response_time` −
//!   `$upstream_header_time`; the waiting is a call span (an operation or
//!   an attempt) that began at least half a read timeout before the line
//!   and ended after the service's server span did: a service finishes the
//!   calls an answer needs before it ends the answer, so a call that
//!   outlived the answer was cut off with it. With no server span, after
//!   nginx's line, when that is written with a millisecond clock (`$msec`).
//! - **Aborted together is cut too.** Which of the two a runtime ends
//!   first on the client's close is a race (Node ends its server span on
//!   the socket's close, then runs the handler that aborts the call — or
//!   the other way round): a call that ended *in error* (or cancelled) within
//!   [`ABORTED_TOGETHER_US`] of the answer was cut with it. A call that
//!   finished well just before a long stream's end was not.

use super::{StreamGap, service_node};
use crate::assemble::Trace;
use crate::shape::{Role, role};
use crate::tree::TraceTree;
use overtime_model::{GatewayRecord, SpanStatus};

/// The hold must reach this share of the read timeout (as a silence must).
const HOLD_OF_READ_TIMEOUT: f64 = 0.9;

/// The coarsest clock of a line this reading trusts (with no server span
/// to compare with), and how long after the line a call must end to have
/// been still running at it, µs.
const FINE_CLOCK_US: i64 = 1_000;

/// How close to the answer's end a call that ended in error counts as
/// aborted with it, µs.
const ABORTED_TOGETHER_US: i64 = 50_000;

/// A call span that says it did not complete: ended in error or
/// cancelled, or left UNSET by an instrumentation that marks every
/// completed operation OK (OpenInference's do).
fn did_not_complete(s: &overtime_model::SpanRecord) -> bool {
    match s.status {
        SpanStatus::Error | SpanStatus::Cancelled => true,
        SpanStatus::Unset => s
            .attributes
            .iter()
            .any(|(k, _)| k == "openinference.span.kind"),
        _ => false,
    }
}

/// The stream nginx held open and cut ([`StreamGap`] with no events: the
/// last byte nginx is known to have had is the headers), when both signs
/// of the module's design rules are there.
pub(crate) fn held_open(
    trace: &Trace,
    tree: &TraceTree,
    gw: &GatewayRecord,
    read_timeout_ms: Option<f64>,
) -> Option<StreamGap> {
    if !gw.status.is_some_and(|s| (200..300).contains(&s)) {
        return None;
    }
    let t = read_timeout_ms.filter(|t| *t > 0.0)?;
    let header = gw.upstream_header_ms.last().copied().flatten()?;
    let response = gw.upstream_response_ms.last().copied().flatten()?;
    let held = response - header;
    if held < HOLD_OF_READ_TIMEOUT * t {
        return None;
    }
    let root = &tree.nodes[tree.root];
    let line = root.end_us;
    // The moment the service was done answering: its server span's end
    // (its own clock, the same as its calls'); else nginx's line, when
    // written with a millisecond clock ($msec) that can tell a call that
    // ended after it from one that ended just before it.
    let answered = match service_node(trace, tree) {
        Some((n, _)) => tree.nodes[n].raw_end_us,
        None if gw.time_precision_us <= FINE_CLOCK_US => line + FINE_CLOCK_US,
        None => return None,
    };
    let waiting = tree.nodes.iter().any(|n| {
        n.span.is_some_and(|i| {
            let s = &trace.spans[i];
            matches!(role(s), Role::Operation | Role::Transport)
                && s.start_us + tree.shift_us[i] <= line - (t * 500.0) as i64
                && (n.raw_end_us > answered
                    || (did_not_complete(s) && n.raw_end_us > answered - ABORTED_TOGETHER_US))
        })
    });
    if !waiting {
        return None;
    }
    let span = service_node(trace, tree)
        .map(|(n, _)| n)
        .and_then(|n| tree.nodes[n].span)
        .or_else(|| tree.nodes.iter().find_map(|n| n.span))?;
    let headers_at = (root.end_us - root.start_us) as f64 / 1000.0 - held;
    Some(StreamGap {
        span,
        gap_ms: held,
        at_end: true,
        events: 0,
        last_event_ms: headers_at.max(0.0),
        depth: 0,
    })
}
