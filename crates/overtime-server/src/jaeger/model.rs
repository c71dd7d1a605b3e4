//! One trace of the store in the JSON the Jaeger query service answers
//! with (its `uimodel`: `traceID`, `spans`, `processes`, `warnings`), as
//! Jaeger builds it from OpenTelemetry spans: the OpenTelemetry collector's
//! translator to Jaeger's model, then the query service's standard
//! adjusters, then its UI converter.
//!
//! Design rules (each as Jaeger does it, unless said otherwise):
//! - Times and durations in µs; a trace id whose upper 64 bits are zero is
//!   written in 16 hex digits (Jaeger's `TraceID.String()`).
//! - A span's tags: the instrumentation scope (`otel.scope.name`,
//!   `otel.scope.version`), then its attributes sorted by key (the
//!   `SortCollections` adjuster), then `span.kind`, `otel.status_code`,
//!   `error` and `otel.status_description`. An integer beyond ±2⁵³ is
//!   written as a string, as Jaeger's UI converter does.
//! - overtime keeps the attributes it reads as columns, not under the
//!   name the span wrote them with; those come back under their current
//!   OpenTelemetry name (`http.response.status_code`,
//!   `gen_ai.request.model`…), and what only overtime knows under
//!   `overtime.` (`overtime.stage`, `overtime.timeout_ms`…). They are
//!   attributes, so they sort with the others.
//! - The verdict goes on the trace's root span (no parent in the trace;
//!   the earliest, then the longest): `overtime.root_cause`,
//!   `overtime.component`, `overtime.share`, `overtime.outcome`,
//!   `overtime.summary`; every span the verdict timed gets its
//!   `overtime.critical_ms`.
//! - Span events become logs (`event` = the event's name); each call's
//!   phases become logs too (`event` = `overtime.phase`, with
//!   `overtime.phase` and `duration_ms`): DNS then connect from the span's
//!   start, and the model server's queue, prefill, decode and io one
//!   after the other from the span's start. Logs are ordered by event
//!   name, in time order within a name (the adjuster sorts events by name).
//! - A span that arrived twice is shown once (the `DeduplicateSpans`
//!   adjuster); spans in start order; processes `p1`, `p2`… by service in
//!   the order their first span comes.
//!
//! ```
//! use overtime_model::SpanRecord;
//! let mut s = SpanRecord::new("0000000000000000000000000000abcd", "00000000000000aa", "agent", "POST /v1", 1_000_000, 1_250_000);
//! s.kind = Some("server".into());
//! let t = overtime_server::jaeger_trace(&[s], None);
//! assert_eq!(t["traceID"], "000000000000abcd");
//! assert_eq!(t["spans"][0]["duration"], 250_000);
//! assert_eq!(t["processes"]["p1"]["serviceName"], "agent");
//! ```

use overtime_model::{SpanRecord, SpanStatus, Verdict};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};

/// JavaScript's largest exact integer: Jaeger writes larger ones as text.
const JS_MAX_SAFE: i64 = (1 << 53) - 1;

/// A trace id as Jaeger writes it: 16 hex digits when the upper half is
/// zero, else 32. Anything that is not hex is written as given.
pub fn jaeger_trace_id(id: &str) -> String {
    let id = id.to_ascii_lowercase();
    if id.len() == 32
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && id[..16].bytes().all(|b| b == b'0')
    {
        return id[16..].to_string();
    }
    id
}

/// One tag (a `KeyValue` of Jaeger's UI model).
fn kv(key: &str, value: TagValue) -> Value {
    let (ty, v) = match value {
        TagValue::Str(s) => ("string", Value::from(s)),
        TagValue::Bool(b) => ("bool", Value::from(b)),
        TagValue::Int(i) if !(-JS_MAX_SAFE..=JS_MAX_SAFE).contains(&i) => {
            ("int64", Value::from(i.to_string()))
        }
        TagValue::Int(i) => ("int64", Value::from(i)),
        TagValue::Float(f) => ("float64", Value::from(f)),
    };
    json!({"key": key, "type": ty, "value": v})
}

/// A tag's value, typed as Jaeger types it.
#[derive(Debug, Clone, PartialEq)]
enum TagValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
}

/// The attributes of `s` as Jaeger tags (unsorted): those overtime kept
/// as they came, and the columns it read, under their names.
fn attributes(s: &SpanRecord, timed: Option<f64>) -> Vec<(String, TagValue)> {
    use TagValue::{Bool, Float, Int, Str};
    let mut out: Vec<(String, TagValue)> = Vec::new();
    let mut put = |k: &str, v: Option<TagValue>| {
        if let Some(v) = v {
            out.push((k.to_string(), v));
        }
    };
    put(
        "http.response.status_code",
        s.http_status.map(|v| Int(v.into())),
    );
    put("error.type", s.error_type.clone().map(Str));
    put("gen_ai.request.model", s.model.clone().map(Str));
    put("gen_ai.usage.input_tokens", s.input_tokens.map(Int));
    put("gen_ai.usage.output_tokens", s.output_tokens.map(Int));
    put("gen_ai.request.max_tokens", s.max_tokens.map(Int));
    put("gen_ai.request.temperature", s.temperature.map(Float));
    put("gen_ai.tool.name", s.tool.clone().map(Str));
    put("overtime.stage", Some(Str(s.stage.as_str().into())));
    if matches!(s.status, SpanStatus::Timeout | SpanStatus::Cancelled) {
        put("overtime.status", Some(Str(s.status.as_str().into())));
    }
    put("overtime.request_id", s.request_id.clone().map(Str));
    put("overtime.peer", s.peer.clone().map(Str));
    put("overtime.attempt", s.attempt.map(|a| Int(a.into())));
    put("overtime.llm_reason", s.llm_reason.clone().map(Str));
    put("overtime.fallback", s.fallback.clone().map(Str));
    put("overtime.fallback_accepted", s.fallback_accepted.map(Bool));
    for (k, v) in [
        ("overtime.timeout_ms", s.timeout_ms),
        ("overtime.budget_ms", s.budget_ms),
        ("overtime.remaining_budget_ms", s.remaining_budget_ms),
        ("overtime.max_wait_ms", s.max_wait_ms),
        ("overtime.ttft_ms", s.ttft_ms),
        ("overtime.gpu_load", s.gpu_load),
        ("overtime.llm_duration_ms", s.llm_duration_ms),
        ("overtime.judge_score", s.judge_score),
        ("overtime.dns_ms", s.dns_ms),
        ("overtime.connect_ms", s.connect_ms),
        ("overtime.critical_ms", timed),
    ] {
        put(k, v.map(Float));
    }
    let named: HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
    for (k, v) in &s.attributes {
        if !named.contains(k) {
            out.push((k.clone(), Str(v.clone())));
        }
    }
    out
}

/// The verdict's tags on the root span.
fn verdict_tags(v: &Verdict) -> Vec<(String, TagValue)> {
    let rc = &v.root_cause;
    let mut t = vec![
        (
            "overtime.root_cause".into(),
            TagValue::Str(rc.kind.as_str().into()),
        ),
        (
            "overtime.component".into(),
            TagValue::Str(rc.component.clone()),
        ),
        ("overtime.share".into(), TagValue::Float(rc.share)),
        (
            "overtime.outcome".into(),
            TagValue::Str(v.outcome.as_str().into()),
        ),
        ("overtime.summary".into(), TagValue::Str(rc.summary.clone())),
    ];
    if let Some(g) = &v.gateway {
        if let Some(st) = g.status {
            t.push(("overtime.gateway.status".into(), TagValue::Int(st.into())));
        }
        if let Some(ms) = g.request_time_ms {
            t.push((
                "overtime.gateway.request_time_ms".into(),
                TagValue::Float(ms),
            ));
        }
    }
    t
}

/// The span's tags in Jaeger's order.
fn span_tags(s: &SpanRecord, extra: Vec<(String, TagValue)>, timed: Option<f64>) -> Vec<Value> {
    let mut tags = Vec::new();
    if let Some(n) = s.scope_name.as_deref().filter(|n| !n.is_empty()) {
        tags.push(kv("otel.scope.name", TagValue::Str(n.into())));
    }
    if let Some(n) = s.scope_version.as_deref().filter(|n| !n.is_empty()) {
        tags.push(kv("otel.scope.version", TagValue::Str(n.into())));
    }
    let mut attrs = attributes(s, timed);
    let extra_keys: HashSet<String> = extra.iter().map(|(k, _)| k.clone()).collect();
    attrs.retain(|(k, _)| !extra_keys.contains(k));
    attrs.extend(extra);
    attrs.sort_by(|a, b| a.0.cmp(&b.0));
    tags.extend(attrs.into_iter().map(|(k, v)| kv(&k, v)));
    if let Some(k) = s
        .kind
        .as_deref()
        .filter(|k| !k.is_empty() && *k != "unspecified")
    {
        tags.push(kv("span.kind", TagValue::Str(k.to_ascii_lowercase())));
    }
    let failed = matches!(
        s.status,
        SpanStatus::Error | SpanStatus::Timeout | SpanStatus::Cancelled
    );
    match s.status {
        SpanStatus::Ok => tags.push(kv("otel.status_code", TagValue::Str("OK".into()))),
        _ if failed => {
            tags.push(kv("otel.status_code", TagValue::Str("ERROR".into())));
            tags.push(kv("error", TagValue::Bool(true)));
        }
        _ => {}
    }
    if let Some(m) = s.status_message.as_deref().filter(|m| !m.is_empty()) {
        tags.push(kv("otel.status_description", TagValue::Str(m.into())));
    }
    tags
}

/// One log: its time and fields.
fn log(time_us: i64, event: &str, fields: Vec<Value>) -> (String, i64, Value) {
    let mut f = vec![kv("event", TagValue::Str(event.into()))];
    f.extend(fields);
    (
        event.to_string(),
        time_us,
        json!({"timestamp": time_us.max(0), "fields": f}),
    )
}

/// A phase as a log at `at_us`.
fn phase_log(at_us: i64, name: &str, ms: f64) -> (String, i64, Value) {
    log(
        at_us,
        "overtime.phase",
        vec![
            kv("overtime.phase", TagValue::Str(name.into())),
            kv("duration_ms", TagValue::Float(ms)),
        ],
    )
}

/// The span's events and phases as logs, in Jaeger's order.
fn span_logs(s: &SpanRecord) -> Vec<Value> {
    let mut logs: Vec<(String, i64, Value)> = s
        .events
        .iter()
        .map(|e| {
            let fields = e
                .duration_ms
                .map(|d| vec![kv("duration_ms", TagValue::Float(d))])
                .unwrap_or_default();
            log(e.time_us, &e.name, fields)
        })
        .collect();
    let us = |ms: f64| (ms * 1000.0).round() as i64;
    let mut at = s.start_us;
    for (name, ms) in [("dns", s.dns_ms), ("connect", s.connect_ms)] {
        if let Some(ms) = ms {
            logs.push(phase_log(at, name, ms));
            at += us(ms);
        }
    }
    let mut at = s.start_us;
    for (name, ms) in s.phases.iter() {
        logs.push(phase_log(at, name, ms));
        at += us(ms);
    }
    // Stable: the events of one name stay in time order.
    logs.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    logs.into_iter().map(|(_, _, v)| v).collect()
}

/// The spans of one trace (any order, duplicates allowed) as the Jaeger
/// query service answers `GET /api/traces/{id}` for it, with `verdict`'s
/// root cause on the root span (`None`: no verdict tags).
pub fn jaeger_trace(spans: &[SpanRecord], verdict: Option<&Verdict>) -> Value {
    let mut seen = HashSet::new();
    let mut spans: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| seen.insert(s.span_id.to_ascii_lowercase()))
        .collect();
    spans.sort_by(|a, b| a.start_us.cmp(&b.start_us).then(a.span_id.cmp(&b.span_id)));
    let ids: HashSet<String> = spans
        .iter()
        .map(|s| s.span_id.to_ascii_lowercase())
        .collect();
    let is_root = |s: &SpanRecord| {
        s.parent_span_id
            .as_deref()
            .is_none_or(|p| p.is_empty() || !ids.contains(&p.to_ascii_lowercase()))
    };
    let root = spans
        .iter()
        .filter(|s| is_root(s))
        .min_by(|a, b| {
            a.start_us
                .cmp(&b.start_us)
                .then((b.end_us - b.start_us).cmp(&(a.end_us - a.start_us)))
        })
        .map(|s| s.span_id.to_ascii_lowercase());
    let timed: BTreeMap<&str, f64> = verdict
        .map(|v| {
            v.timeline
                .iter()
                .map(|t| (t.span_id.as_str(), t.critical_ms))
                .collect()
        })
        .unwrap_or_default();
    let mut processes: Vec<String> = Vec::new();
    let trace_id = spans
        .first()
        .map(|s| jaeger_trace_id(&s.trace_id))
        .unwrap_or_default();
    let out: Vec<Value> = spans
        .iter()
        .map(|s| {
            let pid = match processes.iter().position(|p| *p == s.service) {
                Some(i) => i + 1,
                None => {
                    processes.push(s.service.clone());
                    processes.len()
                }
            };
            let span_id = s.span_id.to_ascii_lowercase();
            let extra = match verdict {
                Some(v) if root.as_deref() == Some(span_id.as_str()) => verdict_tags(v),
                _ => Vec::new(),
            };
            let tid = jaeger_trace_id(&s.trace_id);
            let mut refs = Vec::new();
            if let Some(p) = s.parent_span_id.as_deref().filter(|p| !p.is_empty()) {
                refs.push(json!({"refType": "CHILD_OF", "traceID": tid, "spanID": p.to_ascii_lowercase()}));
            }
            for l in &s.links {
                refs.push(json!({"refType": "FOLLOWS_FROM", "traceID": jaeger_trace_id(&l.trace_id), "spanID": l.span_id.to_ascii_lowercase()}));
            }
            json!({
                "traceID": tid,
                "spanID": span_id,
                "operationName": s.name,
                "references": refs,
                "startTime": s.start_us.max(0),
                "duration": (s.end_us - s.start_us).max(0),
                "tags": span_tags(s, extra, timed.get(s.span_id.as_str()).copied()),
                "logs": span_logs(s),
                "processID": format!("p{pid}"),
                "warnings": null,
            })
        })
        .collect();
    let procs: serde_json::Map<String, Value> = processes
        .iter()
        .enumerate()
        .map(|(i, svc)| {
            (
                format!("p{}", i + 1),
                json!({"serviceName": svc, "tags": []}),
            )
        })
        .collect();
    json!({"traceID": trace_id, "spans": out, "processes": procs, "warnings": null})
}

/// A tag's value as Jaeger's search compares it (`KeyValue.AsString`).
pub(crate) fn tag_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{SpanEvent, Stage};

    fn span(id: &str, parent: Option<&str>, start: i64, end: i64) -> SpanRecord {
        let mut s = SpanRecord::new(
            "83a9efd15c1c98a977e0711cc93ee28b",
            id,
            "agent",
            id,
            start,
            end,
        );
        s.parent_span_id = parent.map(String::from);
        s
    }

    #[test]
    fn an_llm_calls_phases_are_logs_one_after_the_other_from_its_start() {
        let mut s = span("00000000000000aa", None, 10_000_000, 40_000_000);
        s.stage = Stage::Llm;
        s.phases.queue_ms = Some(1000.0);
        s.phases.prefill_ms = Some(20_000.0);
        s.phases.decode_ms = Some(500.0);
        s.events.push(SpanEvent {
            name: "chunk".into(),
            time_us: 35_000_000,
            duration_ms: None,
        });
        let logs = span_logs(&s);
        let at: Vec<(i64, String)> = logs
            .iter()
            .map(|l| {
                (
                    l["timestamp"].as_i64().unwrap(),
                    tag_text(&l["fields"].as_array().unwrap().last().unwrap()["value"]),
                )
            })
            .collect();
        assert_eq!(logs[0]["fields"][0]["value"], "chunk");
        assert_eq!(at[1], (10_000_000, "1000.0".into()));
        assert_eq!(at[2], (11_000_000, "20000.0".into()));
        assert_eq!(at[3], (31_000_000, "500.0".into()));
        assert_eq!(logs[2]["fields"][1]["value"], "prefill");
    }

    #[test]
    fn huge_integers_are_text_and_duplicates_and_order_are_jaegers() {
        let mut a = span("00000000000000bb", Some("00000000000000aa"), 2, 5);
        a.input_tokens = Some(i64::MAX);
        a.status = SpanStatus::Timeout;
        let root = span("00000000000000aa", None, 1, 9);
        let t = jaeger_trace(&[a.clone(), root, a], None);
        let spans = t["spans"].as_array().unwrap();
        assert_eq!(spans.len(), 2, "a span that came twice is shown once");
        assert_eq!(spans[0]["spanID"], "00000000000000aa");
        let tags = spans[1]["tags"].as_array().unwrap();
        let tok = tags
            .iter()
            .find(|t| t["key"] == "gen_ai.usage.input_tokens")
            .unwrap();
        assert_eq!(tok["value"], i64::MAX.to_string());
        let keys: Vec<&str> = tags.iter().map(|t| t["key"].as_str().unwrap()).collect();
        assert_eq!(&keys[keys.len() - 2..], ["otel.status_code", "error"]);
        assert_eq!(spans[1]["references"][0]["refType"], "CHILD_OF");
    }
}
