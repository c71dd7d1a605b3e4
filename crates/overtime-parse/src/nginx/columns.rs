//! Builders sized from the previous batch.
//!
//! Arrow builders start empty after `finish()` and grow by doubling; each
//! step of a 64-byte-aligned buffer is a new allocation plus a copy, and
//! large ones are fresh pages from the kernel. Sizing the next batch's
//! builders like the last one makes that one allocation per buffer.

use arrow::array::{
    Array, AsArray, Float64Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow::record_batch::RecordBatch;
use overtime_model::GatewayColumns;

/// Bytes of a Utf8 column (0 when absent or of another type).
fn str_bytes(b: &RecordBatch, name: &str) -> usize {
    b.column_by_name(name)
        .and_then(|a| a.as_string_opt::<i32>().map(|s| s.values().len()))
        .unwrap_or(0)
}

/// Child values of a List column, and the child's bytes when it is Utf8.
fn list_len(b: &RecordBatch, name: &str) -> (usize, usize) {
    let Some(l) = b.column_by_name(name).and_then(|a| a.as_list_opt::<i32>()) else {
        return (0, 0);
    };
    let child = l.values();
    let bytes = child.as_string_opt::<i32>().map_or(0, |s| s.values().len());
    (child.len(), bytes)
}

/// Most rows the next builders are sized for: a caller that finishes huge
/// batches (or only once) must not get huge idle builders.
const MAX_ROWS: usize = 65_536;

/// Room for `x` items (or bytes) seen in a batch of `n` rows: scaled to at
/// most [`MAX_ROWS`] rows, plus an eighth.
fn room(x: usize, n: usize) -> usize {
    let (num, den) = (n.clamp(1, MAX_ROWS), n.max(1));
    let x = x / den * num + x % den * num / den;
    x + x / 8 + 16
}

/// Gateway builders with room for a batch like `prev` (plus an eighth),
/// scaled down to [`MAX_ROWS`] rows.
pub(crate) fn presized(prev: &RecordBatch) -> GatewayColumns {
    let n = prev.num_rows();
    if n == 0 {
        return GatewayColumns::new();
    }
    let fit = |x: usize| room(x, n);
    let rows = fit(n);
    let s = |name: &str| StringBuilder::with_capacity(rows, fit(str_bytes(prev, name)));
    let f = || Float64Builder::with_capacity(rows);
    let ts = || TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC");
    let fl = |name: &str| {
        ListBuilder::with_capacity(
            Float64Builder::with_capacity(fit(list_len(prev, name).0)),
            rows,
        )
    };
    let (addr_items, addr_bytes) = list_len(prev, "upstream_addr");
    let (extra_items, extra_keys, extra_vals) =
        match prev.column_by_name("extra").and_then(|a| a.as_map_opt()) {
            Some(m) => (
                m.entries().len(),
                m.keys()
                    .as_string_opt::<i32>()
                    .map_or(0, |k| k.values().len()),
                m.values()
                    .as_string_opt::<i32>()
                    .map_or(0, |v| v.values().len()),
            ),
            None => (0, 0, 0),
        };
    GatewayColumns {
        source: s("source"),
        layer: UInt32Builder::with_capacity(rows),
        line: UInt64Builder::with_capacity(rows),
        time: ts(),
        time_precision_us: Int64Builder::with_capacity(rows),
        start_time: ts(),
        remote_addr: s("remote_addr"),
        method: s("method"),
        uri: s("uri"),
        protocol: s("protocol"),
        status: UInt16Builder::with_capacity(rows),
        body_bytes_sent: Int64Builder::with_capacity(rows),
        request_time_ms: f(),
        upstream_connect_ms: fl("upstream_connect_ms"),
        upstream_header_ms: fl("upstream_header_ms"),
        upstream_response_ms: fl("upstream_response_ms"),
        upstream_connect_ms_sum: f(),
        upstream_header_ms_sum: f(),
        upstream_response_ms_sum: f(),
        upstream_status: ListBuilder::with_capacity(
            UInt16Builder::with_capacity(fit(list_len(prev, "upstream_status").0)),
            rows,
        ),
        upstream_status_raw: s("upstream_status_raw"),
        upstream_addr: ListBuilder::with_capacity(
            StringBuilder::with_capacity(fit(addr_items), fit(addr_bytes)),
            rows,
        ),
        upstream_tries: UInt32Builder::with_capacity(rows),
        request_id: s("request_id"),
        traceparent: s("traceparent"),
        trace_id: s("trace_id"),
        max_wait_ms: f(),
        llm_reason: s("llm_reason"),
        llm_duration_ms: f(),
        extra: MapBuilder::with_capacity(
            None,
            StringBuilder::with_capacity(fit(extra_items), fit(extra_keys)),
            StringBuilder::with_capacity(fit(extra_items), fit(extra_vals)),
            rows,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{GatewayRecord, gateway_schema};

    #[test]
    fn presized_builders_make_the_same_schema() {
        let mut c = GatewayColumns::new();
        c.append(&GatewayRecord {
            upstream_addr: vec![Some("10.0.0.1:80".into())],
            extra: vec![("k".into(), "v".into())],
            ..Default::default()
        });
        let prev = c.finish();
        let mut next = presized(&prev);
        next.append(&GatewayRecord::default());
        assert_eq!(next.finish().schema(), gateway_schema());
        assert_eq!(presized(&GatewayColumns::new().finish()).len(), 0);
        // A huge batch does not make huge idle builders.
        assert_eq!(room(8192 * 50, 8192), 8192 * 50 + 8192 * 50 / 8 + 16);
        assert_eq!(
            room(MAX_ROWS * 10 * 50, MAX_ROWS * 10),
            MAX_ROWS * 50 + MAX_ROWS * 50 / 8 + 16
        );
        assert_eq!(room(0, 0), 16);
    }
}
