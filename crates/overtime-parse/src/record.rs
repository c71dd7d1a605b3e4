//! One record format and one decoder for every source: the file tail, the
//! Kafka consumer and `diagnose`'s offline reader all say what their bytes
//! hold with a [`RecordFormat`] and turn them into rows with a [`Decoder`].
//!
//! What users write to name a format is a [`FormatName`] (one alias set,
//! `FromStr` + serde), read by the config's file and Kafka blocks.
//!
//! Design rules:
//! - A new input format is one variant here (and its parser beside
//!   `nginx/` or `spans/`); no source matches on formats itself.
//! - The decoder is pure: bytes in, rows of `gateway_requests` or `spans`
//!   and rows of `rejected` (with their reason) out. What a source knows
//!   and the decoder does not — an empty Kafka message, a position such as
//!   `topic/partition@offset`, a checkpoint — stays in the source.
//! - Nothing is dropped: every record pushed is a row or a rejection,
//!   except blank lines of a line-based format (docs/inputs.md#bad-input).

pub use crate::format_name::{FormatName, UnknownFormat};
use crate::nginx::{GatewayParser, LogFormat};
use crate::spans::{ParsedSpans, SpanFormat, parse_otlp_proto, parse_span_bytes, parse_span_line};
use arrow::record_batch::RecordBatch;
use overtime_model::{RejectedColumns, RejectedRecord, SpanColumns, SpanRecord, Table};
use std::collections::BTreeMap;

/// An nginx access log of one gateway layer: its compiled `log_format`,
/// the layer's name (the `source` of every row) and its depth
/// (`layer_index` 0 for the outermost gateway, numbered by
/// `overtime_diagnose::layer_index`).
#[derive(Debug, Clone, PartialEq)]
pub struct NginxLog {
    /// The compiled `log_format` the layer's nginx writes.
    pub format: LogFormat,
    /// The layer's name (`edge`, `ingress`…): the `source` column of its
    /// rows and the name verdicts blame.
    pub layer: String,
    /// How deep the layer sits: 0 for the outermost gateway, 1 for the
    /// one behind it, and so on.
    pub layer_index: u32,
}

/// What a source's records are.
///
/// ```
/// use overtime_parse::record::RecordFormat;
/// use overtime_parse::spans::SpanFormat;
/// use overtime_parse::nginx::LogFormat;
/// let f = RecordFormat::nginx(LogFormat::builtin("overtime").unwrap(), "edge", 0);
/// assert_eq!((f.name(), f.table()), ("nginx", overtime_model::Table::GatewayRequests));
/// let s = RecordFormat::Spans(SpanFormat::OtlpProto);
/// assert_eq!((s.name(), s.is_line_based()), ("otlp-proto", false));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum RecordFormat {
    /// nginx access-log lines into `gateway_requests`.
    Nginx(NginxLog),
    /// Spans (JSONL, OTLP JSON lines, OTLP protobuf) into `spans`.
    Spans(SpanFormat),
}

impl RecordFormat {
    /// An nginx log of `format` written by the gateway layer `layer` at
    /// depth `layer_index`.
    pub fn nginx(format: LogFormat, layer: &str, layer_index: u32) -> Self {
        RecordFormat::Nginx(NginxLog {
            format,
            layer: layer.to_string(),
            layer_index,
        })
    }

    /// The short name used in logs and the config: `nginx`, `jsonl`,
    /// `otlp-json` or `otlp-proto`.
    pub fn name(&self) -> &'static str {
        self.format_name().as_str()
    }

    /// Its [`FormatName`].
    pub fn format_name(&self) -> FormatName {
        match self {
            RecordFormat::Nginx(_) => FormatName::Nginx,
            RecordFormat::Spans(f) => FormatName::from(*f),
        }
    }

    /// The table its good records go to.
    pub fn table(&self) -> Table {
        match self {
            RecordFormat::Nginx(_) => Table::GatewayRequests,
            RecordFormat::Spans(_) => Table::Spans,
        }
    }

    /// One record per line (everything but OTLP protobuf).
    pub fn is_line_based(&self) -> bool {
        !matches!(self, RecordFormat::Spans(SpanFormat::OtlpProto))
    }

    /// The gateway layer of an nginx log.
    pub fn nginx_log(&self) -> Option<&NginxLog> {
        match self {
            RecordFormat::Nginx(n) => Some(n),
            RecordFormat::Spans(_) => None,
        }
    }
}

/// Good records as decoded: a `gateway_requests` batch, or spans.
#[derive(Debug, Clone)]
pub enum Records {
    /// nginx records, already a `gateway_requests` batch.
    Gateway(RecordBatch),
    /// Spans as records, in the order they were read; not deduplicated.
    Spans(Vec<SpanRecord>),
}

impl Records {
    /// The table they go to.
    pub fn table(&self) -> Table {
        match self {
            Records::Gateway(_) => Table::GatewayRequests,
            Records::Spans(_) => Table::Spans,
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        match self {
            Records::Gateway(b) => b.num_rows(),
            Records::Spans(s) => s.len(),
        }
    }

    /// None at all?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// As one Arrow batch of their table.
    pub fn into_batch(self) -> RecordBatch {
        match self {
            Records::Gateway(b) => b,
            Records::Spans(spans) => {
                let mut cols = SpanColumns::new();
                spans.iter().for_each(|s| cols.append(s));
                cols.finish()
            }
        }
    }
}

/// What a [`Decoder`] made of the records pushed since its last
/// [`finish`](Decoder::finish).
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The records that were read, in the table of the format.
    pub records: Records,
    /// In the order their records were pushed.
    pub rejected: Vec<RejectedRecord>,
}

impl Decoded {
    /// Rejections by reason code.
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        rejected_by_reason(&self.rejected)
    }

    /// (table, its batch, the `rejected` batch), for a `RecordSink`.
    pub fn into_batches(self) -> (Table, RecordBatch, RecordBatch) {
        let table = self.records.table();
        (
            table,
            self.records.into_batch(),
            rejected_batch(&self.rejected),
        )
    }
}

/// Rejections by reason code.
pub fn rejected_by_reason(rejected: &[RejectedRecord]) -> BTreeMap<String, u64> {
    let mut by_reason = BTreeMap::new();
    for r in rejected {
        *by_reason.entry(r.reason.clone()).or_insert(0) += 1;
    }
    by_reason
}

/// The `rejected` batch of some rejections.
pub fn rejected_batch(rejected: &[RejectedRecord]) -> RecordBatch {
    let mut cols = RejectedColumns::new();
    rejected.iter().for_each(|r| cols.append(r));
    cols.finish()
}

enum Inner {
    Nginx(Box<GatewayParser>),
    Spans {
        format: SpanFormat,
        source: String,
        out: ParsedSpans,
    },
}

/// Bytes of one [`RecordFormat`] → rows and rejections. Push records
/// (or chunks of whole lines), then [`finish`](Decoder::finish); the
/// decoder is reused for the next batch.
///
/// ```
/// use overtime_parse::record::{Decoder, RecordFormat};
/// use overtime_parse::spans::SpanFormat;
/// let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::Jsonl), "spans.jsonl");
/// d.push_bytes(b"{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"b7ad6b7169203331\",\
///   \"service\":\"agent\",\"name\":\"root\",\"start_time\":1714561200000,\"duration_ms\":5}\n\nnot json\n", 1);
/// let out = d.finish();
/// assert_eq!(out.records.len(), 1);
/// assert_eq!((out.rejected[0].line, out.rejected[0].reason.as_str()), (3, "bad_json"));
/// let (table, spans, rejected) = out.into_batches();
/// assert_eq!((table, spans.num_rows(), rejected.num_rows()), (overtime_model::Table::Spans, 1, 1));
/// ```
pub struct Decoder {
    inner: Inner,
}

impl Decoder {
    /// A decoder of `format`. `source` is the `source` of span rows and
    /// their rejections (a path, `kafka:<topic>`); nginx rows and their
    /// rejections carry the gateway layer's name instead.
    pub fn new(format: &RecordFormat, source: &str) -> Self {
        let inner = match format {
            RecordFormat::Nginx(n) => Inner::Nginx(Box::new(GatewayParser::new(
                n.format.clone(),
                &n.layer,
                n.layer_index,
            ))),
            RecordFormat::Spans(format) => Inner::Spans {
                format: *format,
                source: source.to_string(),
                out: ParsedSpans::default(),
            },
        };
        Decoder { inner }
    }

    /// The table good records go to.
    pub fn table(&self) -> Table {
        match self.inner {
            Inner::Nginx(_) => Table::GatewayRequests,
            Inner::Spans { .. } => Table::Spans,
        }
    }

    /// One record at `position` (a line number, a message offset): a line
    /// (a trailing `\n` and `\r` stripped; a blank line is skipped) or,
    /// for OTLP protobuf, one `ExportTraceServiceRequest`.
    pub fn push_record(&mut self, data: &[u8], position: u64) {
        match &mut self.inner {
            Inner::Nginx(p) => p.push_line(strip_newline(data), position),
            Inner::Spans {
                format: SpanFormat::OtlpProto,
                source,
                out,
            } => parse_otlp_proto(data, source, position, out),
            Inner::Spans {
                format,
                source,
                out,
            } => parse_span_line(*format, strip_newline(data), source, position, out),
        }
    }

    /// A chunk of whole lines, numbered from `first_line` (a last line
    /// without `\n` is read too); for OTLP protobuf a stream of
    /// length-delimited requests, or one request.
    pub fn push_bytes(&mut self, data: &[u8], first_line: u64) {
        match &mut self.inner {
            Inner::Nginx(p) => {
                p.push_bytes(data, first_line);
            }
            Inner::Spans {
                format: SpanFormat::OtlpProto,
                source,
                out,
            } => out.extend(parse_span_bytes(SpanFormat::OtlpProto, data, source)),
            Inner::Spans {
                format,
                source,
                out,
            } => {
                for (i, line) in data.split(|&b| b == b'\n').enumerate() {
                    parse_span_line(*format, line, source, first_line + i as u64, out);
                }
            }
        }
    }

    /// Everything pushed since the last `finish`.
    pub fn finish(&mut self) -> Decoded {
        match &mut self.inner {
            Inner::Nginx(p) => {
                let (good, rejected) = p.finish_records();
                Decoded {
                    records: Records::Gateway(good),
                    rejected,
                }
            }
            Inner::Spans { out, .. } => {
                let ParsedSpans { spans, rejected } = std::mem::take(out);
                Decoded {
                    records: Records::Spans(spans),
                    rejected,
                }
            }
        }
    }
}

fn strip_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::gateway_records;

    #[test]
    fn nginx_records_carry_the_layer() {
        let f = RecordFormat::nginx(
            LogFormat::compile("'$status rt=$request_time'").unwrap(),
            "edge",
            2,
        );
        let mut d = Decoder::new(&f, "/var/log/edge.log");
        assert_eq!(d.table(), Table::GatewayRequests);
        d.push_record(b"504 rt=60.001\r\n", 7);
        d.push_record(b"   ", 8);
        d.push_record(b"garbage", 9);
        let out = d.finish();
        let rows = gateway_records(&out.records.clone().into_batch()).unwrap();
        assert_eq!((rows[0].source.as_str(), rows[0].layer), ("edge", 2));
        assert_eq!(out.rejected.len(), 1);
        assert_eq!(
            (out.rejected[0].source.as_str(), out.rejected[0].line),
            ("edge", 9)
        );
        assert_eq!(out.rejected_by_reason()["format_mismatch"], 1);
        // A second batch starts clean.
        assert!(d.finish().records.is_empty());
    }

    #[test]
    fn otlp_proto_is_one_message_per_record() {
        let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::OtlpProto), "kafka:otlp");
        d.push_record(b"\xff\xff\xff", 5);
        let out = d.finish();
        assert_eq!(out.rejected[0].reason, "bad_proto");
        assert_eq!(out.rejected[0].source, "kafka:otlp");
        let (table, good, bad) = out.into_batches();
        assert_eq!(
            (table, good.num_rows(), bad.num_rows()),
            (Table::Spans, 0, 1)
        );
        assert_eq!(good.schema(), overtime_model::span_schema());
    }
}
