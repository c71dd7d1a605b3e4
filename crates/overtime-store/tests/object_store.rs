//! Parquet on object storage (`[store] url`), against a real S3-compatible
//! server (s3rver, `overtime_test_support::s3rver`): the store on a bucket
//! answers SQL and trace lookups exactly as the store in a local directory
//! does on the same input, and a query run again reads the bucket no more; two collectors sharing a bucket each see the
//! other's flushed files; a Kafka source's replayable rows are committed
//! only once flushed, and a crash before the flush leaves them to be read
//! again rather than replayed twice; retention deletes expired objects; a wrong
//! bucket, endpoint or secret fails `Store::open` with a clear error.
//!
//! Each test runs in its own process (nextest), so setting the `AWS_*`
//! environment, which the store reads as a deployment would, is safe: it
//! is done before any thread of ours starts.

use crate::common;
use arrow::array::AsArray;
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use common::*;
use datafusion::prelude::SessionContext;
use overtime_model::{Checkpoint, CommitPoints, RecordSink, Table};
use overtime_store::format::{Bucket, manifest_key, parse_key};
use overtime_store::{Store, StoreConfig};
use overtime_test_support::s3rver::S3rver;
use std::path::Path;

const BUCKET: &str = "overtime";

/// s3rver with the bucket, its settings in this process's environment.
fn s3(dir: &Path) -> S3rver {
    let s = S3rver::start(dir, &[BUCKET]);
    for (k, v) in s.env() {
        // SAFETY: one test per process (nextest), and no thread of this
        // process reads the environment yet.
        unsafe { std::env::set_var(k, v) };
    }
    s
}

fn on_bucket(dir: &Path, prefix: &str, collector: &str) -> StoreConfig {
    StoreConfig {
        url: Some(format!("s3://{BUCKET}/{prefix}")),
        collector_id: Some(collector.into()),
        ..cfg(dir)
    }
}

async fn sql(ctx: &SessionContext, q: &str) -> String {
    let b = ctx.sql(q).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&b).unwrap().to_string()
}

fn rows(b: &[RecordBatch]) -> usize {
    b.iter().map(|b| b.num_rows()).sum()
}

/// Sorted `line`s of the spans in `b`.
fn lines(b: &[RecordBatch]) -> Vec<u64> {
    let mut v: Vec<u64> = b
        .iter()
        .flat_map(|b| {
            let c = b
                .column_by_name("line")
                .unwrap()
                .as_primitive::<arrow::datatypes::UInt64Type>()
                .clone();
            (0..c.len()).map(move |i| c.value(i))
        })
        .collect();
    v.sort();
    v
}

/// Three hours of spans and gateway records, then a flush, then more of
/// both that stay in the memtable.
fn load(s: &Store, first: u64) {
    let hour = |i: u64| T0 + (i % 3) as i64 * HOUR + (i as i64 % 500) * 1_000_000;
    s.write(Table::Spans, spans(first, 600, hour), None)
        .unwrap();
    s.write(Table::GatewayRequests, gateway(first, 150, hour), None)
        .unwrap();
    s.flush().unwrap();
    s.write(Table::Spans, spans(first + 600, 200, hour), None)
        .unwrap();
    s.write(Table::GatewayRequests, gateway(first + 150, 50, hour), None)
        .unwrap();
}

const QUERIES: &[&str] = &[
    "SELECT count(*), sum(line), min(start_time), max(start_time) FROM spans",
    "SELECT trace_id, count(*) AS n, sum(line) FROM spans GROUP BY trace_id ORDER BY trace_id",
    "SELECT count(*) FROM spans WHERE start_time >= TIMESTAMP '2025-11-29T21:00:00Z' \
     AND start_time < TIMESTAMP '2025-11-29T22:00:00Z'",
    "SELECT status, count(*), sum(request_time_ms) FROM gateway_requests GROUP BY status ORDER BY status",
    "SELECT line, span_id FROM spans WHERE trace_id = '00000000000000000000000000000011' ORDER BY line",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_s3_answers_sql_and_lookups_like_the_store_in_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    let remote = Store::open(on_bucket(&dir.path().join("r"), "prod", "web-1")).unwrap();
    let local = Store::open(cfg(&dir.path().join("l"))).unwrap();
    load(&remote, 0);
    load(&local, 0);

    let st = remote.stats();
    assert_eq!(st.tables["spans"].parquet_files, 3, "one object per hour");
    assert_eq!(st.tables["spans"].memtable_rows, 200);
    assert!(
        !dir.path().join("r/parquet").exists(),
        "no Parquet in data_dir with a url"
    );
    let (keys, other): (Vec<_>, Vec<_>) = Bucket::open(&format!("s3://{BUCKET}/prod"))
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .partition(|(k, _)| parse_key("prod", k).is_some());
    assert_eq!(
        other.into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
        vec![manifest_key("prod", "web-1")],
        "beside the Parquet, the collector's published manifest"
    );
    assert_eq!(
        keys.len(),
        6,
        "3 hours x (spans, gateway_requests): {keys:?}"
    );
    let (k, _) = keys.iter().find(|(k, _)| k.contains("/spans/")).unwrap();
    assert!(
        k.starts_with("prod/spans/date=2025-11-29/hour=2") && k.contains("/web-1-20251129T2"),
        "{k}"
    );
    assert_eq!(parse_key("prod", k).unwrap().collector, "web-1");

    let (rc, lc) = (SessionContext::new(), SessionContext::new());
    remote.register(&rc).unwrap();
    local.register(&lc).unwrap();
    for q in QUERIES {
        assert_eq!(sql(&rc, q).await, sql(&lc, q).await, "{q}");
    }
    // A dashboard's next refresh, in a session of its own: the same
    // answers, every byte from the store's read cache, none from the bucket.
    let again = SessionContext::new();
    remote.register(&again).unwrap();
    for q in QUERIES {
        assert_eq!(sql(&again, q).await, sql(&lc, q).await, "again: {q}");
        let plan = sql(&again, &format!("EXPLAIN ANALYZE {q}")).await;
        let fetched: Vec<&str> = plan
            .split("bytes_scanned=")
            .skip(1)
            .map(|s| s.split([',', ']']).next().unwrap())
            .collect();
        assert!(
            !fetched.is_empty() && fetched.iter().all(|b| *b == "0"),
            "{q}: bytes fetched from the bucket {fetched:?}"
        );
    }
    for i in [0, 17, 149, 180] {
        let (rg, rs) = remote.trace(&tid(i)).unwrap();
        let (lg, ls) = local.trace(&tid(i)).unwrap();
        assert_eq!(
            (rows(&rg), lines(&rs)),
            (rows(&lg), lines(&ls)),
            "trace {i}"
        );
        assert!(rows(&rs) > 0);
    }
    assert_eq!(
        lines(
            &remote
                .scan(Table::Spans, Some(T0 + HOUR), Some(T0 + 2 * HOUR))
                .unwrap()
        ),
        lines(
            &local
                .scan(Table::Spans, Some(T0 + HOUR), Some(T0 + 2 * HOUR))
                .unwrap()
        ),
    );

    // Reopened, the store finds its objects again (and the WAL's rows).
    drop(remote);
    let remote = Store::open(on_bucket(&dir.path().join("r"), "prod", "web-1")).unwrap();
    let rc = SessionContext::new();
    remote.register(&rc).unwrap();
    for q in QUERIES {
        assert_eq!(sql(&rc, q).await, sql(&lc, q).await, "after reopening: {q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_collectors_on_one_bucket_each_see_the_others_flushed_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    let a = Store::open(on_bucket(&dir.path().join("a"), "shared", "a")).unwrap();
    let b = Store::open(on_bucket(&dir.path().join("b"), "shared", "b")).unwrap();
    // Both use flush sequence 1: the collector id keeps the names apart.
    load(&a, 0);
    load(&b, 10_000);
    // Together, what both flushed (600 spans each) and one's memtable.
    let (ac, bc) = (SessionContext::new(), SessionContext::new());
    a.register(&ac).unwrap();
    b.register(&bc).unwrap();
    let n = "SELECT count(*) AS n FROM spans";
    assert!(
        sql(&ac, n).await.contains("| 1400 |"),
        "{}",
        sql(&ac, n).await
    );
    assert!(
        sql(&bc, n).await.contains("| 1400 |"),
        "{}",
        sql(&bc, n).await
    );
    let g = "SELECT count(*) AS n FROM gateway_requests";
    assert!(
        sql(&ac, g).await.contains("| 350 |"),
        "{}",
        sql(&ac, g).await
    );

    // Trace lookups reach the other's files through their bloom filters.
    let (_, spans_of_b) = a.trace(&tid(10_000 / 4 + 3)).unwrap();
    assert_eq!(lines(&spans_of_b), vec![10_012, 10_013, 10_014, 10_015]);
    let (gw, _) = b.trace(&tid(7)).unwrap();
    assert_eq!(rows(&gw), 1);
    let q = format!(
        "SELECT count(*) AS n FROM spans WHERE trace_id = '{}'",
        tid(10_000 / 4 + 3)
    );
    assert!(
        sql(&ac, &q).await.contains("| 4 |"),
        "{}",
        sql(&ac, &q).await
    );
    // Its three files and the other's three, each once.
    assert_eq!(a.stats().tables["spans"].parquet_files, 6);
}

#[test]
fn replayable_rows_are_committed_once_flushed_and_a_crash_before_the_flush_leaves_them_to_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    let data = dir.path().join("k");
    let src = "kafka:overtime/spans/0";
    let at = |p: &str| {
        Some(Checkpoint {
            source: src.into(),
            position: p.into(),
        })
    };
    let store = Store::open(on_bucket(&data, "kafka", "k-1")).unwrap();
    let t = |_| T0;
    store
        .write_replayable(Table::Spans, spans(0, 40, t), at("40"))
        .unwrap();
    assert_eq!(store.checkpoint(src).as_deref(), Some("40"));
    assert_eq!(store.commit_point(src), None, "nothing flushed yet");
    assert_eq!(
        store.wal_bytes(),
        0,
        "no second durable copy of what Kafka holds"
    );
    assert_eq!(
        store.stats().tables["spans"].memtable_rows,
        40,
        "visible at once"
    );

    store.publish().unwrap();
    assert_eq!(store.commit_point(src).as_deref(), Some("40"));
    assert_eq!(store.stats().tables["spans"].parquet_rows, 40);

    // 40..60 in memory only, then kill -9 (the store is dropped unflushed).
    store
        .write_replayable(Table::Spans, spans(40, 20, t), at("60"))
        .unwrap();
    assert_eq!(store.commit_point(src).as_deref(), Some("40"));
    std::mem::forget(store);
    // The data dir's lock goes with the killed process.
    std::fs::remove_file(data.join("LOCK")).unwrap();
    let store = Store::open(on_bucket(&data, "kafka", "k-1")).unwrap();
    assert_eq!(
        store.checkpoint(src).as_deref(),
        Some("40"),
        "the source resumes at the flush: 40..60 are read again from Kafka"
    );
    assert_eq!(store.commit_point(src).as_deref(), Some("40"));
    let st = store.stats();
    assert_eq!(
        (
            st.tables["spans"].parquet_rows,
            st.tables["spans"].memtable_rows
        ),
        (40, 0),
        "nothing replayed that Kafka will deliver again"
    );

    // Without a bucket the WAL is the copy that counts: replayable writes
    // are durable writes, committed at once.
    let local = Store::open(cfg(&dir.path().join("local"))).unwrap();
    local
        .write_replayable(Table::Spans, spans(0, 5, t), at("5"))
        .unwrap();
    assert!(local.wal_bytes() > 0);
    assert_eq!(local.commit_point(src).as_deref(), Some("5"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_expired_objects_in_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    let url = format!("s3://{BUCKET}/r");
    let a = Store::open(StoreConfig {
        retention_age_hours: Some(2),
        ..on_bucket(&dir.path().join("a"), "r", "a")
    })
    .unwrap();
    let b = Store::open(on_bucket(&dir.path().join("b"), "r", "b")).unwrap();
    for s in [&a, &b] {
        s.write(
            Table::Spans,
            spans(0, 30, |i| T0 + (i % 3) as i64 * HOUR),
            None,
        )
        .unwrap();
        s.flush().unwrap();
    }
    let objects = || {
        let mut o = Bucket::open(&url).unwrap().list().unwrap();
        o.retain(|(k, _)| parse_key("r", k).is_some());
        o
    };
    assert_eq!(objects().len(), 6);

    // At T0+4h with 2 hours kept, the buckets T0 and T0+1h have ended.
    let report = a.enforce_retention(T0 + 4 * HOUR).unwrap();
    assert_eq!(report.files_removed.len(), 4, "{report:?}");
    assert_eq!(report.rows_removed, 40);
    let left: Vec<String> = objects().into_iter().map(|(k, _)| k).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|k| k.contains("/hour=22/")), "{left:?}");
    let ctx = SessionContext::new();
    a.register(&ctx).unwrap();
    assert!(
        sql(&ctx, "SELECT count(*) AS n FROM spans")
            .await
            .contains("| 20 |")
    );
    assert_eq!(a.scan(Table::Spans, None, None).unwrap().len(), 2);
}

fn open_err(cfg: StoreConfig) -> String {
    match Store::open(cfg) {
        Ok(_) => panic!("opened a store that cannot reach its bucket"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn wrong_credentials_fail_open_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    // SAFETY: as in `s3`.
    unsafe { std::env::set_var("AWS_ACCESS_KEY_ID", "nobody") };
    let e = open_err(on_bucket(&dir.path().join("d"), "p", "a"));
    assert!(
        e.contains("s3://overtime/p") && e.contains("InvalidAccessKeyId"),
        "{e}"
    );
}

#[test]
fn a_missing_bucket_or_a_dead_endpoint_fails_open_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let _s3 = s3(dir.path());
    let e = open_err(StoreConfig {
        url: Some("s3://no-such-bucket/p".into()),
        ..cfg(&dir.path().join("d"))
    });
    assert!(
        e.contains("s3://no-such-bucket/p") && e.contains("NoSuchBucket"),
        "{e}"
    );

    // A dead endpoint: a port held closed (refused, and nobody else's).
    let closed = overtime_test_support::ports::ClosedPort::new();
    let port = closed.port();
    // SAFETY: as in `s3`; the store that failed above has stopped its threads.
    unsafe {
        std::env::set_var("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"));
        std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    }
    let e = open_err(on_bucket(&dir.path().join("d2"), "p", "a"));
    assert!(e.contains("s3://overtime/p"), "{e}");

    let e = open_err(StoreConfig {
        url: Some("gs://b/p".into()),
        ..cfg(&dir.path().join("d3"))
    });
    assert!(e.contains("unsupported scheme"), "{e}");
}
