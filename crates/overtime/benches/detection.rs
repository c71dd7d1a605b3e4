//! Detection latency: from the first 504 line written to the tailed access
//! log until the alert is in Alertmanager's API, with the embedded default
//! configuration (only ports, paths and the Alertmanager URL set).
//!
//! Each run starts everything fresh and for real: `overtime simulate`
//! (the simulated agent platform behind real nginx when installed, spans
//! over OTLP) playing healthy traffic then an incident, `overtime serve`
//! tailing its gateway log, a real Alertmanager, and — the peer, in the same
//! run on the same data — a real Prometheus scraping the collector with the
//! shipped rules and the shipped scrape/evaluation intervals.
//!
//! Rows: the collector's own page (`Overtime504Incident`), the collector's
//! first SLO alert, and the first alert Prometheus' shipped rules send.
//!
//! ```sh
//! cargo bench -p overtime --bench detection --profile dev
//! OVERTIME_BENCH_RUNS=3 OVERTIME_BENCH_INCIDENT=tool_no_timeout cargo bench -p overtime --bench detection --profile dev
//! ```
//! Needs nginx (optional), `prometheus` and `prometheus-alertmanager`.

#[path = "../tests/support/mod.rs"]
mod support;

use overtime_test_support::monitoring::{Alertmanager, prometheus, shipped_intervals};
use overtime_test_support::net::{get, wait_for};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{BIN, Serve};

/// The simulator's time scale: the 60 s gateway timeout takes 6 s.
const TIME_SCALE: f64 = 10.0;
/// Healthy traffic before the incident (real time).
const HEALTHY_S: u64 = 60;
/// Longest wait for an alert after the first 504.
const PATIENCE: Duration = Duration::from_secs(300);

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When each alert was first listed, seconds after the first 504 line.
#[derive(Debug, Default, Clone)]
struct Run {
    page: Option<f64>,
    collector_slo: Option<f64>,
    prometheus: Option<f64>,
    prometheus_alert: String,
}

/// The first line with status 504 in the `overtime` format
/// (`… "<request>" <status> …`).
fn is_504(line: &str) -> bool {
    line.split_once("\" ")
        .is_some_and(|(_, rest)| rest.starts_with("504 "))
}

fn one_run(n: usize, incident: &str) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let am = Alertmanager::start();
    let log = dir.join("access.log");
    std::fs::write(&log, "").unwrap();
    let cfg = dir.join("overtime.toml");
    // The embedded default with the deployment's own settings only: no
    // [diagnose] or [alerts] timing is changed.
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n\
             [alerts]\nalertmanager_urls = [\"http://127.0.0.1:{am}\"]\n\
             [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"edge\"\n\
             read_timeout_ms = {rt}\n",
            data = dir.join("data").display().to_string(),
            log = log.display().to_string(),
            am = am.port(),
            rt = (60_000.0 / TIME_SCALE) as u64,
        ),
    )
    .unwrap();
    let serve = Serve::start(&cfg);
    let (port, otlp) = (serve.port, serve.otlp());
    let prom = prometheus(dir, &[port], Some(am.port()), shipped_intervals());
    let sim = Killed(
        Command::new(BIN)
            .args([
                "simulate",
                "--scenario",
                "mix",
                "--incident",
                incident,
                "--incident-after",
                &format!("{HEALTHY_S}s"),
                "--duration",
                &format!("{}s", HEALTHY_S + PATIENCE.as_secs()),
                "--time-scale",
                &TIME_SCALE.to_string(),
                "--seed",
                &n.to_string(),
                "--quiet",
                "--otlp-endpoint",
                &format!("http://127.0.0.1:{otlp}"),
                "--access-log",
            ])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("simulate.log")).unwrap())
            .spawn()
            .expect("overtime simulate starts"),
    );

    // The first 504 line: the log is polled every 5 ms.
    let mut reader = BufReader::new(std::fs::File::open(&log).unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(HEALTHY_S + 120);
    let t0 = loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() > 0 && line.ends_with('\n') {
            if is_504(&line) {
                break Instant::now();
            }
            continue;
        }
        if !line.is_empty() {
            // A partial line: read the rest next time round.
            reader.seek_relative(-(line.len() as i64)).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no 504 in the gateway log {} s into the run: {}",
            HEALTHY_S + 120,
            std::fs::read_to_string(dir.join("simulate.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    };

    let mut run = Run::default();
    let until = t0 + PATIENCE;
    while Instant::now() < until
        && (run.page.is_none() || run.collector_slo.is_none() || run.prometheus.is_none())
    {
        let at = t0.elapsed().as_secs_f64();
        let Some((200, body)) = get(am.port(), "/api/v2/alerts") else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let alerts: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        for a in &alerts {
            let name = a["labels"]["alertname"].as_str().unwrap_or_default();
            let via_prometheus = a["labels"]["via"] == "prometheus";
            if via_prometheus {
                if run.prometheus.is_none() {
                    run.prometheus = Some(at);
                    run.prometheus_alert = name.to_string();
                }
            } else if name == "Overtime504Incident" {
                run.page.get_or_insert(at);
            } else {
                run.collector_slo.get_or_insert(at);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(sim);
    drop(prom);
    drop(serve);
    run
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

fn cell(v: Option<f64>) -> String {
    v.map_or("—".into(), |s| format!("{s:.1} s"))
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runs: usize = env_or("OVERTIME_BENCH_RUNS", 5);
    let incident: String = env_or("OVERTIME_BENCH_INCIDENT", "llm_prefill_slow".to_string());
    let every = shipped_intervals();
    println!(
        "detection latency: first 504 line written → alert listed by Alertmanager\n\
         incident {incident}, simulator --time-scale {TIME_SCALE}, {runs} runs, machine: {}\n\
         collector: embedded default config; Prometheus: shipped rules, scrape {} / eval {}\n",
        machine(),
        every.scrape,
        every.evaluation
    );
    wait_for(5, "the overtime binary", || Path::new(BIN).is_file());
    let mut all = Vec::new();
    println!(
        "{:>4} {:>16} {:>18} {:>24}",
        "run", "collector page", "collector SLO alert", "Prometheus rules (peer)"
    );
    for n in 1..=runs {
        let r = one_run(n, &incident);
        println!(
            "{n:>4} {:>16} {:>18} {:>24}",
            cell(r.page),
            cell(r.collector_slo),
            format!("{} {}", cell(r.prometheus), r.prometheus_alert)
        );
        all.push(r);
    }
    let col = |f: fn(&Run) -> Option<f64>| {
        let v: Vec<f64> = all.iter().filter_map(f).collect();
        (median(v.clone()), v.len())
    };
    let (page, np) = col(|r| r.page);
    let (slo, ns) = col(|r| r.collector_slo);
    let (prom, nq) = col(|r| r.prometheus);
    println!(
        "\nmedian {:>9} ({np}/{runs}) {:>11} ({ns}/{runs}) {:>17} ({nq}/{runs})",
        cell(page),
        cell(slo),
        cell(prom)
    );
    if let (Some(p), Some(q)) = (page, prom) {
        println!(
            "the collector's page comes {:.1}× sooner than the Prometheus rules' first alert",
            q / p
        );
    }
    println!(
        "seeds' mean time to detect: 2.3 min (138 s) after the semantic-success alert; 12 min before it"
    );
}
