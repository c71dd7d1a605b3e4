//! The words every rule shares: the evidence lines about a call (what it
//! held, its attempts, its timeout, the model server's phases and tokens,
//! DNS/connect) and the plain summary. What is particular to a kind is in
//! its rule's file.

use super::Facts;
use crate::calls::{Call, CallKind};
use crate::fmt::{dur, pct};

/// Evidence lines about one call; `model_line`, what the rule adds about
/// a model call after its phases and tokens.
pub fn call_evidence(c: &Call, f: &Facts, model_line: Option<String>) -> Vec<String> {
    let mut ev = Vec::new();
    let what = match c.kind {
        CallKind::Span => format!("{} ({})", c.component, c.stage),
        CallKind::PoolWait => format!("{} waiting before its first call", c.service),
        CallKind::Upstream => format!("the gateway waiting on upstream {}", c.component),
    };
    ev.push(format!(
        "{what} held {} of the {} request on the critical path ({})",
        dur(c.critical_us as f64 / 1000.0),
        dur(f.elapsed_ms),
        pct(f.share(c))
    ));
    let attempts = c.raw_attempts_ms();
    if attempts.len() >= 2 {
        let list: Vec<String> = attempts.iter().map(|a| dur(*a)).collect();
        let total: f64 = attempts.iter().sum();
        let over = match f.gateway_timeout_ms {
            Some(t) if total > t => format!(", more than the gateway timeout {}", dur(t)),
            _ => String::new(),
        };
        ev.push(format!(
            "{} attempts ({}), {} in all{over}",
            attempts.len(),
            list.join(", "),
            dur(total)
        ));
    }
    if let Some(g) = &c.gateway {
        ev.push(gateway_line(c, g, attempts.len()));
    }
    if c.kind == CallKind::Span {
        match (c.timeout_ms, c.timed_out) {
            (None, _) if c.cut => ev.push(format!(
                "{} ran with no timeout: it was still running when the request ended, and no timeout is recorded anywhere",
                c.component
            )),
            (None, _) if crate::findings::timeouts_recorded(f.calls) => {
                ev.push(format!("{} ran with no timeout", c.component))
            }
            (None, _) => ev.push(format!(
                "no timeout is recorded for {} (it did not fire)",
                c.component
            )),
            (Some(t), true) if c.timeout_observed => ev.push(format!(
                "its timeout fired after {} (observed: it ended in {}; the timeout it was given is not recorded)",
                dur(t),
                c.error_type.as_deref().unwrap_or("a timeout error")
            )),
            (Some(t), true) => ev.push(format!("its timeout of {} fired", dur(t))),
            (Some(t), false) => ev.push(format!("its timeout was {}", dur(t))),
        }
        if let Some(r) = c.remaining_budget_ms {
            ev.push(format!("it started with {} of budget left", dur(r)));
        }
    }
    if c.is_llm() {
        let phases: Vec<String> = c
            .phases
            .iter()
            .filter(|(n, _)| *n != "total")
            .map(|(n, v)| format!("{n} {}", dur(v)))
            .collect();
        let source = c.phase_source.as_deref().unwrap_or("model server");
        let total = c
            .phases
            .other
            .iter()
            .find(|(n, _)| n == "total")
            .map(|(_, v)| *v);
        if !phases.is_empty() {
            let of = total
                .map(|t| format!(" of {} as the server timed it", dur(t)))
                .unwrap_or_default();
            ev.push(format!(
                "model server phases ({source}): {}{of}",
                phases.join(", ")
            ));
        } else if let Some(t) = total {
            ev.push(format!(
                "the model server's own time ({source}): {} of the call's {}, with no phases",
                dur(t),
                dur(c.raw_attempts_ms().iter().sum())
            ));
        }
        if let Some(t) = c.input_tokens {
            let cmp = if t as f64 > f.threshold_tokens as f64 {
                ">"
            } else {
                "≤"
            };
            ev.push(format!(
                "input {t} tokens {cmp} threshold {}",
                f.threshold_tokens
            ));
        }
        if let Some(o) = c.output_tokens {
            let max = c
                .max_tokens
                .map(|m| format!(" of max_tokens {m}"))
                .unwrap_or_default();
            ev.push(format!("output {o} tokens{max}"));
        }
        if let Some(t) = c.ttft_ms {
            ev.push(format!("time to first token {}", dur(t)));
        }
        ev.extend(model_line);
    }
    if let Some(d) = c.dns_connect_ms
        && d > 0.0
    {
        let n = attempts.len().max(1);
        let per = match (c.dns_ms, n) {
            (Some(dns), n) if n >= 2 => {
                format!(" ({} DNS in each of {n} attempts)", dur(dns / n as f64))
            }
            (Some(dns), _) => format!(" ({} DNS)", dur(dns)),
            _ => String::new(),
        };
        ev.push(format!(
            "{} of its {} went to DNS/connect{per}",
            dur(d),
            dur(attempts
                .iter()
                .sum::<f64>()
                .max(c.duration_us() as f64 / 1000.0))
        ));
    }
    ev
}

/// What the LLM gateway a call went through did for it: its attempts and
/// the models it fell back to.
fn gateway_line(c: &Call, gateway: &str, attempts: usize) -> String {
    let fallback = match c.models_tried.split_first() {
        Some((from, to)) if !to.is_empty() => {
            format!(", falling back from {from} to {}", to.join(", then "))
        }
        _ => String::new(),
    };
    if attempts >= 2 {
        format!(
            "the LLM gateway {gateway} made the {attempts} attempts on the call's behalf (its own retries{fallback})"
        )
    } else {
        format!("through the LLM gateway {gateway}{fallback}")
    }
}

/// The plain summary: what the call held of the request.
pub fn held(c: &Call, f: &Facts, component: &str) -> String {
    format!(
        "{component} held {} of {}",
        dur(c.critical_us as f64 / 1000.0),
        dur(f.elapsed_ms)
    )
}
