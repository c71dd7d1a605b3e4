//! OTLP protobuf: one `ExportTraceServiceRequest` (an OTLP/HTTP body, a
//! gRPC request, a Kafka message), or a file of them, each prefixed with
//! its varint length (protobuf's `writeDelimitedTo` framing).

use super::ids::encode_hex;
use super::otlp::map_request;
use super::{ParsedSpans, SpanError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use overtime_model::RejectedRecord;
use prost::Message;

/// Position unit of protobuf input: `message 3, span 2`.
pub(crate) const UNIT: &str = "message";

/// A rejection of a whole protobuf message. `raw` holds the hex of its
/// first bytes (binary does not survive lossy UTF-8).
fn reject_message(source: &str, position: u64, e: &SpanError, bytes: &[u8]) -> RejectedRecord {
    let hex = encode_hex(&bytes[..bytes.len().min(overtime_model::RAW_KEEP / 2)]);
    RejectedRecord::new(source, position, e.reason(), e.to_string(), hex.as_bytes())
        .with_position(format!("{UNIT} {position}"))
}

/// Maps an `ExportTraceServiceRequest` however it arrived (protobuf, gRPC,
/// OTLP/HTTP JSON): good spans go to `out.spans`, each bad span to
/// `out.rejected` with position `message <position>, span <k>`. Returns how
/// many spans were rejected, for OTLP's partial success
/// (`rejected_spans`).
///
/// ```
/// use overtime_parse::spans::{spans_from_otlp_request, ParsedSpans};
/// use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
/// use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
/// let good = Span { trace_id: vec![1; 16], span_id: vec![2; 8], name: "chat".into(),
///     start_time_unix_nano: 1_714_561_200_000_000_000, end_time_unix_nano: 1_714_561_201_000_000_000,
///     ..Default::default() };
/// let bad = Span { span_id: vec![], ..good.clone() };
/// let req = ExportTraceServiceRequest { resource_spans: vec![ResourceSpans {
///     scope_spans: vec![ScopeSpans { spans: vec![good, bad], ..Default::default() }],
///     ..Default::default() }] };
/// let mut out = ParsedSpans::default();
/// assert_eq!(spans_from_otlp_request(&req, "otlp-http", 9, &mut out), 1);
/// assert_eq!(out.spans.len(), 1);
/// assert_eq!(out.spans[0].service, "unknown_service");
/// assert_eq!(out.rejected[0].position, "message 9, span 2");
/// ```
pub fn spans_from_otlp_request(
    req: &ExportTraceServiceRequest,
    source: &str,
    position: u64,
    out: &mut ParsedSpans,
) -> usize {
    map_request(req, source, UNIT, position, out)
}

/// Decodes and maps one protobuf `ExportTraceServiceRequest`. Bytes that
/// do not decode become one `bad_proto` rejection at `message <position>`.
///
/// ```
/// use overtime_parse::spans::{parse_otlp_proto, ParsedSpans};
/// let mut out = ParsedSpans::default();
/// parse_otlp_proto(b"\xff\xff\xff", "kafka:spans", 42, &mut out);
/// assert_eq!(out.rejected[0].reason, "bad_proto");
/// assert_eq!(out.rejected[0].position, "message 42");
/// ```
pub fn parse_otlp_proto(bytes: &[u8], source: &str, position: u64, out: &mut ParsedSpans) {
    match ExportTraceServiceRequest::decode(bytes) {
        Ok(req) => {
            map_request(&req, source, UNIT, position, out);
        }
        Err(e) => out.rejected.push(reject_message(
            source,
            position,
            &SpanError::BadProto(e.to_string()),
            bytes,
        )),
    }
}

/// Splits varint length-delimited frames. Returns the frames read and, if
/// the data did not end on a frame boundary, the offset where framing broke.
fn split_frames(data: &[u8]) -> (Vec<&[u8]>, Option<usize>) {
    let mut frames = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let at = data.len() - rest.len();
        let mut cursor = rest;
        let Ok(len) = prost::encoding::decode_varint(&mut cursor) else {
            return (frames, Some(at));
        };
        match usize::try_from(len) {
            Ok(len) if len <= cursor.len() => {
                frames.push(&cursor[..len]);
                rest = &cursor[len..];
            }
            _ => return (frames, Some(at)),
        }
    }
    (frames, None)
}

fn span_count(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum()
}

/// A protobuf file or chunk: a sequence of length-delimited
/// `ExportTraceServiceRequest`s, or a single bare one.
///
/// When both readings decode, the one that yields more spans wins (a bare
/// message can look like a short frame sequence by chance). When neither
/// does, every frame that decodes is still used and each one that does
/// not is rejected (`message <n>`), as is the undecodable tail.
pub(crate) fn parse_proto_stream(data: &[u8], source: &str, out: &mut ParsedSpans) {
    if data.is_empty() {
        return;
    }
    let single = ExportTraceServiceRequest::decode(data);
    let (frames, broken_at) = split_frames(data);
    let decoded: Vec<Result<ExportTraceServiceRequest, prost::DecodeError>> = frames
        .iter()
        .map(|f| ExportTraceServiceRequest::decode(*f))
        .collect();
    let all_frames_ok = broken_at.is_none() && decoded.iter().all(Result::is_ok);
    if let Ok(single) = &single {
        let frame_spans: usize = decoded
            .iter()
            .filter_map(|d| d.as_ref().ok())
            .map(span_count)
            .sum();
        if !all_frames_ok || span_count(single) >= frame_spans {
            map_request(single, source, UNIT, 1, out);
            return;
        }
    }
    for (i, (frame, d)) in frames.iter().zip(&decoded).enumerate() {
        let position = i as u64 + 1;
        match d {
            Ok(req) => {
                map_request(req, source, UNIT, position, out);
            }
            Err(e) => out.rejected.push(reject_message(
                source,
                position,
                &SpanError::BadProto(e.to_string()),
                frame,
            )),
        }
    }
    if let Some(at) = broken_at {
        let position = frames.len() as u64 + 1;
        let e = SpanError::BadProto(format!(
            "{} bytes at offset {at} are neither a length-delimited message nor part of one",
            data.len() - at
        ));
        out.rejected
            .push(reject_message(source, position, &e, &data[at..]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn req(n: usize) -> ExportTraceServiceRequest {
        let spans = (0..n)
            .map(|i| Span {
                trace_id: vec![7; 16],
                span_id: vec![i as u8 + 1; 8],
                name: format!("s{i}"),
                start_time_unix_nano: 1_714_561_200_000_000_000,
                end_time_unix_nano: 1_714_561_200_500_000_000,
                ..Default::default()
            })
            .collect();
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn single_and_delimited() {
        let mut out = ParsedSpans::default();
        parse_proto_stream(&req(3).encode_to_vec(), "f", &mut out);
        assert_eq!((out.spans.len(), out.rejected.len()), (3, 0));

        let mut data = req(2).encode_length_delimited_to_vec();
        data.extend(req(1).encode_length_delimited_to_vec());
        let mut out = ParsedSpans::default();
        parse_proto_stream(&data, "f", &mut out);
        assert_eq!((out.spans.len(), out.rejected.len()), (3, 0));
        assert_eq!(out.spans[2].line, 2, "the third span is in message 2");
    }

    #[test]
    fn good_frames_survive_a_broken_tail() {
        let mut data = req(2).encode_length_delimited_to_vec();
        data.extend([0x7f, 0x01, 0x02]); // claims 127 bytes, has 2
        let mut out = ParsedSpans::default();
        parse_proto_stream(&data, "f", &mut out);
        assert_eq!(out.spans.len(), 2);
        assert_eq!(out.rejected.len(), 1);
        assert_eq!(out.rejected[0].position, "message 2");
        assert_eq!(out.rejected[0].reason, "bad_proto");
    }

    #[test]
    fn garbage_is_one_rejection() {
        let mut out = ParsedSpans::default();
        parse_proto_stream(&[0xff; 40], "f", &mut out);
        assert!(out.spans.is_empty());
        assert_eq!(out.rejected.len(), 1);
        parse_proto_stream(&[], "f", &mut out);
        assert_eq!(out.rejected.len(), 1, "empty input is no record");
    }
}
