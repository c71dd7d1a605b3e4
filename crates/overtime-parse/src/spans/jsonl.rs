//! JSONL span logs: one JSON object per line, fields as docs/inputs.md#spans's table.
//!
//! Required: `trace_id` (32 hex), `span_id` (16 hex), `service`, `name`,
//! `start_time` (RFC 3339 or epoch ms; s/µs/ns by magnitude) and `end_time`
//! or `duration_ms`. Ids are lowercased; `traceId`/`spanId`/`parentSpanId`
//! are accepted as aliases. Every other field is optional; a known field
//! whose value cannot be read, and every unknown field, is kept in
//! `attributes` as a string. A nested `attributes` object is read like OTLP
//! attributes (so `gen_ai.*` and `agent.*` keys work there too), with
//! top-level fields taking precedence.

use super::SpanError;
use super::attributes::SpanBuilder;
use super::ids::{IdKind, normalize_hex_id};
use super::time::parse_timestamp_us;
use super::value::{get, plain_json_to_any};
use crate::duration::parse_duration_ms;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use overtime_model::{RejectedRecord, SpanRecord};
use serde_json::{Map, Value};

/// Keys read directly here rather than through [`SpanBuilder::field`].
const STRUCTURAL: &[&str] = &[
    "trace_id",
    "traceId",
    "span_id",
    "spanId",
    "parent_span_id",
    "parentSpanId",
    "parent_id",
    "service",
    "name",
    "start_time",
    "end_time",
    "duration_ms",
    "events",
    "attributes",
];

/// Parses one JSONL span line (docs/inputs.md#spans table).
///
/// A rejection carries the reason code — `bad_json`, `missing_field`,
/// `bad_field`, `bad_id`, `bad_time` — its detail, and the line.
///
/// ```
/// use overtime_parse::spans::parse_jsonl_line;
/// use overtime_model::{SpanStatus, Stage};
/// let line = br#"{"trace_id":"0AF7651916CD43DD8448EB211C80319C","span_id":"b7ad6b7169203331",
///   "service":"agent","name":"chat","model":"deepseek-v4-pro","start_time":"2024-05-01T11:00:00Z",
///   "duration_ms":31000,"status":"timeout","timeout_ms":30000,"llm_reason":"kv_cache_build=3.2s"}"#;
/// let s = parse_jsonl_line(line, "spans.jsonl", 1).unwrap();
/// assert_eq!(s.trace_id, "0af7651916cd43dd8448eb211c80319c");
/// assert_eq!((s.stage, s.status), (Stage::Llm, SpanStatus::Timeout));
/// assert_eq!(s.duration_ms(), 31000.0);
/// assert_eq!(s.phases.prefill_ms, Some(3200.0));
///
/// let bad = parse_jsonl_line(br#"{"trace_id":"xyz"}"#, "spans.jsonl", 2).unwrap_err();
/// assert_eq!((bad.reason.as_str(), bad.position.as_str()), ("bad_id", "line 2"));
/// ```
// The rejection is returned by value: this signature is the crate's
// contract, and a rejected line is the cold path.
#[allow(clippy::result_large_err)]
pub fn parse_jsonl_line(
    line: &[u8],
    source: &str,
    line_no: u64,
) -> Result<SpanRecord, RejectedRecord> {
    let reject =
        |e: SpanError| RejectedRecord::new(source, line_no, e.reason(), e.to_string(), line);
    let v: Value =
        serde_json::from_slice(line).map_err(|e| reject(SpanError::BadJson(e.to_string())))?;
    span_from_jsonl_value(&v, source, line_no).map_err(reject)
}

/// Reads a required string field; empty counts as missing.
fn required<'a>(o: &'a Map<String, Value>, names: &[&'static str]) -> Result<&'a str, SpanError> {
    match get(o, names) {
        None => Err(SpanError::MissingField(names[0].into())),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(SpanError::MissingField(names[0].into()))
        }
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(SpanError::BadField {
            field: names[0].into(),
            detail: format!("expected a string, got {other}"),
        }),
    }
}

fn id(o: &Map<String, Value>, names: &[&'static str], kind: IdKind) -> Result<String, SpanError> {
    let s = required(o, names).map_err(|e| match e {
        SpanError::BadField { field, detail } => SpanError::BadId { field, detail },
        e => e,
    })?;
    normalize_hex_id(s, kind).ok_or_else(|| SpanError::BadId {
        field: names[0].into(),
        detail: format!("{s:?} is not {} hex digits", kind.bytes() * 2),
    })
}

/// A JSONL span already parsed as JSON (also used for JSONL objects found
/// in an OTLP JSON file).
pub(crate) fn span_from_jsonl_value(
    v: &Value,
    source: &str,
    line_no: u64,
) -> Result<SpanRecord, SpanError> {
    let Value::Object(o) = v else {
        return Err(SpanError::BadJson(format!(
            "expected a JSON object, got {}",
            kind_of(v)
        )));
    };
    let trace_id = id(o, &["trace_id", "traceId"], IdKind::Trace)?;
    let span_id = id(o, &["span_id", "spanId"], IdKind::Span)?;
    let parent = match get(o, &["parent_span_id", "parentSpanId", "parent_id"]) {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() || s.bytes().all(|b| b == b'0') => None,
        Some(_) => Some(id(
            o,
            &["parent_span_id", "parentSpanId", "parent_id"],
            IdKind::Span,
        )?),
    };
    let service = required(o, &["service"])?;
    let name = required(o, &["name"])?;
    let start_us =
        time_field(o, "start_time")?.ok_or(SpanError::MissingField("start_time".into()))?;
    let end_us = match (time_field(o, "end_time")?, get(o, &["duration_ms"])) {
        (Some(end), _) => end,
        (None, Some(d)) => {
            let ms = match d {
                Value::Number(n) => n.as_f64().filter(|f| f.is_finite() && *f >= 0.0),
                Value::String(s) => parse_duration_ms(s, 1.0),
                _ => None,
            }
            .ok_or_else(|| SpanError::BadTime(format!("duration_ms {d} is not a duration")))?;
            start_us
                .checked_add((ms * 1000.0).round() as i64)
                .ok_or_else(|| SpanError::BadTime(format!("duration_ms {d} is too large")))?
        }
        (None, None) => return Err(SpanError::MissingField("end_time or duration_ms".into())),
    };
    // In f64: the difference of two far-apart times need not fit in i64
    // (found by fuzzing).
    if end_us < start_us {
        return Err(SpanError::BadTime(format!(
            "end_time is {} ms before start_time",
            (start_us as f64 - end_us as f64) / 1000.0
        )));
    }
    if end_us.checked_sub(start_us).is_none() {
        return Err(SpanError::BadTime(format!(
            "a span from {start_us} µs to {end_us} µs is too long"
        )));
    }

    let mut rec = SpanRecord::new(&trace_id, &span_id, service, name, start_us, end_us);
    rec.parent_span_id = parent;
    rec.source = source.to_string();
    rec.line = line_no;
    let mut b = SpanBuilder::new(rec);
    if let Some(attrs) = o.get("attributes") {
        match attrs {
            Value::Object(a) => a
                .iter()
                .for_each(|(k, v)| b.attribute(k, &plain_json_to_any(v))),
            Value::Null => {}
            other => b.keep("attributes", &plain_json_to_any(other)),
        }
    }
    for (k, v) in o {
        if STRUCTURAL.contains(&k.as_str()) {
            continue;
        }
        let any = plain_json_to_any(v);
        if !b.field(k, &any) {
            b.attribute(k, &any);
        }
    }
    match o.get("events") {
        Some(Value::Array(evs)) => evs.iter().for_each(|e| add_event(&mut b, start_us, e)),
        None | Some(Value::Null) => {}
        Some(other) => b.keep("events", &plain_json_to_any(other)),
    }
    Ok(b.finish())
}

/// `{"name", "time", "duration_ms"?, "dns_ms"?, "attributes"?: {...}}`;
/// `offset_ms` (from the span's start) may stand in for `time`.
fn add_event(b: &mut SpanBuilder, start_us: i64, e: &Value) {
    let Value::Object(o) = e else {
        return b.unreadable_event();
    };
    let name = get(o, &["name"]).and_then(Value::as_str);
    let offset = || {
        let ms = get(o, &["offset_ms"])?.as_f64().filter(|f| f.is_finite())?;
        start_us.checked_add((ms * 1000.0).round() as i64)
    };
    let time = get(o, &["time", "timestamp"])
        .and_then(parse_timestamp_us)
        .or_else(offset);
    let (Some(name), Some(time)) = (name, time) else {
        return b.unreadable_event();
    };
    let mut attrs: Vec<KeyValue> = o
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "name" | "time" | "timestamp" | "offset_ms" | "attributes"
            )
        })
        .map(|(k, v)| kv(k, v))
        .collect();
    if let Some(Value::Object(a)) = o.get("attributes") {
        attrs.extend(a.iter().map(|(k, v)| kv(k, v)));
    }
    b.event(name, time, &attrs);
}

fn kv(k: &str, v: &Value) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(plain_json_to_any(v)),
        ..Default::default()
    }
}

/// `Ok(None)` when absent, `Err(bad_time)` when present but unreadable.
fn time_field(o: &Map<String, Value>, name: &str) -> Result<Option<i64>, SpanError> {
    match get(o, &[name]) {
        None => Ok(None),
        Some(v) => parse_timestamp_us(v)
            .map(Some)
            .ok_or_else(|| SpanError::BadTime(format!("{name} {v} is not a time"))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{SpanStatus, Stage};

    const IDS: &str =
        r#""trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331""#;

    #[allow(clippy::result_large_err)]
    fn parse(rest: &str) -> Result<SpanRecord, RejectedRecord> {
        let line = format!("{{{IDS},{rest}}}");
        parse_jsonl_line(line.as_bytes(), "t.jsonl", 7)
    }

    #[test]
    fn required_fields_and_reasons() {
        let ok = parse(
            r#""service":"a","name":"n","start_time":1714561200000,"end_time":1714561201500"#,
        )
        .unwrap();
        assert_eq!(ok.duration_ms(), 1500.0);
        assert_eq!((ok.source.as_str(), ok.line), ("t.jsonl", 7));
        assert_eq!(
            ok.stage,
            Stage::Service,
            "a root with nothing else is the service"
        );

        let reason = |r: Result<SpanRecord, RejectedRecord>| r.unwrap_err().reason;
        assert_eq!(
            reason(parse(r#""name":"n","start_time":1,"duration_ms":1"#)),
            "missing_field"
        );
        assert_eq!(
            reason(parse(r#""service":"a","name":"n","duration_ms":1"#)),
            "missing_field"
        );
        assert_eq!(
            reason(parse(
                r#""service":"a","name":"n","start_time":1714561200000"#
            )),
            "missing_field"
        );
        assert_eq!(
            reason(parse(
                r#""service":"a","name":"n","start_time":"noon","duration_ms":1"#
            )),
            "bad_time"
        );
        assert_eq!(
            reason(parse(
                r#""service":"a","name":"n","start_time":1714561200000,"end_time":1714561100000"#
            )),
            "bad_time"
        );
        assert_eq!(
            reason(parse(
                r#""service":"a","name":"n","start_time":1714561200000,"duration_ms":-3"#
            )),
            "bad_time"
        );
        assert_eq!(
            reason(parse(
                r#""service":5,"name":"n","start_time":1,"duration_ms":1"#
            )),
            "bad_field"
        );
        assert_eq!(
            reason(parse(
                r#""service":"a","name":"n","parent_span_id":"123","start_time":1,"duration_ms":1"#
            )),
            "bad_id"
        );
        let missing = parse(r#""service":"a","start_time":1,"duration_ms":1"#).unwrap_err();
        assert!(missing.detail.contains("`name`"), "{}", missing.detail);
        let bad = parse_jsonl_line(b"{\"trace_id\":", "t.jsonl", 3).unwrap_err();
        assert_eq!((bad.reason.as_str(), bad.line), ("bad_json", 3));
        assert_eq!(
            parse_jsonl_line(b"[1,2]", "t", 1).unwrap_err().reason,
            "bad_json"
        );
    }

    #[test]
    fn optional_fields_unknowns_and_nested_attributes() {
        let s = parse(
            r#""service":"a","name":"call weather","parent_span_id":"00F067AA0BA902B7",
            "start_time":"2024-05-01T11:00:00Z","duration_ms":"45s","tool":"weather_api",
            "timeout_ms":null,"attempt":2,"status":"error","error_type":"ReadTimeout",
            "region":"eu","retries":[1,2],
            "attributes":{"gen_ai.tool.name":"ignored_by_top_level","http.response.status_code":504},
            "events":[{"name":"dns","time":"2024-05-01T11:00:00.010Z","duration_ms":12},
                      {"name":"chunk","offset_ms":1500.5},
                      {"name":"no time"}]"#,
        )
        .unwrap();
        assert_eq!(s.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(s.duration_ms(), 45000.0);
        assert_eq!(s.stage, Stage::Tool);
        assert_eq!(s.tool.as_deref(), Some("weather_api"));
        assert_eq!(s.timeout_ms, None);
        assert_eq!(s.attempt, Some(2));
        assert_eq!(s.status, SpanStatus::Timeout);
        assert_eq!(s.http_status, Some(504));
        assert_eq!(s.dns_ms, Some(12.0));
        assert_eq!(s.events.len(), 2);
        assert_eq!(
            s.events[1].time_us - s.start_us,
            1_500_500,
            "offset_ms from the start"
        );
        let attr = |k: &str| {
            s.attributes
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(attr("region"), Some("eu"));
        assert_eq!(attr("retries"), Some("[1,2]"));
        assert_eq!(attr("overtime.unreadable_events"), Some("1"));
    }
}
