//! Test helpers: a real Alertmanager (Debian `prometheus-alertmanager`)
//! started on a free port with deploy/alertmanager/alertmanager.yml and a
//! temporary storage path, stopped when the guard drops.
#![allow(dead_code)]

use overtime_test_support::net::{free_port, get};
use overtime_test_support::program::find_program;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running Alertmanager; killed on drop.
pub struct Alertmanager {
    child: Child,
    pub url: String,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Alertmanager {
    /// Starts Alertmanager with the shipped config and waits for /-/ready.
    pub fn start() -> Alertmanager {
        let bin = find_program(
            &["prometheus-alertmanager", "alertmanager"],
            "prometheus-alertmanager",
        );
        let dir = tempfile::tempdir().unwrap();
        let config = repo_root().join("deploy/alertmanager/alertmanager.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("alertmanager.log")).unwrap();
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.path().display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // no HA cluster: nothing listens on 9094, nothing gossips
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut am = Alertmanager {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = am.child.try_wait() {
                panic!("alertmanager exited with {status}: {}", am.log());
            }
            if matches!(get(port, "/-/ready"), Some((200, _))) {
                return am;
            }
            assert!(
                Instant::now() < deadline,
                "alertmanager not ready after 30 s: {}",
                am.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("alertmanager.log")).unwrap_or_default()
    }

    /// `GET /api/v2/alerts`: the alerts Alertmanager holds (resolved ones
    /// are not listed).
    pub fn alerts(&self) -> Vec<Value> {
        let (code, body) = get(self.port, "/api/v2/alerts").expect("alertmanager answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The listed alerts named `alertname`.
    pub fn named(&self, alertname: &str) -> Vec<Value> {
        self.alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == alertname)
            .collect()
    }

    /// Polls until `pred` holds on the listed alerts, or panics after `within`.
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
