//! nginx access logs → Arrow `gateway_requests`, on one core, in the
//! `overtime` format and in ingress-nginx's `upstreaminfo` format (unquoted
//! `$upstream_*` lists), each against DuckDB reading the same file
//! (scripts/bench/duckdb_nginx_peer.py).
//!
//! ```text
//! cargo bench -p overtime-parse --bench nginx_to_arrow
//! ```
//! Generates ~200k realistic lines (mostly 200s, some 504/502/499/429,
//! retries across upstream servers and groups, traceparents, model-server
//! headers) into a temp file, measures read + parse + Arrow batches of 8192
//! rows with criterion (Throughput::Elements = lines), then times the same
//! work as medians of several runs for overtime and DuckDB and prints the
//! table `engine | lines/s (median) | ratio`.
//!
//! Without `--bench` (as `cargo test --benches` runs it) it only checks a
//! small file parses completely. `OVERTIME_BENCH_LINES` changes the size;
//! `OVERTIME_PYTHON` the Python that runs the peer; `OVERTIME_BENCH_NO_PEER`
//! skips the peer.

use criterion::{Criterion, Throughput};
use overtime_parse::fuzz::Rng;
use overtime_parse::nginx::{GatewayParser, LogFormat};
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn secs(rng: &mut Rng, max_ms: usize) -> String {
    let ms = rng.below(max_ms + 1);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// One realistic `overtime` line.
fn line(rng: &mut Rng, i: u64, out: &mut String) {
    use std::fmt::Write as _;
    let roll = rng.below(100);
    let status = match roll {
        0..=84 => 200,
        85..=92 => 504,
        93..=95 => 502,
        96..=97 => 499,
        _ => 429,
    };
    let tries = match rng.below(10) {
        0..=7 => 1,
        8 => 2,
        _ => 3,
    };
    let (mut uct, mut uht, mut urt, mut us, mut ua) = (
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    );
    for t in 0..tries {
        let sep = match t {
            0 => "",
            _ if rng.below(5) == 0 => " : ",
            _ => ", ",
        };
        let last = t + 1 == tries;
        let timed_out = status == 504 && last;
        let failed = !last;
        let _ = write!(
            uct,
            "{sep}{}",
            if failed && rng.below(2) == 0 {
                "-".into()
            } else {
                secs(rng, 3)
            }
        );
        let _ = write!(
            uht,
            "{sep}{}",
            if timed_out || failed {
                "-".into()
            } else {
                secs(rng, 9000)
            }
        );
        let _ = write!(
            urt,
            "{sep}{}",
            if timed_out {
                "60.001".into()
            } else {
                secs(rng, 30_000)
            }
        );
        let _ = write!(us, "{sep}{}", if failed { 502 } else { status });
        let _ = write!(ua, "{sep}10.1.{}.{}:8000", rng.below(4), rng.below(250));
    }
    let trace = format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64() | 1);
    let uri = match rng.below(100) {
        0 => "/v1/chat/completions?q=\\x22quoted\\x22",
        1..=60 => "/v1/chat/completions",
        61..=90 => "/v1/agents/run?session=8c1f",
        _ => "/v1/embeddings",
    };
    let (llm, llmd) = if status == 200 {
        let (p, d) = (rng.below(4000), rng.below(30_000));
        (
            format!("kv_cache_build={p}ms,decode_loop={d}ms,io_wait=12ms"),
            format!("{:.1}s", (p + d + 12) as f64 / 1000.0),
        )
    } else {
        ("-".to_string(), "-".to_string())
    };
    let rt = if status == 504 {
        "60.002".to_string()
    } else {
        secs(rng, 40_000)
    };
    let _ = writeln!(
        out,
        "10.0.{}.{} [2026-11-29T10:{:02}:{:02}+00:00] \"POST {uri} HTTP/1.1\" {status} {} rt={rt} \
         uct=\"{uct}\" uht=\"{uht}\" urt=\"{urt}\" us=\"{us}\" ua=\"{ua}\" rid={:032x} \
         tp=\"00-{trace}-{:016x}-01\" mw=\"{}\" llm=\"{llm}\" llmd=\"{llmd}\"",
        rng.below(256),
        rng.below(256),
        (i / 60_000) % 60,
        (i / 1000) % 60,
        rng.below(100_000),
        rng.next_u64() as u128 * 7919,
        rng.next_u64(),
        ["120s", "90", "1500ms", "-"][rng.below(4)],
    );
}

/// One realistic ingress-nginx `upstreaminfo` line: the same mix of
/// statuses and retries, the lists unquoted with shared separators.
fn ingress_line(rng: &mut Rng, i: u64, out: &mut String) {
    use std::fmt::Write as _;
    let status = match rng.below(100) {
        0..=84 => 200,
        85..=92 => 504,
        93..=95 => 502,
        96..=97 => 499,
        _ => 429,
    };
    let tries = match rng.below(10) {
        0..=7 => 1,
        8 => 2,
        _ => 3,
    };
    let (mut ua, mut ul, mut urt, mut us) =
        (String::new(), String::new(), String::new(), String::new());
    for t in 0..tries {
        let sep = match t {
            0 => "",
            _ if rng.below(5) == 0 => " : ",
            _ => ", ",
        };
        let last = t + 1 == tries;
        let _ = write!(ua, "{sep}10.244.{}.{}:8000", rng.below(4), rng.below(250));
        let _ = write!(ul, "{sep}{}", if last { rng.below(90_000) } else { 0 });
        let _ = write!(
            urt,
            "{sep}{}",
            if status == 504 && last {
                "60.001".into()
            } else {
                secs(rng, 30_000)
            }
        );
        let _ = write!(us, "{sep}{}", if last { status } else { 502 });
    }
    let agent = [
        "python-httpx/0.27.0",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
        "OpenAI/Python 1.30.1",
        "curl/8.5.0",
    ][rng.below(4)];
    let uri = match rng.below(100) {
        0 => "/v1/chat/completions?q=\\x22quoted\\x22",
        1..=60 => "/v1/chat/completions",
        61..=90 => "/v1/agents/run?session=8c1f",
        _ => "/v1/embeddings",
    };
    let rt = if status == 504 {
        "60.002".to_string()
    } else {
        secs(rng, 40_000)
    };
    let _ = writeln!(
        out,
        "10.0.{}.{} - - [29/Nov/2026:10:{:02}:{:02} +0000] \"POST {uri} HTTP/1.1\" {status} {} \"-\" \"{agent}\" {} {rt} [agents-llm-gateway-8000] [] {ua} {ul} {urt} {us} {:032x}",
        rng.below(256),
        rng.below(256),
        (i / 60_000) % 60,
        (i / 1000) % 60,
        rng.below(100_000),
        200 + rng.below(3000),
        rng.next_u64() as u128 * 7919,
    );
}

fn generate(path: &Path, lines: u64, each: LineGen) {
    // The same file on every run.
    let mut rng = Rng::new(0x0e77_1e5e_ed00_u64.wrapping_add(lines));
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut buf = String::new();
    for i in 0..lines {
        buf.clear();
        each(&mut rng, i, &mut buf);
        f.write_all(buf.as_bytes()).unwrap();
    }
    f.flush().unwrap();
}

/// Rows per Arrow batch: DataFusion's default batch size. Batches this
/// small also let the allocator recycle the builders' memory instead of
/// faulting in fresh pages for every batch (64k-row batches measured
/// markedly slower).
const BATCH_ROWS: usize = 8192;

/// Streams the file through a reused 1 MiB buffer (as a collector tailing a
/// log does), parses whole lines, and cuts Arrow batches of [`BATCH_ROWS`];
/// returns (rows, rejected).
fn parse_file(path: &Path, format: &LogFormat) -> (usize, usize) {
    use std::io::Read;
    const CHUNK: usize = 1 << 20;
    let mut file = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    let mut p = GatewayParser::new(format.clone(), "edge", 0);
    let (mut rows, mut rejected) = (0, 0);
    let mut line_no = 1;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // a line longer than the buffer
        }
        let n = file.read(&mut buf[filled..]).unwrap();
        filled += n;
        let eof = n == 0;
        // Parse up to the last complete line; keep the tail for the next read.
        let end = match eof {
            true => filled,
            false => buf[..filled]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |k| k + 1),
        };
        line_no += p.push_bytes(&buf[..end], line_no);
        buf.copy_within(end..filled, 0);
        filled -= end;
        if p.rows() >= BATCH_ROWS || eof {
            let (g, r) = p.finish();
            rows += g.num_rows();
            rejected += r.num_rows();
            black_box((g, r));
        }
        if eof {
            return (rows, rejected);
        }
    }
}

fn median_lines_per_s(path: &Path, format: &LogFormat, lines: u64, runs: usize) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(parse_file(path, format));
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    lines as f64 / times[runs / 2]
}

fn run_peer(path: &Path, format: &str) -> serde_json::Value {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench/duckdb_nginx_peer.py");
    let python = std::env::var("OVERTIME_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(&script)
        .arg(path)
        .args(["--format", format])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the DuckDB peer with {python}: {e} (install Python 3 and `pip install duckdb`)"));
    assert!(
        out.status.success(),
        "DuckDB peer failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("peer prints JSON")
}

/// Writes line `i` of a generated log into the buffer.
type LineGen = fn(&mut Rng, u64, &mut String);

/// The formats measured: name, line generator.
const FORMATS: [(&str, LineGen); 2] = [("overtime", line), ("ingress-nginx", ingress_line)];

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let lines: u64 = std::env::var("OVERTIME_BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 200_000 } else { 2_000 });
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, each) in FORMATS {
        let path = dir.path().join(format!("{name}-access.log"));
        generate(&path, lines, each);
        let format = LogFormat::builtin(name).unwrap();
        let (rows, rejected) = parse_file(&path, &format);
        assert_eq!(
            (rows, rejected),
            (lines as usize, 0),
            "every generated {name} line parses"
        );
        files.push((name, path, format));
    }
    if !full {
        println!(
            "nginx_to_arrow: {lines} lines of each format parse (run with `cargo bench` to measure)"
        );
        return;
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("nginx_to_arrow");
        g.throughput(Throughput::Elements(lines));
        for (name, path, format) in &files {
            g.bench_function(format!("{name}_format_file"), |b| {
                b.iter(|| black_box(parse_file(path, format)))
            });
        }
        g.finish();
    }
    c.final_summary();

    for (name, path, format) in &files {
        let bytes = std::fs::metadata(path).unwrap().len();
        println!(
            "\n{name}: {lines} lines, {:.1} MB, {:.0} bytes/line",
            bytes as f64 / 1e6,
            bytes as f64 / lines as f64
        );
        let ours = median_lines_per_s(path, format, lines, 7);
        let peer = match std::env::var_os("OVERTIME_BENCH_NO_PEER") {
            Some(_) => serde_json::json!({"results": []}),
            None => run_peer(path, name),
        };
        println!("| engine | lines/s (median) | ratio |");
        println!("|---|---:|---:|");
        println!("| overtime GatewayParser (1 thread) | {ours:.0} | 1.00 |");
        for r in peer["results"].as_array().into_iter().flatten() {
            let lps = r["lines_per_s"].as_f64().unwrap_or(f64::NAN);
            println!(
                "| {} ({} thread{}) | {lps:.0} | {:.2} |",
                r["engine"].as_str().unwrap_or("duckdb"),
                r["threads"],
                if r["threads"] == 1 { "" } else { "s" },
                lps / ours,
            );
        }
    }
    println!(
        "\nratio = engine lines/s ÷ overtime lines/s; medians of 7 (overtime) and 5 (DuckDB) runs of read + parse + typed columns."
    );
}
