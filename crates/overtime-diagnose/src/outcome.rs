//! What the user saw: which gateway layer gave up, the outcome, the
//! budget, and the silences of a streamed response.

use crate::assemble::Trace;
use crate::timeouts::LayerTimeout;
use crate::tree::TraceTree;
use overtime_model::{GatewayRecord, Outcome, SpanRecord, SpanStatus};
use std::collections::BTreeMap;

/// The gateway record that speaks for the request: the layer that gave up
/// first. Among the layers that answered 504 (else among all layers), the
/// shortest `$request_time`; layers that logged the same time (an outer one
/// relays what the inner one decided) go to the one with the shortest read
/// timeout, then to the innermost.
pub fn deciding_gateway(trace: &Trace, timeouts: &BTreeMap<String, LayerTimeout>) -> Option<usize> {
    let any_504 = trace.gateway.iter().any(|g| g.status == Some(504));
    let candidates: Vec<usize> = (0..trace.gateway.len())
        .filter(|&i| !any_504 || trace.gateway[i].status == Some(504))
        .collect();
    let rt = |i: usize| trace.gateway[i].request_time_ms.unwrap_or(f64::MAX);
    let min = candidates.iter().map(|&i| rt(i)).fold(f64::MAX, f64::min);
    let tol = (min * 0.01).max(50.0);
    candidates
        .into_iter()
        .filter(|&i| rt(i) <= min + tol)
        .min_by(|&a, &b| {
            let t = |i: usize| {
                timeouts
                    .get(&trace.gateway[i].source)
                    .map_or(f64::MAX, |t| t.ms)
            };
            t(a).total_cmp(&t(b))
                .then(trace.gateway[b].layer.cmp(&trace.gateway[a].layer))
        })
}

/// The longest silence of a streamed response, up to the gateway's end.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamGap {
    /// Span index of the streaming span.
    pub span: usize,
    pub gap_ms: f64,
    /// The gap ran into the end of the request (the cut came in it).
    pub at_end: bool,
    /// Stream events (chunks, heartbeats) before the end.
    pub events: usize,
}

fn is_stream_event(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "chunk"
        || n == "heartbeat"
        || n.ends_with(".chunk")
        || n.starts_with("chunk")
        || n.contains("heartbeat")
}

/// The streaming span with the longest silence (from the request's start
/// or a previous chunk/heartbeat to the next one, or to the request's end).
pub fn stream_gap(trace: &Trace, tree: &TraceTree) -> Option<StreamGap> {
    let root = &tree.nodes[tree.root];
    let end = root.end_us;
    let mut best: Option<StreamGap> = None;
    // ASGI instrumentation writes each body chunk sent as a child span
    // `… http send` (asgi.event.type http.response.body): chunks too.
    let mut sends: std::collections::HashMap<usize, Vec<i64>> = std::collections::HashMap::new();
    for n in &tree.nodes {
        let (Some(i), Some(p)) = (n.span, n.parent.and_then(|p| tree.nodes[p].span)) else {
            continue;
        };
        let s = &trace.spans[i];
        let body = s
            .attributes
            .iter()
            .find(|(k, _)| k == "asgi.event.type")
            .is_none_or(|(_, v)| v == "http.response.body");
        if body && s.name.to_ascii_lowercase().ends_with("http send") {
            sends
                .entry(p)
                .or_default()
                .push(s.start_us + tree.shift_us[i]);
        }
    }
    for (i, s) in trace.spans.iter().enumerate() {
        let shift = tree.shift_us[i];
        let mut times: Vec<i64> = s
            .events
            .iter()
            .filter(|e| is_stream_event(&e.name))
            .map(|e| e.time_us + shift)
            .chain(sends.get(&i).into_iter().flatten().copied())
            .filter(|&t| t <= end)
            .collect();
        if times.is_empty() {
            continue;
        }
        times.sort_unstable();
        let n = times.len();
        let mut prev = root.start_us.max((s.start_us + shift).min(times[0]));
        let mut gap = 0i64;
        for t in &times {
            gap = gap.max(t - prev);
            prev = *t;
        }
        let span_end = (s.end_us + shift).min(end);
        let tail_end = if s.end_us + shift >= end {
            end
        } else {
            span_end
        };
        let tail = tail_end - prev;
        let at_end = tail >= gap && s.end_us + shift >= end - 1_000;
        gap = gap.max(tail);
        let g = StreamGap {
            span: i,
            gap_ms: gap as f64 / 1000.0,
            at_end,
            events: n,
        };
        if best.as_ref().is_none_or(|b| g.gap_ms > b.gap_ms) {
            best = Some(g);
        }
    }
    best
}

fn top_spans<'a>(trace: &'a Trace, tree: &TraceTree) -> Vec<&'a SpanRecord> {
    let root = &tree.nodes[tree.root];
    match root.span {
        Some(i) => vec![&trace.spans[i]],
        None => root
            .children
            .iter()
            .filter_map(|&c| tree.nodes[c].span)
            .map(|i| &trace.spans[i])
            .collect(),
    }
}

/// Did the gateway cut a response that was still running (logged as a
/// success because the headers had gone out)?
pub fn cut_stream(
    trace: &Trace,
    tree: &TraceTree,
    gw: &GatewayRecord,
    read_timeout_ms: Option<f64>,
) -> bool {
    if gw.status.is_some_and(|s| s >= 300) {
        return false;
    }
    let root = &tree.nodes[tree.root];
    let tol = 1_000_000 + gw.time_precision_us.max(0);
    let ran_on = root
        .children
        .iter()
        .any(|&c| tree.nodes[c].raw_end_us > root.end_us + tol);
    if !ran_on {
        return false;
    }
    let reset = top_spans(trace, tree).iter().any(|s| {
        s.status == SpanStatus::Cancelled
            || s.error_type.as_deref().is_some_and(|e| {
                let e = e.to_ascii_lowercase();
                e.contains("reset")
                    || e.contains("disconnect")
                    || e.contains("broken")
                    || e.contains("cancel")
            })
    });
    let silent = stream_gap(trace, tree).is_some_and(|g| {
        g.at_end && read_timeout_ms.map_or(g.gap_ms >= 5_000.0, |t| g.gap_ms >= 0.9 * t)
    });
    reset || silent
}

/// The outcome and whether the trace failed.
pub fn outcome(
    trace: &Trace,
    tree: &TraceTree,
    gw: Option<&GatewayRecord>,
    read_timeout_ms: Option<f64>,
) -> Outcome {
    let any_timeout = trace.spans.iter().any(|s| s.status == SpanStatus::Timeout);
    if let Some(g) = gw {
        return match g.status {
            Some(504) => Outcome::GatewayTimeout,
            Some(s) if s >= 500 => {
                if any_timeout {
                    Outcome::ServiceTimeout
                } else {
                    Outcome::Error
                }
            }
            _ if cut_stream(trace, tree, g, read_timeout_ms) => Outcome::GatewayTimeout,
            // SPEC §4: a span timeout is a failure even when the request
            // recovered (a fallback answered in time).
            _ if any_timeout => Outcome::ServiceTimeout,
            _ => Outcome::Ok,
        };
    }
    let tops = top_spans(trace, tree);
    if tops.iter().any(|s| s.status == SpanStatus::Timeout) || any_timeout {
        Outcome::ServiceTimeout
    } else if tops
        .iter()
        .any(|s| s.status == SpanStatus::Error || s.http_status.is_some_and(|h| h >= 500))
    {
        Outcome::Error
    } else {
        Outcome::Ok
    }
}

/// The service that owns the request: the top span's service.
pub fn owning_service(trace: &Trace, tree: &TraceTree) -> Option<String> {
    top_spans(trace, tree)
        .into_iter()
        .min_by_key(|s| s.start_us)
        .map(|s| s.service.clone())
}

/// The request's budget and where it came from (SPEC §4 `budget.source`).
pub fn budget(
    trace: &Trace,
    tree: &TraceTree,
    gw_timeout_ms: Option<f64>,
    default_ms: Option<f64>,
) -> (Option<f64>, Option<&'static str>) {
    let max_wait = trace
        .gateway
        .iter()
        .find_map(|g| g.max_wait_ms)
        .or_else(|| trace.spans.iter().find_map(|s| s.max_wait_ms));
    if let Some(m) = max_wait {
        return (Some(m), Some("x-max-wait"));
    }
    let mut tops = top_spans(trace, tree);
    tops.sort_by_key(|s| s.start_us);
    let span_budget = tops
        .iter()
        .find_map(|s| s.budget_ms)
        .or_else(|| trace.spans.iter().find_map(|s| s.budget_ms));
    if let Some(b) = span_budget {
        return (Some(b), Some("span"));
    }
    if let Some(t) = gw_timeout_ms {
        return (Some(t), Some("gateway"));
    }
    match default_ms {
        Some(d) => (Some(d), Some("config")),
        None => (None, None),
    }
}

/// The service's own budget (a span's `budget_ms`), for the alignment rule.
pub fn service_budget_ms(trace: &Trace, tree: &TraceTree) -> Option<f64> {
    let mut tops = top_spans(trace, tree);
    tops.sort_by_key(|s| s.start_us);
    tops.iter()
        .find_map(|s| s.budget_ms)
        .or_else(|| trace.spans.iter().find_map(|s| s.budget_ms))
}

/// The HTTP status the service itself answered with, if it answered
/// before the gateway gave up.
pub fn service_answer(trace: &Trace, tree: &TraceTree) -> Option<(u16, f64)> {
    let root = &tree.nodes[tree.root];
    root.children
        .iter()
        .filter_map(|&c| tree.nodes[c].span.map(|i| (c, &trace.spans[i])))
        .filter(|(c, _)| tree.nodes[*c].raw_end_us <= root.end_us)
        .find_map(|(c, s)| {
            let status = s.http_status.or(match s.status {
                SpanStatus::Timeout => Some(503),
                _ => None,
            })?;
            Some((
                status,
                (tree.nodes[c].raw_end_us - root.start_us) as f64 / 1000.0,
            ))
        })
}
