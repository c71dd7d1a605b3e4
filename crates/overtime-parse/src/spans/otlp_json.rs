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

use super::ids::{IdKind, id_bytes_from_json};
use super::jsonl::span_from_jsonl_value;
use super::otlp::{Origin, UNKNOWN_KIND, map_span, reject_span, service_name};
use super::time::parse_unix_nano;
use super::value::{get, otlp_json_attributes};
use super::{ParsedSpans, SpanError};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{
    Span, Status,
    span::{Event, Link},
};
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
            )));
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
                .push(whole(SpanError::MissingField("resourceSpans".into())));
        }
    };
    let mut k = 0;
    let at_line = |at: &str, what: &str| {
        whole(SpanError::BadOtlp(format!("{at} {what}")))
            .with_position(format!("{UNIT} {line_no}, {at}"))
    };
    for (ri, rs) in resource_spans.iter().enumerate() {
        let at_r = format!("resourceSpans[{ri}]");
        let Value::Object(rs) = rs else {
            out.rejected.push(at_line(&at_r, "is not an object"));
            continue;
        };
        let resource = match get(rs, &["resource"]) {
            None | Some(Value::Null) => None,
            Some(Value::Object(r)) => Some(r),
            Some(_) => {
                out.rejected
                    .push(at_line(&at_r, "resource is not an object"));
                continue;
            }
        };
        let attrs = resource
            .map(|r| otlp_json_attributes(r.get("attributes")))
            .unwrap_or_default();
        let service = service_name(&attrs);
        let scopes = match get(
            rs,
            &[
                "scopeSpans",
                "scope_spans",
                "instrumentationLibrarySpans",
                "instrumentation_library_spans",
            ],
        ) {
            Some(Value::Array(a)) if !a.is_empty() => a,
            Some(Value::Array(_)) | Some(Value::Null) | None => {
                out.rejected.push(at_line(&at_r, "has no scopeSpans"));
                continue;
            }
            Some(_) => {
                out.rejected
                    .push(at_line(&at_r, "scopeSpans is not an array"));
                continue;
            }
        };
        for (si, ss) in scopes.iter().enumerate() {
            let at_s = format!("{at_r}.scopeSpans[{si}]");
            let Value::Object(ss) = ss else {
                out.rejected.push(at_line(&at_s, "is not an object"));
                continue;
            };
            let (scope_name, scope_version) = match scope_of(ss) {
                Ok(s) => s,
                Err(what) => {
                    out.rejected.push(at_line(&at_s, what));
                    continue;
                }
            };
            let spans = match get(ss, &["spans"]) {
                Some(Value::Array(a)) if !a.is_empty() => a,
                Some(Value::Array(_)) | Some(Value::Null) | None => {
                    out.rejected.push(at_line(&at_s, "has no spans"));
                    continue;
                }
                Some(_) => {
                    out.rejected.push(at_line(&at_s, "spans is not an array"));
                    continue;
                }
            };
            let o = Origin {
                service: &service,
                scope_name,
                scope_version,
                source,
                position: line_no,
            };
            for span in spans {
                k += 1;
                let mapped = span_from_json(span).and_then(|s| map_span(&s, &o));
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

/// The instrumentation scope's name and version (`scope`, or
/// `instrumentationLibrary` before OTLP 1.0); `Err` when it is not shaped
/// like one.
fn scope_of(ss: &Map<String, Value>) -> Result<(Option<&str>, Option<&str>), &'static str> {
    let scope = match get(
        ss,
        &["scope", "instrumentationLibrary", "instrumentation_library"],
    ) {
        None | Some(Value::Null) => return Ok((None, None)),
        Some(Value::Object(s)) => s,
        Some(_) => return Err("scope is not an object"),
    };
    let text = |name: &str| match scope.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(()),
    };
    let name = text("name").map_err(|()| "scope.name is not a string")?;
    let version = text("version").map_err(|()| "scope.version is not a string")?;
    Ok((name, version))
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
/// `CLIENT`, `Error`…), looked up in `names` (index = value). Absent or
/// null is 0; `Err` holds a value that is neither (kept for the caller to
/// reject or flag).
fn enum_value(v: Option<&Value>, prefix: &str, names: &[&str]) -> Result<i32, String> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| n.to_string()),
        Some(Value::String(s)) => {
            let u = s.trim().to_ascii_uppercase();
            let u = u.strip_prefix(prefix).unwrap_or(&u);
            match u.parse::<i32>() {
                Ok(i) => Ok(i),
                Err(_) => names
                    .iter()
                    .position(|n| *n == u)
                    .map(|i| i as i32)
                    .ok_or_else(|| s.clone()),
            }
        }
        Some(other) => Err(other.to_string()),
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

/// An optional array field of a span (`events`, `links`): absent or null is
/// empty, anything else but an array an error.
fn array<'a>(o: &'a Map<String, Value>, name: &str) -> Result<&'a [Value], SpanError> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(SpanError::BadOtlp(format!("{name} is not an array"))),
    }
}

/// An id error of link `i`, named `links[i].<field>`.
fn prefix_field(e: SpanError, i: usize) -> SpanError {
    match e {
        SpanError::BadId { field, detail } => SpanError::BadId {
            field: format!("links[{i}].{field}"),
            detail,
        },
        e => e,
    }
}

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
    // In map_span's order, so JSON and protobuf give the same reason.
    let trace_id = id_field(o, &["traceId", "trace_id"], IdKind::Trace)?;
    if trace_id.is_empty() {
        return Err(SpanError::MissingField("traceId".into()));
    }
    let span_id = id_field(o, &["spanId", "span_id"], IdKind::Span)?;
    if span_id.is_empty() {
        return Err(SpanError::MissingField("spanId".into()));
    }
    let parent_span_id = id_field(o, &["parentSpanId", "parent_span_id"], IdKind::Span)?;
    let status = match field(&["status"]) {
        None | Some(Value::Null) => None,
        Some(Value::Object(s)) => Some(Status {
            code: enum_value(get(s, &["code"]), "STATUS_CODE_", CODES).map_err(|raw| {
                SpanError::BadField {
                    field: "status.code".into(),
                    detail: format!("{raw} is not an OTLP status code (0 unset, 1 ok, 2 error)"),
                }
            })?,
            message: get(s, &["message"])
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }),
        Some(_) => return Err(SpanError::BadOtlp("status is not an object".into())),
    };
    let links = array(o, "links")?
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let l = l
                .as_object()
                .ok_or_else(|| SpanError::BadOtlp(format!("links[{i}] is not an object")))?;
            Ok(Link {
                trace_id: id_field(l, &["traceId", "trace_id"], IdKind::Trace)
                    .map_err(|e| prefix_field(e, i))?,
                span_id: id_field(l, &["spanId", "span_id"], IdKind::Span)
                    .map_err(|e| prefix_field(e, i))?,
                trace_state: get(l, &["traceState", "trace_state"])
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                attributes: otlp_json_attributes(l.get("attributes")),
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>, SpanError>>()?;
    let events = array(o, "events")?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let e = e
                .as_object()
                .ok_or_else(|| SpanError::BadOtlp(format!("events[{i}] is not an object")))?;
            Ok(Event {
                time_unix_nano: nanos(e, &["timeUnixNano", "time_unix_nano"]).map_err(
                    |e| match e {
                        SpanError::BadTime(m) => SpanError::BadTime(format!("events[{i}].{m}")),
                        e => e,
                    },
                )?,
                name: get(e, &["name"])
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                attributes: otlp_json_attributes(e.get("attributes")),
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>, SpanError>>()?;
    let mut attributes = otlp_json_attributes(field(&["attributes"]));
    let kind = enum_value(field(&["kind"]), "SPAN_KIND_", KINDS).unwrap_or_else(|raw| {
        attributes.push(KeyValue {
            key: UNKNOWN_KIND.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(raw)),
            }),
            ..Default::default()
        });
        0
    });
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id,
        name: text(&["name"]),
        kind,
        start_time_unix_nano: nanos(o, &["startTimeUnixNano", "start_time_unix_nano"])?,
        end_time_unix_nano: nanos(o, &["endTimeUnixNano", "end_time_unix_nano"])?,
        attributes,
        events,
        links,
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
