//! Configuration findings of docs/diagnosis.md#findings-configuration-not-one-call: not one call's fault, but the way
//! the timeouts of the chain are set.

use crate::calls::{Call, CallKind};
use crate::fmt::dur;
use crate::outcome::ServiceAnswer;
use crate::timeouts::LayerTimeout;
use overtime_model::{Finding, FindingKind as F, GatewayRecord, Stage};
use std::collections::BTreeMap;

/// Inputs of the findings for one trace.
pub struct FindingFacts<'a> {
    pub calls: &'a [Call],
    pub elapsed_ms: f64,
    pub service: &'a str,
    pub service_budget_ms: Option<f64>,
    /// Gateway records of the trace, outermost first, and the deciding one.
    pub gateway: &'a [GatewayRecord],
    pub deciding: Option<usize>,
    pub timeouts: &'a BTreeMap<String, LayerTimeout>,
    /// The service's own answer, before or after the gateway's.
    pub service_answer: Option<ServiceAnswer>,
}

/// Do this trace's spans record the timeouts calls were given (not only
/// the ones that fired)?
pub fn timeouts_recorded(calls: &[Call]) -> bool {
    calls
        .iter()
        .any(|c| c.timeout_ms.is_some() && !c.timeout_observed)
}

pub fn findings(f: &FindingFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    let gw = f.deciding.map(|i| &f.gateway[i]);
    let gw_timeout = gw.and_then(|g| f.timeouts.get(&g.source));

    // timeout_misaligned: sum(downstream timeouts) < service budget < gateway timeout.
    let critical: Vec<&Call> = f
        .calls
        .iter()
        .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
        .collect();
    let with_t: Vec<(&Call, f64)> = critical
        .iter()
        .filter_map(|c| c.timeout_ms.map(|t| (*c, t)))
        .collect();
    let sum: f64 = with_t.iter().map(|(c, t)| t * c.attempts() as f64).sum();
    // A 200 k-span trace must not make a megabyte finding: the first few
    // calls are named, the rest counted.
    const NAMED: usize = 8;
    let mut parts: Vec<String> = with_t
        .iter()
        .take(NAMED)
        .map(|(c, t)| {
            if c.attempts() > 1 {
                format!("{} {} × {}", c.component, dur(*t), c.attempts())
            } else {
                format!("{} {}", c.component, dur(*t))
            }
        })
        .collect();
    if with_t.len() > NAMED {
        parts.push(format!("and {} more calls", with_t.len() - NAMED));
    }
    let mut broken = Vec::new();
    match (f.service_budget_ms, gw_timeout) {
        (Some(b), _) if !with_t.is_empty() && sum >= b => broken.push(format!(
            "downstream timeouts on the critical path sum to {} ({}) ≥ the {} budget of {}",
            dur(sum),
            parts.join(", "),
            f.service,
            dur(b)
        )),
        (None, Some(t)) if !with_t.is_empty() && sum >= t.ms => broken.push(format!(
            "downstream timeouts on the critical path sum to {} ({}) ≥ the gateway timeout of {}",
            dur(sum),
            parts.join(", "),
            dur(t.ms)
        )),
        _ => {}
    }
    if let (Some(b), Some(t)) = (f.service_budget_ms, gw_timeout)
        && b >= t.ms
    {
        broken.push(format!(
            "the {} budget of {} ≥ the gateway {} timeout of {}",
            f.service,
            dur(b),
            gw.map(|g| g.source.as_str()).unwrap_or("?"),
            dur(t.ms)
        ));
    }
    // Layers: an outer layer must wait longer than the one inside it.
    for pair in f.gateway.windows(2) {
        if let (Some(o), Some(i)) = (
            f.timeouts.get(&pair[0].source),
            f.timeouts.get(&pair[1].source),
        ) && pair[0].source != pair[1].source
            && o.ms <= i.ms
        {
            broken.push(format!(
                "outer gateway {} times out at {} ≤ inner gateway {} at {}",
                pair[0].source,
                dur(o.ms),
                pair[1].source,
                dur(i.ms)
            ));
        }
    }
    if !broken.is_empty() {
        out.push(Finding {
            kind: F::TimeoutMisaligned,
            summary: format!("the alignment rule sum(downstream timeouts) < service budget < gateway timeout is broken: {}", broken.join("; ")),
        });
    }

    // semantic_mask: the service said one thing, the client saw another.
    if let Some(g) = gw {
        // Whichever answered first: a service that gave up after the
        // gateway had already cut sent its status to a closed connection.
        if let (Some(client), Some(a)) = (g.status, f.service_answer) {
            // Timeouts either way: the service's 503 (or its own timeout)
            // behind the gateway's 504, or the reverse.
            let timeout_answer = |s: u16| s == 503 || s == 504;
            let hidden = timeout_answer(client)
                && client != a.status
                && (timeout_answer(a.status) || (a.timed_out && client == 504));
            if hidden {
                let when = if a.after_gateway {
                    ", after the gateway had already answered: its status went to a closed connection"
                } else {
                    ""
                };
                out.push(Finding {
                    kind: F::SemanticMask,
                    summary: format!("{} answered {} at {}{when}, but the client saw {client} from gateway {} at {}: the gateway hid the real status", f.service, a.status, dur(a.at_ms), g.source, dur(f.elapsed_ms)),
                });
            }
        }
        let inner_mask = f.gateway.iter().find(|o| {
            o.layer > g.layer
                && o.status.is_some_and(|s| s >= 500)
                && o.status != g.status
                && g.status.is_some_and(|s| s >= 500)
        });
        if let Some(o) = inner_mask {
            out.push(Finding {
                kind: F::SemanticMask,
                summary: format!(
                    "inner gateway {} answered {} but the client saw {} from {}",
                    o.source,
                    o.status.unwrap_or(0),
                    g.status.unwrap_or(0),
                    g.source
                ),
            });
        }
    }

    // no_timeout: a call on the critical path ran with no timeout. Spans
    // that record configured timeouts say so by their absence; spans that
    // only show a timeout when it fires (off-the-shelf instrumentation)
    // say so only for a call still running when the request ended.
    let recorded = timeouts_recorded(f.calls);
    for c in critical.iter().filter(|c| c.cut || recorded) {
        let share = c.critical_us as f64 / 1000.0 / f.elapsed_ms.max(1.0);
        if c.timeout_ms.is_none()
            && share >= 0.05
            && matches!(
                c.stage,
                Stage::Tool | Stage::Memory | Stage::Network | Stage::Llm | Stage::Judge
            )
        {
            out.push(Finding {
                kind: F::NoTimeout,
                summary: format!(
                    "{} ({}) ran {} with no timeout",
                    c.component,
                    c.stage,
                    dur(c.raw_attempts_ms().iter().sum())
                ),
            });
        }
    }

    if let (Some(g), Some(t)) = (gw, gw_timeout)
        && t.inferred
    {
        out.push(Finding {
            kind: F::GatewayTimeoutInferred,
            summary: inferred_summary(&g.source, t),
        });
    }
    out
}

/// How a layer's read timeout was inferred, in words: from its own 504s'
/// request times, from the silences before the streams it cut, or both.
fn inferred_summary(source: &str, t: &LayerTimeout) -> String {
    let n504 = t.cluster - t.cut_streams;
    if t.cut_streams == 0 {
        return format!(
            "gateway {source} read timeout inferred as {} from {} of {} 504s clustered there",
            dur(t.ms),
            t.cluster,
            t.of
        );
    }
    let streams = match t.cut_streams {
        1 => "1 cut stream".to_string(),
        n => format!("{n} cut streams"),
    };
    let what = match n504 {
        0 => streams,
        n => format!("{n} 504s and {streams}"),
    };
    format!(
        "gateway {source} read timeout inferred as {} from {what} ({} of {} of the layer's cuts clustered there: 504s' request times and the silences from a stream's last byte to the gateway's line)",
        dur(t.ms),
        t.cluster,
        t.of
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inferred(cluster: usize, of: usize, cut_streams: usize) -> LayerTimeout {
        LayerTimeout {
            ms: 3_000.0,
            inferred: true,
            cluster,
            of,
            cut_streams,
        }
    }

    #[test]
    fn the_inferred_timeout_says_what_it_was_inferred_from() {
        assert_eq!(
            inferred_summary("edge", &inferred(4, 5, 0)),
            "gateway edge read timeout inferred as 3.0 s from 4 of 5 504s clustered there"
        );
        let both = inferred_summary("edge", &inferred(19, 20, 7));
        assert!(
            both.starts_with("gateway edge read timeout inferred as 3.0 s from 12 504s and 7 cut streams (19 of 20"),
            "{both}"
        );
        let streams = inferred_summary("inner", &inferred(3, 3, 3));
        assert!(streams.contains("from 3 cut streams (3 of 3"), "{streams}");
    }
}
