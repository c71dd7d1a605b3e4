//! Data written before a column existed still reads: a `spans` Parquet file
//! and a WAL record without `scope_name`, `scope_version` and `links` come
//! back with the current schema (nulls in the new columns), through
//! `Store::scan`, the trace lookup and SQL.

use crate::common::*;
use arrow::array::{Array, AsArray, Int64Array};
use datafusion::prelude::SessionContext;
use overtime_model::{RecordSink, Table, span_records, span_schema};
use overtime_store::Store;
use overtime_store::format::{decode_payload, encode_payload};
use overtime_store::format::{list_files, open_segment, write_segment};

/// `spans` as an older version wrote them: without the last three columns.
fn old_spans(first: u64, n: u64) -> arrow::record_batch::RecordBatch {
    let b = spans(first, n, |i| T0 + i as i64 * 1_000_000);
    let keep: Vec<usize> = (0..b.num_columns() - 3).collect();
    let old = b.project(&keep).unwrap();
    assert!(old.schema().column_with_name("links").is_none());
    old
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_file_from_before_scope_and_links_reads_with_nulls() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open(cfg(dir.path())).unwrap();
        s.write(
            Table::Spans,
            spans(0, 8, |i| T0 + i as i64 * 1_000_000),
            None,
        )
        .unwrap();
        s.flush().unwrap();
    }
    // Replace the flushed file by the same rows in the old schema.
    let pq = dir.path().join("parquet").join("spans");
    let files = list_files(&pq).unwrap();
    assert_eq!(files.len(), 1);
    let f = open_segment(Table::Spans, &files[0]).unwrap();
    std::fs::remove_file(&files[0]).unwrap();
    let old = old_spans(0, 8);
    write_segment(
        &pq,
        Table::Spans,
        f.bucket_start_us,
        f.flush_seq,
        &old,
        false,
    )
    .unwrap();

    let s = Store::open(cfg(dir.path())).unwrap();
    let scanned = s.scan(Table::Spans, None, None).unwrap();
    assert_eq!(scanned.iter().map(|b| b.num_rows()).sum::<usize>(), 8);
    for b in &scanned {
        assert_eq!(b.schema().fields(), span_schema().fields());
        for r in span_records(b).unwrap() {
            assert_eq!(
                (r.scope_name, r.scope_version, r.links.len()),
                (None, None, 0)
            );
        }
    }
    let (_, traced) = s.trace(&tid(0)).unwrap();
    assert_eq!(traced.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    // New rows beside the old file, then SQL over both.
    s.write(
        Table::Spans,
        spans(8, 4, |i| T0 + i as i64 * 1_000_000),
        None,
    )
    .unwrap();
    s.flush().unwrap();
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    let b = ctx
        .sql("SELECT count(*) AS n, count(scope_name) AS named FROM spans")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let col = |i: usize| {
        b[0].column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!((col(0), col(1)), (12, 0));
    let links = ctx
        .sql("SELECT links FROM spans ORDER BY line")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let n: usize = links.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n, 12);
    let first = links[0].column(0).as_list::<i32>();
    assert!(first.is_null(0) || first.value(0).is_empty());
}

#[test]
fn a_wal_record_from_before_scope_and_links_decodes_with_the_current_schema() {
    let old = old_spans(0, 3);
    let payload = encode_payload(Table::Spans, T0, None, &old).unwrap();
    let rec = decode_payload(&payload).unwrap();
    assert_eq!(rec.batch.schema().fields(), span_schema().fields());
    assert_eq!(rec.batch.num_rows(), 3);
    assert!(rec.batch.column_by_name("scope_name").unwrap().is_null(2));
}
