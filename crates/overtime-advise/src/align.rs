//! The alignment rule, top-down: sum of downstream timeouts < service
//! budget < gateway timeout (and each outer gateway above the one inside
//! it). Checked per service with the recommended values: which layer to
//! change first, by how much, and the budget that results at each layer.
//! Raises go from the outside in — a gateway raised after the service
//! behind it would turn the service's 503s into 504s in between.

use crate::advice::GroupAdvice;
use crate::extract::{CallFacts, Class, Dataset};
use crate::stats::percentile;
use overtime_diagnose::fmt::dur;
use overtime_diagnose::{BUCKETS, bucket_of};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One layer of the chain, outermost first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignStep {
    /// `gateway <name>`, `service <name> budget`, `downstream`.
    pub layer: String,
    /// `None`: no timeout at all (unbounded).
    pub current_ms: Option<f64>,
    /// The value the alignment rule asks of this layer (ms); `None` when
    /// the data cannot say.
    pub recommended_ms: Option<f64>,
    /// recommended − current (ms), when both are known.
    pub change_ms: Option<f64>,
    /// Why, in words, for the report.
    pub why: String,
}

/// The rule for one service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alignment {
    /// The service that owns the requests (their top span's service).
    pub service: String,
    /// Requests of this service the rule was checked on.
    pub traces: usize,
    /// The rule holds with today's values.
    pub holds_now: bool,
    /// The layers from the outermost gateway down to the calls.
    pub steps: Vec<AlignStep>,
    /// The layer to change first, with by how much.
    pub first: Option<String>,
}

/// Rounds up to a value an operator would write: 10 ms steps below 1 s,
/// 100 ms below 10 s, whole seconds above.
pub(crate) fn nice_up(ms: f64) -> f64 {
    let step = if ms < 1_000.0 {
        10.0
    } else if ms < 10_000.0 {
        100.0
    } else {
        1_000.0
    };
    (ms / step).ceil() * step
}

/// Headroom of each layer over the one inside it.
const HEADROOM: f64 = 1.1;

fn lookup(
    c: &CallFacts,
    llm: &BTreeMap<(&str, &str), f64>,
    other: &BTreeMap<&str, f64>,
) -> Option<f64> {
    match c.class {
        Class::Llm => {
            let b = c
                .tokens_in
                .map_or("unknown tokens", |t| BUCKETS[bucket_of(t)]);
            llm.get(&(c.component.as_str(), b)).copied()
        }
        _ => other.get(c.component.as_str()).copied(),
    }
}

/// The sum of a trace's downstream timeouts along its critical path (each
/// attempt gets its own); `None` when a call on it had none.
fn chain_sum(calls: &[CallFacts], per_call: impl Fn(&CallFacts) -> Option<f64>) -> Option<f64> {
    let mut sum = 0.0;
    for c in calls.iter().filter(|c| c.critical) {
        sum += per_call(c)? * c.attempts.len() as f64;
    }
    Some(sum)
}

/// The rule per service, with the recommended values of `llm` and `other`.
pub(crate) fn align(
    ds: &Dataset,
    llm: &[GroupAdvice],
    other: &[GroupAdvice],
    target: f64,
) -> Vec<Alignment> {
    let rec_llm: BTreeMap<(&str, &str), f64> = llm
        .iter()
        .filter_map(|g| {
            Some((
                (g.name.as_str(), g.bucket.as_deref()?),
                g.recommended_ms.or(g.timeout.as_ref().map(|t| t.ms))?,
            ))
        })
        .collect();
    let rec_other: BTreeMap<&str, f64> = other
        .iter()
        .filter_map(|g| {
            Some((
                g.name.as_str(),
                g.recommended_ms.or(g.timeout.as_ref().map(|t| t.ms))?,
            ))
        })
        .collect();
    let mut by_service: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in ds.traces.iter().enumerate() {
        if let Some(s) = &t.service {
            by_service.entry(s.as_str()).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for (service, idx) in by_service {
        let traces: Vec<_> = idx.iter().map(|&i| &ds.traces[i]).collect();
        // Layers this service sits behind, outermost first.
        let layers: Vec<&str> = ds
            .layers
            .iter()
            .map(|l| l.name.as_str())
            .filter(|l| traces.iter().any(|t| t.layers.iter().any(|x| x == l)))
            .collect();
        let budgets: Vec<f64> = traces.iter().filter_map(|t| t.budget_ms).collect();
        let budget_now = percentile(&budgets, 0.5);
        let now_sums: Vec<Option<f64>> = traces
            .iter()
            .map(|t| chain_sum(&t.calls, |c| c.timeout_ms))
            .collect();
        let unbounded_now = now_sums.iter().any(Option::is_none);
        let down_now = percentile(&now_sums.iter().flatten().copied().collect::<Vec<_>>(), 0.5);
        let rec_sums: Vec<f64> = traces
            .iter()
            .filter_map(|t| chain_sum(&t.calls, |c| lookup(c, &rec_llm, &rec_other)))
            .collect();
        let ends: Vec<f64> = traces.iter().filter_map(|t| t.service_end_ms).collect();
        let need_down = percentile(&rec_sums, target);
        let need_service = percentile(&ends, target);
        let Some(need) = need_down.into_iter().chain(need_service).reduce(f64::max) else {
            continue;
        };
        let budget_rec = nice_up(need * HEADROOM);
        let mut steps = Vec::new();
        // Gateways, innermost computed first, listed outermost first.
        let mut floor = budget_rec;
        let mut gw_steps = Vec::new();
        for l in layers.iter().rev() {
            let cur = ds.layer_timeout_ms(l);
            let need_here = nice_up((floor * HEADROOM).max(floor + 1_000.0));
            let rec = match cur {
                Some(c) if c >= need_here => c,
                _ => nice_up(need_here.max(1_000.0) / 1_000.0 * 1_000.0),
            };
            let why = match cur {
                Some(c) if c >= need_here => format!(
                    "{} already outlives what it waits for ({})",
                    dur(c),
                    dur(floor)
                ),
                Some(c) => format!(
                    "{} cuts before the {} inside it ends: the client would get a 504 where the service answers",
                    dur(c),
                    dur(floor)
                ),
                None => "no read timeout known for this layer".into(),
            };
            gw_steps.push(AlignStep {
                layer: format!("gateway {l}"),
                current_ms: cur,
                recommended_ms: Some(rec),
                change_ms: cur.map(|c| rec - c),
                why,
            });
            floor = rec;
        }
        gw_steps.reverse();
        steps.extend(gw_steps);
        let budget_why = match budget_now {
            None => format!(
                "no budget: set one above the {} the downstream calls need ({:.1} % of requests)",
                dur(need),
                target * 100.0
            ),
            // The rule is strict: a budget equal to what the calls need
            // ends together with a chain that uses all of its timeouts.
            Some(b) if b <= need => format!(
                "{} is not longer than the {} the downstream calls need",
                dur(b),
                dur(need)
            ),
            Some(b) => format!("{} covers the {} needed", dur(b), dur(need)),
        };
        let budget_final = match budget_now {
            Some(b) if b > need && b < floor_of(&steps).unwrap_or(f64::INFINITY) => b,
            _ => budget_rec,
        };
        steps.push(AlignStep {
            layer: format!("service {service} budget"),
            current_ms: budget_now,
            recommended_ms: Some(budget_final),
            change_ms: budget_now.map(|b| budget_final - b),
            why: budget_why,
        });
        steps.extend(llm_gateway_steps(&traces, &rec_llm, budget_final));
        steps.push(AlignStep {
            layer: "downstream (sum of timeouts on the critical path)".into(),
            current_ms: if unbounded_now { None } else { down_now },
            recommended_ms: need_down,
            change_ms: match (unbounded_now, down_now, need_down) {
                (false, Some(a), Some(b)) => Some(b - a),
                _ => None,
            },
            why: if unbounded_now {
                "a call on the path has no timeout: the chain is unbounded".into()
            } else {
                format!(
                    "the recommended per-call timeouts, summed ({:.1} % of requests)",
                    target * 100.0
                )
            },
        });
        let holds_now = rule_holds(
            &layers,
            ds,
            budget_now,
            (!unbounded_now).then_some(down_now).flatten(),
        );
        let first = steps
            .iter()
            .find(|s| match (s.current_ms, s.recommended_ms) {
                (Some(c), Some(r)) => (r - c).abs() > c * 0.02,
                (None, Some(_)) => true,
                _ => false,
            })
            .map(|s| match (s.current_ms, s.recommended_ms) {
                (Some(c), Some(r)) => format!(
                    "{}: {} → {} ({}{})",
                    s.layer,
                    dur(c),
                    dur(r),
                    if r >= c { "+" } else { "−" },
                    dur((r - c).abs())
                ),
                (_, Some(r)) => format!("{}: none → {}", s.layer, dur(r)),
                _ => s.layer.clone(),
            });
        out.push(Alignment {
            service: service.to_string(),
            traces: traces.len(),
            holds_now,
            steps,
            first,
        });
    }
    out
}

/// The median of `v`, `None` when empty.
fn median(v: &[f64]) -> Option<f64> {
    percentile(v, 0.5)
}

/// An LLM gateway's retry loop — its per-attempt `timeout` times its
/// attempts, plus the backoff between them — is a layer of the chain
/// inside the service's budget. Per gateway the service's calls went
/// through: today's loop (the timeout that fired, the most attempts seen,
/// the median pause between attempts) and the one that fits the
/// recommended budget with the models' recommended timeouts — as LiteLLM's
/// `timeout`, `num_retries` and `stream_timeout` when the gateway is
/// LiteLLM.
fn llm_gateway_steps(
    traces: &[&crate::extract::TraceFacts],
    rec_llm: &BTreeMap<(&str, &str), f64>,
    budget_ms: f64,
) -> Vec<AlignStep> {
    // Per gateway: its calls, and the pauses between their attempts (an
    // attempt that began after the request ended shows no pause: its
    // start is clamped to the end).
    let mut by_gateway: BTreeMap<&str, (Vec<&CallFacts>, Vec<f64>)> = BTreeMap::new();
    for t in traces {
        for c in t.calls.iter().filter(|c| c.class == Class::Llm) {
            if let Some(g) = &c.gateway {
                let (calls, pauses) = by_gateway.entry(g.as_str()).or_default();
                calls.push(c);
                pauses.extend(
                    c.attempts
                        .windows(2)
                        .filter(|w| w[1].start_ms < t.elapsed_ms - 1.0)
                        .map(|w| (w[1].start_ms - (w[0].start_ms + w[0].ms)).max(0.0)),
                );
            }
        }
    }
    let mut out = Vec::new();
    for (gateway, (calls, pauses)) in by_gateway {
        let fired: Vec<f64> = calls.iter().filter_map(|c| c.timeout_ms).collect();
        let attempts = calls.iter().map(|c| c.attempts.len()).max().unwrap_or(1);
        // The backoff of its retries (a fallback's pause is shorter): the
        // longer pauses, to keep the loop inside the budget.
        let pause = percentile(&pauses, 0.9).unwrap_or(0.0);
        let wanted: Vec<f64> = calls
            .iter()
            .filter_map(|c| lookup(c, rec_llm, &BTreeMap::new()))
            .collect();
        let (Some(timeout), Some(now)) = (median(&wanted), median(&fired)) else {
            continue;
        };
        let timeout = nice_up(timeout);
        let loop_ms = |t: f64, retries: usize| t * (retries + 1) as f64 + pause * retries as f64;
        let room = budget_ms / HEADROOM;
        let retries = (0..attempts.max(3))
            .rev()
            .find(|&n| loop_ms(timeout, n) <= room)
            .unwrap_or(0);
        let current = loop_ms(now, attempts - 1);
        let recommended = loop_ms(timeout, retries);
        let settings = if gateway.to_ascii_lowercase().contains("litellm") {
            format!(
                "LiteLLM: `timeout: {}`, `stream_timeout: {}`, `num_retries: {retries}`",
                secs(timeout),
                secs(timeout)
            )
        } else {
            format!(
                "its per-attempt timeout {} and {retries} retries",
                dur(timeout)
            )
        };
        let today = format!(
            "today {} × {attempts} attempts{} = {}",
            dur(now),
            if attempts > 1 {
                format!(" + {} pauses", dur(pause))
            } else {
                String::new()
            },
            dur(current)
        );
        let why = if loop_ms(timeout, 0) > room {
            format!(
                "{today}; even one attempt with the model's recommended timeout ({}) does not fit the service's budget of {}: {settings}, and raise the budget",
                dur(timeout),
                dur(budget_ms)
            )
        } else {
            format!(
                "{today}; the retry loop must end inside the service's budget of {}: {settings}",
                dur(budget_ms)
            )
        };
        out.push(AlignStep {
            layer: format!("LLM gateway {gateway} (timeout × attempts + pauses)"),
            current_ms: Some(current),
            recommended_ms: Some(recommended),
            change_ms: Some(recommended - current),
            why,
        });
    }
    out
}

/// Seconds as a config file writes them (`1.5`, `30`).
fn secs(ms: f64) -> String {
    let s = ms / 1000.0;
    if (s - s.round()).abs() < 1e-9 {
        format!("{}", s.round())
    } else {
        format!("{s:.1}")
    }
}

/// The smallest recommended gateway timeout among the steps so far.
fn floor_of(steps: &[AlignStep]) -> Option<f64> {
    steps
        .iter()
        .filter_map(|s| s.recommended_ms)
        .reduce(f64::min)
}

fn rule_holds(layers: &[&str], ds: &Dataset, budget: Option<f64>, down: Option<f64>) -> bool {
    let gws: Vec<Option<f64>> = layers.iter().map(|l| ds.layer_timeout_ms(l)).collect();
    let inner_gw = gws.last().copied().flatten();
    let nested = gws
        .windows(2)
        .all(|w| matches!((w[0], w[1]), (Some(a), Some(b)) if a >= b));
    match (down, budget, inner_gw) {
        (Some(d), Some(b), Some(g)) => d < b && b < g && nested,
        (Some(d), None, Some(g)) => d < g && nested,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_up_rounds_to_a_readable_value() {
        assert_eq!(nice_up(43_210.0), 44_000.0);
        assert_eq!(nice_up(2_345.0), 2_400.0);
    }
}
