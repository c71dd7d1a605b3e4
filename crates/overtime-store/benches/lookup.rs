//! GET-trace lookup benchmark: `Store::trace` p50/p99 with 10 M spans,
//! mostly in Parquet, beside DuckDB reading the same Parquet files for the
//! same trace ids (`benches/duckdb_lookup.py`, PyPI `duckdb`).
//!
//! ```text
//! cargo bench -p overtime-store --bench lookup            # 10 M spans
//! OVERTIME_BENCH_SPANS=1000000 cargo bench -p overtime-store --bench lookup
//! ```
//! Prints one Markdown table (docs/store.md keeps the last run's).

mod common;

use common::*;
use overtime_model::{RecordSink, Table};
use overtime_store::{Store, StoreConfig};
use std::process::Command;
use std::time::Instant;

const LOOKUPS: usize = 1_000;

fn main() {
    let total: u64 = std::env::var("OVERTIME_BENCH_SPANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let in_memtable = total / 10;
    let chunk = (total / 10).max(BATCH) / BATCH * BATCH;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(StoreConfig {
        data_dir: dir.path().into(),
        memtable_bytes: 2 << 30,
        flush_interval_ms: 0,
        fsync: false,
        ..Default::default()
    })
    .expect("open");
    let load = Instant::now();
    let mut written = 0;
    while written < total {
        let n = BATCH.min(total - written);
        store
            .write(Table::Spans, batch(written, n), None)
            .expect("write");
        written += n;
        if written % chunk == 0 && written <= total - in_memtable {
            store.flush().expect("flush");
        }
    }
    let load = load.elapsed();
    let st = store.stats();
    // Ids from the Parquet part, so the DuckDB peer can find them too.
    let traces = st.tables["spans"].parquet_rows.max(SPANS_PER_TRACE) / SPANS_PER_TRACE;
    let ids = lookup_ids(LOOKUPS, traces);

    let mut ours = Vec::with_capacity(LOOKUPS);
    for id in &ids {
        let t = Instant::now();
        let (_, spans) = store.trace(id).expect("trace");
        ours.push(t.elapsed());
        let n: usize = spans.iter().map(|b| b.num_rows()).sum();
        assert_eq!(n as u64, SPANS_PER_TRACE, "trace {id}");
    }

    let ids_file = dir.path().join("ids.txt");
    std::fs::write(&ids_file, ids.join("\n")).expect("ids");
    let glob = dir.path().join("parquet/spans/*.parquet");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/duckdb_lookup.py");
    let duck = Command::new("python3")
        .arg(script)
        .arg(&glob)
        .arg(&ids_file)
        .output();
    let duck_line = match duck {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Ok(o) => format!(
            "| DuckDB | failed: {} |",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ),
        Err(e) => format!("| DuckDB | not run: {e} |"),
    };

    println!();
    println!(
        "{} spans ({} in Parquet, {} files, {:.0} MiB; {} in the memtable), loaded in {:.1} s; {} lookups of random traces ({} spans each)",
        total,
        st.tables["spans"].parquet_rows,
        st.parquet_files,
        st.parquet_bytes as f64 / (1 << 20) as f64,
        st.tables["spans"].memtable_rows,
        load.as_secs_f64(),
        LOOKUPS,
        SPANS_PER_TRACE
    );
    println!();
    println!("| engine | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    let (p50, p99) = (pct(&mut ours.clone(), 0.5), pct(&mut ours, 0.99));
    println!(
        "| overtime Store::trace (bloom + row filter, memtable included) | {p50:.2} | {p99:.2} |"
    );
    println!("{duck_line}");
}
