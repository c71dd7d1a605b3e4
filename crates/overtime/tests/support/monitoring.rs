//! The monitoring stack the tests and the detection bench start for real:
//! the Debian `prometheus` and `prometheus-alertmanager` binaries, with the
//! shipped rules and Alertmanager config; killed on drop.

use overtime_test_support::net::{free_port, get, http};
use overtime_test_support::program::find_program;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Prometheus or an Alertmanager; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    pub fn start(bin: PathBuf, args: Vec<String>, port: u16, log: PathBuf) -> Daemon {
        let child = Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut d = Daemon { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(get(port, "/-/ready"), Some((200, _))) {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("{} exited with {st}: {}", bin.display(), d.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready: {}",
                bin.display(),
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

pub fn alertmanager(dir: &Path) -> Daemon {
    let port = free_port();
    let storage = dir.join("am-data");
    std::fs::create_dir_all(&storage).unwrap();
    Daemon::start(
        find_program(
            &["prometheus-alertmanager", "alertmanager"],
            "prometheus-alertmanager",
        ),
        vec![
            format!(
                "--config.file={}",
                repo()
                    .join("deploy/alertmanager/alertmanager.yml")
                    .display()
            ),
            format!("--storage.path={}", storage.display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--cluster.listen-address=".into(),
        ],
        port,
        dir.join("alertmanager.log"),
    )
}

/// How often Prometheus scrapes and evaluates.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    pub scrape: &'static str,
    pub evaluation: &'static str,
}

/// For tests: every second.
pub const FAST: Intervals = Intervals {
    scrape: "1s",
    evaluation: "1s",
};

/// The shipped `deploy/prometheus/prometheus.yml`'s `global` section.
pub fn shipped_intervals() -> Intervals {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/prometheus.yml")).unwrap();
    let find = |key: &str| -> &'static str {
        let v = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in deploy/prometheus/prometheus.yml"))
            .trim()
            .to_string();
        Box::leak(v.into_boxed_str())
    };
    Intervals {
        scrape: find("scrape_interval:"),
        evaluation: find("evaluation_interval:"),
    }
}

/// Prometheus scraping `targets` with the shipped rules, its alerts sent
/// to `alertmanager` with the label `via="prometheus"` (so they can be
/// told from the collector's own).
pub fn prometheus(
    dir: &Path,
    targets: &[u16],
    alertmanager: Option<u16>,
    every: Intervals,
) -> Daemon {
    let port = free_port();
    let targets: Vec<String> = targets
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let alerting = alertmanager.map_or(String::new(), |p| {
        format!("alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{p}\"]\n")
    });
    let config = format!(
        "global:\n  scrape_interval: {scrape}\n  evaluation_interval: {eval}\n  external_labels:\n    via: prometheus\nrule_files:\n  - {rules:?}\n{alerting}\
         scrape_configs:\n  - job_name: overtime\n    static_configs:\n      - targets: [{t}]\n",
        rules = repo()
            .join("deploy/prometheus/overtime.rules.yml")
            .display()
            .to_string(),
        t = targets.join(", "),
        scrape = every.scrape,
        eval = every.evaluation,
    );
    let cfg = dir.join("prometheus.yml");
    std::fs::write(&cfg, config).unwrap();
    let tsdb = dir.join("tsdb");
    Daemon::start(
        find_program(&["prometheus"], "prometheus"),
        vec![
            format!("--config.file={}", cfg.display()),
            format!("--storage.tsdb.path={}", tsdb.display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ],
        port,
        dir.join("prometheus.log"),
    )
}

pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A Prometheus HTTP API call (form POST); the `data` field.
pub fn prom_api(port: u16, path: &str, form: &[(&str, String)]) -> Value {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect();
    let form = body.join("&");
    let (status, text) = http(
        port,
        "POST",
        path,
        "application/x-www-form-urlencoded",
        form.as_bytes(),
    )
    .unwrap_or_else(|| panic!("prometheus {path}: no answer"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
    assert_eq!(status, 200, "{path} {form:?}: {text}");
    v["data"].clone()
}

/// Alertmanager's alerts named `alertname`.
pub fn am_alerts(port: u16, alertname: &str) -> Vec<Value> {
    let (status, body) = get(port, "/api/v2/alerts").expect("alertmanager answers");
    assert_eq!(status, 200, "{body}");
    let all: Vec<Value> = serde_json::from_str(&body).unwrap();
    all.into_iter()
        .filter(|a| a["labels"]["alertname"] == alertname)
        .collect()
}
