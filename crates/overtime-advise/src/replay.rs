//! One trace replayed under a proposal.
//!
//! The request is replayed call by call, in the order its calls began:
//! - each attempt's latency is what it took when it finished; when it was
//!   cut (its own timeout, or with its request) and the proposal lets it
//!   run longer than it ran, the latency is drawn from the fitted law
//!   beyond the point where it was cut;
//! - its timeout is the proposal's (else today's); under a budget the
//!   service shares out (a share of the remaining budget, learned from the
//!   traces) the timeout is capped by that share of what is left;
//! - a call that now times out ends the request there (the service answers
//!   503 right away) unless the component is seen falling back, or retrying
//!   after a timeout; a call that now finishes lets the request go on, and
//!   so does one that failed (today too) in a request that was answered all
//!   the same;
//! - every call on the critical path that ends earlier or later moves what
//!   came after it by as much; the service answers at its old answer time
//!   moved by the same amount;
//! - the gateway (the tightest of its layers, proposed or today's) cuts an
//!   answer later than its read timeout: a 504; a stream is cut when its
//!   longest silence outlasts it.

use crate::attempts::{Timeouts, replay_call};
use crate::context::Context;
use crate::extract::{CallFacts, Class, TraceFacts};
use crate::proposal::Proposal;
use crate::stats::Rng;
use overtime_diagnose::{BUCKETS, bucket_of};
use overtime_model::Outcome;
use serde::{Deserialize, Serialize};

/// What the client got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// It answered (2xx).
    Ok,
    /// A call failed and a fallback answered.
    Fallback,
    /// The service gave up (a timeout or its budget) and answered 503
    /// before the gateway cut. Spelled `fast_503` everywhere (the counts'
    /// field, the transitions, the changed requests), as the docs do.
    #[serde(rename = "fast_503")]
    Fast503,
    /// The gateway cut it: 504.
    GatewayTimeout,
    /// Another failure.
    Error,
}

impl Fate {
    /// Whether the client got a failure (503, 504 or another error);
    /// a fallback answer is not one.
    pub fn failed(self) -> bool {
        matches!(self, Fate::Fast503 | Fate::GatewayTimeout | Fate::Error)
    }
    /// The name used in the JSON and the reports (`ok`, `fast_503`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Ok => "ok",
            Fate::Fallback => "fallback",
            Fate::Fast503 => "fast_503",
            Fate::GatewayTimeout => "gateway_timeout",
            Fate::Error => "error",
        }
    }
}

/// What the traces show happened.
pub(crate) fn observed(t: &TraceFacts) -> Fate {
    let status = t.status.or(t.service_status);
    if t.outcome == Outcome::GatewayTimeout || status == Some(504) {
        return Fate::GatewayTimeout;
    }
    if status.is_some_and(|s| s >= 500) {
        return if t.outcome == Outcome::ServiceTimeout || status == Some(503) {
            Fate::Fast503
        } else {
            Fate::Error
        };
    }
    if t.calls
        .iter()
        .any(|c| c.failed() && c.fallback_ms.is_some())
    {
        return Fate::Fallback;
    }
    Fate::Ok
}

/// One replayed request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayed {
    pub fate: Fate,
    /// What the client would wait (ms).
    pub elapsed_ms: f64,
    /// A cut call's latency was drawn from a fitted law.
    pub drawn: bool,
    /// A call that ended the request before now finishes: what would have
    /// run after it was never seen, and is taken to take no time.
    pub unseen: bool,
    /// A cut call had no law to draw from: taken to outlast every timeout.
    pub no_law: bool,
    /// One line on what decided it.
    pub why: String,
}

fn fmt_ms(ms: f64) -> String {
    overtime_diagnose::fmt::dur(ms)
}

/// The proposal's timeout for a call, else `None` (not set).
fn proposed_timeout(p: &Proposal, c: &CallFacts) -> Option<Option<f64>> {
    match c.class {
        Class::Llm => {
            let b = c.tokens_in.map_or("*", |t| BUCKETS[bucket_of(t)]);
            p.llm_timeout_for(&c.component, b)
        }
        _ => p.tool_timeout_for(&c.component),
    }
}

/// The cap (the timeout before any budget share) a call ran under today.
fn cap_now(cx: &Context, c: &CallFacts, share: Option<f64>) -> Option<f64> {
    match (share, c.timeout_ms, c.remaining_budget_ms) {
        (Some(f), Some(to), Some(rem)) if to >= f * rem * 0.98 && !c.timeout_observed => {
            cx.cap.get(&c.component).copied()
        }
        (_, to, _) => to,
    }
}

/// Replays `t` under `p`.
pub(crate) fn replay(t: &TraceFacts, p: &Proposal, cx: &Context, rng: &mut Rng) -> Replayed {
    let before = observed(t);
    let layers_gw: Vec<f64> = t
        .layers
        .iter()
        .filter_map(|l| {
            p.gateway_for(l)
                .or_else(|| cx.layer_timeout.get(l).copied())
        })
        .collect();
    let gateway = layers_gw.into_iter().reduce(f64::min);
    let service = t.service.clone().unwrap_or_default();
    let budget = p.budget_for(&service).unwrap_or(t.budget_ms);
    let mut drawn = false;
    let mut no_law = false;
    let old_end = t.service_end_ms.unwrap_or(t.elapsed_ms);

    if t.calls.is_empty() {
        return replay_gateway_only(t, gateway, cx, rng, before);
    }
    // (old end of a critical call, how much later it now ends).
    let mut moved: Vec<(f64, f64)> = Vec::new();
    let shift_at = |moved: &[(f64, f64)], at: f64| -> f64 {
        moved
            .iter()
            .filter(|(end, _)| *end <= at + 1.0)
            .map(|(_, d)| d)
            .sum()
    };
    let mut failure: Option<(f64, Fate, String)> = None;
    let mut fell_back = false;
    let mut resumed_after_failure: Option<(f64, f64)> = None;
    for c in &t.calls {
        let shift = shift_at(&moved, c.start_ms());
        let start = c.start_ms() + shift;
        // The share of the remaining budget a call gets, where the traces
        // show one: on requests that ran under a budget (a route without
        // one today shows nothing of how it would share one out).
        let share = t
            .budget_ms
            .and_then(|_| cx.budget_share.get(&c.class).copied());
        if let Some(b) = budget
            && start >= b
            && share.is_none()
        {
            failure = Some((
                start,
                Fate::Fast503,
                format!(
                    "the {} budget was spent before {} began",
                    fmt_ms(b),
                    c.component
                ),
            ));
            break;
        }
        let proposed = proposed_timeout(p, c);
        let timeouts = Timeouts {
            cap: proposed.unwrap_or_else(|| cap_now(cx, c, share)),
            today: proposed.is_none() && p.budget_for(&service).is_none(),
            budget_share: budget.zip(share),
        };
        let retries_on = p.retries_for(&c.component).unwrap_or(true);
        let run = replay_call(c, start, &timeouts, retries_on, cx, rng);
        drawn |= run.drawn;
        no_law |= run.no_law;
        let (clock, ok, timed_out) = (run.end, run.ok, run.timed_out);
        let new_end = clock;
        if c.critical {
            moved.push((c.end_ms(), new_end - c.end_ms() - shift));
        }
        let failed_before = c.failed();
        if !ok && failed_before && !before.failed() && c.fallback_ms.is_none() {
            // It failed today too and the request was answered all the
            // same: the service goes on without it.
            continue;
        }
        if !ok {
            if c.fallback_ms.is_some()
                || (!failed_before && cx.fallback_ms.contains_key(&c.component))
            {
                if !failed_before {
                    let fb = cx.fallback_ms.get(&c.component).copied().unwrap_or(0.0);
                    if let Some(last) = moved.last_mut().filter(|_| c.critical) {
                        last.1 += fb;
                    }
                }
                fell_back = true;
                continue;
            }
            let fate = if timed_out {
                Fate::Fast503
            } else {
                Fate::Error
            };
            let why = if timed_out {
                format!(
                    "{} timed out at {} into the request",
                    c.component,
                    fmt_ms(new_end)
                )
            } else {
                format!("{} failed", c.component)
            };
            // A call that ended the request before too: the service took
            // as long to answer after it as it did then.
            let answer_after = if failed_before {
                (old_end - c.end_ms()).max(0.0)
            } else {
                0.0
            };
            failure = Some((new_end + answer_after, fate, why));
            break;
        }
        if failed_before && c.fallback_ms.is_none() {
            // It ended the request before; what ran after it was never seen.
            resumed_after_failure = Some((c.end_ms(), new_end));
        }
    }
    // A service with a deadline watchdog answers 503 at its budget.
    let watchdog = budget.and_then(|b| cx.deadline.get(&service).map(|late| b + late));
    let failure = match (failure, watchdog) {
        (Some((at, _, _)), Some(w)) if at > w => Some((
            w,
            Fate::Fast503,
            format!("the budget ran out at {}", fmt_ms(w)),
        )),
        (f, _) => f,
    };
    let (service_end, fate, mut why) = match failure {
        Some((at, fate, why)) => (at, fate, why),
        None => {
            let end = match resumed_after_failure {
                Some((old_call_end, new_call_end)) => {
                    new_call_end + (old_end - old_call_end).max(0.0)
                }
                None => old_end + shift_at(&moved, f64::INFINITY),
            };
            // The service gave up for a reason no call shows (its budget
            // ran out between calls): it still does.
            let own_failure = t.service_status.filter(|s| *s >= 500);
            let fate = if let (Some(st), None) = (own_failure, resumed_after_failure) {
                if st == 503 {
                    Fate::Fast503
                } else {
                    Fate::Error
                }
            } else if before == Fate::Error && resumed_after_failure.is_none() {
                Fate::Error
            } else if fell_back {
                Fate::Fallback
            } else {
                Fate::Ok
            };
            match watchdog {
                Some(w) if end > w => (
                    w,
                    Fate::Fast503,
                    format!("the budget ran out at {}", fmt_ms(w)),
                ),
                _ => (
                    end,
                    fate,
                    format!(
                        "the service answers at {} (was {})",
                        fmt_ms(end),
                        fmt_ms(old_end)
                    ),
                ),
            }
        }
    };
    // Its failure answers never reach the client: the gateway times out.
    let (service_end, fate) = match (fate, gateway) {
        (Fate::Fast503 | Fate::Error, Some(g)) if cx.masks.contains_key(&service) => {
            why = format!("{why}; the service's failure never reaches the gateway (seen before)");
            (service_end.max(g + 1.0), fate)
        }
        other => (service_end, other.0),
    };
    let overhead = if before == Fate::GatewayTimeout {
        0.0
    } else {
        (t.elapsed_ms - old_end).max(0.0)
    };
    let (fate, elapsed) = match (t.stream_gap_ms, gateway) {
        (Some(gap), Some(g)) if gap > g => {
            why = format!(
                "the stream stayed silent {} > the gateway's {}",
                fmt_ms(gap),
                fmt_ms(g)
            );
            (Fate::GatewayTimeout, service_end.min(t.elapsed_ms))
        }
        (Some(_), _) => (fate, service_end + overhead),
        (None, Some(g)) if service_end > g => {
            why = format!("{why}; the gateway cut at {}", fmt_ms(g));
            (Fate::GatewayTimeout, g)
        }
        _ => (fate, service_end + overhead),
    };
    Replayed {
        fate,
        elapsed_ms: elapsed,
        drawn,
        unseen: resumed_after_failure.is_some(),
        no_law,
        why,
    }
}

/// A request seen only by the gateway: its time, cut at the read timeout.
fn replay_gateway_only(
    t: &TraceFacts,
    gateway: Option<f64>,
    cx: &Context,
    rng: &mut Rng,
    before: Fate,
) -> Replayed {
    let mut drawn = false;
    let mut no_law = false;
    let mut latency = t.elapsed_ms;
    if before == Fate::GatewayTimeout && gateway.is_none_or(|g| g > t.elapsed_ms) {
        let law = t.layers.first().and_then(|l| cx.layer_tails.get(l));
        match law {
            Some(f) => {
                drawn = true;
                latency = f.dist.draw_above(t.elapsed_ms, rng);
            }
            None => {
                no_law = true;
                latency = f64::INFINITY;
            }
        }
    }
    let (fate, elapsed) = match gateway {
        Some(g) if latency > g => (Fate::GatewayTimeout, g),
        _ if before == Fate::GatewayTimeout => (Fate::Ok, latency),
        _ => (before, latency),
    };
    Replayed {
        fate,
        elapsed_ms: elapsed,
        drawn,
        unseen: false,
        no_law,
        why: "gateway only (no spans)".into(),
    }
}
