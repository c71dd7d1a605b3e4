//! One call's attempts replayed under a timeout, as its client makes
//! them (see [`crate::retry`] for how the client is learned).
//!
//! Design rules:
//! - An attempt that was seen is replayed as it went: a finished or failed
//!   one takes what it took; one cut by a timeout (or with its request)
//!   would have run longer than it ran — and longer than the timeout that
//!   fired on it, which is where its attempts cluster, not the shortest
//!   of them. A timeout no longer than that is **cut again** (at the same
//!   time as before when the timeout is today's): nothing is drawn, so a
//!   replay of today's settings gives today's outcome. A longer timeout
//!   draws its latency from the fitted law beyond that point.
//! - A timeout that fires is retried when the client was seen retrying
//!   after a timeout, up to the most attempts it was seen making: a retry
//!   seen is replayed as seen (after the gap seen before it); a retry
//!   never made today waits the client's backoff and asks for the same
//!   work — as long as the attempt before it with the learned
//!   `same_latency` chance, else a fresh draw from the law.
//! - `retries=off` keeps the first attempt only.

use crate::context::Context;
use crate::extract::{CallFacts, End};
use crate::stats::Rng;

/// How one call went under the replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CallRun {
    /// When its last attempt ended (ms from the request's start).
    pub end: f64,
    /// An attempt finished.
    pub ok: bool,
    /// The last attempt was cut by its timeout.
    pub timed_out: bool,
    /// A latency was drawn (or reused for a retry never made).
    pub drawn: bool,
    /// A latency had no law to come from (taken to outlast every timeout).
    pub no_law: bool,
    /// Attempts made.
    pub attempts: usize,
}

/// The call's timeout for an attempt beginning at `clock`.
pub(crate) struct Timeouts {
    /// The proposal's (or today's) timeout before any budget share.
    pub cap: Option<f64>,
    /// Whether `cap` is today's (nothing proposed for this call).
    pub today: bool,
    /// The budget and the share of what remains of it a call gets.
    pub budget_share: Option<(f64, f64)>,
}

impl Timeouts {
    fn at(&self, clock: f64) -> Option<f64> {
        let budget_cap = self.budget_share.map(|(b, f)| f * (b - clock).max(0.0));
        match (self.cap, budget_cap) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
}

/// Replays the attempts of `c` from `start`.
pub(crate) fn replay_call(
    c: &CallFacts,
    start: f64,
    to: &Timeouts,
    retries_on: bool,
    cx: &Context,
    rng: &mut Rng,
) -> CallRun {
    let rule = cx.retry.get(&c.component);
    let retry_after_timeout = rule.is_some_and(|r| r.after_timeout)
        || cx
            .retry_on_timeout
            .get(&c.component)
            .copied()
            .unwrap_or(false);
    let most = if retries_on {
        c.attempts.len().max(rule.map_or(1, |r| r.attempts))
    } else {
        1
    };
    let fired_today = c.timeout_ms;
    let mut run = CallRun {
        end: start,
        ok: false,
        timed_out: false,
        drawn: false,
        no_law: false,
        attempts: 0,
    };
    let mut clock = start;
    // What the work took, as far as the attempts so far tell.
    let mut work = Work::Unknown;
    let same = rule.map_or(1.0, |r| r.same_latency);
    let mut k = 0;
    while k < most {
        let seen = c.attempts.get(k);
        if k > 0 {
            clock += match (seen, c.attempts.get(k - 1)) {
                (Some(a), Some(prev)) => (a.start_ms - (prev.start_ms + prev.ms)).max(0.0),
                _ => rule.map_or(0.0, |r| r.backoff_ms(k, rng)),
            };
        }
        run.attempts = k + 1;
        let timeout = to.at(clock);
        // (latency, when it is cut by `timeout`: how long it ran).
        let (latency, cut_after) = match seen {
            Some(a) if a.end.censored() => {
                // It would have run beyond where it was cut, and beyond the
                // timeout that fired on it.
                let floor = match (a.end, fired_today) {
                    (End::TimedOut, Some(f)) => a.ms.max(f),
                    _ => a.ms,
                };
                let same_timeout = to.today && timeout == fired_today;
                let ran = |t: f64| if same_timeout { a.ms } else { t };
                if let Some(known) = a.known_ms {
                    (known, timeout.map(ran))
                } else if let Some(t) = timeout.filter(|t| *t <= floor) {
                    // Cut again: how long it would have run stays unknown.
                    (f64::INFINITY, Some(ran(t)))
                } else {
                    let l = again(work, floor, same, c, cx, rng);
                    match l {
                        Some(l) => {
                            run.drawn = true;
                            (l, timeout.map(ran))
                        }
                        None => {
                            run.no_law = true;
                            (f64::INFINITY, timeout)
                        }
                    }
                }
            }
            Some(a) => (a.ms, timeout),
            None => {
                // A retry never made today: the same work again.
                let l = again(work, 0.0, same, c, cx, rng);
                match l {
                    Some(l) => {
                        run.drawn = true;
                        (l, timeout)
                    }
                    None => {
                        run.no_law = true;
                        (f64::INFINITY, timeout)
                    }
                }
            }
        };
        work = if latency.is_finite() {
            Work::Took(latency)
        } else {
            // Cut again: it would have run longer than it was let.
            Work::Beyond(cut_after.or(timeout).unwrap_or(0.0))
        };
        match timeout {
            Some(t) if latency > t => {
                clock += cut_after.unwrap_or(t);
                run.timed_out = true;
                if !retry_after_timeout {
                    break;
                }
            }
            _ if latency.is_infinite() => {
                clock = f64::INFINITY;
                break;
            }
            _ => {
                clock += latency;
                run.timed_out = false;
                if seen.is_none_or(|a| a.end != End::Failed) {
                    run.ok = true;
                    break;
                }
                // A failure is retried only as it was seen.
                if k + 1 >= c.attempts.len() {
                    break;
                }
            }
        }
        k += 1;
    }
    run.end = clock;
    run
}

/// What the work of a call took, as its attempts so far tell.
#[derive(Debug, Clone, Copy)]
enum Work {
    Unknown,
    Took(f64),
    Beyond(f64),
}

/// The latency of an attempt known to outlast `floor`: with chance `same`
/// the same work as the attempt before (its latency, or a draw beyond
/// where it was cut), else a fresh draw beyond `floor`; `None` with no
/// law.
fn again(
    work: Work,
    floor: f64,
    same: f64,
    c: &CallFacts,
    cx: &Context,
    rng: &mut Rng,
) -> Option<f64> {
    let reuse = same >= 1.0 || (same > 0.0 && rng.uniform() < same);
    match work {
        Work::Took(l) if reuse && l > floor => Some(l),
        Work::Beyond(b) if reuse => cx.draw_beyond(c, b.max(floor), rng),
        _ => cx.draw_beyond(c, floor, rng),
    }
}
