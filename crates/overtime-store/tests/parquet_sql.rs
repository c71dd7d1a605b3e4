//! Flush to Parquet, read back through DataFusion and directly: identical
//! rows, sorted by time, bloom filter on trace_id, each row once across
//! memtable ∪ Parquet, time pruning that skips files, trace lookups.

use crate::common;
use arrow::array::{Array, AsArray, Int64Array};
use arrow::record_batch::RecordBatch;
use common::*;
use datafusion::prelude::SessionContext;
use overtime_model::{RecordSink, Table, span_records};
use overtime_store::Store;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::fs::File;

async fn sql(ctx: &SessionContext, q: &str) -> Vec<RecordBatch> {
    ctx.sql(q).await.unwrap().collect().await.unwrap()
}

async fn count(ctx: &SessionContext, q: &str) -> i64 {
    let b = sql(ctx, q).await;
    b[0].column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

/// Spans over three hours, written out of time order.
fn three_hours(s: &Store) {
    s.write(
        Table::Spans,
        spans(0, 300, |i| T0 + 2 * HOUR + (300 - i as i64) * 1_000_000),
        None,
    )
    .unwrap();
    s.write(
        Table::Spans,
        spans(300, 300, |i| T0 + ((i % 300) as i64 * 7 % 300) * 1_000_000),
        None,
    )
    .unwrap();
    s.write(
        Table::Spans,
        spans(600, 300, |i| T0 + HOUR + (i as i64 % 300) * 1_000_000),
        None,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_writes_sorted_hourly_files_with_bloom_filters_that_read_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    three_hours(&s);
    let before = s.scan(Table::Spans, None, None).unwrap();
    let report = s.flush().unwrap();
    assert_eq!(report.files.len(), 3, "one file per hour");
    assert_eq!(report.rows["spans"], 900);
    assert_eq!(s.wal_bytes(), 0, "WAL truncated after the flush");
    assert_eq!(s.stats().tables["spans"].memtable_rows, 0);
    for path in &report.files {
        assert!(
            path.to_string_lossy().contains("/parquet/spans/"),
            "{path:?}"
        );
        let r = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let md = r.metadata();
        let cols = md.file_metadata().schema_descr();
        let trace = (0..cols.num_columns())
            .find(|i| cols.column(*i).name() == "trace_id")
            .unwrap();
        let start = (0..cols.num_columns())
            .find(|i| cols.column(*i).name() == "start_time")
            .unwrap();
        for rg in md.row_groups() {
            assert!(
                rg.column(trace).bloom_filter_offset().is_some(),
                "bloom filter on trace_id"
            );
            assert!(
                rg.column(start).statistics().is_some(),
                "row-group statistics"
            );
        }
        // rows sorted by time, all in one hour
        let rows: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(path).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
        let t = times(&rows, "start_time");
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "sorted by start_time");
        assert_eq!(
            t.first().unwrap().div_euclid(HOUR),
            t.last().unwrap().div_euclid(HOUR)
        );
    }
    // Same rows through SQL and through scan.
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    let via_sql = sql(&ctx, "SELECT * FROM spans ORDER BY line").await;
    let mut want =
        span_records(&arrow::compute::concat_batches(&before[0].schema(), &before).unwrap())
            .unwrap();
    want.sort_by_key(|r| r.line);
    let mut got = Vec::new();
    for b in &via_sql {
        got.extend(span_records(b).unwrap());
    }
    assert_eq!(got, want);
    let via_scan = s.scan(Table::Spans, None, None).unwrap();
    assert_eq!(rows(&via_scan), 900);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memtable_union_parquet_counts_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    s.write(
        Table::GatewayRequests,
        gateway(0, 100, |i| T0 + i as i64 * 1000),
        None,
    )
    .unwrap();
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM gateway_requests").await,
        100
    );
    s.flush().unwrap();
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM gateway_requests").await,
        100
    );
    s.write(
        Table::GatewayRequests,
        gateway(100, 50, |i| T0 + i as i64 * 1000),
        None,
    )
    .unwrap();
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM gateway_requests").await,
        150
    );
    assert_eq!(
        count(&ctx, "SELECT count(DISTINCT line) FROM gateway_requests").await,
        150
    );
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM gateway_requests WHERE status = 504"
        )
        .await,
        50
    );
    // rejected: ingested_at is its time column
    s.write(Table::Rejected, rejected(0, 7), None).unwrap();
    s.flush().unwrap();
    s.write(Table::Rejected, rejected(7, 3), None).unwrap();
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM rejected WHERE ingested_at IS NOT NULL"
        )
        .await,
        10
    );
    // after a restart too
    drop(s);
    let s = Store::open(cfg(dir.path())).unwrap();
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM gateway_requests").await,
        150
    );
    assert_eq!(count(&ctx, "SELECT count(*) FROM rejected").await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_filters_prune_whole_files_and_trace_id_uses_the_bloom_filter() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    three_hours(&s);
    s.flush().unwrap();
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();

    let opened = s.stats().files_scanned;
    let q = format!(
        "SELECT count(*) FROM spans WHERE start_time >= to_timestamp_micros({}) AND start_time < to_timestamp_micros({})",
        T0 + HOUR,
        T0 + 2 * HOUR
    );
    assert_eq!(count(&ctx, &q).await, 300);
    assert_eq!(
        s.stats().files_scanned - opened,
        1,
        "two of three files pruned"
    );

    let opened = s.stats().files_scanned;
    let q = "SELECT count(*) FROM spans WHERE start_time >= '2025-11-29T22:00:00Z'";
    assert_eq!(count(&ctx, q).await, 300);
    assert_eq!(s.stats().files_scanned - opened, 1);

    // trace 160 is spans 640..644, all in the second hour's file
    let opened = s.stats().files_scanned;
    let q = format!("SELECT count(*) FROM spans WHERE trace_id = '{}'", tid(160));
    assert_eq!(count(&ctx, &q).await, 4);
    let scanned = s.stats().files_scanned - opened;
    assert!(
        scanned <= 1,
        "bloom filters ruled out the other files ({scanned} opened)"
    );

    let plan = sql(
        &ctx,
        &format!(
            "EXPLAIN SELECT * FROM spans WHERE trace_id = '{}'",
            tid(160)
        ),
    )
    .await;
    let text: String = plan
        .iter()
        .flat_map(|b| {
            let c = b.column(1).as_string::<i32>().clone();
            (0..c.len()).map(move |i| c.value(i).to_string())
        })
        .collect();
    assert!(
        text.contains("predicate="),
        "predicate pushed into the Parquet scan:\n{text}"
    );
}

#[test]
fn trace_lookup_reads_memtable_and_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    // trace 5: spans 20..24 and gateway record 5; half flushed, half not
    s.write(Table::Spans, spans(0, 22, |i| T0 + i as i64), None)
        .unwrap();
    s.write(
        Table::GatewayRequests,
        gateway(0, 10, |i| T0 + i as i64),
        None,
    )
    .unwrap();
    s.flush().unwrap();
    s.write(Table::Spans, spans(22, 10, |i| T0 + i as i64), None)
        .unwrap();
    let (g, sp) = s.trace(&tid(5)).unwrap();
    assert_eq!(lines(&g), vec![5]);
    let mut l = lines(&sp);
    l.sort();
    assert_eq!(l, vec![20, 21, 22, 23]);
    let (g, sp) = s.trace(&tid(999)).unwrap();
    assert!(g.is_empty() && sp.is_empty());
    // time-range scan over both sides
    let r = s.scan(Table::Spans, Some(T0 + 10), Some(T0 + 25)).unwrap();
    let mut l = lines(&r);
    l.sort();
    assert_eq!(l, (10..25).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_racing_a_flush_still_counts_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(Store::open(cfg(dir.path())).unwrap());
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    let mut written = 0;
    for round in 0..5u64 {
        s.write(
            Table::Spans,
            spans(round * 2_000, 2_000, |i| T0 + i as i64 * 1_000),
            None,
        )
        .unwrap();
        written += 2_000;
        let flusher = {
            let s = s.clone();
            std::thread::spawn(move || s.flush().unwrap())
        };
        while !flusher.is_finished() {
            assert_eq!(count(&ctx, "SELECT count(*) FROM spans").await, written);
        }
        flusher.join().unwrap();
        assert_eq!(count(&ctx, "SELECT count(*) FROM spans").await, written);
    }
    assert_eq!(s.stats().tables["spans"].memtable_rows, 0);
}
