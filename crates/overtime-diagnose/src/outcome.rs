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
    /// Span index of the streaming span (for chunks whose parent never
    /// arrived: the first of them).
    pub span: usize,
    /// The longest silence between stream events (or from the last of
    /// them to the end), ms.
    pub gap_ms: f64,
    /// The gap ran into the end of the request (the cut came in it).
    pub at_end: bool,
    /// Stream events (chunks, heartbeats) before the end.
    pub events: usize,
    /// When the last of them was sent, ms after the request's start.
    pub last_event_ms: f64,
    /// How deep the stream sits under the request (0: the request itself).
    depth: usize,
}

/// How long before the gateway's end a stream's span may end and still
/// count as running into the cut (µs).
const AT_END_TOLERANCE_US: i64 = 500_000;

/// A chunk or heartbeat event of a stream, by its name.
pub(crate) fn is_stream_event(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "chunk"
        || n == "heartbeat"
        || n.ends_with(".chunk")
        || n.starts_with("chunk")
        || n.contains("heartbeat")
        || n.contains("token stream event")
}

/// An ASGI `http send` span of a response body (one per streamed chunk).
fn is_body_send(s: &SpanRecord) -> bool {
    let body = s
        .attributes
        .iter()
        .find(|(k, _)| k == "asgi.event.type")
        .is_none_or(|(_, v)| v == "http.response.body");
    body && s.name.to_ascii_lowercase().ends_with("http send")
}

/// The streams of a request and their longest silences (from the
/// request's start or a chunk/heartbeat to the next one, or to the
/// request's end). A stream's chunks are its span's chunk and heartbeat
/// events, or the ASGI `http send` body spans under it; `http send` spans
/// whose server span never arrived are the request's own stream. The one
/// returned is the longest silence, or — when the request was cut in a
/// silence about as long — the outermost stream that ran into the cut:
/// the stream the gateway was reading.
pub fn stream_gap(trace: &Trace, tree: &TraceTree) -> Option<StreamGap> {
    let root = &tree.nodes[tree.root];
    let end = root.end_us;
    let gw_precision_us = tree
        .gateway
        .map_or(0, |g| trace.gateway[g].time_precision_us.max(0));
    // Owner node → (span standing for it, chunk times).
    let mut streams: BTreeMap<usize, (usize, Vec<i64>)> = BTreeMap::new();
    for (n, node) in tree.nodes.iter().enumerate() {
        let Some(i) = node.span else { continue };
        let s = &trace.spans[i];
        let shift = tree.shift_us[i];
        if is_body_send(s)
            && let Some(p) = node.parent
        {
            let owner = tree.nodes[p].span.unwrap_or(i);
            streams
                .entry(p)
                .or_insert((owner, Vec::new()))
                .1
                .push(s.start_us + shift);
        }
        let events = s
            .events
            .iter()
            .filter(|e| is_stream_event(&e.name))
            .map(|e| e.time_us + shift);
        streams.entry(n).or_insert((i, Vec::new())).1.extend(events);
    }
    let depth = |mut n: usize| {
        let mut d = 0;
        while let Some(p) = tree.nodes[n].parent {
            d += 1;
            n = p;
        }
        d
    };
    let mut found: Vec<StreamGap> = Vec::new();
    for (owner, (span, times)) in streams {
        let mut times: Vec<i64> = times.into_iter().filter(|&t| t <= end).collect();
        if times.is_empty() {
            continue;
        }
        times.sort_unstable();
        let node = &tree.nodes[owner];
        // The span's own extent; the request's for chunks with no span.
        let (s_start, s_end) = match node.span {
            Some(i) => {
                let sh = tree.shift_us[i];
                (trace.spans[i].start_us + sh, trace.spans[i].end_us + sh)
            }
            None => (root.start_us, end),
        };
        let mut prev = root.start_us.max(s_start.min(times[0]));
        let mut gap = 0i64;
        for t in &times {
            gap = gap.max(t - prev);
            prev = *t;
        }
        // A span that ended about when the gateway did ran to the end: the
        // service notices the closed connection a moment before or after
        // nginx writes its line.
        let at_end_tol = AT_END_TOLERANCE_US.max(gw_precision_us);
        let ran_to_end = s_end >= end - at_end_tol;
        let tail_end = if ran_to_end { end } else { s_end.min(end) };
        let tail = tail_end - prev;
        let at_end = tail >= gap && ran_to_end;
        found.push(StreamGap {
            span,
            gap_ms: gap.max(tail) as f64 / 1000.0,
            at_end,
            events: times.len(),
            last_event_ms: (prev - root.start_us) as f64 / 1000.0,
            depth: depth(owner),
        });
    }
    let longest = found
        .iter()
        .map(|g| g.gap_ms)
        .fold(f64::NEG_INFINITY, f64::max);
    let outer_cut = found
        .iter()
        .filter(|g| g.at_end && g.gap_ms >= 0.9 * longest)
        .min_by_key(|g| g.depth)
        .cloned();
    outer_cut.or_else(|| {
        found
            .into_iter()
            .max_by(|a, b| a.gap_ms.total_cmp(&b.gap_ms))
    })
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
/// success because the headers had gone out)? Yes when the response's
/// stream had been silent from its last chunk to the gateway's end for
/// about the gateway's read timeout (at least 90 % of it; 5 s when the
/// timeout is not known): nginx logs exactly that when
/// `proxy_read_timeout` fires mid-stream. Also when the service ran on
/// past the gateway's end and its span says the client went away.
pub(crate) fn cut_stream(
    trace: &Trace,
    tree: &TraceTree,
    gw: &GatewayRecord,
    read_timeout_ms: Option<f64>,
) -> bool {
    if gw.status.is_some_and(|s| s >= 300) {
        return false;
    }
    let silent = stream_gap(trace, tree).is_some_and(|g| {
        g.at_end && read_timeout_ms.map_or(g.gap_ms >= 5_000.0, |t| g.gap_ms >= 0.9 * t)
    });
    if silent {
        return true;
    }
    let root = &tree.nodes[tree.root];
    let tol = 1_000_000 + gw.time_precision_us.max(0);
    let ran_on = root
        .children
        .iter()
        .any(|&c| tree.nodes[c].raw_end_us > root.end_us + tol);
    ran_on
        && top_spans(trace, tree).iter().any(|s| {
            s.status == SpanStatus::Cancelled
                || s.error_type.as_deref().is_some_and(|e| {
                    let e = e.to_ascii_lowercase();
                    e.contains("reset")
                        || e.contains("disconnect")
                        || e.contains("broken")
                        || e.contains("cancel")
                })
        })
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
            // docs/diagnosis.md: a span timeout is a failure even when the request
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

/// The request's budget and where it came from (docs/diagnosis.md `budget.source`).
pub(crate) fn budget(
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

/// The service's own answer: the HTTP status its top span answered with
/// (a span that ended in a timeout answered 503), when it answered, ms
/// after the request's start — before the gateway's end, or after it,
/// to a connection the gateway had already closed.
pub fn service_answer(trace: &Trace, tree: &TraceTree) -> Option<ServiceAnswer> {
    let root = &tree.nodes[tree.root];
    root.children
        .iter()
        .filter_map(|&c| tree.nodes[c].span.map(|i| (c, &trace.spans[i])))
        .filter(|(_, s)| s.kind.as_deref() != Some("client"))
        .min_by_key(|(c, s)| (tree.nodes[*c].start_us, s.span_id.as_str()))
        .and_then(|(c, s)| {
            let timed_out = s.status == SpanStatus::Timeout;
            let status = s.http_status.or(timed_out.then_some(503))?;
            let end = tree.nodes[c].raw_end_us;
            Some(ServiceAnswer {
                status,
                timed_out,
                at_ms: (end - root.start_us) as f64 / 1000.0,
                after_gateway: end > root.end_us,
            })
        })
}

/// What the service itself answered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceAnswer {
    /// The HTTP status its server span recorded.
    pub status: u16,
    /// Its span ended in a timeout (whatever status went out).
    pub timed_out: bool,
    /// When, ms after the request's start.
    pub at_ms: f64,
    /// It came after the gateway had already answered.
    pub after_gateway: bool,
}
