//! `gateway_requests`: one row per nginx access-log line (a *gateway record*).
//!
//! The nginx parser appends straight into [`GatewayColumns`] (its builders
//! are public so the hot loop writes without an intermediate struct);
//! everything downstream reads rows back with [`gateway_records`].
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `source` | Utf8 | the layer's name (`edge`, `internal`…) |
//! | `layer` | UInt32 | 0 for the outermost gateway, 1 for the next… |
//! | `line` | UInt64 | 1-based line number in its source |
//! | `time` | Timestamp(µs, UTC) | when nginx wrote the line (request end) |
//! | `time_precision_us` | Int64 | 1 000 000 for `$time_iso8601`/`$time_local`, 1 000 for `$msec` |
//! | `start_time` | Timestamp(µs, UTC) | `time` − `request_time` |
//! | `remote_addr`, `method`, `uri`, `protocol` | Utf8 | from `$remote_addr` and `$request` |
//! | `status` | UInt16 | `$status` |
//! | `body_bytes_sent` | Int64 | |
//! | `request_time_ms` | Float64 | `$request_time` in ms |
//! | `upstream_connect_ms` … `upstream_response_ms` | List<Float64> | one value per try, null for `-` |
//! | `upstream_*_ms_sum` | Float64 | sum of the tries (null when none known) |
//! | `upstream_status` | List<UInt16> | per try |
//! | `upstream_status_raw` | Utf8 | `$upstream_status` as written |
//! | `upstream_addr` | List<Utf8> | per try |
//! | `upstream_tries` | UInt32 | number of servers tried |
//! | `request_id`, `traceparent` | Utf8 | |
//! | `trace_id` | Utf8 | from `traceparent` (32 lowercase hex) |
//! | `max_wait_ms` | Float64 | `X-Max-Wait` in ms |
//! | `llm_reason` | Utf8 | `X-LLM-Reason` from the upstream |
//! | `llm_duration_ms` | Float64 | `X-LLM-Duration` in ms |
//! | `extra` | Map<Utf8, Utf8> | every other variable, by name |

use crate::ModelError;
use arrow::array::{
    ArrayBuilder, ArrayRef, Float64Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// One gateway record as a row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GatewayRecord {
    /// The layer's source name (`edge`, `internal`…), as configured.
    pub source: String,
    /// 0 for the outermost gateway, 1 for the next one in, and so on.
    pub layer: u32,
    /// 1-based line number in its source file (or message number).
    pub line: u64,
    /// When nginx wrote the line (the request's end), µs since the Unix epoch.
    pub time_us: i64,
    /// Precision of `time_us`, µs: 1 000 000 for `$time_iso8601`/`$time_local`, 1 000 for `$msec`.
    pub time_precision_us: i64,
    /// The client's address (`$remote_addr`).
    pub remote_addr: Option<String>,
    /// HTTP method, from `$request`.
    pub method: Option<String>,
    /// Request URI, from `$request`.
    pub uri: Option<String>,
    /// HTTP protocol (`HTTP/1.1`), from `$request`.
    pub protocol: Option<String>,
    /// HTTP status this layer answered (`$status`).
    pub status: Option<u16>,
    /// Bytes of body sent to the client (`$body_bytes_sent`).
    pub body_bytes_sent: Option<i64>,
    /// Time this layer spent on the request, ms (`$request_time`).
    pub request_time_ms: Option<f64>,
    /// Time to connect to each upstream tried, ms (`$upstream_connect_time`); `None` for `-`.
    pub upstream_connect_ms: Vec<Option<f64>>,
    /// Time until each upstream's response header, ms (`$upstream_header_time`); `None` for `-`.
    pub upstream_header_ms: Vec<Option<f64>>,
    /// Time until each upstream's response ended, ms (`$upstream_response_time`); `None` for `-`.
    pub upstream_response_ms: Vec<Option<f64>>,
    /// Status each upstream answered (`$upstream_status`); `None` for `-`.
    pub upstream_status: Vec<Option<u16>>,
    /// `$upstream_status` exactly as written (`502, 504`).
    pub upstream_status_raw: Option<String>,
    /// Address of each upstream tried (`$upstream_addr`).
    pub upstream_addr: Vec<Option<String>>,
    /// The request id (`$request_id` or an `X-Request-ID` header), when logged.
    pub request_id: Option<String>,
    /// The W3C `traceparent` header as received, when logged.
    pub traceparent: Option<String>,
    /// Trace id read from `traceparent` (32 lowercase hex); `None` when absent or malformed.
    pub trace_id: Option<String>,
    /// The client's budget from `X-Max-Wait`, ms.
    pub max_wait_ms: Option<f64>,
    /// The model server's `X-LLM-Reason` header (its phase times).
    pub llm_reason: Option<String>,
    /// The model server's `X-LLM-Duration` header, ms.
    pub llm_duration_ms: Option<f64>,
    /// Every other logged variable, by name, in log order.
    pub extra: Vec<(String, String)>,
}

/// Sum of the known values; `None` when no value is known.
pub fn sum_known(v: &[Option<f64>]) -> Option<f64> {
    let mut any = false;
    let mut s = 0.0;
    for x in v.iter().flatten() {
        any = true;
        s += x;
    }
    any.then_some(s)
}

impl GatewayRecord {
    /// When the request started: `time` − `request_time`.
    pub fn start_us(&self) -> i64 {
        // Saturating: hostile times must not overflow (the parser rejects
        // them, but records can be built by hand).
        self.time_us
            .saturating_sub((self.request_time_ms.unwrap_or(0.0) * 1000.0).round() as i64)
    }
    /// Total upstream connect time over the tries, ms; `None` when none is known.
    pub fn upstream_connect_sum_ms(&self) -> Option<f64> {
        sum_known(&self.upstream_connect_ms)
    }
    /// Total time to upstream response headers over the tries, ms; `None` when none is known.
    pub fn upstream_header_sum_ms(&self) -> Option<f64> {
        sum_known(&self.upstream_header_ms)
    }
    /// Total upstream response time over the tries, ms; `None` when none is known.
    pub fn upstream_response_sum_ms(&self) -> Option<f64> {
        sum_known(&self.upstream_response_ms)
    }
    /// Number of upstream servers tried (the longest of the per-try lists).
    pub fn upstream_tries(&self) -> usize {
        [
            self.upstream_connect_ms.len(),
            self.upstream_header_ms.len(),
            self.upstream_response_ms.len(),
            self.upstream_status.len(),
            self.upstream_addr.len(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
    /// A variable kept by name in `extra`.
    pub fn extra(&self, name: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Arrow builders of `gateway_requests`, one per column, in schema order.
pub struct GatewayColumns {
    /// `source`: the layer's source name (`edge`, `internal`…), as configured.
    pub source: StringBuilder,
    /// `layer`: 0 for the outermost gateway, 1 for the next one in, and so on.
    pub layer: UInt32Builder,
    /// `line`: 1-based line number in its source file (or message number).
    pub line: UInt64Builder,
    /// `time`: when nginx wrote the line, µs since the epoch, UTC.
    pub time: TimestampMicrosecondBuilder,
    /// `time_precision_us`: precision of `time_us`, µs: 1 000 000 for `$time_iso8601`/`$time_local`, 1 000 for `$msec`.
    pub time_precision_us: Int64Builder,
    /// `start_time`: `time` − `request_time`, µs since the epoch, UTC.
    pub start_time: TimestampMicrosecondBuilder,
    /// `remote_addr`: the client's address (`$remote_addr`).
    pub remote_addr: StringBuilder,
    /// `method`: hTTP method, from `$request`.
    pub method: StringBuilder,
    /// `uri`: request URI, from `$request`.
    pub uri: StringBuilder,
    /// `protocol`: hTTP protocol (`HTTP/1.1`), from `$request`.
    pub protocol: StringBuilder,
    /// `status`: hTTP status this layer answered (`$status`).
    pub status: UInt16Builder,
    /// `body_bytes_sent`: bytes of body sent to the client (`$body_bytes_sent`).
    pub body_bytes_sent: Int64Builder,
    /// `request_time_ms`: time this layer spent on the request, ms (`$request_time`).
    pub request_time_ms: Float64Builder,
    /// `upstream_connect_ms`: time to connect to each upstream tried, ms (`$upstream_connect_time`); `None` for `-`.
    pub upstream_connect_ms: ListBuilder<Float64Builder>,
    /// `upstream_header_ms`: time until each upstream's response header, ms (`$upstream_header_time`); `None` for `-`.
    pub upstream_header_ms: ListBuilder<Float64Builder>,
    /// `upstream_response_ms`: time until each upstream's response ended, ms (`$upstream_response_time`); `None` for `-`.
    pub upstream_response_ms: ListBuilder<Float64Builder>,
    /// `upstream_connect_ms_sum`: sum of the tries' `upstream_connect_ms`, ms; null when none is known.
    pub upstream_connect_ms_sum: Float64Builder,
    /// `upstream_header_ms_sum`: sum of the tries' `upstream_header_ms`, ms; null when none is known.
    pub upstream_header_ms_sum: Float64Builder,
    /// `upstream_response_ms_sum`: sum of the tries' `upstream_response_ms`, ms; null when none is known.
    pub upstream_response_ms_sum: Float64Builder,
    /// `upstream_status`: status each upstream answered (`$upstream_status`); `None` for `-`.
    pub upstream_status: ListBuilder<UInt16Builder>,
    /// `upstream_status_raw`: `$upstream_status` exactly as written (`502, 504`).
    pub upstream_status_raw: StringBuilder,
    /// `upstream_addr`: address of each upstream tried (`$upstream_addr`).
    pub upstream_addr: ListBuilder<StringBuilder>,
    /// `upstream_tries`: number of upstream servers tried.
    pub upstream_tries: UInt32Builder,
    /// `request_id`: the request id (`$request_id` or an `X-Request-ID` header), when logged.
    pub request_id: StringBuilder,
    /// `traceparent`: the W3C `traceparent` header as received, when logged.
    pub traceparent: StringBuilder,
    /// `trace_id`: trace id read from `traceparent` (32 lowercase hex); `None` when absent or malformed.
    pub trace_id: StringBuilder,
    /// `max_wait_ms`: the client's budget from `X-Max-Wait`, ms.
    pub max_wait_ms: Float64Builder,
    /// `llm_reason`: the model server's `X-LLM-Reason` header (its phase times).
    pub llm_reason: StringBuilder,
    /// `llm_duration_ms`: the model server's `X-LLM-Duration` header, ms.
    pub llm_duration_ms: Float64Builder,
    /// `extra`: every other logged variable, by name, in log order.
    pub extra: MapBuilder<StringBuilder, StringBuilder>,
}

impl Default for GatewayColumns {
    fn default() -> Self {
        Self::new()
    }
}

fn ts() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("UTC")
}

impl GatewayColumns {
    /// Empty builders, ready for rows.
    pub fn new() -> Self {
        GatewayColumns {
            source: StringBuilder::new(),
            layer: UInt32Builder::new(),
            line: UInt64Builder::new(),
            time: ts(),
            time_precision_us: Int64Builder::new(),
            start_time: ts(),
            remote_addr: StringBuilder::new(),
            method: StringBuilder::new(),
            uri: StringBuilder::new(),
            protocol: StringBuilder::new(),
            status: UInt16Builder::new(),
            body_bytes_sent: Int64Builder::new(),
            request_time_ms: Float64Builder::new(),
            upstream_connect_ms: ListBuilder::new(Float64Builder::new()),
            upstream_header_ms: ListBuilder::new(Float64Builder::new()),
            upstream_response_ms: ListBuilder::new(Float64Builder::new()),
            upstream_connect_ms_sum: Float64Builder::new(),
            upstream_header_ms_sum: Float64Builder::new(),
            upstream_response_ms_sum: Float64Builder::new(),
            upstream_status: ListBuilder::new(UInt16Builder::new()),
            upstream_status_raw: StringBuilder::new(),
            upstream_addr: ListBuilder::new(StringBuilder::new()),
            upstream_tries: UInt32Builder::new(),
            request_id: StringBuilder::new(),
            traceparent: StringBuilder::new(),
            trace_id: StringBuilder::new(),
            max_wait_ms: Float64Builder::new(),
            llm_reason: StringBuilder::new(),
            llm_duration_ms: Float64Builder::new(),
            extra: MapBuilder::new(None, StringBuilder::new(), StringBuilder::new()),
        }
    }

    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.line.len()
    }

    /// No row appended yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one whole row (the convenient, allocating path).
    pub fn append(&mut self, r: &GatewayRecord) {
        self.source.append_value(&r.source);
        self.layer.append_value(r.layer);
        self.line.append_value(r.line);
        self.time.append_value(r.time_us);
        self.time_precision_us.append_value(r.time_precision_us);
        self.start_time.append_value(r.start_us());
        self.remote_addr.append_option(r.remote_addr.as_deref());
        self.method.append_option(r.method.as_deref());
        self.uri.append_option(r.uri.as_deref());
        self.protocol.append_option(r.protocol.as_deref());
        self.status.append_option(r.status);
        self.body_bytes_sent.append_option(r.body_bytes_sent);
        self.request_time_ms.append_option(r.request_time_ms);
        for (b, v) in [
            (&mut self.upstream_connect_ms, &r.upstream_connect_ms),
            (&mut self.upstream_header_ms, &r.upstream_header_ms),
            (&mut self.upstream_response_ms, &r.upstream_response_ms),
        ] {
            for x in v {
                b.values().append_option(*x);
            }
            b.append(true);
        }
        self.upstream_connect_ms_sum
            .append_option(r.upstream_connect_sum_ms());
        self.upstream_header_ms_sum
            .append_option(r.upstream_header_sum_ms());
        self.upstream_response_ms_sum
            .append_option(r.upstream_response_sum_ms());
        for x in &r.upstream_status {
            self.upstream_status.values().append_option(*x);
        }
        self.upstream_status.append(true);
        self.upstream_status_raw
            .append_option(r.upstream_status_raw.as_deref());
        for x in &r.upstream_addr {
            self.upstream_addr.values().append_option(x.as_deref());
        }
        self.upstream_addr.append(true);
        self.upstream_tries.append_value(r.upstream_tries() as u32);
        self.request_id.append_option(r.request_id.as_deref());
        self.traceparent.append_option(r.traceparent.as_deref());
        self.trace_id.append_option(r.trace_id.as_deref());
        self.max_wait_ms.append_option(r.max_wait_ms);
        self.llm_reason.append_option(r.llm_reason.as_deref());
        self.llm_duration_ms.append_option(r.llm_duration_ms);
        for (k, v) in &r.extra {
            self.extra.keys().append_value(k);
            self.extra.values().append_value(v);
        }
        self.extra
            .append(true)
            .expect("map keys and values appended in pairs");
    }

    /// Finishes the batch and resets the builders.
    pub fn finish(&mut self) -> RecordBatch {
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("source", Arc::new(self.source.finish())),
            ("layer", Arc::new(self.layer.finish())),
            ("line", Arc::new(self.line.finish())),
            ("time", Arc::new(self.time.finish())),
            (
                "time_precision_us",
                Arc::new(self.time_precision_us.finish()),
            ),
            ("start_time", Arc::new(self.start_time.finish())),
            ("remote_addr", Arc::new(self.remote_addr.finish())),
            ("method", Arc::new(self.method.finish())),
            ("uri", Arc::new(self.uri.finish())),
            ("protocol", Arc::new(self.protocol.finish())),
            ("status", Arc::new(self.status.finish())),
            ("body_bytes_sent", Arc::new(self.body_bytes_sent.finish())),
            ("request_time_ms", Arc::new(self.request_time_ms.finish())),
            (
                "upstream_connect_ms",
                Arc::new(self.upstream_connect_ms.finish()),
            ),
            (
                "upstream_header_ms",
                Arc::new(self.upstream_header_ms.finish()),
            ),
            (
                "upstream_response_ms",
                Arc::new(self.upstream_response_ms.finish()),
            ),
            (
                "upstream_connect_ms_sum",
                Arc::new(self.upstream_connect_ms_sum.finish()),
            ),
            (
                "upstream_header_ms_sum",
                Arc::new(self.upstream_header_ms_sum.finish()),
            ),
            (
                "upstream_response_ms_sum",
                Arc::new(self.upstream_response_ms_sum.finish()),
            ),
            ("upstream_status", Arc::new(self.upstream_status.finish())),
            (
                "upstream_status_raw",
                Arc::new(self.upstream_status_raw.finish()),
            ),
            ("upstream_addr", Arc::new(self.upstream_addr.finish())),
            ("upstream_tries", Arc::new(self.upstream_tries.finish())),
            ("request_id", Arc::new(self.request_id.finish())),
            ("traceparent", Arc::new(self.traceparent.finish())),
            ("trace_id", Arc::new(self.trace_id.finish())),
            ("max_wait_ms", Arc::new(self.max_wait_ms.finish())),
            ("llm_reason", Arc::new(self.llm_reason.finish())),
            ("llm_duration_ms", Arc::new(self.llm_duration_ms.finish())),
            ("extra", Arc::new(self.extra.finish())),
        ];
        crate::arrow_util::batch(cols)
    }
}

/// The schema of `gateway_requests`.
pub fn gateway_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| GatewayColumns::new().finish().schema())
        .clone()
}

/// Reads the rows of a `gateway_requests` batch.
pub fn gateway_records(batch: &RecordBatch) -> Result<Vec<GatewayRecord>, ModelError> {
    let rows = crate::GatewayRows::new(batch)?;
    Ok((0..batch.num_rows()).map(|i| rows.row(i)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_arrow() {
        let r = GatewayRecord {
            source: "edge".into(),
            layer: 0,
            line: 7,
            time_us: 1_700_000_060_000_000,
            time_precision_us: 1_000_000,
            status: Some(504),
            request_time_ms: Some(60001.0),
            upstream_connect_ms: vec![Some(1.0), None],
            upstream_header_ms: vec![None, None],
            upstream_response_ms: vec![Some(30000.0), Some(30001.0)],
            upstream_status: vec![Some(502), Some(504)],
            upstream_status_raw: Some("502, 504".into()),
            upstream_addr: vec![Some("10.0.0.1:80".into()), Some("10.0.0.2:80".into())],
            request_id: Some("abc".into()),
            extra: vec![("host".into(), "example".into())],
            ..Default::default()
        };
        let mut cols = GatewayColumns::new();
        cols.append(&r);
        cols.append(&GatewayRecord {
            line: 8,
            ..Default::default()
        });
        let batch = cols.finish();
        assert_eq!(batch.schema(), gateway_schema());
        let back = gateway_records(&batch).unwrap();
        assert_eq!(back[0], r);
        assert_eq!(back[0].upstream_response_sum_ms(), Some(60001.0));
        assert_eq!(back[0].upstream_header_sum_ms(), None);
        assert_eq!(back[0].start_us(), 1_700_000_000_000_000 - 1000);
        assert_eq!(back[1].line, 8);
        assert!(back[1].upstream_addr.is_empty());
    }
}
