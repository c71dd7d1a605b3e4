//! OTLP spans → `spans` rows: the one mapping shared by protobuf, gRPC,
//! OTLP/HTTP and OTLP JSON (which is first read into the same prost types).

use super::attributes::{kind_name, SpanBuilder};
use super::ids::{hex_id_from_bytes, IdKind};
use super::value::any_str;
use super::{ParsedSpans, SpanError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use overtime_model::{RejectedRecord, SpanRecord, SpanStatus};

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

/// Maps one OTLP span of service `service` (SPEC §2.2; the table is in
/// the README). Rejects a span with no/invalid trace or span id, an
/// invalid parent id, a zero start or end time, or an end before start.
pub(crate) fn map_span(
    span: &Span,
    service: &str,
    source: &str,
    position: u64,
) -> Result<SpanRecord, SpanError> {
    let trace_id = id(&span.trace_id, IdKind::Trace, "traceId")?
        .ok_or_else(|| SpanError::MissingField("traceId".into()))?;
    let span_id = id(&span.span_id, IdKind::Span, "spanId")?
        .ok_or_else(|| SpanError::MissingField("spanId".into()))?;
    let parent = id(&span.parent_span_id, IdKind::Span, "parentSpanId")?;
    let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
    if start == 0 {
        return Err(SpanError::MissingField("startTimeUnixNano".into()));
    }
    if end == 0 {
        return Err(SpanError::MissingField("endTimeUnixNano".into()));
    }
    if end < start {
        return Err(SpanError::BadTime(format!(
            "endTimeUnixNano is {} ms before startTimeUnixNano",
            (start - end) as f64 / 1e6
        )));
    }
    let (start_us, end_us) = ((start / 1000) as i64, (end / 1000) as i64);
    let mut rec = SpanRecord::new(&trace_id, &span_id, service, &span.name, start_us, end_us);
    rec.parent_span_id = parent;
    rec.source = source.to_string();
    rec.line = position;
    let mut b = SpanBuilder::new(rec);
    b.set_kind(kind_name(&span.kind.to_string()));
    for kv in &span.attributes {
        match &kv.value {
            Some(v) => b.attribute(&kv.key, v),
            None => b.keep(&kv.key, &Default::default()),
        }
    }
    for e in &span.events {
        let t = if e.time_unix_nano == 0 {
            start_us
        } else {
            (e.time_unix_nano / 1000) as i64
        };
        b.event(&e.name, t, &e.attributes);
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

/// Maps every span of a request; bad spans are rejected one by one with
/// position `"<unit> <position>, span <k>"` (k counts from 1 across the
/// whole request). Returns how many were rejected.
pub(crate) fn map_request(
    req: &ExportTraceServiceRequest,
    source: &str,
    unit: &str,
    position: u64,
    out: &mut ParsedSpans,
) -> usize {
    let mut k = 0;
    let mut rejected = 0;
    for rs in &req.resource_spans {
        let attrs = rs.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        let service = service_name(attrs);
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                k += 1;
                match map_span(span, &service, source, position) {
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
        let r = map_span(&span(), "agent", "otlp", 3).unwrap();
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
        let reason = |s: Span| map_span(&s, "a", "x", 1).unwrap_err().reason();
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
