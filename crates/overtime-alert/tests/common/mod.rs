//! Test helpers: a real Alertmanager (Debian `prometheus-alertmanager`)
//! started on a free port with deploy/alertmanager/alertmanager.yml and a
//! temporary storage path, stopped when the guard drops.
#![allow(dead_code)]

use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Finds a program on PATH or in the usual Debian places.
pub fn find_program(names: &[&str], package: &str) -> PathBuf {
    for name in names {
        for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
        if let Ok(path) = std::env::var("PATH") {
            for dir in path.split(':') {
                let p = Path::new(dir).join(name);
                if p.is_file() {
                    return p;
                }
            }
        }
    }
    panic!(
        "{} not found: install it with `apt-get install -y --no-install-recommends {package}` \
         (scripts/test does this)",
        names.join(" / ")
    );
}

/// A running Alertmanager; killed on drop.
pub struct Alertmanager {
    child: Child,
    pub url: String,
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
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = am.child.try_wait() {
                panic!("alertmanager exited with {status}: {}", am.log());
            }
            if http_get(&format!("{}/-/ready", am.url)).is_ok_and(|(code, _)| code == 200) {
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
        let (code, body) = http_get(&format!("{}/api/v2/alerts", self.url)).unwrap();
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

/// A blocking HTTP/1.0 GET on loopback: status code and body.
pub fn http_get(url: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((code, body))
}
