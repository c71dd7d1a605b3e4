//! GET-trace lookup benchmark: `Store::trace` p50/p99 with 10 M spans,
//! mostly in Parquet, beside DuckDB reading the same Parquet files for the
//! same trace ids (`benches/duckdb_lookup.py`, PyPI `duckdb`).
//!
//! ```text
//! cargo bench -p overtime-store --bench lookup            # 10 M spans
//! OVERTIME_BENCH_SPANS=1000000 cargo bench -p overtime-store --bench lookup
//! ```
//! Prints one Markdown table (docs/store.md keeps the last run's).

use overtime_model::{RecordSink, SpanColumns, SpanRecord, SpanStatus, Stage, Table};
use overtime_store::{Store, StoreConfig};
use std::process::Command;
use std::time::{Duration, Instant};

const T0: i64 = 1_764_446_400_000_000;
const SPANS_PER_TRACE: u64 = 8;
const BATCH: u64 = 100_000;
const LOOKUPS: usize = 1_000;

fn tid(i: u64) -> String {
    format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// Spans `first..first+n`: trace `i / 8`, one trace starting every 17 ms,
/// so 10 M spans cover about 6 hours (6 hourly buckets).
fn batch(first: u64, n: u64) -> arrow::record_batch::RecordBatch {
    let mut c = SpanColumns::new();
    for i in first..first + n {
        let trace = i / SPANS_PER_TRACE;
        let start = T0 + trace as i64 * 17_000 + (i % SPANS_PER_TRACE) as i64 * 1_000;
        let mut s = SpanRecord::new(
            &tid(trace),
            &format!("{i:016x}"),
            "agent",
            "call",
            start,
            start + 250_000,
        );
        s.stage = if i.is_multiple_of(3) {
            Stage::Llm
        } else {
            Stage::Tool
        };
        s.status = SpanStatus::Ok;
        s.model = (i.is_multiple_of(3)).then(|| "deepseek-v4-pro".to_string());
        s.input_tokens = Some((i % 900) as i64);
        s.line = i;
        c.append(&s);
    }
    c.finish()
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

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
    let ids: Vec<String> = (0..LOOKUPS as u64)
        .map(|k| tid((k * 7_919 + 13) % traces))
        .collect();

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
