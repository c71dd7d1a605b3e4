//! Messages of one partition → the Arrow batches the sink stores: one
//! record per message, every bad message a rejected row. Pure: no I/O, no
//! Kafka client.
//!
//! Design rules:
//! - One record per message (docs/inputs.md#spans): an nginx line, a JSONL span (an
//!   OTLP JSON request is read too), or one protobuf
//!   `ExportTraceServiceRequest`. A trailing `\n` / `\r\n` is tolerated.
//! - Nothing is dropped silently: an empty or null payload is rejected as
//!   `empty_message`; the parsers' rejections keep their reason, and their
//!   position becomes `topic/partition@offset` (with `, span N` kept for a
//!   bad span inside an OTLP request), `line` the offset.

use arrow::record_batch::RecordBatch;
use overtime_model::{RejectedColumns, RejectedRecord, Table};
use overtime_parse::record::{self, RecordFormat};
use std::collections::BTreeMap;

/// One message as taken from the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// The message's offset in its partition.
    pub offset: i64,
    /// `None` for a null (tombstone) payload.
    pub payload: Option<Vec<u8>>,
}

/// What one batch of messages became.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The table the records go to (`gateway_requests` or `spans`).
    pub table: Table,
    /// The good records, in offset order, in `table`'s schema (no rows
    /// when every message was bad).
    pub records: RecordBatch,
    /// One `rejected` row per bad or empty message (or bad span of an OTLP
    /// request), in offset order, at `topic/partition@offset`.
    pub rejected: RecordBatch,
    /// The rejected rows counted by reason code (`bad_json`,
    /// `empty_message`…); empty when nothing was rejected.
    pub rejected_by_reason: BTreeMap<String, u64>,
}

/// Decodes the messages of one topic: `overtime_parse`'s one
/// [`record::Decoder`], plus what only Kafka knows (empty messages, the
/// `topic/partition@offset` position).
pub struct Decoder {
    topic: String,
    /// `source` of rejected empty messages: the layer for nginx, else
    /// `kafka:<topic>` (the `source` of span rows).
    reject_source: String,
    /// A message is a line (nginx, JSONL), not one protobuf message.
    line_based: bool,
    inner: record::Decoder,
}

/// `topic/partition@offset`, where a rejected message was.
pub(crate) fn message_position(topic: &str, partition: i32, offset: i64) -> String {
    format!("{topic}/{partition}@{offset}")
}

impl Decoder {
    /// A decoder of `format` for `topic`'s messages: the format first, then
    /// where the records come from, as [`record::Decoder::new`] takes them.
    pub fn new(format: &RecordFormat, topic: &str) -> Self {
        let span_source = format!("kafka:{topic}");
        let reject_source = match format.nginx_log() {
            Some(n) => n.layer.clone(),
            None => span_source.clone(),
        };
        Decoder {
            topic: topic.to_string(),
            reject_source,
            line_based: format.is_line_based(),
            inner: record::Decoder::new(format, &span_source),
        }
    }

    /// A payload with no record in it: none, empty, or (for a line)
    /// only blanks.
    fn is_empty(&self, payload: &[u8]) -> bool {
        if self.line_based {
            payload.iter().all(u8::is_ascii_whitespace)
        } else {
            payload.is_empty()
        }
    }

    /// Decodes `msgs` (all of `partition`, in offset order).
    ///
    /// ```
    /// use overtime_kafka::{Decoder, Msg};
    /// use overtime_parse::{record::RecordFormat, spans::SpanFormat};
    /// let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::Jsonl), "spans");
    /// let out = d.decode(3, &[Msg { offset: 17, payload: Some(b"{not json".to_vec()) }]);
    /// let bad = overtime_model::rejected_records(&out.rejected).unwrap();
    /// assert_eq!(bad[0].position, "spans/3@17");
    /// assert_eq!(out.rejected_by_reason["bad_json"], 1);
    /// ```
    pub fn decode(&mut self, partition: i32, msgs: &[Msg]) -> Decoded {
        let mut empty = Vec::new();
        for m in msgs {
            match m.payload.as_deref() {
                Some(p) if !self.is_empty(p) => self.inner.push_record(p, m.offset as u64),
                raw => empty.push((m.offset, raw.unwrap_or_default().to_vec())),
            }
        }
        let decoded = self.inner.finish();
        let table = decoded.records.table();
        let records = decoded.records.into_batch();
        let mut rejected = decoded.rejected;
        for (offset, raw) in empty {
            rejected.push(RejectedRecord::new(
                &self.reject_source,
                offset as u64,
                "empty_message",
                "the message has no payload",
                &raw,
            ));
        }
        rejected.sort_by_key(|r| r.line);
        let mut cols = RejectedColumns::new();
        let mut by_reason = BTreeMap::new();
        for mut r in rejected {
            let suffix = r.position.split_once(',').map(|(_, s)| s).unwrap_or("");
            let sep = if suffix.is_empty() { "" } else { "," };
            r.position = format!(
                "{}{sep}{suffix}",
                message_position(&self.topic, partition, r.line as i64)
            );
            *by_reason.entry(r.reason.clone()).or_insert(0) += 1;
            cols.append(&r);
        }
        Decoded {
            table,
            records,
            rejected: cols.finish(),
            rejected_by_reason: by_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{gateway_records, rejected_records, span_records};
    use overtime_parse::nginx::LogFormat;
    use overtime_parse::spans::SpanFormat;

    fn msg(offset: i64, p: &[u8]) -> Msg {
        Msg {
            offset,
            payload: Some(p.to_vec()),
        }
    }

    #[test]
    fn nginx_lines_one_per_message() {
        let format = RecordFormat::nginx(
            LogFormat::compile("'$status rt=$request_time rid=$request_id'").unwrap(),
            "edge",
            0,
        );
        let mut d = Decoder::new(&format, "edge-access");
        let out = d.decode(
            2,
            &[
                msg(10, b"504 rt=60.001 rid=4bf92f3577b34da6a3ce929d0e0e4736\n"),
                msg(11, b"garbage"),
                Msg {
                    offset: 12,
                    payload: None,
                },
                msg(13, b"200 rt=0.1 rid=abc\r\n"),
            ],
        );
        assert_eq!(out.table, Table::GatewayRequests);
        let rows = gateway_records(&out.records).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].source, "edge");
        assert_eq!(
            rows[0].request_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let bad = rejected_records(&out.rejected).unwrap();
        let got: Vec<_> = bad
            .iter()
            .map(|r| (r.position.as_str(), r.reason.as_str(), r.line))
            .collect();
        assert_eq!(
            got,
            vec![
                ("edge-access/2@11", "format_mismatch", 11),
                ("edge-access/2@12", "empty_message", 12)
            ]
        );
        // The parser is reused: a second batch starts clean.
        let again = d.decode(2, &[msg(14, b"200 rt=0.2 rid=x")]);
        assert_eq!(
            (again.records.num_rows(), again.rejected.num_rows()),
            (1, 0)
        );
    }

    #[test]
    fn jsonl_and_otlp_spans() {
        let span = br#"{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","service":"agent","name":"root","start_time":1714561200000,"duration_ms":5}"#;
        let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::Jsonl), "spans");
        let out = d.decode(
            0,
            &[msg(0, span), msg(1, b"  "), msg(2, b"{\"trace_id\":1}")],
        );
        assert_eq!(out.table, Table::Spans);
        let spans = span_records(&out.records).unwrap();
        assert_eq!(spans[0].source, "kafka:spans");
        let bad = rejected_records(&out.rejected).unwrap();
        assert_eq!(bad.len(), 2);
        assert_eq!(
            (bad[0].position.as_str(), bad[0].reason.as_str()),
            ("spans/0@1", "empty_message")
        );
        assert_eq!(bad[1].position, "spans/0@2");

        let mut d = Decoder::new(&RecordFormat::Spans(SpanFormat::OtlpProto), "otlp");
        let out = d.decode(1, &[msg(5, b"\xff\xff\xff"), msg(6, b"")]);
        let bad = rejected_records(&out.rejected).unwrap();
        assert_eq!(
            (bad[0].position.as_str(), bad[0].reason.as_str()),
            ("otlp/1@5", "bad_proto")
        );
        assert_eq!(out.rejected_by_reason["empty_message"], 1);
    }
}
