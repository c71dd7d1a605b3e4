//! Trace assembly: spans deduplicated by (trace id, span id), grouped by
//! trace, and joined with the gateway records of every layer (SPEC §2.4).

use overtime_model::{is_trace_id, GatewayRecord, SpanRecord};
use std::collections::{HashMap, HashSet};

/// Everything known about one request.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The W3C trace id, or a stand-in (`request:<id>`, `line:<source>:<n>`)
    /// for a gateway record no span can be joined to.
    pub id: String,
    /// Gateway records of this request, outermost layer first.
    pub gateway: Vec<GatewayRecord>,
    pub spans: Vec<SpanRecord>,
}

/// What assembly saw, for the run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssemblyStats {
    pub spans_in: usize,
    pub duplicate_spans: usize,
    pub gateway_records: usize,
    pub joined_by_traceparent: usize,
    pub joined_by_request_id: usize,
    pub joined_by_request_id_as_trace: usize,
    pub unjoined_gateway_records: usize,
}

/// Groups spans into traces (each span once) and joins gateway records:
/// by `$http_traceparent`, else by a span whose `request_id` equals
/// `$request_id`, else by `$request_id` itself when it is 32 hex.
pub fn assemble(
    gateway: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
) -> (Vec<Trace>, AssemblyStats) {
    let mut stats = AssemblyStats {
        spans_in: spans.len(),
        gateway_records: gateway.len(),
        ..Default::default()
    };
    let mut seen: HashSet<(String, String)> = HashSet::with_capacity(spans.len());
    let mut by_trace: HashMap<String, Trace> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut request_ids: HashMap<String, String> = HashMap::new();
    for s in spans {
        if !seen.insert((s.trace_id.clone(), s.span_id.clone())) {
            stats.duplicate_spans += 1;
            continue;
        }
        if let Some(rid) = &s.request_id {
            request_ids
                .entry(rid.clone())
                .or_insert_with(|| s.trace_id.clone());
        }
        let t = by_trace.entry(s.trace_id.clone()).or_insert_with(|| {
            order.push(s.trace_id.clone());
            Trace {
                id: s.trace_id.clone(),
                ..Default::default()
            }
        });
        t.spans.push(s);
    }
    for g in gateway {
        let id = if let Some(tid) = g.trace_id.clone() {
            stats.joined_by_traceparent += 1;
            tid
        } else if let Some(tid) = g.request_id.as_ref().and_then(|r| request_ids.get(r)) {
            stats.joined_by_request_id += 1;
            tid.clone()
        } else if let Some(r) = g.request_id.as_ref().filter(|r| is_trace_id(r)) {
            stats.joined_by_request_id_as_trace += 1;
            r.to_ascii_lowercase()
        } else {
            stats.unjoined_gateway_records += 1;
            match &g.request_id {
                Some(r) => format!("request:{r}"),
                None => format!("line:{}:{}", g.source, g.line),
            }
        };
        let t = by_trace.entry(id.clone()).or_insert_with(|| {
            order.push(id.clone());
            Trace {
                id,
                ..Default::default()
            }
        });
        t.gateway.push(g);
    }
    let mut traces: Vec<Trace> = order
        .into_iter()
        .filter_map(|id| by_trace.remove(&id))
        .collect();
    for t in &mut traces {
        t.gateway.sort_by_key(|g| (g.layer, g.time_us));
    }
    (traces, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(trace: Option<&str>, rid: Option<&str>) -> GatewayRecord {
        GatewayRecord {
            trace_id: trace.map(String::from),
            request_id: rid.map(String::from),
            status: Some(504),
            ..Default::default()
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
                gw(Some(t1), None),
                gw(None, Some("req-2")),
                gw(None, Some("2af7651916cd43dd8448eb211c80319c")),
                gw(None, Some("nope")),
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
}
