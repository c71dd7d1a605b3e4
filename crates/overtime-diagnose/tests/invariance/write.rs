//! Rewritten spans into the bytes `overtime diagnose` reads: JSONL span
//! lines (overtime's fields) or OTLP JSON lines (one
//! `ExportTraceServiceRequest` per trace, one `resourceSpans` per service,
//! as the Collector's file exporter writes them).
//!
//! Status is written so that it reads back as it was: OTLP has only
//! ok/error, so a timeout or a cancellation is an error whose `error.type`
//! or message says so (with an `exception` event, as SDKs record it).

use chrono::{DateTime, SecondsFormat};
use overtime_model::SpanStatus;
use serde_json::{Value, json};

/// An attribute value (or a JSONL field's).
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    S(String),
    I(i64),
    F(f64),
    B(bool),
    A(Vec<String>),
    /// Raw JSON (JSONL only: the `attributes` object).
    J(Value),
}

impl From<String> for V {
    fn from(s: String) -> V {
        V::S(s)
    }
}
impl From<i64> for V {
    fn from(i: i64) -> V {
        V::I(i)
    }
}
impl From<f64> for V {
    fn from(f: f64) -> V {
        V::F(f)
    }
}
impl From<bool> for V {
    fn from(b: bool) -> V {
        V::B(b)
    }
}

impl V {
    fn json(&self) -> Value {
        match self {
            V::S(s) => json!(s),
            V::I(i) => json!(i),
            V::F(f) => json!(f),
            V::B(b) => json!(b),
            V::A(a) => json!(a),
            V::J(j) => j.clone(),
        }
    }
    fn otlp(&self) -> Value {
        match self {
            V::S(s) => json!({"stringValue": s}),
            V::I(i) => json!({"intValue": i.to_string()}),
            V::F(f) => json!({"doubleValue": f}),
            V::B(b) => json!({"boolValue": b}),
            V::A(a) => {
                json!({"arrayValue": {"values": a.iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
            }
            V::J(j) => json!({"stringValue": j.to_string()}),
        }
    }
}

/// A span event.
#[derive(Debug, Clone)]
pub struct Ev {
    pub name: String,
    pub time_us: i64,
    pub attrs: Vec<(String, V)>,
}

/// One span of a rewrite, with what it tells about its call.
#[derive(Debug, Clone)]
pub struct Out {
    pub id: String,
    pub parent: Option<String>,
    pub service: String,
    pub name: String,
    pub kind: &'static str,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub message: Option<String>,
    pub error_type: Option<String>,
    /// JSONL fields or OTLP attributes.
    pub fields: Vec<(String, V)>,
    pub events: Vec<Ev>,
    /// The call (index into `Logical::calls`) this span belongs to.
    pub call: Option<usize>,
    pub tells: super::families::Tells,
    /// The X-LLM-Reason this span carries (checked when read back).
    pub reason: Option<String>,
}

fn rfc3339(us: i64) -> String {
    DateTime::from_timestamp_micros(us)
        .expect("span times are in range")
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn classify(text: &str) -> Option<SpanStatus> {
    let l = text.to_ascii_lowercase();
    if ["timeout", "timed out", "timed_out", "timedout", "deadline"]
        .iter()
        .any(|n| l.contains(n))
    {
        Some(SpanStatus::Timeout)
    } else if [
        "cancel",
        "client reset",
        "client_reset",
        "client closed",
        "client_closed",
        "client disconnect",
        "client_disconnect",
    ]
    .iter()
    .any(|n| l.contains(n))
    {
        Some(SpanStatus::Cancelled)
    } else {
        None
    }
}

/// The OTLP status message that makes an error read back as `want`
/// (the type first, then the message, as docs/span-conventions.md says).
fn otlp_message(want: SpanStatus, error_type: Option<&str>, msg: Option<&str>) -> Option<String> {
    let by_type = error_type.and_then(classify);
    let read = by_type.or_else(|| msg.and_then(classify));
    let word = match want {
        SpanStatus::Timeout => "timed out",
        SpanStatus::Cancelled => "cancelled",
        _ => return msg.map(str::to_string),
    };
    if read == Some(want) || by_type.is_some() {
        return msg.map(str::to_string);
    }
    Some(match msg {
        Some(m) => format!("{word}: {m}"),
        None => word.to_string(),
    })
}

/// JSONL lines, one span each.
pub fn jsonl(outs: &[Out], trace_id: &str) -> String {
    let mut s = String::new();
    for o in outs {
        let mut m = serde_json::Map::new();
        m.insert("trace_id".into(), json!(trace_id));
        m.insert("span_id".into(), json!(o.id));
        if let Some(p) = &o.parent {
            m.insert("parent_span_id".into(), json!(p));
        }
        m.insert("service".into(), json!(o.service));
        m.insert("name".into(), json!(o.name));
        m.insert("kind".into(), json!(o.kind));
        m.insert("start_time".into(), json!(rfc3339(o.start_us)));
        m.insert("end_time".into(), json!(rfc3339(o.end_us)));
        m.insert("status".into(), json!(o.status.as_str()));
        if let Some(x) = &o.message {
            m.insert("status_message".into(), json!(x));
        }
        if let Some(x) = &o.error_type {
            m.insert("error_type".into(), json!(x));
        }
        for (k, v) in &o.fields {
            m.insert(k.clone(), v.json());
        }
        if !o.events.is_empty() {
            let evs: Vec<Value> = o
                .events
                .iter()
                .map(|e| {
                    let mut ev = serde_json::Map::new();
                    ev.insert("name".into(), json!(e.name));
                    ev.insert("time".into(), json!(rfc3339(e.time_us)));
                    for (k, v) in &e.attrs {
                        ev.insert(k.clone(), v.json());
                    }
                    Value::Object(ev)
                })
                .collect();
            m.insert("events".into(), Value::Array(evs));
        }
        s.push_str(&Value::Object(m).to_string());
        s.push('\n');
    }
    s
}

/// One OTLP JSON line (an `ExportTraceServiceRequest`) for a trace.
pub fn otlp(outs: &[Out], trace_id: &str) -> String {
    let mut services: Vec<&str> = outs.iter().map(|o| o.service.as_str()).collect();
    services.sort();
    services.dedup();
    let resource_spans: Vec<Value> = services
        .iter()
        .map(|svc| {
            let spans: Vec<Value> = outs
                .iter()
                .filter(|o| o.service == *svc)
                .map(|o| otlp_span(o, trace_id))
                .collect();
            json!({
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": svc}}]},
                "scopeSpans": [{"scope": {"name": "overtime.invariance"}, "spans": spans}]
            })
        })
        .collect();
    let mut s = json!({"resourceSpans": resource_spans}).to_string();
    s.push('\n');
    s
}

fn otlp_span(o: &Out, trace_id: &str) -> Value {
    let kind = match o.kind {
        "server" => 2,
        "client" => 3,
        "producer" => 4,
        "consumer" => 5,
        _ => 1,
    };
    let mut attrs: Vec<Value> = o
        .fields
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v.otlp()}))
        .collect();
    let mut events: Vec<Value> = o
        .events
        .iter()
        .map(|e| {
            json!({
                "timeUnixNano": (e.time_us * 1000).to_string(),
                "name": e.name,
                "attributes": e.attrs.iter().map(|(k, v)| json!({"key": k, "value": v.otlp()})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let failed = matches!(
        o.status,
        SpanStatus::Error | SpanStatus::Timeout | SpanStatus::Cancelled
    );
    let status = match o.status {
        SpanStatus::Unset => json!({}),
        SpanStatus::Ok => json!({"code": 1}),
        want => {
            let m = otlp_message(want, o.error_type.as_deref(), o.message.as_deref());
            match m {
                Some(m) => json!({"code": 2, "message": m}),
                None => json!({"code": 2}),
            }
        }
    };
    if let Some(t) = &o.error_type {
        attrs.push(json!({"key": "error.type", "value": {"stringValue": t}}));
        if failed {
            let mut ea = vec![json!({"key": "exception.type", "value": {"stringValue": t}})];
            if let Some(m) = &o.message {
                ea.push(json!({"key": "exception.message", "value": {"stringValue": m}}));
            }
            events.push(json!({"timeUnixNano": (o.end_us * 1000).to_string(), "name": "exception", "attributes": ea}));
        }
    }
    let mut span = json!({
        "traceId": trace_id,
        "spanId": o.id,
        "name": o.name,
        "kind": kind,
        "startTimeUnixNano": (o.start_us * 1000).to_string(),
        "endTimeUnixNano": (o.end_us * 1000).to_string(),
        "attributes": attrs,
        "events": events,
        "status": status,
    });
    if let Some(p) = &o.parent {
        span["parentSpanId"] = json!(p);
    }
    span
}
