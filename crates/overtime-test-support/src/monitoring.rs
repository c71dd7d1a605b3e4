//! The monitoring stack, for real: Debian's `prometheus` and
//! `prometheus-alertmanager` binaries, each on a port it is given (again on
//! a fresh one if that was taken first: [`crate::ports`]), with the repository's
//! shipped rules (`deploy/prometheus/overtime.rules.yml`) and Alertmanager
//! config (`deploy/alertmanager/alertmanager.yml`); stopped on drop.
//!
//! ```no_run
//! use overtime_test_support::monitoring::{Alertmanager, FAST, prometheus};
//! let dir = tempfile::tempdir().unwrap();
//! let am = Alertmanager::start();
//! let prom = prometheus(dir.path(), &[9464], Some(am.port()), FAST);
//! assert!(am.named("Overtime504Incident").is_empty());
//! # drop(prom);
//! ```

use crate::net::{get, http};
use crate::ports::{Started, on_fresh_ports, spawn_listening};
use crate::program::{Proc, find_program};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root (the shipped configs live under `deploy/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Prometheus or an Alertmanager process, ready (`/-/ready` answered
/// 200); killed and reaped on drop.
pub struct Daemon {
    child: Proc,
    port: u16,
    log: PathBuf,
}

impl Daemon {
    /// Starts `bin` with the `args` made for a candidate port (stderr to
    /// `log`), again on a fresh port if that one was taken before it
    /// bound it ([`crate::ports::on_fresh_ports`]); then waits up to 60 s
    /// for `/-/ready`. Panics with the log if it exits.
    pub fn start(bin: PathBuf, args: impl Fn(u16) -> Vec<String>, log: PathBuf) -> Daemon {
        let what = bin.display().to_string();
        let mut d = on_fresh_ports(&what, 1, |ports| {
            let mut cmd = Command::new(&bin);
            cmd.args(args(ports[0]))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap());
            match spawn_listening(&what, cmd, ports, std::slice::from_ref(&log), 60) {
                Started::Up(child) => Started::Up(Daemon {
                    child,
                    port: ports[0],
                    log: log.clone(),
                }),
                Started::PortTaken(why) => Started::PortTaken(why),
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(get(d.port, "/-/ready"), Some((200, _))) {
            assert!(d.child.alive(), "{what} exited: {}", d.log_text());
            assert!(
                Instant::now() < deadline,
                "{what} not ready after 60 s: {}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A real Alertmanager with the shipped config, no HA cluster.
pub struct Alertmanager {
    daemon: Daemon,
    _dir: tempfile::TempDir,
    /// `http://127.0.0.1:<port>`, what `[alerts] alertmanager_urls` takes.
    pub url: String,
}

impl Alertmanager {
    /// Starts Alertmanager with its storage and log in a temporary
    /// directory, removed when it stops.
    pub fn start() -> Alertmanager {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let storage = dir.join("am-data");
        std::fs::create_dir_all(&storage).unwrap();
        let config = repo().join("deploy/alertmanager/alertmanager.yml");
        let daemon = Daemon::start(
            find_program(
                &["prometheus-alertmanager", "alertmanager"],
                "prometheus-alertmanager",
            ),
            |port| {
                vec![
                    format!("--config.file={}", config.display()),
                    format!("--storage.path={}", storage.display()),
                    format!("--web.listen-address=127.0.0.1:{port}"),
                    // no HA cluster: nothing listens on 9094, nothing gossips
                    "--cluster.listen-address=".into(),
                ]
            },
            dir.join("alertmanager.log"),
        );
        Alertmanager {
            url: format!("http://127.0.0.1:{}", daemon.port),
            daemon,
            _dir: tmp,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.daemon.port
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.daemon.log_text()
    }

    /// `GET /api/v2/alerts`: the alerts it holds (resolved ones are not
    /// listed).
    pub fn alerts(&self) -> Vec<Value> {
        let (code, body) = get(self.port(), "/api/v2/alerts").expect("alertmanager answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Vec<Value>>(&body).unwrap()
    }

    /// The listed alerts named `alertname`.
    pub fn named(&self, alertname: &str) -> Vec<Value> {
        self.alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == alertname)
            .collect()
    }

    /// Polls until `pred` holds on the listed alerts, or panics after
    /// `within` with what it lists.
    pub fn wait_for(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let alerts = self.alerts();
            if pred(&alerts) {
                return alerts;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not seen within {within:?}; alertmanager lists {alerts:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// How often Prometheus scrapes and evaluates.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// `global.scrape_interval`.
    pub scrape: &'static str,
    /// `global.evaluation_interval`.
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
        |port| {
            vec![
                format!("--config.file={}", cfg.display()),
                format!("--storage.tsdb.path={}", tsdb.display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ]
        },
        dir.join("prometheus.log"),
    )
}

/// A Prometheus HTTP API call (a form POST); its `data` field.
pub fn prom_api(port: u16, path: &str, form: &[(&str, String)]) -> Value {
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
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
