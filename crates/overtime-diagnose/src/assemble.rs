//! Trace assembly: spans deduplicated by (trace id, span id), grouped by
//! trace, and joined with the gateway records of every layer (docs/inputs.md#identity-and-joining).
//!
//! Design rules (the input can be a 1 GB log):
//! - Keys are trace ids as `u128`, hashed with FxHash: no string per row.
//! - A gateway row is materialised as a [`GatewayRecord`] only when its
//!   request needs a verdict (it has spans, or a layer answered 5xx, or
//!   every verdict was asked for). Healthy requests with no spans become a
//!   [`LightRequest`]: enough for the report's totals.
//! - A request logged by several layers counts once.

use overtime_model::{GatewayRecord, SpanRecord};

/// Everything known about one request that needs a verdict.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The W3C trace id, or a stand-in (`request:<id>`, `line:<source>:<n>`)
    /// for a gateway record no span can be joined to.
    pub id: String,
    /// Gateway records of this request, outermost layer first.
    pub gateway: Vec<GatewayRecord>,
    /// Its spans, each span id once (empty when only gateways saw it).
    pub spans: Vec<SpanRecord>,
}

impl Trace {
    /// Puts records in a canonical order (gateway by layer and time, spans
    /// by start and id) so the verdict never depends on arrival order.
    pub(crate) fn normalize(&mut self) {
        self.gateway.sort_by_key(|g| (g.layer, g.time_us));
        self.spans.sort_by(|a, b| {
            a.start_us
                .cmp(&b.start_us)
                .then_with(|| a.span_id.cmp(&b.span_id))
        });
    }
}

/// A healthy request seen only by the gateway.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LightRequest {
    /// When the gateway received it, µs since the epoch.
    pub start_us: i64,
    /// When the gateway answered, µs since the epoch.
    pub end_us: i64,
    /// The gateway's status; `None` when its log has none.
    pub status: Option<u16>,
    pub(crate) layer: u32,
}

/// What assembly saw, for the run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssemblyStats {
    /// Span rows read.
    pub spans_in: usize,
    /// Of those, repeats of a span id already seen in its trace (kept once).
    pub duplicate_spans: usize,
    /// Gateway records read.
    pub gateway_records: usize,
    /// Gateway records joined to spans by their `traceparent`.
    pub joined_by_traceparent: usize,
    /// Joined by their request id (`X-Request-ID`) to a span or another layer's record carrying it.
    pub joined_by_request_id: usize,
    /// Joined by a 32-hex request id used as the trace id.
    pub joined_by_request_id_as_trace: usize,
    /// Gateway records nothing joined: each is a trace of its own, with the gateway's view only.
    pub unjoined_gateway_records: usize,
}

impl AssemblyStats {
    /// Counts a gateway line with a request id and no traceparent of its
    /// own, as the join resolved it.
    pub fn count_join(&mut self, how: crate::join::Joined) {
        use crate::join::Joined;
        match how {
            Joined::ByRequestId => self.joined_by_request_id += 1,
            Joined::RequestIdAsTrace => self.joined_by_request_id_as_trace += 1,
            Joined::Unjoined => self.unjoined_gateway_records += 1,
        }
    }

    /// Adds what another part of the run counted.
    pub fn merge(&mut self, o: &AssemblyStats) {
        self.spans_in += o.spans_in;
        self.duplicate_spans += o.duplicate_spans;
        self.gateway_records += o.gateway_records;
        self.joined_by_traceparent += o.joined_by_traceparent;
        self.joined_by_request_id += o.joined_by_request_id;
        self.joined_by_request_id_as_trace += o.joined_by_request_id_as_trace;
        self.unjoined_gateway_records += o.unjoined_gateway_records;
    }
}

/// A trace's join key; ordered (trace ids before stand-ins) so that ties
/// between records are broken the same way in every engine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A W3C trace id.
    Trace(u128),
    /// A stand-in: an odd trace id, `request:<id>`, `line:<source>:<n>`.
    Other(String),
}

/// Latest time taken at face value: year 2200, in µs since the epoch.
pub const MAX_TIME_US: i64 = 7_258_118_400_000_000;
/// Longest duration taken at face value: 30 days, in ms.
const MAX_DURATION_MS: f64 = 30.0 * 24.0 * 3600.0 * 1000.0;

/// Keeps the arithmetic of the diagnosis in range whatever the input said:
/// times before 1970 or after 2200 and absurd durations are clamped.
pub(crate) fn sane_span(s: &mut SpanRecord) {
    s.start_us = s.start_us.clamp(0, MAX_TIME_US);
    s.end_us = s.end_us.clamp(s.start_us, MAX_TIME_US);
    for e in &mut s.events {
        e.time_us = e.time_us.clamp(0, MAX_TIME_US);
    }
}

pub(crate) fn sane_ms(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
        .map(|x| x.clamp(0.0, MAX_DURATION_MS))
}

pub(crate) fn sane_gateway(mut g: GatewayRecord) -> GatewayRecord {
    g.time_us = g.time_us.clamp(0, MAX_TIME_US);
    g.time_precision_us = g.time_precision_us.clamp(0, 1_000_000);
    g.request_time_ms = sane_ms(g.request_time_ms);
    for v in [
        &mut g.upstream_connect_ms,
        &mut g.upstream_header_ms,
        &mut g.upstream_response_ms,
    ] {
        for x in v.iter_mut() {
            *x = sane_ms(*x);
        }
    }
    g.max_wait_ms = sane_ms(g.max_wait_ms);
    g
}

/// A W3C trace id (32 hex digits, not all zero, either case) as a number.
///
/// One pass over the bytes, as two 64-bit halves: it runs for every
/// gateway line and span of a day's input, where checking and then
/// parsing the text through `u128::from_str_radix` took 3 % of a run.
pub fn hex128(s: &str) -> Option<u128> {
    fn half(b: &[u8]) -> Option<u64> {
        b.iter().try_fold(0u64, |v, &c| {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return None,
            };
            Some(v << 4 | d as u64)
        })
    }
    let b = s.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let t = (half(&b[..16])? as u128) << 64 | half(&b[16..])? as u128;
    (t != 0).then_some(t)
}

/// The trace id a key stands for (a stand-in as itself).
pub fn key_name(k: &Key) -> String {
    match k {
        Key::Trace(t) => format!("{t:032x}"),
        Key::Other(s) => s.clone(),
    }
}

/// Requests that need a verdict, and the light ones.
#[derive(Debug, Default)]
pub struct Assembled {
    /// The requests that need a verdict (every request with `all`).
    pub traces: Vec<Trace>,
    /// The healthy requests only a gateway saw, kept light (no verdict).
    pub light: Vec<LightRequest>,
    /// What assembly saw: spans read and duplicated, gateway records
    /// joined by each key.
    pub stats: AssemblyStats,
}

/// Assembles spans and `gateway_requests` batches into requests, in
/// memory: the one join ([`crate::join`]), then [`assemble_sorted`] — the
/// assembly every partition of the batch engine runs too. `all`
/// materialises every request (for `all_verdicts`).
pub fn assemble_tables(
    gateway: &[arrow::record_batch::RecordBatch],
    spans: Vec<SpanRecord>,
    all: bool,
) -> Result<Assembled, overtime_model::ModelError> {
    Ok(crate::in_memory::JoinedRecords::of(gateway, spans)?.assemble(all))
}

/// What every request's totals read of a gateway line, even one whose
/// request needs no verdict: enough for a [`LightRequest`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineHead {
    /// The line's layer (0: outermost).
    pub layer: u32,
    /// Its status, when logged.
    pub status: Option<u16>,
    /// When the layer answered, µs since the epoch.
    pub time_us: i64,
    /// The layer's own request time, ms.
    pub request_time_ms: Option<f64>,
}

impl LineHead {
    /// The head of a whole row.
    pub fn of(g: &GatewayRecord) -> Self {
        LineHead {
            layer: g.layer,
            status: g.status,
            time_us: g.time_us,
            request_time_ms: g.request_time_ms,
        }
    }

    /// Whether the line alone makes its request need a verdict.
    pub fn failed(&self) -> bool {
        self.status.is_some_and(|s| s >= 500)
    }
}

/// A gateway line on its way into assembly: its trace's key, its head,
/// and its row as the caller keeps it (decoded only when its request
/// needs a verdict).
pub struct Line<B> {
    /// The trace the join put it in.
    pub key: Key,
    /// What a light request reads.
    pub head: LineHead,
    /// The row, in the caller's form.
    pub row: B,
}

/// Assembles one set of joined records into requests: spans and lines
/// each in input order (so "first" never depends on threads, partitions
/// or spilling), every span once (its first copy), every layer's line
/// joined to its trace, healthy lines of requests with no span kept light
/// — unless `all`. `row` turns a line's row into its record, for the
/// requests that need a verdict only.
///
/// ```
/// use overtime_diagnose::assemble::{Key, Line, LineHead, assemble_sorted};
/// use overtime_model::{GatewayRecord, SpanRecord};
///
/// let t = 0x0af7651916cd43dd8448eb211c80319c_u128;
/// let span = SpanRecord::new(&format!("{t:032x}"), "b7ad6b7169203331", "agent", "POST /chat", 0, 1);
/// let line = |status| Line {
///     key: Key::Trace(t),
///     head: LineHead { layer: 0, status: Some(status), time_us: 1, request_time_ms: Some(1.0) },
///     row: GatewayRecord { status: Some(status), ..Default::default() },
/// };
/// // The same span twice, and one gateway line: one request, one span.
/// let a = assemble_sorted(
///     vec![(Key::Trace(t), span.clone()), (Key::Trace(t), span)],
///     vec![line(504)],
///     false,
///     |g, _| Ok::<_, std::convert::Infallible>(g),
/// ).unwrap();
/// assert_eq!((a.traces.len(), a.traces[0].spans.len(), a.stats.duplicate_spans), (1, 1, 1));
/// assert!(a.light.is_empty());
/// ```
pub fn assemble_sorted<B, E>(
    spans: Vec<(Key, SpanRecord)>,
    lines: Vec<Line<B>>,
    all: bool,
    mut row: impl FnMut(B, &Key) -> Result<GatewayRecord, E>,
) -> Result<Assembled, E> {
    use rustc_hash::{FxHashMap, FxHashSet};
    // A request needs a verdict when it has spans, a layer answered 5xx,
    // or every verdict was asked for.
    let heavy: FxHashSet<Key> = {
        let with_spans: FxHashSet<&Key> = spans.iter().map(|s| &s.0).collect();
        lines
            .iter()
            .filter(|l| all || l.head.failed() || with_spans.contains(&l.key))
            .map(|l| l.key.clone())
            .collect()
    };
    let mut out = Assembled::default();
    out.stats.spans_in = spans.len();
    let mut index: FxHashMap<Key, usize> = FxHashMap::default();
    let mut seen: FxHashSet<(u128, u64)> = FxHashSet::default();
    let mut seen_odd: FxHashSet<(String, String)> = FxHashSet::default();
    for (key, mut s) in spans {
        sane_span(&mut s);
        let span64 = u64::from_str_radix(&s.span_id, 16)
            .ok()
            .filter(|_| s.span_id.len() <= 16);
        let first = match (&key, span64) {
            (Key::Trace(t), Some(sp)) => seen.insert((*t, sp)),
            _ => seen_odd.insert((s.trace_id.clone(), s.span_id.clone())),
        };
        if !first {
            out.stats.duplicate_spans += 1;
            continue;
        }
        let idx = *index.entry(key).or_insert_with(|| {
            out.traces.push(Trace {
                id: s.trace_id.clone(),
                ..Default::default()
            });
            out.traces.len() - 1
        });
        out.traces[idx].spans.push(s);
    }
    let mut light: FxHashMap<Key, LightRequest> = FxHashMap::default();
    for l in lines {
        if heavy.contains(&l.key) {
            let g = row(l.row, &l.key)?;
            let idx = match index.get(&l.key) {
                Some(&idx) => idx,
                None => {
                    out.traces.push(Trace {
                        id: key_name(&l.key),
                        ..Default::default()
                    });
                    index.insert(l.key, out.traces.len() - 1);
                    out.traces.len() - 1
                }
            };
            out.traces[idx].gateway.push(sane_gateway(g));
            continue;
        }
        let h = l.head;
        let end = h.time_us.clamp(0, MAX_TIME_US);
        let start = end - (sane_ms(h.request_time_ms).unwrap_or(0.0) * 1000.0) as i64;
        let req = LightRequest {
            start_us: start,
            end_us: end,
            status: h.status,
            layer: h.layer,
        };
        light
            .entry(l.key)
            .and_modify(|x| {
                if req.layer < x.layer {
                    *x = req;
                }
            })
            .or_insert(req);
    }
    out.light = light.into_values().collect();
    for t in &mut out.traces {
        t.normalize();
    }
    Ok(out)
}

/// [`assemble_tables`] over rows, for the unit tests.
#[cfg(test)]
fn assemble(gateway: Vec<GatewayRecord>, spans: Vec<SpanRecord>) -> (Vec<Trace>, AssemblyStats) {
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    let batch = cols.finish();
    let a = assemble_tables(&[batch], spans, true).expect("our own batch has every column");
    (a.traces, a.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(trace: Option<&str>, rid: Option<&str>, status: u16) -> GatewayRecord {
        GatewayRecord {
            trace_id: trace.map(String::from),
            request_id: rid.map(String::from),
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn a_trace_id_is_read_as_the_spec_defines_it_in_either_case() {
        let reference = |s: &str| {
            overtime_model::is_trace_id(s)
                .then(|| u128::from_str_radix(s, 16).ok())
                .flatten()
        };
        for s in [
            "0af7651916cd43dd8448eb211c80319c",
            "0AF7651916CD43DD8448EB211C80319C",
            "00000000000000000000000000000001",
            "10000000000000000000000000000000",
            "ffffffffffffffffffffffffffffffff",
            "00000000000000000000000000000000",
            "0af7651916cd43dd8448eb211c80319",
            "0af7651916cd43dd8448eb211c80319c0",
            "0af7651916cd43dd8448eb211c80319g",
            "+af7651916cd43dd8448eb211c80319c",
            "0af7651916cd43dd-448eb211c80319c",
            "0af7651916cd43d\u{e9}448eb211c80319c",
            "",
        ] {
            assert_eq!(hex128(s), reference(s), "{s}");
        }
    }

    #[test]
    fn joins_in_spec_order_and_counts_spans_once() {
        let t1 = "0af7651916cd43dd8448eb211c80319c";
        let t2 = "1af7651916cd43dd8448eb211c80319c";
        let mut s1 = SpanRecord::new(t1, "00000000000000a1", "api", "root", 0, 10);
        let s1_dup = s1.clone();
        let mut s2 = SpanRecord::new(t2, "00000000000000b1", "api", "root", 0, 10);
        s2.request_id = Some("req-2".into());
        s1.request_id = Some("req-1".into());
        let (traces, stats) = assemble(
            vec![
                gw(Some(t1), None, 504),
                gw(None, Some("req-2"), 504),
                gw(None, Some("2af7651916cd43dd8448eb211c80319c"), 504),
                gw(None, Some("nope"), 504),
            ],
            vec![s1, s1_dup, s2],
        );
        assert_eq!(stats.duplicate_spans, 1);
        assert_eq!(stats.joined_by_traceparent, 1);
        assert_eq!(stats.joined_by_request_id, 1);
        assert_eq!(stats.joined_by_request_id_as_trace, 1);
        assert_eq!(stats.unjoined_gateway_records, 1);
        let t = traces.iter().find(|t| t.id == t1).unwrap();
        assert_eq!((t.spans.len(), t.gateway.len()), (1, 1));
        let t = traces.iter().find(|t| t.id == t2).unwrap();
        assert_eq!((t.spans.len(), t.gateway.len()), (1, 1));
        assert!(traces.iter().any(|t| t.id == "request:nope"));
        assert_eq!(traces.len(), 4);
    }

    #[test]
    fn healthy_gateway_only_requests_stay_light_and_count_once() {
        let t = "3af7651916cd43dd8448eb211c80319c";
        let mut outer = gw(Some(t), None, 200);
        outer.layer = 0;
        let mut inner = gw(Some(t), None, 200);
        inner.layer = 1;
        let mut cols = overtime_model::GatewayColumns::new();
        for g in [
            &outer,
            &inner,
            &gw(None, Some("4af7651916cd43dd8448eb211c80319c"), 502),
        ] {
            cols.append(g);
        }
        let a = assemble_tables(&[cols.finish()], vec![], false).unwrap();
        assert_eq!(
            a.light.len(),
            1,
            "two layers of one healthy request count once"
        );
        assert_eq!(a.traces.len(), 1, "the 502 needs a verdict");
        assert_eq!(a.traces[0].id, "4af7651916cd43dd8448eb211c80319c");
    }
}
