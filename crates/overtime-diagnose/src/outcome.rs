//! What the user saw: which gateway layer gave up, the outcome, the
//! budget, and the silences of a streamed response.
//!
//! Design rules:
//! - A layer gave up itself only when it answered 504 without a response
//!   header from its upstream ([`relayed`]); a 504 it passed on is its
//!   upstream's: an inner layer's, or the service's own (`service_timeout`).
//! - A stream the gateway cut is logged as a success. It is a cut when its
//!   last byte came a read timeout before the line (the timeout known or
//!   inferred), or — when no timeout is known — when the spans show the
//!   client going away at about the line's time after a silence
//!   ([`cut_silence`]): the silences of those cuts are what the layer's
//!   timeout is inferred from, with its 504s (crate::timeouts).

use crate::assemble::Trace;
use crate::timeouts::LayerTimeout;
use crate::tree::TraceTree;
use overtime_model::{GatewayRecord, Outcome, SpanRecord, SpanStatus};
use std::collections::BTreeMap;

/// The upstream answered with a response header before the layer logged
/// its status: a 504 it logged came from upstream (an inner gateway's own
/// 504, or the service's), not from its own read timeout. nginx sets
/// `$upstream_header_time` only when a header arrived; on its own timeout
/// the last try's value is `-`. A format that does not log it cannot tell:
/// every 504 then counts as the layer's own.
///
/// ```
/// use overtime_diagnose::outcome::relayed;
/// use overtime_model::GatewayRecord;
/// // edge `504 … uht="3.003" us="504"`, inner `504 … uht="-" us="504"`
/// let edge = GatewayRecord { status: Some(504), upstream_header_ms: vec![Some(3003.0)], ..Default::default() };
/// let inner = GatewayRecord { status: Some(504), upstream_header_ms: vec![None], ..Default::default() };
/// assert!(relayed(&edge));
/// assert!(!relayed(&inner));
/// assert!(!relayed(&GatewayRecord { status: Some(504), ..Default::default() }));
/// ```
pub fn relayed(g: &GatewayRecord) -> bool {
    g.upstream_header_ms.last().is_some_and(|h| h.is_some())
}

/// The layer answered 504 on its own read timeout (not relayed).
pub fn own_504(g: &GatewayRecord) -> bool {
    g.status == Some(504) && !relayed(g)
}

/// The gateway record that speaks for the request: the layer that gave up
/// first. Among the layers that answered 504 on their own timeout (else
/// among those that answered 504, else among all layers), the shortest
/// `$request_time`; layers that logged the same time (an outer one
/// relays what the inner one decided) go to the one with the shortest read
/// timeout, then to the innermost.
pub fn deciding_gateway(trace: &Trace, timeouts: &BTreeMap<String, LayerTimeout>) -> Option<usize> {
    let any_own = trace.gateway.iter().any(own_504);
    let any_504 = trace.gateway.iter().any(|g| g.status == Some(504));
    let candidates: Vec<usize> = (0..trace.gateway.len())
        .filter(|&i| {
            let g = &trace.gateway[i];
            if any_own {
                own_504(g)
            } else {
                !any_504 || g.status == Some(504)
            }
        })
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

/// The nodes of the request's top spans: the root span, or the spans
/// right under the gateway (or a synthetic root).
fn top_span_nodes(tree: &TraceTree) -> Vec<usize> {
    let root = &tree.nodes[tree.root];
    match root.span {
        Some(_) => vec![tree.root],
        None => root
            .children
            .iter()
            .copied()
            .filter(|&c| tree.nodes[c].span.is_some())
            .collect(),
    }
}

fn top_spans<'a>(trace: &'a Trace, tree: &TraceTree) -> Vec<&'a SpanRecord> {
    top_span_nodes(tree)
        .into_iter()
        .filter_map(|n| tree.nodes[n].span)
        .map(|i| &trace.spans[i])
        .collect()
}

/// Shortest silence before a cut that the spans alone (no timeout known)
/// can call a cut, ms: nginx's read timeouts are whole seconds.
const MIN_CUT_SILENCE_MS: f64 = 1_000.0;

/// Silence at the end of a stream that is a cut whatever else is known
/// (no timeout known, no sign of the client going away), ms.
const LONG_SILENCE_MS: f64 = 5_000.0;

/// How far from the gateway's line the client's going away may be seen
/// and still be the same moment, µs (plus the line's clock precision).
const LEFT_AT_LINE_US: i64 = 1_000_000;

/// An ASGI `http receive` whose event was `http.disconnect`: the client
/// (the gateway) went away.
fn is_disconnect(s: &SpanRecord) -> bool {
    s.attributes
        .iter()
        .any(|(k, v)| k == "asgi.event.type" && v == "http.disconnect")
}

/// A span that ended because its caller went away (cancelled, a reset or
/// broken connection).
fn says_client_left(s: &SpanRecord) -> bool {
    s.status == SpanStatus::Cancelled
        || s.error_type.as_deref().is_some_and(|e| {
            let e = e.to_ascii_lowercase();
            e.contains("reset")
                || e.contains("disconnect")
                || e.contains("broken")
                || e.contains("cancel")
        })
}

/// When the spans show the client (the gateway) going away: the end of an
/// ASGI `http.disconnect` receive, or of a top span that ended because its
/// caller left; the one nearest the gateway's end (µs, skew-shifted).
fn client_left_at(trace: &Trace, tree: &TraceTree) -> Option<i64> {
    let end = tree.nodes[tree.root].end_us;
    let tops = top_span_nodes(tree);
    tree.nodes
        .iter()
        .enumerate()
        .filter_map(|(n, node)| {
            let i = node.span?;
            let s = &trace.spans[i];
            (is_disconnect(s) || (tops.contains(&n) && says_client_left(s)))
                .then(|| s.end_us + tree.shift_us[i])
        })
        .min_by_key(|t| (t - end).abs())
}

/// The silence (ms) before a stream the gateway cut, as the spans alone
/// show it (no timeout needed): the gateway logged a success, the stream's
/// last chunk came at least a second before the gateway's end and nothing
/// came after it, and the spans show the client going away at about the
/// gateway's end (an ASGI `http.disconnect`, a server span ended by a
/// reset or a cancellation). `None` when any of that is missing. What a
/// layer's read timeout is inferred from, with its 504s.
pub fn cut_silence(trace: &Trace, tree: &TraceTree, gw: &GatewayRecord) -> Option<f64> {
    if !gw.status.is_some_and(|s| (200..300).contains(&s)) {
        return None;
    }
    let g = stream_gap(trace, tree)?;
    if !g.at_end || g.gap_ms < MIN_CUT_SILENCE_MS {
        return None;
    }
    let end = tree.nodes[tree.root].end_us;
    let left = client_left_at(trace, tree)?;
    let tol = LEFT_AT_LINE_US + gw.time_precision_us.max(0);
    ((left - end).abs() <= tol).then_some(g.gap_ms)
}

/// Does any span carry a stream (body `http send` spans, chunk or
/// heartbeat events)? A cheap look before building the tree.
pub(crate) fn has_stream(trace: &Trace) -> bool {
    trace
        .spans
        .iter()
        .any(|s| is_body_send(s) || s.events.iter().any(|e| is_stream_event(&e.name)))
}

/// A success the gateway logged at the end of a stream's silence of a
/// second or more: whether it was a cut depends on the layer's read
/// timeout ([`cut_stream`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SilentEnd {
    /// The deciding layer.
    pub layer: String,
    /// The silence the spans show was cut ([`cut_silence`]): what the
    /// layer's timeout is inferred from; `None` when they do not show the
    /// client going away.
    pub cut_silence_ms: Option<f64>,
}

/// [`SilentEnd`] of a trace, building its tree (only for a trace that
/// streamed: [`has_stream`]).
pub(crate) fn silent_end(
    trace: &Trace,
    timeouts: &BTreeMap<String, LayerTimeout>,
    clock_skew_ms: f64,
) -> Option<SilentEnd> {
    if !has_stream(trace) {
        return None;
    }
    let deciding = deciding_gateway(trace, timeouts)?;
    let gw = &trace.gateway[deciding];
    if !gw.status.is_some_and(|s| (200..300).contains(&s)) {
        return None;
    }
    let tree = crate::tree::build(trace, Some(deciding), clock_skew_ms);
    let g = stream_gap(trace, &tree)?;
    (g.at_end && g.gap_ms >= MIN_CUT_SILENCE_MS).then(|| SilentEnd {
        layer: gw.source.clone(),
        cut_silence_ms: cut_silence(trace, &tree, gw),
    })
}

/// Did the gateway cut a response that was still running (logged as a
/// success because the headers had gone out)? Yes when the response's
/// stream had been silent from its last chunk to the gateway's end for
/// about the gateway's read timeout (at least 90 % of it): nginx logs
/// exactly that when `proxy_read_timeout` fires mid-stream. With no
/// timeout known, when the spans show the client going away at the end of
/// such a silence ([`cut_silence`]), or the silence lasted 5 s. Also when
/// the service ran on past the gateway's end and its span says the client
/// went away.
pub(crate) fn cut_stream(
    trace: &Trace,
    tree: &TraceTree,
    gw: &GatewayRecord,
    read_timeout_ms: Option<f64>,
) -> bool {
    if gw.status.is_some_and(|s| s >= 300) {
        return false;
    }
    let gap = stream_gap(trace, tree).filter(|g| g.at_end);
    let silent = match read_timeout_ms {
        Some(t) => gap.is_some_and(|g| g.gap_ms >= 0.9 * t),
        None => {
            gap.is_some_and(|g| g.gap_ms >= LONG_SILENCE_MS)
                || cut_silence(trace, tree, gw).is_some()
        }
    };
    if silent {
        return true;
    }
    let root = &tree.nodes[tree.root];
    let tol = 1_000_000 + gw.time_precision_us.max(0);
    let ran_on = root
        .children
        .iter()
        .any(|&c| tree.nodes[c].raw_end_us > root.end_us + tol);
    ran_on && top_spans(trace, tree).iter().any(|s| says_client_left(s))
}

/// How long after the gateway's line the service's span of an answer the
/// gateway passed on may end (it ends once the answer is written), µs
/// (plus the line's clock precision).
const ANSWERED_BY_LINE_US: i64 = 100_000;

/// A 504 the service answered itself (its own timeout gave up) and the
/// gateway only passed on: the gateway got a response header for it
/// ([`relayed`]), or the service's top span recorded HTTP 504 and ended by
/// the gateway's line (one sent later went to a connection the gateway
/// had already given up on). Not when the service ran on past the
/// gateway's end: then a gateway gave up on it (one whose log may not be
/// here).
fn service_answered_504(trace: &Trace, tree: &TraceTree, gw: &GatewayRecord) -> bool {
    let root = &tree.nodes[tree.root];
    let precision = gw.time_precision_us.max(0);
    let server = service_node(trace, tree).map(|(c, s)| (tree.nodes[c].raw_end_us, s));
    if server.is_some_and(|(end, _)| end > root.end_us + LEFT_AT_LINE_US + precision) {
        return false;
    }
    relayed(gw)
        || server.is_some_and(|(end, s)| {
            s.http_status == Some(504) && end <= root.end_us + ANSWERED_BY_LINE_US + precision
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
            Some(504) if service_answered_504(trace, tree, g) => Outcome::ServiceTimeout,
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
    service_node(trace, tree).and_then(|(c, s)| {
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

/// The service's first span under the request's root (not a client
/// span): the one that answered the gateway. (node, span)
fn service_node<'a>(trace: &'a Trace, tree: &TraceTree) -> Option<(usize, &'a SpanRecord)> {
    tree.nodes[tree.root]
        .children
        .iter()
        .filter_map(|&c| tree.nodes[c].span.map(|i| (c, &trace.spans[i])))
        .filter(|(_, s)| s.kind.as_deref() != Some("client"))
        .min_by_key(|(c, s)| (tree.nodes[*c].start_us, s.span_id.as_str()))
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
