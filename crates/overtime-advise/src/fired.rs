//! Timeouts that fired, read from the attempts' durations.
//!
//! Instrumentation records the errors a timeout raises, rarely the
//! timeout itself. What the attempts do record is how long each ran, and
//! a client timeout makes every attempt it cuts last the same time. So:
//!
//! - **An attempt followed by a retry did not finish.** A client retries
//!   only after a failure; an earlier attempt whose span says nothing went
//!   wrong (the transport's span closed cleanly when the client gave up)
//!   still failed.
//! - **Attempts that cluster at one duration are timeouts that fired.**
//!   Per component, the unfinished attempts that got no answer (no HTTP
//!   status: a status means the server answered, which no timeout does)
//!   are grouped at ±2 % (at least ±20 ms); the densest group, when it
//!   holds at least three attempts, is a timeout that fired, and every
//!   attempt in it ended by that timeout (censored: it would have run
//!   longer).
//! - **The timeout is the cluster's median, never its shortest attempt.**
//!   The shortest member sits just under where the timeout fires; taking
//!   it as the timeout makes the attempt that set it look as if it fitted
//!   under its own timeout, and a replay of today's settings then lets it
//!   finish. A timeout recorded on the spans (configured) is kept.
//!
//! ```
//! use overtime_advise::fired_cluster;
//! // Three attempts cut at 1.5 s (with a scheduler's jitter), one error
//! // answered fast.
//! let (t, n) = fired_cluster(&[1_498.0, 1_503.0, 1_512.0, 40.0]).unwrap();
//! assert_eq!((t, n), (1_503.0, 3));
//! assert_eq!(fired_cluster(&[1_500.0, 2_900.0, 40.0]), None, "no three alike");
//! ```

use crate::extract::{End, TraceFacts};
use std::collections::BTreeMap;

// The clustering itself lives in overtime-model: the live early warning
// (overtime-slo) learns fired timeouts the same way.
pub use overtime_model::fired_cluster;

/// Whether `ms` lies in the cluster around `t` (the tolerance of
/// [`fired_cluster`], both ways).
pub(crate) fn in_cluster(ms: f64, t: f64) -> bool {
    (ms - t).abs() <= (t * 0.02).max(20.0)
}

/// Settles how every attempt ended and the timeout of every call whose
/// timeout was not configured, by the rules above; returns, per component
/// seen retrying after a timeout, how much its retries redo the same work
/// ([`same_work`]).
pub(crate) fn settle(traces: &mut [TraceFacts]) -> BTreeMap<String, f64> {
    // An attempt followed by a retry did not finish.
    for t in traces.iter_mut() {
        for c in &mut t.calls {
            let n = c.attempts.len();
            for a in c.attempts.iter_mut().take(n.saturating_sub(1)) {
                if a.end == End::Finished {
                    a.end = End::Failed;
                }
            }
        }
    }
    // Per component: where its attempts that timed out cluster (else its
    // unanswered failed ones: a timeout its instrumentation called an
    // error). Under 50 ms an unanswered failure is a refused connection,
    // not a timeout.
    let mut durations: BTreeMap<String, [Vec<f64>; 2]> = BTreeMap::new();
    for t in traces.iter() {
        for c in &t.calls {
            let d = durations.entry(c.component.clone()).or_default();
            for a in c.attempts.iter().filter(|a| !a.answered && a.ms >= 50.0) {
                match a.end {
                    End::TimedOut => d[0].push(a.ms),
                    End::Failed => d[1].push(a.ms),
                    _ => {}
                }
            }
        }
    }
    let fired: BTreeMap<String, f64> = durations
        .into_iter()
        .filter_map(|(k, [timed_out, failed])| {
            fired_cluster(&timed_out)
                .or_else(|| fired_cluster(&failed))
                .map(|(t, _)| (k, t))
        })
        .collect();
    for t in traces.iter_mut() {
        for c in &mut t.calls {
            let configured = c.timeout_ms.filter(|_| !c.timeout_observed);
            let Some(to) = configured.or_else(|| fired.get(&c.component).copied()) else {
                continue;
            };
            let mut in_it = false;
            for a in &mut c.attempts {
                if a.end == End::Failed && !a.answered && in_cluster(a.ms, to) {
                    a.end = End::TimedOut;
                }
                in_it |= a.end == End::TimedOut && in_cluster(a.ms, to);
            }
            // A call whose own timeouts fired elsewhere (a share of a
            // budget that varies) keeps the one it showed; one that showed
            // none may have run under another client's (one model, several
            // call sites with their own timeouts): nothing is assumed.
            if configured.is_none() && in_it {
                c.timeout_ms = Some(to);
                c.timeout_observed = true;
            }
        }
    }
    same_work(traces)
}

/// Per component seen retrying after a timeout: how much a retry takes as
/// long as the attempt before it. Independent draws time a retry out as
/// often as first attempts (`q`); the same work times it out again every
/// time. With `r` the share of retries after a timeout that timed out
/// again, `(r − q) / (1 − q)`, clamped to 0–1; 1 with fewer than three
/// such retries (a retry asks for the same work).
fn same_work(traces: &[TraceFacts]) -> BTreeMap<String, f64> {
    // (first attempts, of them timed out, retries after a timeout, of them
    // timed out again).
    let mut n: BTreeMap<&str, [f64; 4]> = BTreeMap::new();
    for t in traces {
        for c in &t.calls {
            let e = n.entry(c.component.as_str()).or_default();
            if let Some(a) = c.attempts.first() {
                e[0] += 1.0;
                e[1] += f64::from(u8::from(a.end == End::TimedOut));
            }
            for w in c.attempts.windows(2) {
                if w[0].end == End::TimedOut && w[1].end != End::Cut {
                    e[2] += 1.0;
                    e[3] += f64::from(u8::from(w[1].end == End::TimedOut));
                }
            }
        }
    }
    n.into_iter()
        .filter(|(_, e)| e[2] > 0.0)
        .map(|(comp, [first, first_out, retried, again])| {
            let q = first_out / first.max(1.0);
            let rho = if retried < 3.0 || q >= 1.0 {
                1.0
            } else {
                ((again / retried - q) / (1.0 - q)).clamp(0.0, 1.0)
            };
            (comp.to_string(), rho)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_the_middle_of_the_cluster_not_its_shortest_attempt() {
        let d = [1_496.0, 1_501.0, 1_502.0, 1_509.0, 1_520.0, 300.0, 310.0];
        let (t, n) = fired_cluster(&d).unwrap();
        assert_eq!(n, 5);
        assert_eq!(t, 1_502.0);
        assert!(in_cluster(1_496.0, t) && !in_cluster(1_300.0, t));
    }
}
