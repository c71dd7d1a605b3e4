//! Helpers shared by the store's integration tests: small tables built with
//! the model's builders, and ways to read rows back.
#![allow(dead_code)]

use arrow::array::AsArray;
use arrow::datatypes::{TimestampMicrosecondType, UInt64Type};
use arrow::record_batch::RecordBatch;
use overtime_model::{
    GatewayColumns, GatewayRecord, RejectedColumns, RejectedRecord, SpanColumns, SpanRecord, Stage,
};
use overtime_store::StoreConfig;
use std::path::Path;

pub const HOUR: i64 = 3_600_000_000;
/// 2025-11-29T20:00:00Z.
pub const T0: i64 = 1_764_446_400_000_000;

pub fn cfg(dir: &Path) -> StoreConfig {
    StoreConfig {
        data_dir: dir.to_path_buf(),
        flush_interval_ms: 0,
        ..Default::default()
    }
}

/// Trace id number `i` (32 hex).
pub fn tid(i: u64) -> String {
    format!("{:032x}", i + 1)
}

/// Spans `first..first+n`: span `i` is in trace `tid(i / 4)`, starts at
/// `start(i)` and has `line = i`.
pub fn spans(first: u64, n: u64, start: impl Fn(u64) -> i64) -> RecordBatch {
    let mut c = SpanColumns::new();
    for i in first..first + n {
        let s0 = start(i);
        let mut s = SpanRecord::new(
            &tid(i / 4),
            &format!("{i:016x}"),
            "agent",
            "call",
            s0,
            s0 + 1_000,
        );
        s.stage = Stage::Tool;
        s.line = i;
        s.source = "test".into();
        c.append(&s);
    }
    c.finish()
}

/// Gateway records `first..first+n`: record `i` is trace `tid(i)`, written
/// at `time(i)`, `line = i`.
pub fn gateway(first: u64, n: u64, time: impl Fn(u64) -> i64) -> RecordBatch {
    let mut c = GatewayColumns::new();
    for i in first..first + n {
        c.append(&GatewayRecord {
            source: "edge".into(),
            line: i,
            time_us: time(i),
            time_precision_us: 1000,
            status: Some(if i.is_multiple_of(3) { 504 } else { 200 }),
            request_time_ms: Some(100.0 + i as f64),
            trace_id: Some(tid(i)),
            ..Default::default()
        });
    }
    c.finish()
}

pub fn rejected(first: u64, n: u64) -> RecordBatch {
    let mut c = RejectedColumns::new();
    for i in first..first + n {
        c.append(&RejectedRecord::new(
            "edge.log",
            i,
            "format_mismatch",
            "bad",
            b"junk",
        ));
    }
    c.finish()
}

pub fn rows(b: &[RecordBatch]) -> usize {
    b.iter().map(|b| b.num_rows()).sum()
}

/// The `line` column of every row, in order.
pub fn lines(b: &[RecordBatch]) -> Vec<u64> {
    b.iter()
        .flat_map(|b| {
            let a = b
                .column_by_name("line")
                .expect("line")
                .as_primitive::<UInt64Type>()
                .clone();
            (0..a.len()).map(move |i| a.value(i))
        })
        .collect()
}

/// A timestamp column of every row, in order.
pub fn times(b: &[RecordBatch], col: &str) -> Vec<i64> {
    b.iter()
        .flat_map(|b| {
            let a = b
                .column_by_name(col)
                .expect("time column")
                .as_primitive::<TimestampMicrosecondType>()
                .clone();
            (0..a.len()).map(move |i| a.value(i))
        })
        .collect()
}
