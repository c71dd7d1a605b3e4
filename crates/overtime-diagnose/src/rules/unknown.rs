//! `unknown`: too little data to name a cause; the verdict says what is
//! missing.

use super::evidence::call_evidence;
use super::shared::upstream_wait;
use super::{Decision, Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats};
use crate::fmt::dur;
use overtime_model::{RootCause, RootCauseKind as K};

/// Nothing on the critical path to blame: no calls at all (no spans, or
/// none that held time), or the gateway waiting on an upstream that wrote
/// no spans (and not in DNS/connect) — whatever held the time there is not
/// seen, so no later rule may guess it from the gateway's tries. It is
/// also what a trace gets when no rule holds ([`nothing_holds`]), and it
/// cannot be switched off. Never an incident's cause.
///
/// ```text
/// edge answered 504 after 60.0 s (read timeout 60.0 s); no spans
/// → unknown: "cannot tell where the 60.0 s went: no spans for this trace
///   (sampled out or not instrumented)"
/// ```
pub struct Unknown;

impl Rule for Unknown {
    fn kind(&self) -> K {
        K::Unknown
    }
    fn label(&self) -> &'static str {
        "not enough data"
    }
    fn checks(&self) -> &'static str {
        "too little data (no calls on the critical path, the gateway waiting on an upstream that wrote no spans, or no rule holds); the summary says what is missing (for example: no spans, the trace was sampled out)"
    }
    fn color(&self) -> &'static str {
        "#9aa3b2"
    }

    fn holds_for(&self, c: &Call, f: &Facts) -> bool {
        upstream_wait(c) && !f.has_spans
    }

    fn component(&self, _c: &Call, _f: &Facts) -> String {
        "—".into()
    }

    fn decide(&self, f: &Facts) -> Option<Decision> {
        match f.calls.first() {
            None => {
                let why = if f.has_spans {
                    "no calls on the critical path"
                } else {
                    NO_SPANS
                };
                Some((unknown(f, why, f.with_gateway(vec![])), vec![]))
            }
            Some(d) if self.holds_for(d, f) => Some(of_dominant(f, d)),
            Some(_) => None,
        }
    }

    fn stats(&self, _run: &Run, _s: &mut Stats) -> Option<String> {
        None
    }
}

const NO_SPANS: &str = "no spans for this trace (sampled out or not instrumented)";

/// The decision when no rule holds.
pub fn nothing_holds(f: &Facts) -> Decision {
    match f.calls.first() {
        Some(d) => of_dominant(f, d),
        None => Unknown
            .decide(f)
            .expect("a trace with no calls is always unknown"),
    }
}

/// `unknown` with the dominant call's evidence.
fn of_dominant(f: &Facts, dominant: &Call) -> Decision {
    let why = if f.has_spans {
        "the dominant time is in a span of no known stage"
    } else {
        NO_SPANS
    };
    let mut ev = f.with_gateway(vec![]);
    ev.extend(call_evidence(dominant, f, None));
    (unknown(f, why, ev), vec![])
}

/// An `unknown` root cause, saying what is missing.
fn unknown(f: &Facts, why: &str, mut evidence: Vec<String>) -> RootCause {
    evidence.push(format!("missing: {why}"));
    RootCause {
        kind: K::Unknown,
        component: "—".into(),
        share: 0.0,
        summary: format!("cannot tell where the {} went: {why}", dur(f.elapsed_ms)),
        evidence,
    }
}
