//! OTLP spans → `spans` rows: the one mapping shared by protobuf, gRPC,
//! OTLP/HTTP and OTLP JSON (which is first read into the same prost types).

use super::attributes::{SpanBuilder, kind_name};
use super::ids::{IdKind, hex_id_from_bytes};
use super::value::{any_str, any_to_string};
use super::{ParsedSpans, SpanError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, status::StatusCode};
use overtime_model::{RejectedRecord, SpanLink, SpanRecord, SpanStatus};

/// The service of a resource: `service.name`, else OpenTelemetry's
/// `unknown_service` default.
pub(crate) fn service_name(resource_attrs: &[KeyValue]) -> String {
    resource_attrs
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref())
        .and_then(any_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or("unknown_service")
        .to_string()
}

/// Where a span sat: `"<unit> <position>, span <k>"`, e.g. `line 4, span 2`.
pub(crate) fn span_position(unit: &str, position: u64, k: usize) -> String {
    format!("{unit} {position}, span {k}")
}

/// A rejection of one span of a request.
pub(crate) fn reject_span(
    source: &str,
    unit: &str,
    position: u64,
    k: usize,
    e: &SpanError,
    raw: &[u8],
) -> RejectedRecord {
    RejectedRecord::new(source, position, e.reason(), e.to_string(), raw)
        .with_position(span_position(unit, position, k))
}

fn id(bytes: &[u8], kind: IdKind, field: &str) -> Result<Option<String>, SpanError> {
    hex_id_from_bytes(bytes, kind).map_err(|detail| SpanError::BadId {
        field: field.into(),
        detail,
    })
}

/// Times past this are absurd: 2262-04-11, the last instant a signed
/// 64-bit count of nanoseconds holds (and so most tools).
pub(crate) const MAX_UNIX_NANO: u64 = i64::MAX as u64;

/// Where a span came from: its resource's service and its instrumentation
/// scope, and the source position for `rejected`.
pub(crate) struct Origin<'a> {
    pub service: &'a str,
    pub scope_name: Option<&'a str>,
    pub scope_version: Option<&'a str>,
    pub source: &'a str,
    pub position: u64,
}

fn absurd(field: &str, nanos: u64) -> SpanError {
    SpanError::BadTime(format!(
        "{field} {nanos} ns is after 2262-04-11 (the most a signed 64-bit nanosecond time holds)"
    ))
}

/// Maps one OTLP span (docs/inputs.md#spans). Rejects, in
/// this order (the OTLP JSON reader checks in the same order, so both
/// encodings give the same reason): no/invalid trace or span id, an
/// invalid parent id, a status code OTLP does not define (the status
/// decides the verdict, so it is not guessed), a link without valid ids,
/// an event without a time, after 2262 or without a name (its time is
/// never replaced by the span's start), no name, a zero or absurd (after
/// 2262) start or end time, an end before start.
/// An unknown span kind is kept as `overtime.unknown_span_kind` with
/// `kind` null (the kind only helps tell the stage).
pub(crate) fn map_span(span: &Span, o: &Origin<'_>) -> Result<SpanRecord, SpanError> {
    let trace_id = id(&span.trace_id, IdKind::Trace, "traceId")?
        .ok_or_else(|| SpanError::MissingField("traceId".into()))?;
    let span_id = id(&span.span_id, IdKind::Span, "spanId")?
        .ok_or_else(|| SpanError::MissingField("spanId".into()))?;
    let parent = id(&span.parent_span_id, IdKind::Span, "parentSpanId")?;
    if let Some(st) = &span.status
        && StatusCode::try_from(st.code).is_err()
    {
        return Err(SpanError::BadField {
            field: "status.code".into(),
            detail: format!(
                "{} is not an OTLP status code (0 unset, 1 ok, 2 error)",
                st.code
            ),
        });
    }
    let mut links = Vec::with_capacity(span.links.len());
    for (i, l) in span.links.iter().enumerate() {
        let f = |n: &str| format!("links[{i}].{n}");
        let tid = id(&l.trace_id, IdKind::Trace, &f("traceId"))?
            .ok_or_else(|| SpanError::MissingField(f("traceId")))?;
        let sid = id(&l.span_id, IdKind::Span, &f("spanId"))?
            .ok_or_else(|| SpanError::MissingField(f("spanId")))?;
        links.push(SpanLink {
            trace_id: tid,
            span_id: sid,
            trace_state: (!l.trace_state.is_empty()).then(|| l.trace_state.clone()),
            attributes: l
                .attributes
                .iter()
                .map(|kv| {
                    let v = kv.value.as_ref().map(any_to_string).unwrap_or_default();
                    (kv.key.clone(), v)
                })
                .collect(),
        });
    }
    for (i, e) in span.events.iter().enumerate() {
        if e.time_unix_nano == 0 {
            return Err(SpanError::MissingField(format!("events[{i}].timeUnixNano")));
        }
        if e.time_unix_nano > MAX_UNIX_NANO {
            return Err(absurd(
                &format!("events[{i}].timeUnixNano"),
                e.time_unix_nano,
            ));
        }
        if e.name.is_empty() {
            return Err(SpanError::MissingField(format!("events[{i}].name")));
        }
    }
    if span.name.is_empty() {
        return Err(SpanError::MissingField("name".into()));
    }
    let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
    if start == 0 {
        return Err(SpanError::MissingField("startTimeUnixNano".into()));
    }
    if end == 0 {
        return Err(SpanError::MissingField("endTimeUnixNano".into()));
    }
    if start > MAX_UNIX_NANO {
        return Err(absurd("startTimeUnixNano", start));
    }
    if end > MAX_UNIX_NANO {
        return Err(absurd("endTimeUnixNano", end));
    }
    if end < start {
        return Err(SpanError::BadTime(format!(
            "endTimeUnixNano is {} ms before startTimeUnixNano",
            (start - end) as f64 / 1e6
        )));
    }
    let (start_us, end_us) = ((start / 1000) as i64, (end / 1000) as i64);
    let mut rec = SpanRecord::new(&trace_id, &span_id, o.service, &span.name, start_us, end_us);
    rec.parent_span_id = parent;
    rec.source = o.source.to_string();
    rec.line = o.position;
    rec.scope_name = o.scope_name.filter(|s| !s.is_empty()).map(str::to_string);
    rec.scope_version = o
        .scope_version
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    rec.links = links;
    let mut b = SpanBuilder::new(rec);
    match kind_name(&span.kind.to_string()) {
        Some(k) => b.set_kind(Some(k)),
        None if span.kind != 0 => b.keep(
            UNKNOWN_KIND,
            &AnyValue {
                value: Some(any_value::Value::StringValue(span.kind.to_string())),
            },
        ),
        None => {}
    }
    for kv in &span.attributes {
        match &kv.value {
            Some(v) => b.attribute(&kv.key, v),
            None => b.keep(&kv.key, &Default::default()),
        }
    }
    for e in &span.events {
        b.event(&e.name, (e.time_unix_nano / 1000) as i64, &e.attributes);
    }
    if let Some(st) = &span.status {
        match StatusCode::try_from(st.code) {
            Ok(StatusCode::Ok) => b.set_status(SpanStatus::Ok),
            Ok(StatusCode::Error) => b.set_status(SpanStatus::Error),
            _ => {}
        }
        b.set_status_message(&st.message);
    }
    Ok(b.finish())
}

/// The attribute that keeps a span kind OTLP does not define.
pub(crate) const UNKNOWN_KIND: &str = "overtime.unknown_span_kind";

/// Maps every span of a request; bad spans are rejected one by one with
/// position `"<unit> <position>, span <k>"` (k counts from 1 across the
/// whole request). A resource without scopes, or a scope without spans, is
/// a rejection too (`bad_otlp`, position `<unit> <position>,
/// resourceSpans[i]` or `….scopeSpans[j]`): OTLP exporters never send one,
/// so it is a broken request, not an empty one. Returns how many spans were
/// rejected (for OTLP's partial success).
pub(crate) fn map_request(
    req: &ExportTraceServiceRequest,
    source: &str,
    unit: &str,
    position: u64,
    out: &mut ParsedSpans,
) -> usize {
    let mut k = 0;
    let mut rejected = 0;
    let structural = |out: &mut ParsedSpans, at: String, what: &str| {
        let e = SpanError::BadOtlp(format!("{at} {what}"));
        out.rejected.push(
            RejectedRecord::new(source, position, e.reason(), e.to_string(), at.as_bytes())
                .with_position(format!("{unit} {position}, {at}")),
        );
    };
    for (ri, rs) in req.resource_spans.iter().enumerate() {
        let attrs = rs.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        let service = service_name(attrs);
        if rs.scope_spans.is_empty() {
            structural(out, format!("resourceSpans[{ri}]"), "has no scopeSpans");
        }
        for (si, ss) in rs.scope_spans.iter().enumerate() {
            if ss.spans.is_empty() {
                let at = format!("resourceSpans[{ri}].scopeSpans[{si}]");
                structural(out, at, "has no spans");
            }
            let o = Origin {
                service: &service,
                scope_name: ss.scope.as_ref().map(|s| s.name.as_str()),
                scope_version: ss.scope.as_ref().map(|s| s.version.as_str()),
                source,
                position,
            };
            for span in &ss.spans {
                k += 1;
                match map_span(span, &o) {
                    Ok(r) => out.spans.push(r),
                    Err(e) => {
                        rejected += 1;
                        let raw = format!("{span:?}");
                        out.rejected.push(reject_span(
                            source,
                            unit,
                            position,
                            k,
                            &e,
                            raw.as_bytes(),
                        ));
                    }
                }
            }
        }
    }
    rejected
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::Status;

    fn origin<'a>(service: &'a str, source: &'a str, position: u64) -> Origin<'a> {
        Origin {
            service,
            scope_name: None,
            scope_version: None,
            source,
            position,
        }
    }

    fn span() -> Span {
        Span {
            trace_id: vec![0x0a; 16],
            span_id: vec![0xb7; 8],
            name: "POST /v1/agent".into(),
            kind: 2,
            start_time_unix_nano: 1_714_561_200_000_000_000,
            end_time_unix_nano: 1_714_561_260_001_000_000,
            status: Some(Status {
                code: 2,
                message: "upstream timed out".into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn maps_ids_times_kind_status() {
        let r = map_span(&span(), &origin("agent", "otlp", 3)).unwrap();
        assert_eq!(r.trace_id, "0a".repeat(16));
        assert_eq!(r.span_id, "b7".repeat(8));
        assert_eq!(r.parent_span_id, None);
        assert_eq!(r.duration_ms(), 60001.0);
        assert_eq!(r.kind.as_deref(), Some("server"));
        assert_eq!(r.status, SpanStatus::Timeout, "message says timed out");
        assert_eq!(r.stage, overtime_model::Stage::Service);
        assert_eq!((r.source.as_str(), r.line), ("otlp", 3));
    }

    #[test]
    fn rejects_bad_ids_and_times() {
        let reason = |s: Span| map_span(&s, &origin("a", "x", 1)).unwrap_err().reason();
        assert_eq!(
            reason(Span {
                trace_id: vec![],
                ..span()
            }),
            "missing_field"
        );
        assert_eq!(
            reason(Span {
                trace_id: vec![0; 16],
                ..span()
            }),
            "bad_id"
        );
        assert_eq!(
            reason(Span {
                span_id: vec![1; 4],
                ..span()
            }),
            "bad_id"
        );
        assert_eq!(
            reason(Span {
                parent_span_id: vec![1; 9],
                ..span()
            }),
            "bad_id"
        );
        assert_eq!(
            reason(Span {
                start_time_unix_nano: 0,
                ..span()
            }),
            "missing_field"
        );
        assert_eq!(
            reason(Span {
                end_time_unix_nano: 5,
                ..span()
            }),
            "bad_time"
        );
    }

    #[test]
    fn service_name_default() {
        assert_eq!(service_name(&[]), "unknown_service");
    }
}
