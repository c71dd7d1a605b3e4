//! Row access to a `gateway_requests` batch: cheap typed accessors for the
//! few columns a scan needs (no allocation), and whole rows on demand.

use crate::arrow_util::*;
use crate::{GatewayRecord, ModelError};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;

/// Column handles of one `gateway_requests` batch.
pub struct GatewayRows<'a> {
    cols: [&'a ArrayRef; 25],
}

const NAMES: [&str; 25] = [
    "source",
    "layer",
    "line",
    "time",
    "time_precision_us",
    "remote_addr",
    "method",
    "uri",
    "protocol",
    "status",
    "body_bytes_sent",
    "request_time_ms",
    "upstream_connect_ms",
    "upstream_header_ms",
    "upstream_response_ms",
    "upstream_status",
    "upstream_status_raw",
    "upstream_addr",
    "request_id",
    "traceparent",
    "trace_id",
    "max_wait_ms",
    "llm_reason",
    "llm_duration_ms",
    "extra",
];

/// A string cell without allocating (Utf8 / LargeUtf8 / Utf8View).
pub(crate) fn str_at(a: &ArrayRef, i: usize) -> Option<&str> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(a.as_string_view().value(i)),
        _ => None,
    }
}

impl<'a> GatewayRows<'a> {
    /// Column views of a `gateway_requests` batch; fails when a column is missing.
    pub fn new(batch: &'a RecordBatch) -> Result<Self, ModelError> {
        let mut cols = Vec::with_capacity(NAMES.len());
        for n in NAMES {
            cols.push(col(batch, n)?);
        }
        Ok(GatewayRows {
            cols: cols.try_into().expect("NAMES has 25 entries"),
        })
    }
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.cols[0].len()
    }
    /// No rows?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Row `i`'s layer name (`""` when null).
    pub fn source(&self, i: usize) -> &'a str {
        str_at(self.cols[0], i).unwrap_or("")
    }
    /// Row `i`'s layer number, 0 for the outermost (0 when null).
    pub fn layer(&self, i: usize) -> u32 {
        opt_u32(self.cols[1], i).unwrap_or(0)
    }
    /// Row `i`'s end time, µs since the epoch (0 when null).
    pub fn time_us(&self, i: usize) -> i64 {
        opt_i64(self.cols[3], i).unwrap_or(0)
    }
    /// Row `i`'s `$status`.
    pub fn status(&self, i: usize) -> Option<u16> {
        opt_u16(self.cols[9], i)
    }
    /// Row `i`'s `$request_time`, ms.
    pub fn request_time_ms(&self, i: usize) -> Option<f64> {
        opt_f64(self.cols[11], i)
    }
    /// Row `i`'s request id.
    pub fn request_id(&self, i: usize) -> Option<&'a str> {
        str_at(self.cols[18], i)
    }
    /// Row `i`'s trace id (from `traceparent`).
    pub fn trace_id(&self, i: usize) -> Option<&'a str> {
        str_at(self.cols[20], i)
    }
    /// The whole row.
    pub fn row(&self, i: usize) -> GatewayRecord {
        let c = &self.cols;
        GatewayRecord {
            source: opt_str(c[0], i).unwrap_or_default(),
            layer: opt_u32(c[1], i).unwrap_or(0),
            line: opt_u64(c[2], i).unwrap_or(0),
            time_us: opt_i64(c[3], i).unwrap_or(0),
            time_precision_us: opt_i64(c[4], i).unwrap_or(1000),
            remote_addr: opt_str(c[5], i),
            method: opt_str(c[6], i),
            uri: opt_str(c[7], i),
            protocol: opt_str(c[8], i),
            status: opt_u16(c[9], i),
            body_bytes_sent: opt_i64(c[10], i),
            request_time_ms: opt_f64(c[11], i),
            upstream_connect_ms: list_f64(c[12], i),
            upstream_header_ms: list_f64(c[13], i),
            upstream_response_ms: list_f64(c[14], i),
            upstream_status: list_u16(c[15], i),
            upstream_status_raw: opt_str(c[16], i),
            upstream_addr: list_str(c[17], i),
            request_id: opt_str(c[18], i),
            traceparent: opt_str(c[19], i),
            trace_id: opt_str(c[20], i),
            max_wait_ms: opt_f64(c[21], i),
            llm_reason: opt_str(c[22], i),
            llm_duration_ms: opt_f64(c[23], i),
            extra: map_pairs(c[24], i),
        }
    }
}
