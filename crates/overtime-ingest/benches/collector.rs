//! The collector's ingest benchmarks, each beside a peer from
//! the same run, printed as one Markdown table:
//!
//! 1. OTLP/HTTP protobuf spans/s into the durable store (WAL fsync'd
//!    before the 200), 8 concurrent exporters, 1,000 spans per request;
//!    peer: DuckDB bulk-loading the same spans from JSON lines into a
//!    database file (`scripts/bench/duckdb_spans_peer.py`) — no network,
//!    no per-request durability, so it favours DuckDB.
//! 2. nginx lines/s through the file source (tail → parse → store);
//!    peer: DuckDB `read_csv` + `regexp_extract` of the same file into a
//!    database file (`scripts/bench/duckdb_nginx_peer.py --db`).
//! 3. RSS while ingesting at full speed, and under a 10× overload (80
//!    exporters against a memtable budget of 32 MiB): peak RSS against the
//!    budget, 429s answered, and acknowledged spans lost (must be 0).
//!
//! ```text
//! cargo bench -p overtime-ingest --bench collector
//! OVERTIME_BENCH_SECONDS=5 OVERTIME_BENCH_LOG_MB=100 cargo bench -p overtime-ingest --bench collector
//! ```

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status};
use overtime_ingest::file_tail::{FileSourceConfig, spawn_file_tail};
use overtime_ingest::otlp::{OtlpConfig, OtlpStats, serve_otlp_http_on};
use overtime_model::RecordSink;
use overtime_parse::nginx::LogFormat;
use overtime_parse::record::RecordFormat;
use overtime_store::{Store, StoreConfig};
use prost::Message;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const SPANS_PER_REQUEST: usize = 1_000;
const REQUESTS: usize = 32;
const MIB: u64 = 1024 * 1024;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Resident set size now, bytes (Linux).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// `REQUESTS` protobuf bodies of `SPANS_PER_REQUEST` agent spans each
/// (LLM and tool calls with the attributes real exporters send), and the
/// same spans as docs/inputs.md#spans JSON lines for the peer.
fn payloads(jsonl: &Path) -> Vec<Vec<u8>> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(jsonl).unwrap());
    let t0: u64 = 1_764_410_400_000_000_000;
    (0..REQUESTS)
        .map(|r| {
            let spans: Vec<Span> = (0..SPANS_PER_REQUEST)
                .map(|i| {
                    // From 1: an all-zero span id is invalid (rejected).
                    let n = (r * SPANS_PER_REQUEST + i) as u64 + 1;
                    let trace = ((n / 8) as u128 * 0x9e37_79b9_7f4a_7c15) | 1;
                    let start = t0 + n * 3_000_000;
                    let end = start + 250_000_000 + (n % 97) * 10_000_000;
                    let llm = n.is_multiple_of(3);
                    let mut attrs = vec![kv("agent.timeout_ms", Value::IntValue(30_000))];
                    if llm {
                        attrs.push(kv("gen_ai.operation.name", Value::StringValue("chat".into())));
                        attrs.push(kv("gen_ai.request.model", Value::StringValue("deepseek-v4-pro".into())));
                        attrs.push(kv("gen_ai.usage.input_tokens", Value::IntValue((n % 900) as i64)));
                    } else {
                        attrs.push(kv("gen_ai.operation.name", Value::StringValue("execute_tool".into())));
                        attrs.push(kv("gen_ai.tool.name", Value::StringValue("weather_api".into())));
                    }
                    let (name, stage) = if llm { ("chat deepseek-v4-pro", "llm") } else { ("execute_tool weather_api", "tool") };
                    let _ = writeln!(
                        out,
                        r#"{{"trace_id":"{trace:032x}","span_id":"{n:016x}","service":"agent-api","name":"{name}","stage":"{stage}","start_time":{},"end_time":{},"timeout_ms":30000,"status":"ok"}}"#,
                        start / 1_000_000,
                        end / 1_000_000
                    );
                    Span {
                        trace_id: trace.to_be_bytes().to_vec(),
                        span_id: n.to_be_bytes().to_vec(),
                        name: name.into(),
                        kind: 3,
                        start_time_unix_nano: start,
                        end_time_unix_nano: end,
                        attributes: attrs,
                        status: Some(Status {
                            code: status::StatusCode::Ok as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                })
                .collect();
            ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![kv("service.name", Value::StringValue("agent-api".into()))],
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec()
        })
        .collect()
}

fn store(dir: &Path, budget: u64) -> Arc<Store> {
    Arc::new(
        Store::open(StoreConfig {
            data_dir: dir.to_path_buf(),
            memtable_bytes: budget,
            flush_interval_ms: 2_000,
            fsync: true,
            // The spans' times are older than the default retention.
            retention_age_hours: None,
            ..Default::default()
        })
        .unwrap(),
    )
}

fn stored_rows(s: &Store, table: &str) -> u64 {
    s.stats()
        .tables
        .get(table)
        .map_or(0, |t| t.memtable_rows + t.parquet_rows)
}

struct OtlpRun {
    spans_per_s: f64,
    peak_rss: u64,
    acked_spans: u64,
    stored_spans: u64,
    throttled: u64,
}

/// `clients` exporters post the bodies round-robin for `secs`; a 429 is
/// retried after its Retry-After, as the OpenTelemetry exporters do.
fn otlp_run(dir: &Path, bodies: &[Vec<u8>], clients: usize, budget: u64, secs: u64) -> OtlpRun {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = store(dir, budget);
    let sink: Arc<dyn RecordSink> = store.clone();
    let stats = Arc::new(OtlpStats::default());
    let stop = CancellationToken::new();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    rt.spawn(serve_otlp_http_on(
        listener,
        sink,
        stats,
        OtlpConfig::default(),
        stop.clone(),
    ));
    let acked = Arc::new(AtomicU64::new(0));
    let throttled = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let bodies: Arc<Vec<bytes::Bytes>> = Arc::new(
        bodies
            .iter()
            .map(|b| bytes::Bytes::from(b.clone()))
            .collect(),
    );
    let peak = Arc::new(AtomicU64::new(rss()));
    let sampler = {
        let (peak, running) = (peak.clone(), running.clone());
        std::thread::spawn(move || {
            while running.load(Relaxed) {
                peak.fetch_max(rss(), Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t = Instant::now();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (client, url, bodies) = (client.clone(), url.clone(), bodies.clone());
            let (acked, throttled, running) = (acked.clone(), throttled.clone(), running.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = c;
                while running.load(Relaxed) {
                    let r = client
                        .post(&url)
                        .header("content-type", "application/x-protobuf")
                        .body(bodies[i % bodies.len()].clone())
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status() == 200 => {
                            acked.fetch_add(SPANS_PER_REQUEST as u64, Relaxed);
                            i += 1;
                        }
                        Ok(r) if r.status() == 429 => {
                            throttled.fetch_add(1, Relaxed);
                            let wait = r
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.parse::<f64>().ok())
                                .unwrap_or(1.0);
                            tokio::time::sleep(Duration::from_secs_f64(wait.min(1.0))).await;
                        }
                        Ok(r) => panic!("OTLP answered {}", r.status()),
                        Err(e) => panic!("OTLP post failed: {e}"),
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        running.store(false, Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
    });
    let elapsed = t.elapsed().as_secs_f64();
    running.store(false, Relaxed);
    sampler.join().unwrap();
    stop.cancel();
    let acked_spans = acked.load(Relaxed);
    let stored_spans = stored_rows(&store, "spans");
    OtlpRun {
        spans_per_s: acked_spans as f64 / elapsed,
        peak_rss: peak.load(Relaxed),
        acked_spans,
        stored_spans,
        throttled: throttled.load(Relaxed),
    }
}

/// Tails `log` from the start into a fresh store; lines/s until every
/// line is stored.
fn file_run(dir: &Path, log: &Path, lines: u64) -> (f64, u64) {
    let store = store(dir, 256 * MIB);
    let sink: Arc<dyn RecordSink> = store.clone();
    let stop = CancellationToken::new();
    let peak = AtomicU64::new(rss());
    let t = Instant::now();
    let kind = RecordFormat::nginx(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    let cfg = FileSourceConfig {
        poll_interval_ms: 5,
        ..FileSourceConfig::new(log, kind)
    };
    let tail = spawn_file_tail(cfg, sink, stop.clone());
    while stored_rows(&store, "gateway_requests") + stored_rows(&store, "rejected") < lines {
        peak.fetch_max(rss(), Relaxed);
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = t.elapsed().as_secs_f64();
    stop.cancel();
    tail.join().unwrap();
    assert_eq!(
        stored_rows(&store, "rejected"),
        0,
        "the generated log has bad lines"
    );
    (lines as f64 / secs, peak.load(Relaxed))
}

fn python(args: &[&str]) -> String {
    let py = std::env::var("OVERTIME_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&py).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {py}: {e} (install Python 3; the peers need `pip install duckdb`)")
    });
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` builds it; only `cargo bench` runs it
    }
    let secs = env_u64("OVERTIME_BENCH_SECONDS", 10);
    let log_mb = env_u64("OVERTIME_BENCH_LOG_MB", 200);
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("spans.jsonl");
    let bodies = payloads(&jsonl);
    let root = root();

    let full = otlp_run(&tmp.path().join("otlp"), &bodies, 8, 256 * MIB, secs);
    let over = otlp_run(&tmp.path().join("over"), &bodies, 80, 32 * MIB, secs);
    let spans_peer: serde_json::Value = serde_json::from_str(&python(&[
        root.join("scripts/bench/duckdb_spans_peer.py")
            .to_str()
            .unwrap(),
        jsonl.to_str().unwrap(),
        tmp.path().join("peer-spans.duckdb").to_str().unwrap(),
    ]))
    .unwrap();

    python(&[
        root.join("scripts/bench/gen_big.py").to_str().unwrap(),
        tmp.path().join("log").to_str().unwrap(),
        &log_mb.to_string(),
        "0",
    ]);
    let log = tmp.path().join("log/access.log");
    let lines = std::fs::read(&log)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;
    let (lines_per_s, file_rss) = file_run(&tmp.path().join("file"), &log, lines);
    let nginx_peer: serde_json::Value = serde_json::from_str(&python(&[
        root.join("scripts/bench/duckdb_nginx_peer.py")
            .to_str()
            .unwrap(),
        log.to_str().unwrap(),
        "--runs",
        "3",
        "--threads",
        "2",
        "--db",
        tmp.path().join("peer-nginx.duckdb").to_str().unwrap(),
    ]))
    .unwrap();
    let nginx_peer_rate = nginx_peer["results"][0]["lines_per_s"].as_f64().unwrap();
    let spans_peer_rate = spans_peer["spans_per_s"].as_f64().unwrap();

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "\nMachine: {} cores, {cpu}; {secs} s per OTLP run, {lines} log lines ({log_mb} MB).\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| benchmark | overtime | peer (same run) | overtime ÷ peer |");
    println!("|---|---|---|---|");
    println!(
        "| OTLP/HTTP protobuf → durable store (fsync), 8 exporters | {:.0} spans/s | {} {:.0} spans/s | {:.2}× |",
        full.spans_per_s,
        spans_peer["engine"].as_str().unwrap_or("DuckDB"),
        spans_peer_rate,
        full.spans_per_s / spans_peer_rate
    );
    println!(
        "| nginx `overtime` lines → file source → store | {:.0} lines/s | {} {:.0} lines/s | {:.2}× |",
        lines_per_s,
        nginx_peer["results"][0]["engine"]
            .as_str()
            .unwrap_or("DuckDB"),
        nginx_peer_rate,
        lines_per_s / nginx_peer_rate
    );
    println!("\n| RSS | peak | memtable budget | 429s | spans acked | spans stored | acked lost |");
    println!("|---|---|---|---|---|---|---|");
    for (name, r, budget) in [
        ("full speed (8 exporters)", &full, 256 * MIB),
        ("10× overload (80 exporters)", &over, 32 * MIB),
    ] {
        println!(
            "| {name} | {} MiB | {} MiB | {} | {} | {} | {} |",
            r.peak_rss / MIB,
            budget / MIB,
            r.throttled,
            r.acked_spans,
            r.stored_spans,
            r.acked_spans.saturating_sub(r.stored_spans)
        );
    }
    println!(
        "| file source at full speed | {} MiB | 256 MiB | – | – | – | – |",
        file_rss / MIB
    );
}
