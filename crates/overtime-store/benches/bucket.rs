//! Lookups over a bucket from a collector that wrote none of it: 10 M
//! spans written to a real S3-compatible server (s3rver, as the
//! object-storage tests start it) by one collector, then read by a second
//! collector with its own empty WAL and memtable — trace lookup p50/p99
//! and a 504s-by-cause query — beside the writer itself (the
//! single-collector figure) and DuckDB reading the same objects from the
//! same bucket (`benches/duckdb_bucket.py`: PyPI `duckdb` with `s3fs`
//! through fsspec, since DuckDB's own httpfs extension is downloaded at
//! run time).
//!
//! ```text
//! cargo bench --profile release -p overtime-store --bench bucket
//! OVERTIME_BENCH_SPANS=1000000 cargo bench --profile release -p overtime-store --bench bucket
//! OVERTIME_BENCH_EXPLAIN=1 …   # also print EXPLAIN ANALYZE of the 504s-by-cause query (warm)
//! ```
//! Prints one Markdown table (docs/store.md keeps the last run's). Both
//! engines' answers to the query are compared: the bench fails if they
//! differ.

mod common;

use common::*;
use datafusion::prelude::SessionContext;
use overtime_model::{RecordSink, Table};
use overtime_store::{Store, StoreConfig};
use overtime_test_support::s3rver::S3rver;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BUCKET: &str = "overtime";
const PREFIX: &str = "bench";
const LOOKUPS: usize = 1_000;
const QUERY_RUNS: usize = 5;

/// 504s by cause: each 504 root's failed child, by stage and error type.
const BY_CAUSE: &str = "SELECT c.stage, c.error_type, count(*) AS traces \
     FROM spans r JOIN spans c ON c.trace_id = r.trace_id AND c.parent_span_id = r.span_id \
     WHERE r.http_status = 504 AND c.status = 'error' \
     GROUP BY c.stage, c.error_type ORDER BY traces DESC, c.stage, c.error_type";

fn collector(dir: &Path, id: &str) -> Store {
    Store::open(StoreConfig {
        data_dir: dir.join(id),
        url: Some(format!("s3://{BUCKET}/{PREFIX}")),
        collector_id: Some(id.into()),
        memtable_bytes: 2 << 30,
        flush_interval_ms: 0,
        fsync: false,
        // Room for the query's columns over 10 M spans (~370 MiB), as
        // DuckDB's external file cache has (up to its memory limit).
        read_cache_bytes: 1 << 30,
        ..Default::default()
    })
    .expect("open a collector on the bucket")
}

fn lookups(store: &Store, ids: &[String]) -> Vec<Duration> {
    ids.iter()
        .map(|id| {
            let t = Instant::now();
            let (_, spans) = store.trace(id).expect("trace");
            let d = t.elapsed();
            let n: usize = spans.iter().map(|b| b.num_rows()).sum();
            assert_eq!(n as u64, SPANS_PER_TRACE, "trace {id}");
            d
        })
        .collect()
}

/// The query's rows as `stage,error_type,traces` lines, and its run times.
fn by_cause(rt: &tokio::runtime::Runtime, store: &Store) -> (Vec<String>, Vec<Duration>) {
    let ctx = SessionContext::new();
    store.register(&ctx).expect("register");
    let mut times = Vec::new();
    let mut rows = Vec::new();
    for _ in 0..QUERY_RUNS {
        let t = Instant::now();
        let b = rt
            .block_on(async { ctx.sql(BY_CAUSE).await?.collect().await })
            .expect("504s by cause");
        times.push(t.elapsed());
        let text = arrow::util::display::ArrayFormatter::try_new;
        rows.clear();
        for b in &b {
            let cols: Vec<_> = b
                .columns()
                .iter()
                .map(|c| text(c.as_ref(), &Default::default()).expect("format"))
                .collect();
            for i in 0..b.num_rows() {
                let v: Vec<String> = cols.iter().map(|c| c.value(i).to_string()).collect();
                rows.push(v.join(","));
            }
        }
    }
    (rows, times)
}

fn main() {
    let total: u64 = std::env::var("OVERTIME_BENCH_SPANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let s3 = S3rver::start(dir.path(), &[BUCKET]);
    for (k, v) in s3.env() {
        // SAFETY: no other thread of this process has started yet.
        unsafe { std::env::set_var(k, v) };
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    let writer = collector(dir.path(), "writer");
    let load = Instant::now();
    let chunk = (total / 10).max(BATCH) / BATCH * BATCH;
    let mut written = 0;
    while written < total {
        let n = BATCH.min(total - written);
        writer
            .write(Table::Spans, batch(written, n), None)
            .expect("write");
        written += n;
        if written % chunk == 0 || written == total {
            writer.flush().expect("flush to the bucket");
            eprintln!(
                "bucket bench: {written} spans in the bucket after {:.1?}",
                load.elapsed()
            );
        }
    }
    let load = load.elapsed();
    let st = writer.stats();
    eprintln!("bucket bench: {total} spans loaded in {load:.1?}");
    let ids = lookup_ids(LOOKUPS, total / SPANS_PER_TRACE);

    // The reader wrote nothing: everything it answers comes from the bucket.
    let reader = collector(dir.path(), "reader");
    let mut cold = lookups(&reader, &ids[..1]);
    let mut theirs = lookups(&reader, &ids);
    eprintln!(
        "bucket bench: {LOOKUPS} lookups by the reader, p50 {:.2?}",
        pct_of(&theirs, 0.5)
    );
    let mut ours = lookups(&writer, &ids);
    eprintln!(
        "bucket bench: {LOOKUPS} lookups by the writer, p50 {:.2?}",
        pct_of(&ours, 0.5)
    );
    let (rows, mut q_reader) = by_cause(&rt, &reader);
    let (rows_w, mut q_writer) = by_cause(&rt, &writer);
    if std::env::var_os("OVERTIME_BENCH_EXPLAIN").is_some() {
        // Where the query's time goes, operator by operator, once the
        // reader has run it (its footers and bytes cached, as the runs were).
        let ctx = SessionContext::new();
        reader.register(&ctx).expect("register");
        let plan = rt
            .block_on(async {
                ctx.sql(&format!("EXPLAIN ANALYZE {BY_CAUSE}"))
                    .await?
                    .collect()
                    .await
            })
            .expect("explain");
        eprintln!(
            "{}",
            arrow::util::pretty::pretty_format_batches(&plan).expect("format")
        );
    }
    assert_eq!(rows, rows_w, "the reader and the writer disagree");
    eprintln!("bucket bench: 504s by cause, {QUERY_RUNS} runs each; DuckDB next");
    let expected_504s = (0..total / SPANS_PER_TRACE)
        .filter(|t| failure(*t).is_some())
        .count();
    let counted: usize = rows
        .iter()
        .map(|r| r.rsplit(',').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(counted, expected_504s, "504s by cause: {rows:?}");

    let ids_file = dir.path().join("ids.txt");
    std::fs::write(&ids_file, ids.join("\n")).expect("ids");
    let expected = dir.path().join("expected.txt");
    std::fs::write(&expected, rows.join("\n")).expect("expected");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/duckdb_bucket.py");
    let mut py = Command::new(python());
    py.arg(script)
        .arg(format!("s3://{BUCKET}/{PREFIX}/spans/**/*.parquet"))
        .arg(&ids_file)
        .arg(BY_CAUSE)
        .arg(&expected)
        .envs(s3.env());
    let duck = match py.output() {
        Ok(o) if o.status.success() => {
            eprint!("{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        }
        Ok(o) => panic!(
            "the DuckDB peer failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("the DuckDB peer could not start: {e}"),
    };

    println!();
    println!(
        "{total} spans in {} Parquet objects ({:.0} MiB) on s3rver, written by one collector in {:.1} s; \
         {LOOKUPS} lookups of random traces ({SPANS_PER_TRACE} spans each); \
         504s by cause ({} 504s) run {QUERY_RUNS} times",
        st.parquet_files,
        st.parquet_bytes as f64 / (1 << 20) as f64,
        load.as_secs_f64(),
        expected_504s,
    );
    println!();
    println!("| engine | lookup p50 ms | lookup p99 ms | 504s by cause, median ms |");
    println!("|---|---:|---:|---:|");
    let q50 = |v: &mut Vec<Duration>| pct(v, 0.5);
    println!(
        "| overtime, the collector that wrote it | {:.2} | {:.2} | {:.0} |",
        pct(&mut ours.clone(), 0.5),
        pct(&mut ours, 0.99),
        q50(&mut q_writer)
    );
    println!(
        "| overtime, a collector that wrote none of it (first lookup {:.0} ms) | {:.2} | {:.2} | {:.0} |",
        pct(&mut cold, 0.5),
        pct(&mut theirs.clone(), 0.5),
        pct(&mut theirs, 0.99),
        q50(&mut q_reader)
    );
    println!("{duck}");
}

/// A percentile of `v` for a progress line (the table uses [`pct`]).
fn pct_of(v: &[Duration], p: f64) -> Duration {
    Duration::from_secs_f64(pct(&mut v.to_vec(), p) / 1000.0)
}

/// A python with duckdb and s3fs: this one, or a venv made on first use.
fn python() -> String {
    let ok = |py: &str| {
        Command::new(py)
            .args(["-c", "import duckdb, s3fs"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok("python3") {
        return "python3".into();
    }
    let venv = format!(
        "{}/.cache/overtime-bench-venv",
        std::env::var("HOME").expect("HOME")
    );
    let py = format!("{venv}/bin/python");
    if !Path::new(&py).exists() {
        eprintln!("bucket bench: making a venv with PyPI duckdb and s3fs in {venv}");
        let s = Command::new("python3").args(["-m", "venv", &venv]).status();
        assert!(s.is_ok_and(|s| s.success()), "python3 -m venv {venv}");
    }
    if !ok(&py) {
        let s = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "duckdb", "s3fs"])
            .status();
        assert!(s.is_ok_and(|s| s.success()), "pip install duckdb s3fs");
    }
    py
}
