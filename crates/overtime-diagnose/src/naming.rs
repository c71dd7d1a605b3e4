//! The one naming rule: what a call is called in every verdict, evidence
//! line, statistic, incident fingerprint and headline
//! (docs/diagnosis.md, "Names").
//!
//! A component is named by what a person would call it, read from every
//! span of the call — its operation span(s) first, then the attempts and
//! whatever ran inside them, then the operation's parent:
//!
//! | the call is | named by, first that says it |
//! |---|---|
//! | an LLM or judge call | the model: the `model` column (GenAI `gen_ai.request.model` / `response.model`, OpenInference `llm.model_name` or `llm.invocation_parameters`, `ai.model.id`, `ls_model_name`…), else a GenAI span name `chat <model>`, else the target an operation span's name names (`deepseek-v4-pro call`) |
//! | a tool, memory, network or queue call | the tool: the `tool` column (`gen_ai.tool.name`, `tool.name`, `traceloop.entity.name`, `ai.toolCall.name`, or a span named `execute_tool <name>`, `tool.<name>`, `<name>.tool`…); else the store or data source (`gen_ai.memory.store.name`, `gen_ai.data_source.id`, `db.namespace`, `rpc.service`, `peer.service`, a span named `search_memory <store>`); else the operation span's own name when it is not a transport's (`POST`, `GET /x`) |
//! | anything else, or nothing above | the address of its first attempt (`server.address:port`, the URL's host); the span's name when there is none |
//!
//! Design rules:
//! - **One function.** [`call_component`] is the only place a call gets its
//!   name; verdicts, contributing causes, statistics and the timeline all
//!   read it from the [`crate::calls::Call`].
//! - **An address is a last resort.** It names a call only when no span of
//!   the call names anything better.

use crate::assemble::Trace;
use crate::calls::{Call, CallKind};
use crate::outcome::StreamGap;
use crate::shape::{Role, role};
use crate::tree::TraceTree;
use overtime_model::{SpanRecord, Stage};
use overtime_parse::spans::names::{model_in_name, store_in_name, tool_in_name};

/// Attributes that name a memory store, data source or remote service,
/// in the order they win.
const STORE_KEYS: &[&str] = &[
    "gen_ai.memory.store.name",
    "gen_ai.memory.store.names",
    "gen_ai.data_source.id",
    "db.namespace",
    "db.name",
    "rpc.service",
    "peer.service",
    "gen_ai.memory.store.id",
];

/// The spans of a call in the order their names count: the operation
/// spans (`nodes`), then everything under them breadth-first, then the
/// parent of the first operation when it is not the service's own span.
fn spans_in_order<'a>(trace: &'a Trace, tree: &TraceTree, nodes: &[usize]) -> Vec<&'a SpanRecord> {
    let mut order: Vec<usize> = nodes.to_vec();
    let mut i = 0;
    while i < order.len() {
        order.extend(tree.nodes[order[i]].children.iter().copied());
        i += 1;
    }
    let mut out: Vec<&SpanRecord> = order
        .into_iter()
        .filter_map(|n| tree.nodes[n].span)
        .map(|s| &trace.spans[s])
        .collect();
    if let Some(parent) = nodes
        .first()
        .and_then(|&n| tree.nodes[n].parent)
        .and_then(|p| tree.nodes[p].span)
        .map(|p| &trace.spans[p])
        .filter(|p| !matches!(p.stage, Stage::Service | Stage::Gateway))
    {
        out.push(parent);
    }
    out
}

/// A kept attribute's value, with a one-element array (`["x"]`) read as
/// its element.
fn attribute<'a>(s: &'a SpanRecord, key: &str) -> Option<&'a str> {
    let v = s.attributes.iter().find(|(k, _)| k == key)?.1.trim();
    let v = v
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .map_or(v, |inner| inner.split(',').next().unwrap_or("").trim());
    let v = v.trim_matches('"').trim();
    (!v.is_empty()).then_some(v)
}

/// Is `name` what an HTTP, RPC or database client calls every span
/// (`POST`, `GET /v1/x`, `HTTP GET`, `SELECT`, `redis GET`)?
fn transport_name(name: &str) -> bool {
    let first = name.split_whitespace().next().unwrap_or("");
    let method = |w: &str| {
        matches!(
            w.to_ascii_uppercase().as_str(),
            "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS" | "CONNECT" | "HTTP"
        )
    };
    method(first)
        || name.split_whitespace().nth(1).is_some_and(method)
        || matches!(
            first.to_ascii_uppercase().as_str(),
            "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "CALL" | "EXECUTE"
        )
        || name.starts_with('/')
        || name.contains("://")
}

/// The name of a call whose operation spans are the tree nodes `nodes`
/// (several when the call was retried as repeated operations), judged as
/// a call of `stage`. See the module's table for the precedence.
pub fn call_component(trace: &Trace, tree: &TraceTree, nodes: &[usize], stage: Stage) -> String {
    let spans = spans_in_order(trace, tree, nodes);
    let ops = &spans[..nodes.len().min(spans.len())];
    let nonempty = |v: &Option<String>| {
        v.as_deref()
            .filter(|x| !x.trim().is_empty())
            .map(str::to_string)
    };
    let named = match stage {
        Stage::Llm | Stage::Judge => spans
            .iter()
            .find_map(|s| nonempty(&s.model))
            .or_else(|| {
                spans
                    .iter()
                    .find_map(|s| model_in_name(&s.name).map(str::to_string))
            })
            .or_else(|| {
                ops.iter()
                    .find_map(|s| tool_in_name(&s.name).map(str::to_string))
            }),
        _ => None,
    };
    let named = named.or_else(|| match stage {
        Stage::Tool | Stage::Memory | Stage::Network | Stage::Queue | Stage::Other => spans
            .iter()
            .find_map(|s| nonempty(&s.tool))
            .or_else(|| {
                spans.iter().find_map(|s| {
                    STORE_KEYS
                        .iter()
                        .find_map(|k| attribute(s, k))
                        .or_else(|| store_in_name(&s.name))
                        .or_else(|| tool_in_name(&s.name))
                        .map(str::to_string)
                })
            })
            .or_else(|| {
                ops.iter()
                    .find(|s| role(s) == Role::Operation && !transport_name(&s.name))
                    .map(|s| s.name.clone())
            }),
        _ => None,
    });
    named
        .or_else(|| spans.iter().find_map(|s| nonempty(&s.peer)))
        .or_else(|| ops.first().map(|s| s.name.clone()))
        .unwrap_or_else(|| "—".into())
}

/// How long after the cut a call may end and still have been running at
/// it (the service notices the closed connection a moment later), µs.
const AT_CUT_US: i64 = 500_000;

/// The tree node of every span index.
pub fn nodes_of_spans(tree: &TraceTree, spans: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; spans];
    for (n, node) in tree.nodes.iter().enumerate() {
        if let Some(i) = node.span {
            out[i] = Some(n);
        }
    }
    out
}

/// What went silent in a cut stream: the call that was streaming into it,
/// named as every call is; else the service whose stream it was (it
/// waited on something that does not stream, such as a tool, and sent no
/// heartbeat). The call streaming into it is a model call (or a call with
/// stream events of its own) that began before the last chunk and either
/// ran until the cut, or — a bare HTTP attempt whose operation span never
/// arrived — is the last call the service made before the cut (an HTTP
/// client's span ends when the reply's headers arrive, while its body
/// streams on).
pub fn stream_component(
    trace: &Trace,
    tree: &TraceTree,
    calls: &[Call],
    gap: &StreamGap,
) -> String {
    let root = &tree.nodes[tree.root];
    let last_chunk = root.start_us + (gap.last_event_ms * 1000.0).round() as i64;
    let cut = root.end_us;
    let node_of = nodes_of_spans(tree, trace.spans.len());
    // Each span call's own start and end (its first operation span's).
    let spans_of = |c: &Call| -> Option<(i64, i64)> {
        let nodes: Vec<usize> = c.spans.iter().filter_map(|&s| node_of[s]).collect();
        let start = nodes.iter().map(|&n| tree.nodes[n].start_us).min()?;
        let end = nodes.iter().map(|&n| tree.nodes[n].raw_end_us).max()?;
        Some((start, end))
    };
    let timed: Vec<(&Call, i64, i64)> = calls
        .iter()
        .filter(|c| c.kind == CallKind::Span)
        .filter_map(|c| spans_of(c).map(|(s, e)| (c, s, e)))
        .filter(|(_, s, _)| *s < cut)
        .collect();
    let streaming = |c: &Call| c.is_llm() || streams_itself(trace, c);
    let running_at_cut = timed
        .iter()
        .filter(|(c, s, e)| streaming(c) && *s < last_chunk && *e >= cut - AT_CUT_US)
        .max_by_key(|(_, s, _)| *s);
    // Only a bare HTTP attempt's span ends before its reply does; an
    // operation span that ended had its whole reply.
    let bare = |c: &Call| {
        c.spans
            .iter()
            .all(|&i| role(&trace.spans[i]) == Role::Transport)
    };
    let last_made = timed
        .iter()
        .max_by_key(|(_, s, _)| *s)
        .filter(|(c, s, _)| streaming(c) && bare(c) && *s < last_chunk);
    running_at_cut
        .or(last_made)
        .map(|(c, _, _)| c.component.clone())
        .unwrap_or_else(|| trace.spans[gap.span].service.clone())
}

/// A call whose own spans carry stream events (chunks, heartbeats).
fn streams_itself(trace: &Trace, c: &Call) -> bool {
    c.spans.iter().any(|&i| {
        trace.spans[i]
            .events
            .iter()
            .any(|e| crate::outcome::is_stream_event(&e.name))
    })
}

/// The component of every span: the name of the call it belongs to (its
/// operation or anything under it), else its own ([`crate::calls::component_of`]).
pub fn span_components(trace: &Trace, tree: &TraceTree, calls: &[Call]) -> Vec<String> {
    let mut out: Vec<Option<String>> = vec![None; trace.spans.len()];
    let node_of = nodes_of_spans(tree, trace.spans.len());
    for c in calls.iter().filter(|c| c.kind == CallKind::Span) {
        let mut stack: Vec<usize> = c.spans.iter().filter_map(|&s| node_of[s]).collect();
        while let Some(n) = stack.pop() {
            if let Some(i) = tree.nodes[n].span
                && out[i].is_none()
            {
                out[i] = Some(c.component.clone());
            }
            stack.extend(tree.nodes[n].children.iter().copied());
        }
    }
    out.into_iter()
        .zip(&trace.spans)
        .map(|(c, s)| c.unwrap_or_else(|| crate::calls::component_of(s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::build;

    const T: &str = "0af7651916cd43dd8448eb211c80319c";

    fn span(id: &str, parent: Option<&str>, name: &str, stage: Stage) -> SpanRecord {
        let mut r = SpanRecord::new(T, id, "agent", name, 1_000, 9_000_000);
        r.parent_span_id = parent.map(str::to_string);
        r.stage = stage;
        r
    }

    /// The component of the call at span `op` of `spans` (span 0 is the root).
    fn name(spans: Vec<SpanRecord>, op: usize, stage: Stage) -> String {
        let trace = Trace {
            id: T.into(),
            gateway: vec![],
            spans,
        };
        let tree = build(&trace, None, 0.0);
        let node = tree.nodes.iter().position(|n| n.span == Some(op)).unwrap();
        call_component(&trace, &tree, &[node], stage)
    }

    fn root() -> SpanRecord {
        let mut r = SpanRecord::new(T, "r", "agent", "POST /v1/agent", 0, 10_000_000);
        r.stage = Stage::Service;
        r
    }

    #[test]
    fn a_bare_tool_span_is_named_by_its_name_not_its_attempts_address() {
        let op = span("op", Some("r"), "carrier_rates", Stage::Tool);
        let mut http = span("h", Some("op"), "POST", Stage::Network);
        http.peer = Some("127.0.0.1:50655".into());
        assert_eq!(
            name(vec![root(), op, http], 1, Stage::Tool),
            "carrier_rates"
        );
    }

    #[test]
    fn a_memory_call_is_named_by_its_store() {
        let mut op = span("op", Some("r"), "search_memory", Stage::Memory);
        op.peer = Some("redis-memory.research.internal:6379".into());
        op.attributes
            .push(("gen_ai.memory.store.name".into(), "session-memory".into()));
        assert_eq!(name(vec![root(), op], 1, Stage::Memory), "session-memory");
        let mut arr = span("op", Some("r"), "query_memory", Stage::Memory);
        arr.attributes.push((
            "gen_ai.memory.store.names".into(),
            "[\"support-history\"]".into(),
        ));
        assert_eq!(name(vec![root(), arr], 1, Stage::Memory), "support-history");
    }

    #[test]
    fn a_model_anywhere_in_the_call_names_an_llm_call_and_an_address_comes_last() {
        let op = span("op", Some("r"), "llm", Stage::Llm);
        let mut http = span("h", Some("op"), "POST", Stage::Network);
        http.peer = Some("10.0.0.7:8000".into());
        assert_eq!(
            name(vec![root(), op.clone(), http.clone()], 1, Stage::Llm),
            "10.0.0.7:8000"
        );
        let mut named = http;
        named.model = Some("qwen2.5-72b".into());
        assert_eq!(name(vec![root(), op, named], 1, Stage::Llm), "qwen2.5-72b");
        let chat = span("op", Some("r"), "chat deepseek-v4-pro", Stage::Llm);
        assert_eq!(name(vec![root(), chat], 1, Stage::Llm), "deepseek-v4-pro");
    }

    #[test]
    fn a_plain_http_call_is_its_address() {
        let mut http = span("h", Some("r"), "GET /v3/forecast", Stage::Network);
        http.peer = Some("api.weather.example:443".into());
        assert_eq!(
            name(vec![root(), http], 1, Stage::Network),
            "api.weather.example:443"
        );
    }
}
