//! Span inputs (docs/inputs.md#spans): JSONL span logs, OTLP JSON lines and OTLP
//! protobuf, into the `spans` table; bad records into `rejected` (docs/inputs.md#bad-input).
//!
//! Entry points: [`parse_span_bytes`] for a whole file or chunk,
//! [`parse_span_line`] for one line of it, [`parse_jsonl_line`] / [`parse_otlp_json_line`] / [`parse_otlp_proto`]
//! for one record, and [`spans_from_otlp_request`] for a request that
//! arrived over OTLP/gRPC or OTLP/HTTP (it returns the rejected count for
//! partial success). Deduplication by (trace id, span id) is the
//! diagnosis's job: duplicates are simply returned twice.
//!
//! # OTLP attributes → `spans` columns
//!
//! Resource `service.name` → `service`; span name, kind and status; then
//! every attribute through the one table of conventions ([`ATTRIBUTE_MAPPINGS`]) (HTTP old and
//! stable, captured headers, GenAI, OpenInference, Traceloop), then
//! `agent.<column>`; everything else is kept in `attributes`. The table
//! is shown in `docs/span-conventions.md`.
//!
//! A `stage` not given explicitly is derived from the span's name, kind and
//! attributes (`stage.rs`).

mod attributes;
mod conventions;
mod ids;
mod jsonl;
pub mod names;
mod otlp;
mod otlp_json;
mod otlp_proto;
mod stage;
mod status;
mod time;
mod value;

pub use conventions::{ATTRIBUTE_MAPPINGS, AttributeMapping};
pub use jsonl::parse_jsonl_line;
pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use otlp_json::parse_otlp_json_line;
pub use otlp_proto::{parse_otlp_proto, spans_from_otlp_request};

use arrow::record_batch::RecordBatch;
use overtime_model::{RejectedColumns, RejectedRecord, SpanColumns, SpanRecord};
use serde_json::Value;
use std::str::FromStr;

/// Why a span (or a line, or a message) was rejected. [`SpanError::reason`]
/// is the stable code stored in `rejected.reason`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpanError {
    /// The line is not JSON, or not a JSON object.
    #[error("not valid JSON: {0}")]
    BadJson(String),
    /// A required field is absent, null or empty.
    #[error("missing required field `{0}`")]
    MissingField(String),
    /// A required field has the wrong type.
    #[error("field `{field}`: {detail}")]
    BadField {
        /// The field's name as it appears in the record.
        field: String,
        /// What was found instead, in words.
        detail: String,
    },
    /// A trace/span id is not hex of the right length (or is all zeros).
    #[error("bad id `{field}`: {detail}")]
    BadId {
        /// The id's field (`trace_id`, `span_id`, `parent_span_id`…).
        field: String,
        /// What is wrong with it, in words.
        detail: String,
    },
    /// A time cannot be read, or the span ends before it starts.
    #[error("bad time: {0}")]
    BadTime(String),
    /// JSON that is not shaped like an OTLP request.
    #[error("not an OTLP trace request: {0}")]
    BadOtlp(String),
    /// Bytes that do not decode as an OTLP protobuf request.
    #[error("not an OTLP protobuf ExportTraceServiceRequest: {0}")]
    BadProto(String),
}

impl SpanError {
    /// The stable reason code: `bad_json`, `missing_field`, `bad_field`,
    /// `bad_id`, `bad_time`, `bad_otlp` or `bad_proto`.
    pub fn reason(&self) -> &'static str {
        match self {
            SpanError::BadJson(_) => "bad_json",
            SpanError::MissingField(_) => "missing_field",
            SpanError::BadField { .. } => "bad_field",
            SpanError::BadId { .. } => "bad_id",
            SpanError::BadTime(_) => "bad_time",
            SpanError::BadOtlp(_) => "bad_otlp",
            SpanError::BadProto(_) => "bad_proto",
        }
    }
}

/// The encodings spans arrive in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanFormat {
    /// JSONL span logs, one span per line (docs/inputs.md#spans table).
    Jsonl,
    /// OTLP JSON, one `ExportTraceServiceRequest` per line.
    OtlpJson,
    /// OTLP protobuf `ExportTraceServiceRequest`s (length-delimited, or one).
    OtlpProto,
}

/// An unknown format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown span format `{0}`: expected jsonl, otlp-json or otlp-proto")]
pub struct UnknownSpanFormat(pub String);

impl SpanFormat {
    /// The name used in the CLI and the config (its
    /// [`FormatName`](crate::record::FormatName)'s).
    pub fn as_str(self) -> &'static str {
        crate::record::FormatName::from(self).as_str()
    }

    /// Guesses the format from the first bytes of a file: a JSON object
    /// with `resourceSpans` is OTLP JSON, another JSON object JSONL,
    /// anything else protobuf.
    ///
    /// ```
    /// use overtime_parse::spans::SpanFormat;
    /// assert_eq!(SpanFormat::sniff(b"\n{\"resourceSpans\":[]}"), SpanFormat::OtlpJson);
    /// assert_eq!(SpanFormat::sniff(b"{\"trace_id\":\"..\"}"), SpanFormat::Jsonl);
    /// assert_eq!(SpanFormat::sniff(b"\x0a\x10"), SpanFormat::OtlpProto);
    /// ```
    pub fn sniff(data: &[u8]) -> SpanFormat {
        let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
        let start = data
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(data.len());
        let rest = &data[start..];
        if rest.first() != Some(&b'{') {
            return SpanFormat::OtlpProto;
        }
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(rest);
        let head = &line[..line.len().min(1 << 16)];
        let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
        if has(b"\"resourceSpans\"") || has(b"\"resource_spans\"") {
            SpanFormat::OtlpJson
        } else {
            SpanFormat::Jsonl
        }
    }
}

/// As its name ([`SpanFormat::as_str`]); read with every spelling
/// [`FromStr`] accepts.
impl serde::Serialize for SpanFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for SpanFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for SpanFormat {
    type Err = UnknownSpanFormat;

    /// Any spelling [`FormatName`](crate::record::FormatName) reads of a
    /// span format (one alias set for every reader); `nginx` is not one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<crate::record::FormatName>()
            .ok()
            .and_then(|f| f.span_format())
            .ok_or_else(|| UnknownSpanFormat(s.to_string()))
    }
}

/// Spans read and records rejected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedSpans {
    /// The spans read, in input order; a span sent twice is here twice
    /// (deduplication is the diagnosis's job).
    pub spans: Vec<SpanRecord>,
    /// The records that could not be read, each with its reason code
    /// ([`SpanError::reason`]) and position, in input order.
    pub rejected: Vec<RejectedRecord>,
}

impl ParsedSpans {
    /// The `spans` and `rejected` tables.
    ///
    /// ```
    /// use overtime_parse::spans::{parse_span_bytes, SpanFormat};
    /// let p = parse_span_bytes(SpanFormat::Jsonl, b"not json\n", "x.jsonl");
    /// let (spans, rejected) = p.to_batches();
    /// assert_eq!((spans.num_rows(), rejected.num_rows()), (0, 1));
    /// assert_eq!(spans.schema(), overtime_model::span_schema());
    /// ```
    pub fn to_batches(&self) -> (RecordBatch, RecordBatch) {
        let mut spans = SpanColumns::new();
        self.spans.iter().for_each(|s| spans.append(s));
        let mut rejected = RejectedColumns::new();
        self.rejected.iter().for_each(|r| rejected.append(r));
        (spans.finish(), rejected.finish())
    }

    /// Appends another result.
    pub fn extend(&mut self, other: ParsedSpans) {
        self.spans.extend(other.spans);
        self.rejected.extend(other.rejected);
    }
}

/// Parses a whole file or chunk. JSONL and OTLP JSON are split on `\n`
/// (lines numbered from 1, blank lines skipped, `\r` and a leading BOM
/// stripped) and each line read by [`parse_span_line`]. `OtlpProto` is a
/// sequence of varint length-delimited `ExportTraceServiceRequest`s or, if
/// that does not decode, one message.
///
/// ```
/// use overtime_parse::spans::{parse_span_bytes, SpanFormat};
/// let data = b"{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"b7ad6b7169203331\",\
///   \"service\":\"agent\",\"name\":\"root\",\"start_time\":1714561200000,\"duration_ms\":60000}\r\n\
///   \n{\"trace_id\":\"0af7\"}\n";
/// let p = parse_span_bytes(SpanFormat::Jsonl, data, "spans.jsonl");
/// assert_eq!(p.spans.len(), 1);
/// assert_eq!((p.rejected[0].line, p.rejected[0].reason.as_str()), (3, "bad_id"));
/// ```
pub fn parse_span_bytes(format: SpanFormat, data: &[u8], source: &str) -> ParsedSpans {
    let mut out = ParsedSpans::default();
    if format == SpanFormat::OtlpProto {
        otlp_proto::parse_proto_stream(data, source, &mut out);
        return out;
    }
    let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        parse_span_line(format, line, source, i as u64 + 1, &mut out);
    }
    out
}

/// Reads one line of a JSONL or OTLP JSON file exactly as
/// [`parse_span_bytes`] does, for callers that split files themselves
/// (e.g. in parallel chunks). A blank line is skipped and a trailing `\r`
/// stripped. The line's own shape decides how it is read, whatever the
/// file's format: an object with `resourceSpans` is an OTLP request, any
/// other object a JSONL span. With `OtlpProto` the bytes are one
/// protobuf message ([`parse_otlp_proto`]).
///
/// ```
/// use overtime_parse::spans::{parse_span_line, ParsedSpans, SpanFormat};
/// let mut out = ParsedSpans::default();
/// parse_span_line(SpanFormat::Jsonl, b"{\"resourceSpans\":[]}\r", "mixed.jsonl", 1, &mut out);
/// parse_span_line(SpanFormat::Jsonl, b"  ", "mixed.jsonl", 2, &mut out);
/// assert!(out.spans.is_empty() && out.rejected.is_empty());
/// ```
pub fn parse_span_line(
    format: SpanFormat,
    line: &[u8],
    source: &str,
    line_no: u64,
    out: &mut ParsedSpans,
) {
    if format == SpanFormat::OtlpProto {
        return parse_otlp_proto(line, source, line_no, out);
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let reject =
        |e: SpanError| RejectedRecord::new(source, line_no, e.reason(), e.to_string(), line);
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return out.rejected.push(reject(SpanError::BadJson(e.to_string()))),
    };
    if format == SpanFormat::OtlpJson || otlp_json::looks_like_otlp(&v) {
        otlp_json::otlp_json_value(&v, line, source, line_no, out);
    } else {
        match jsonl::span_from_jsonl_value(&v, source, line_no) {
            Ok(s) => out.spans.push(s),
            Err(e) => out.rejected.push(reject(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in [
            SpanFormat::Jsonl,
            SpanFormat::OtlpJson,
            SpanFormat::OtlpProto,
        ] {
            assert_eq!(f.as_str().parse::<SpanFormat>(), Ok(f));
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("{:?}", f.as_str()));
            assert_eq!(serde_json::from_str::<SpanFormat>(&json).unwrap(), f);
        }
        assert_eq!("OTLP_JSON".parse(), Ok(SpanFormat::OtlpJson));
        assert_eq!("protobuf".parse(), Ok(SpanFormat::OtlpProto));
        let err = "xml".parse::<SpanFormat>().unwrap_err();
        assert!(err.to_string().contains("xml"));
    }

    #[test]
    fn extend_and_batches() {
        let mut a = parse_span_bytes(SpanFormat::Jsonl, b"x\n", "a");
        let b = parse_span_bytes(SpanFormat::OtlpJson, b"y\n\n{}\n", "b");
        a.extend(b);
        assert_eq!(a.rejected.len(), 3);
        assert_eq!(a.rejected[2].line, 3);
        let (s, r) = a.to_batches();
        assert_eq!((s.num_rows(), r.num_rows()), (0, 3));
        assert_eq!(r.schema(), overtime_model::rejected_schema());
    }

    #[test]
    fn sniff_skips_bom_and_blank_lines() {
        assert_eq!(
            SpanFormat::sniff(b"\xef\xbb\xbf  \n{\"resource_spans\":[]}"),
            SpanFormat::OtlpJson
        );
        assert_eq!(SpanFormat::sniff(b""), SpanFormat::OtlpProto);
    }
}
