//! One completed trace → one [`RequestObservation`]: what the request
//! contributes to the live SLIs (docs/metrics.md). The live diagnosis makes one per
//! trace, at its first diagnosis; revisions do not observe it again.
//!
//! Calls are spans of a calling stage (llm, judge, tool, memory, network,
//! queue), each attempt on its own, counted at the hop an SRE would name:
//! a span under a call of the same stage family (an LLM gateway's span
//! over the model server's, a judge's inner LLM call) is the same call seen
//! twice, and a network span that leads to further calls is a transport,
//! not a call.

use crate::assemble::Trace;
use crate::calls::{self, family, is_call_stage, span_phases};
use crate::naming::span_components;
use crate::timeouts::LayerTimeout;
use crate::verdict::TraceSummary;
use overtime_model::{
    CallObservation, GatewayStatus, LlmPhases, RequestObservation, SpanRecord, SpanStatus, Stage,
};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The route: the outermost gateway's request path without its query
/// string, else the root span's name.
pub fn route(trace: &Trace) -> String {
    if let Some(uri) = trace.gateway.iter().find_map(|g| g.uri.as_deref()) {
        let path = uri.split(['?', '#']).next().unwrap_or(uri);
        if !path.is_empty() {
            return path.to_string();
        }
    }
    let ids: FxHashMap<&str, usize> = trace
        .spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    trace
        .spans
        .iter()
        .filter(|s| {
            s.parent_span_id
                .as_deref()
                .is_none_or(|p| !ids.contains_key(p))
        })
        .min_by_key(|s| (s.start_us, s.span_id.as_str()))
        .map_or_else(|| "unknown".to_string(), |s| s.name.clone())
}

/// Which spans are calls (see the module doc).
fn call_spans(spans: &[SpanRecord]) -> Vec<usize> {
    let ids: FxHashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    let parent = |i: usize| {
        spans[i]
            .parent_span_id
            .as_deref()
            .and_then(|p| ids.get(p).copied())
            .filter(|p| *p != i)
    };
    // Walks up at most `spans.len()` steps: a cycle cannot hang it.
    let ancestors = |i: usize| {
        let mut cur = parent(i);
        let mut left = spans.len();
        std::iter::from_fn(move || {
            let c = cur.filter(|_| left > 0)?;
            left -= 1;
            cur = parent(c);
            Some(c)
        })
    };
    let mut call_below = vec![false; spans.len()];
    for (i, s) in spans.iter().enumerate() {
        if is_call_stage(s.stage) {
            for a in ancestors(i) {
                if call_below[a] {
                    break;
                }
                call_below[a] = true;
            }
        }
    }
    (0..spans.len())
        .filter(|&i| {
            let s = spans[i].stage;
            if !is_call_stage(s) || (s == Stage::Network && call_below[i]) {
                return false;
            }
            // Plain HTTP hops between services are transport: the server
            // span at the far end of a call's request (the model server's
            // under the LLM gateway's, the tool service's under the
            // agent's tool call) is that call again, not another one.
            let nearest = ancestors(i)
                .find(|&a| is_call_stage(spans[a].stage) && spans[a].stage != Stage::Network);
            // The HTTP request a call made is that call, not another one.
            if s == Stage::Network && nearest.is_some() {
                return false;
            }
            nearest.is_none_or(|a| family(spans[a].stage) != family(s))
        })
        .collect()
}

/// The phases of the LLM call at span `i`: its own, else those of the
/// first span under it that has some (the model server's span under the
/// LLM gateway's, or a plain HTTP client's captured header).
fn call_phases(
    spans: &[SpanRecord],
    i: usize,
    children: &FxHashMap<&str, Vec<usize>>,
) -> LlmPhases {
    let mut todo = vec![i];
    let mut left = spans.len();
    while let Some(j) = todo.pop() {
        let p = span_phases(&spans[j]);
        if p.queue_ms.is_some() || p.prefill_ms.is_some() {
            return p;
        }
        if left == 0 {
            break;
        }
        left -= 1;
        if let Some(c) = children.get(spans[j].span_id.as_str()) {
            todo.extend(c.iter().rev().copied().filter(|&c| c != j));
        }
    }
    LlmPhases::default()
}

/// The largest share of a known timeout used by the call at span `i` or a
/// span under it (a span that ended in its timeout used all of it).
fn call_timeout_used(
    spans: &[SpanRecord],
    i: usize,
    children: &FxHashMap<&str, Vec<usize>>,
) -> Option<f64> {
    let mut used: Option<f64> = None;
    let mut todo = vec![i];
    let mut left = spans.len();
    while let Some(j) = todo.pop() {
        let s = &spans[j];
        let u = if s.status == SpanStatus::Timeout {
            Some(1.0)
        } else {
            s.timeout_ms
                .filter(|t| t.is_finite() && *t > 0.0)
                .map(|t| s.duration_ms() / t)
        };
        if let Some(u) = u.filter(|u| u.is_finite()) {
            used = Some(used.map_or(u, |x: f64| x.max(u)));
        }
        if left == 0 {
            break;
        }
        left -= 1;
        if let Some(c) = children.get(s.span_id.as_str()) {
            todo.extend(c.iter().copied().filter(|&c| c != j));
        }
    }
    used
}

fn call(
    s: &SpanRecord,
    name: &str,
    phases: &LlmPhases,
    timeout_used: Option<f64>,
) -> CallObservation {
    let llm = matches!(s.stage, Stage::Llm | Stage::Judge);
    let tool = matches!(s.stage, Stage::Tool | Stage::Memory | Stage::Network);
    CallObservation {
        stage: s.stage,
        model: llm.then(|| name.to_string()),
        tool: tool.then(|| name.to_string()),
        status: s.status,
        duration_ms: s.duration_ms(),
        ttft_ms: s.ttft_ms,
        input_tokens: s.input_tokens,
        budget_left_ms: s.remaining_budget_ms,
        end_us: s.end_us,
        timeout_ms: s.timeout_ms.filter(|t| t.is_finite() && *t > 0.0),
        timeout_used,
        attempt: s.attempt.unwrap_or(0),
        queue_ms: phases.queue_ms.filter(|_| llm),
        prefill_ms: phases.prefill_ms.filter(|_| llm),
    }
}

/// The longest silence of a streamed response (`chunk` / `heartbeat`
/// events), from the request's start to its end; `None` if it did not
/// stream.
fn stream_silence_ms(trace: &Trace, start_us: i64, end_us: i64) -> Option<f64> {
    let mut times: Vec<i64> = trace
        .spans
        .iter()
        .flat_map(|s| s.events.iter())
        .filter(|e| matches!(e.name.as_str(), "chunk" | "heartbeat"))
        .map(|e| e.time_us)
        .collect();
    if times.is_empty() {
        return None;
    }
    times.push(start_us);
    times.push(end_us);
    times.sort_unstable();
    let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Some(gap.max(0) as f64 / 1000.0)
}

/// The share of the tightest timeout known for the request as a whole
/// that it used (see [`RequestObservation::timeout_used`]).
fn timeout_used(
    trace: &Trace,
    timeouts: &BTreeMap<String, LayerTimeout>,
    start_us: i64,
    end_us: i64,
) -> Option<f64> {
    let mut used: Option<f64> = None;
    let mut take = |u: f64| {
        if u.is_finite() && u >= 0.0 {
            used = Some(used.map_or(u, |x| x.max(u)));
        }
    };
    if let Some(g) = trace.gateway.first()
        && let Some(t) = timeouts.get(&g.source).map(|t| t.ms).filter(|t| *t > 0.0)
    {
        let (s, e) = (g.start_us(), g.time_us);
        match stream_silence_ms(trace, s.min(start_us), e.max(end_us)) {
            Some(gap) => take(gap / t),
            None => {
                if let Some(rt) = g.request_time_ms {
                    take(rt / t);
                }
            }
        }
    }
    // The service's own budget, on its outermost span that records one.
    if let Some(s) = trace
        .spans
        .iter()
        .filter(|s| s.budget_ms.is_some_and(|b| b.is_finite() && b > 0.0))
        .min_by_key(|s| (s.start_us, s.span_id.as_str()))
    {
        take(s.duration_ms() / s.budget_ms.unwrap_or(1.0));
    }
    used
}

/// What `trace` (normalized, with its `summary`) contributes to the SLIs,
/// with no gateway read timeout known (the unit tests' case).
#[cfg(test)]
fn observe(trace: &Trace, summary: &TraceSummary) -> RequestObservation {
    observe_with_timeouts(trace, summary, &BTreeMap::new())
}

/// What `trace` contributes to the SLIs, its gateway layers' read
/// timeouts (configured or inferred) known.
pub fn observe_with_timeouts(
    trace: &Trace,
    summary: &TraceSummary,
    timeouts: &BTreeMap<String, LayerTimeout>,
) -> RequestObservation {
    let spans = &trace.spans;
    let mut children: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
    for (i, s) in spans.iter().enumerate() {
        if let Some(p) = s.parent_span_id.as_deref() {
            children.entry(p).or_default().push(i);
        }
    }
    // Names come from the one call model (naming.rs), as in verdicts.
    let tree = crate::tree::build(
        trace,
        crate::outcome::deciding_gateway(trace, timeouts),
        0.0,
    );
    let names = span_components(trace, &tree, &calls::collect(trace, &tree));
    let mut calls: Vec<CallObservation> = call_spans(spans)
        .into_iter()
        .map(|i| {
            let phases = if matches!(spans[i].stage, Stage::Llm | Stage::Judge) {
                call_phases(spans, i, &children)
            } else {
                LlmPhases::default()
            };
            call(
                &spans[i],
                &names[i],
                &phases,
                call_timeout_used(spans, i, &children),
            )
        })
        .collect();
    calls.sort_by_key(|c| c.end_us);
    let last_seen = trace
        .gateway
        .iter()
        .map(|g| g.time_us)
        .chain(spans.iter().map(|s| s.end_us))
        .max()
        .unwrap_or(0);
    let end_us = if summary.end_us > 0 {
        summary.end_us
    } else {
        last_seen
    };
    let judge_score = spans
        .iter()
        .filter(|s| s.judge_score.is_some_and(f64::is_finite))
        .max_by_key(|s| s.end_us)
        .and_then(|s| s.judge_score);
    let accepted = spans.iter().filter_map(|s| s.fallback_accepted);
    let start_us = summary.start_us.min(end_us);
    RequestObservation {
        trace_id: trace.id.clone(),
        route: route(trace),
        outcome: summary.outcome,
        start_us,
        end_us,
        gateway: trace
            .gateway
            .iter()
            .map(|g| GatewayStatus {
                layer: g.source.clone(),
                status: g.status,
            })
            .collect(),
        judge_score,
        fallback: spans.iter().find_map(|s| s.fallback.clone()),
        fallback_accepted: accepted.reduce(|a, b| a || b),
        calls,
        timeout_used: timeout_used(trace, timeouts, start_us, end_us),
        provisional: false,
        provisional_calls_until_us: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{GatewayRecord, Outcome};

    fn span(id: &str, parent: Option<&str>, stage: Stage, s_ms: i64, e_ms: i64) -> SpanRecord {
        let mut s = SpanRecord::new(&"a".repeat(32), id, "agent", id, s_ms * 1000, e_ms * 1000);
        s.parent_span_id = parent.map(String::from);
        s.stage = stage;
        s
    }

    fn summary(outcome: Outcome, end_us: i64) -> TraceSummary {
        TraceSummary {
            trace_id: String::new(),
            start_us: 0,
            end_us,
            outcome,
            gateway_status: None,
            llm_calls: vec![],
            dominant: None,
            stream_gap_ms: None,
            records: 0,
        }
    }

    #[test]
    fn calls_are_counted_once_at_the_hop_an_sre_names() {
        let mut llm_gw = span("llm-gw", Some("root"), Stage::Llm, 10, 40_010);
        llm_gw.model = Some("deepseek-v4-pro".into());
        llm_gw.status = SpanStatus::Timeout;
        llm_gw.remaining_budget_ms = Some(29_990.0);
        let mut server = span("server", Some("llm-gw"), Stage::Llm, 20, 40_000);
        server.model = Some("deepseek-v4-pro".into());
        let mut judge = span("judge", Some("root"), Stage::Judge, 40_020, 43_000);
        judge.model = Some("judge-model".into());
        let judge_llm = span("judge-llm", Some("judge"), Stage::Llm, 40_030, 42_900);
        // The model server's own span, reached over an HTTP client span.
        let post = span("post", Some("llm-gw"), Stage::Network, 15, 40_005);
        let mut far = span("far", Some("post"), Stage::Llm, 18, 40_002);
        far.model = Some("deepseek-v4-pro".into());
        let http = span("http", Some("root"), Stage::Network, 5, 9);
        let mut tool = span("tool", Some("http"), Stage::Tool, 6, 8);
        tool.tool = Some("weather_api".into());
        let mut dns = span("dns", None, Stage::Network, 1, 2);
        dns.peer = Some("api.weather.example.cn".into());
        let mut root = span("root", None, Stage::Service, 0, 43_100);
        root.judge_score = Some(0.4);
        root.fallback_accepted = Some(false);
        let mut cache = span("cache", Some("root"), Stage::Memory, 41_000, 41_200);
        cache.fallback = Some("cache".into());
        let trace = Trace {
            id: "a".repeat(32),
            gateway: vec![GatewayRecord {
                source: "edge".into(),
                status: Some(504),
                uri: Some("/api/agent/execute?x=1".into()),
                time_us: 60_000_000,
                ..Default::default()
            }],
            spans: vec![
                root, llm_gw, server, judge, judge_llm, http, tool, dns, cache, post, far,
            ],
        };
        let o = observe(&trace, &summary(Outcome::GatewayTimeout, 60_000_000));
        let names: Vec<(Stage, String)> = o
            .calls
            .iter()
            .map(|c| (c.stage, c.model.clone().or(c.tool.clone()).unwrap()))
            .collect();
        assert_eq!(
            names,
            vec![
                (Stage::Network, "api.weather.example.cn".to_string()),
                (Stage::Tool, "weather_api".to_string()),
                (Stage::Llm, "deepseek-v4-pro".to_string()),
                (Stage::Memory, "cache".to_string()),
                (Stage::Judge, "judge-model".to_string()),
            ]
        );
        let llm = &o.calls[2];
        assert!(llm.timed_out());
        assert_eq!(llm.budget_left_ms, Some(29_990.0));
        assert_eq!(o.route, "/api/agent/execute");
        assert_eq!(o.outcome, Outcome::GatewayTimeout);
        assert_eq!(o.gateway[0].status, Some(504));
        assert_eq!(o.judge_score, Some(0.4));
        assert_eq!(
            (o.fallback.as_deref(), o.fallback_accepted),
            (Some("cache"), Some(false))
        );
        assert_eq!(o.end_us, 60_000_000);
    }

    #[test]
    fn early_warning_inputs_come_from_the_hops_inside_each_call() {
        // The orchestrator's tool call (8 s timeout) over the tool
        // service's own client call (5 s), which timed out; an LLM call
        // whose phases only the model server's span reports.
        let mut tool = span("tool", Some("root"), Stage::Tool, 100, 5_200);
        tool.tool = Some("weather_lookup".into());
        tool.timeout_ms = Some(8_000.0);
        tool.status = SpanStatus::Error;
        let mut client = span("client", Some("tool"), Stage::Network, 150, 5_150);
        client.timeout_ms = Some(5_000.0);
        client.status = SpanStatus::Timeout;
        let mut llm = span("llm", Some("root"), Stage::Llm, 5_300, 9_300);
        llm.model = Some("deepseek-v4-pro".into());
        llm.timeout_ms = Some(30_000.0);
        let mut server = span("server", Some("llm"), Stage::Llm, 5_310, 9_290);
        server.llm_reason = Some("queue_wait=1.5s,kv_cache_build=0.5s,decode_loop=1.9s".into());
        let mut root = span("root", None, Stage::Service, 0, 9_400);
        root.budget_ms = Some(20_000.0);
        let trace = Trace {
            id: "a".repeat(32),
            gateway: vec![GatewayRecord {
                source: "edge".into(),
                status: Some(200),
                request_time_ms: Some(9_500.0),
                time_us: 9_500_000,
                ..Default::default()
            }],
            spans: vec![root, tool, client, llm, server],
        };
        let timeouts = BTreeMap::from([(
            "edge".to_string(),
            LayerTimeout {
                ms: 10_000.0,
                inferred: false,
                cluster: 0,
                of: 0,
                cut_streams: 0,
            },
        )]);
        let o = observe_with_timeouts(&trace, &summary(Outcome::Ok, 9_500_000), &timeouts);
        let tool = o.calls.iter().find(|c| c.stage == Stage::Tool).unwrap();
        assert_eq!(tool.timeout_ms, Some(8_000.0));
        assert_eq!(tool.timeout_used, Some(1.0), "the hop inside timed out");
        let llm = o.calls.iter().find(|c| c.stage == Stage::Llm).unwrap();
        assert_eq!((llm.queue_ms, llm.prefill_ms), (Some(1_500.0), Some(500.0)));
        // 9.5 s of the edge's 10 s (the budget: 9.4 of 20 s).
        assert_eq!(o.timeout_used, Some(0.95));
        // No timeout known for the layer: only the budget.
        let o = observe(&trace, &summary(Outcome::Ok, 9_500_000));
        assert_eq!(o.timeout_used, Some(0.47));
    }

    #[test]
    fn route_falls_back_to_the_root_span_and_cycles_do_not_hang() {
        let a = span("a", Some("b"), Stage::Llm, 0, 10);
        let b = span("b", Some("a"), Stage::Llm, 0, 10);
        let root = span("POST /v1/agent/chat", None, Stage::Service, 0, 20);
        let trace = Trace {
            id: "t".into(),
            gateway: vec![],
            spans: vec![a, b, root],
        };
        assert_eq!(route(&trace), "POST /v1/agent/chat");
        let o = observe(&trace, &summary(Outcome::Ok, 0));
        assert_eq!(o.end_us, 20_000, "no summary end: the last record");
        assert!(o.calls.len() <= 2);
        let empty = Trace::default();
        assert_eq!(route(&empty), "unknown");
    }

    #[test]
    fn the_live_diagnosis_observes_each_trace_once() {
        use crate::live::LiveDiagnoser;
        let id = "0af7651916cd43dd8448eb211c80319c";
        let mut live = LiveDiagnoser::new(Default::default(), 0, 600_000, 1000);
        let g = GatewayRecord {
            source: "edge".into(),
            status: Some(504),
            request_time_ms: Some(60_000.0),
            trace_id: Some(id.into()),
            uri: Some("/v1/agent/chat".into()),
            time_us: 60_000_000,
            ..Default::default()
        };
        let mut root = span("root", None, Stage::Service, 0, 60_000);
        root.trace_id = id.into();
        live.add_gateway(vec![g], 1);
        live.add_spans(vec![root], 1);
        assert_eq!(live.tick(2).len(), 1);
        let first = live.drain_observations();
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].route.as_str(), first[0].outcome),
            ("/v1/agent/chat", Outcome::GatewayTimeout)
        );
        // A late LLM span revises the verdict but is not a second request.
        let mut llm = span("llm", Some("root"), Stage::Llm, 10, 59_990);
        llm.trace_id = id.into();
        llm.model = Some("deepseek-v4-pro".into());
        live.add_spans(vec![llm], 3);
        let revised = live.tick(4);
        assert_eq!(revised.len(), 1);
        assert_eq!(revised[0].revision, 1);
        assert!(live.drain_observations().is_empty());
        assert_eq!(live.observations_dropped(), 0);
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn route_is_the_uri_path() {
        use super::route;
        use crate::Trace;
        use overtime_model::GatewayRecord;
        let t = Trace {
            gateway: vec![GatewayRecord {
                uri: Some("/v1/agent/chat?user=7".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(route(&t), "/v1/agent/chat");
    }
}
