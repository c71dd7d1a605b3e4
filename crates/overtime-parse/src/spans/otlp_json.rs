//! OTLP JSON: one `ExportTraceServiceRequest` per line, as the
//! OpenTelemetry Collector's file exporter writes it (and as OTLP/HTTP JSON
//! bodies are).
//!
//! Read tolerantly over `serde_json::Value` into the prost types, then
//! mapped by the same code as protobuf: field names camelCase (the OTLP
//! JSON spec) or snake_case; `traceId`/`spanId` hex, or base64 of 16/8
//! bytes; `*UnixNano` as strings or numbers; enums (`kind`, `status.code`)
//! as integers or names; attribute values of every `AnyValue` kind.
//! `instrumentationLibrarySpans` (pre-1.0 OTLP) is read as `scopeSpans`.

use super::ids::{id_bytes_from_json, IdKind};
use super::jsonl::span_from_jsonl_value;
use super::otlp::{map_span, reject_span, service_name};
use super::time::parse_unix_nano;
use super::value::{get, otlp_json_attributes};
use super::{ParsedSpans, SpanError};
use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};
use overtime_model::RejectedRecord;
use serde_json::{Map, Value};

/// Position unit of OTLP JSON lines: `line 4, span 2`.
const UNIT: &str = "line";

/// Parses one OTLP JSON line (one `ExportTraceServiceRequest`): good spans
/// are kept, each bad span is rejected on its own with position
/// `line N, span K` (K counts from 1 across the request). A line that is
/// not JSON, or not a request, is one rejection at `line N`. A line that
/// is a JSONL span object (it has `trace_id`) is read as JSONL.
///
/// ```
/// use overtime_parse::spans::{parse_otlp_json_line, ParsedSpans};
/// let line = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"agent"}}]},
///   "scopeSpans":[{"spans":[
///     {"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"chat",
///      "kind":3,"startTimeUnixNano":"1714561200000000000","endTimeUnixNano":"1714561231000000000",
///      "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}]},
///     {"traceId":"not-hex","spanId":"b7ad6b7169203332","name":"bad"}]}]}]}"#;
/// let mut out = ParsedSpans::default();
/// parse_otlp_json_line(line, "traces.jsonl", 4, &mut out);
/// assert_eq!(out.spans[0].service, "agent");
/// assert_eq!(out.spans[0].stage, overtime_model::Stage::Llm);
/// assert_eq!(out.rejected[0].position, "line 4, span 2");
/// assert_eq!(out.rejected[0].reason, "bad_id");
/// ```
pub fn parse_otlp_json_line(line: &[u8], source: &str, line_no: u64, out: &mut ParsedSpans) {
    match serde_json::from_slice::<Value>(line) {
        Ok(v) => otlp_json_value(&v, line, source, line_no, out),
        Err(e) => out.rejected.push(RejectedRecord::new(
            source,
            line_no,
            "bad_json",
            SpanError::BadJson(e.to_string()).to_string(),
            line,
        )),
    }
}

/// Is this JSON object an OTLP request rather than a JSONL span?
pub(crate) fn looks_like_otlp(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.contains_key("resourceSpans") || o.contains_key("resource_spans"))
}

/// An OTLP JSON line already parsed as JSON.
pub(crate) fn otlp_json_value(
    v: &Value,
    line: &[u8],
    source: &str,
    line_no: u64,
    out: &mut ParsedSpans,
) {
    let whole =
        |e: SpanError| RejectedRecord::new(source, line_no, e.reason(), e.to_string(), line);
    let Value::Object(o) = v else {
        return out
            .rejected
            .push(whole(SpanError::BadOtlp("expected a JSON object".into())));
    };
    let resource_spans = match get(o, &["resourceSpans", "resource_spans"]) {
        Some(Value::Array(a)) => a,
        Some(_) => {
            return out.rejected.push(whole(SpanError::BadOtlp(
                "resourceSpans is not an array".into(),
            )))
        }
        None if get(o, &["trace_id", "traceId"]).is_some() => {
            return match span_from_jsonl_value(v, source, line_no) {
                Ok(s) => out.spans.push(s),
                Err(e) => out.rejected.push(whole(e)),
            };
        }
        None => {
            return out
                .rejected
                .push(whole(SpanError::MissingField("resourceSpans".into())))
        }
    };
    let mut k = 0;
    for (ri, rs) in resource_spans.iter().enumerate() {
        let Value::Object(rs) = rs else {
            let e = SpanError::BadOtlp(format!("resourceSpans[{ri}] is not an object"));
            out.rejected
                .push(whole(e).with_position(format!("line {line_no}, resourceSpans[{ri}]")));
            continue;
        };
        let attrs = get(rs, &["resource"])
            .and_then(Value::as_object)
            .map(|r| otlp_json_attributes(r.get("attributes")))
            .unwrap_or_default();
        let service = service_name(&attrs);
        let scopes = get(
            rs,
            &["scopeSpans", "scope_spans", "instrumentationLibrarySpans"],
        );
        for ss in scopes.and_then(Value::as_array).map_or(&[][..], |a| a) {
            let spans = ss
                .as_object()
                .and_then(|s| get(s, &["spans"]))
                .and_then(Value::as_array);
            for span in spans.map_or(&[][..], |a| a) {
                k += 1;
                let mapped =
                    span_from_json(span).and_then(|s| map_span(&s, &service, source, line_no));
                match mapped {
                    Ok(r) => out.spans.push(r),
                    Err(e) => {
                        let raw = span.to_string();
                        out.rejected.push(reject_span(
                            source,
                            UNIT,
                            line_no,
                            k,
                            &e,
                            raw.as_bytes(),
                        ));
                    }
                }
            }
        }
    }
}

fn id_field(
    o: &Map<String, Value>,
    names: &[&'static str],
    kind: IdKind,
) -> Result<Vec<u8>, SpanError> {
    match get(o, names) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => id_bytes_from_json(s, kind).ok_or_else(|| SpanError::BadId {
            field: names[0].into(),
            detail: format!(
                "{s:?} is neither {} hex digits nor base64 of {} bytes",
                kind.bytes() * 2,
                kind.bytes()
            ),
        }),
        Some(other) => Err(SpanError::BadId {
            field: names[0].into(),
            detail: format!("expected a string, got {other}"),
        }),
    }
}

fn nanos(o: &Map<String, Value>, names: &[&'static str]) -> Result<u64, SpanError> {
    let v = get(o, names);
    parse_unix_nano(v).map_err(|()| {
        let shown = v.map(Value::to_string).unwrap_or_default();
        SpanError::BadTime(format!("{} {shown} is not a time", names[0]))
    })
}

/// An enum as an integer or a name (`SPAN_KIND_CLIENT`, `STATUS_CODE_ERROR`,
/// `CLIENT`, `Error`…), looked up in `names` (index = value).
fn enum_value(v: Option<&Value>, prefix: &str, names: &[&str]) -> i32 {
    match v {
        Some(Value::Number(n)) => n.as_i64().and_then(|i| i32::try_from(i).ok()).unwrap_or(0),
        Some(Value::String(s)) => {
            let u = s.trim().to_ascii_uppercase();
            let u = u.strip_prefix(prefix).unwrap_or(&u);
            match u.parse::<i32>() {
                Ok(i) => i,
                Err(_) => names.iter().position(|n| *n == u).map_or(0, |i| i as i32),
            }
        }
        _ => 0,
    }
}

const KINDS: &[&str] = &[
    "UNSPECIFIED",
    "INTERNAL",
    "SERVER",
    "CLIENT",
    "PRODUCER",
    "CONSUMER",
];
const CODES: &[&str] = &["UNSET", "OK", "ERROR"];

/// One OTLP JSON span → prost `Span`. Only what cannot be read at all is an
/// error here (a non-object, unreadable ids or times); the rest of the
/// checks are [`map_span`]'s, shared with protobuf.
fn span_from_json(v: &Value) -> Result<Span, SpanError> {
    let Value::Object(o) = v else {
        return Err(SpanError::BadOtlp("span is not an object".into()));
    };
    let field = |names: &[&str]| get(o, names);
    let text = |names: &[&str]| {
        field(names)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let events = field(&["events"])
        .and_then(Value::as_array)
        .map_or(&[][..], |a| a)
        .iter()
        .filter_map(Value::as_object)
        .map(|e| Event {
            time_unix_nano: parse_unix_nano(get(e, &["timeUnixNano", "time_unix_nano"]))
                .unwrap_or(0),
            name: get(e, &["name"])
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            attributes: otlp_json_attributes(e.get("attributes")),
            ..Default::default()
        })
        .collect();
    let status = field(&["status"])
        .and_then(Value::as_object)
        .map(|s| Status {
            code: enum_value(get(s, &["code"]), "STATUS_CODE_", CODES),
            message: get(s, &["message"])
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        });
    Ok(Span {
        trace_id: id_field(o, &["traceId", "trace_id"], IdKind::Trace)?,
        span_id: id_field(o, &["spanId", "span_id"], IdKind::Span)?,
        parent_span_id: id_field(o, &["parentSpanId", "parent_span_id"], IdKind::Span)?,
        name: text(&["name"]),
        kind: enum_value(field(&["kind"]), "SPAN_KIND_", KINDS),
        start_time_unix_nano: nanos(o, &["startTimeUnixNano", "start_time_unix_nano"])?,
        end_time_unix_nano: nanos(o, &["endTimeUnixNano", "end_time_unix_nano"])?,
        attributes: otlp_json_attributes(field(&["attributes"])),
        events,
        status,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::SpanStatus;
    use serde_json::json;

    #[test]
    fn snake_case_base64_and_enum_names() {
        let v = json!({"resource_spans": [{"scope_spans": [{"spans": [{
            "trace_id": "CvdlGRbNQ92ESOshHIAxnA==", "span_id": "APBnqgupArc=",
            "name": "GET", "kind": "SPAN_KIND_CLIENT",
            "start_time_unix_nano": 1_714_561_200_000_000_000_u64,
            "end_time_unix_nano": "1714561200250000000",
            "status": {"code": "STATUS_CODE_ERROR", "message": "boom"}
        }]}]}]});
        let mut out = ParsedSpans::default();
        otlp_json_value(&v, b"", "f", 1, &mut out);
        assert!(out.rejected.is_empty(), "{:?}", out.rejected);
        let s = &out.spans[0];
        assert_eq!(s.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(s.span_id, "00f067aa0ba902b7");
        assert_eq!(s.kind.as_deref(), Some("client"));
        assert_eq!(s.status, SpanStatus::Error);
        assert_eq!(s.duration_ms(), 250.0);
    }

    #[test]
    fn whole_line_rejections() {
        let mut out = ParsedSpans::default();
        parse_otlp_json_line(b"{\"resourceSpans\":[", "f", 1, &mut out);
        parse_otlp_json_line(b"{\"hello\":1}", "f", 2, &mut out);
        parse_otlp_json_line(b"{\"resourceSpans\":5}", "f", 3, &mut out);
        parse_otlp_json_line(b"[]", "f", 4, &mut out);
        parse_otlp_json_line(b"{\"resourceSpans\":[7]}", "f", 5, &mut out);
        let got: Vec<(&str, &str)> = out
            .rejected
            .iter()
            .map(|r| (r.reason.as_str(), r.position.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("bad_json", "line 1"),
                ("missing_field", "line 2"),
                ("bad_otlp", "line 3"),
                ("bad_otlp", "line 4"),
                ("bad_otlp", "line 5, resourceSpans[0]"),
            ]
        );
        // An empty request is valid and has no spans.
        parse_otlp_json_line(b"{\"resourceSpans\":[]}", "f", 6, &mut out);
        assert_eq!(out.rejected.len(), 5);
    }

    #[test]
    fn a_jsonl_span_in_an_otlp_file_is_read() {
        let mut out = ParsedSpans::default();
        let line = br#"{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","service":"a","name":"n","start_time":1714561200000,"duration_ms":5}"#;
        parse_otlp_json_line(line, "f", 1, &mut out);
        assert_eq!(out.spans.len(), 1);
    }
}
