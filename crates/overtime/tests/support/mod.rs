//! What the binary's integration tests share: a `overtime serve` process
//! that is always stopped, on the ports it bound itself (port 0 in the
//! config, read back from `--ready-file`), an upstream for nginx, the SQL
//! API, memory sampling and the lines and traces the fault tests send.
//! Ports, waits, the HTTP client, nginx and tansu are
//! `overtime_test_support`'s.
#![allow(dead_code)] // each test binary uses its own part

pub mod early_warning;
pub mod kafka;
pub mod storm;

use overtime_test_support::net::{Answer, get, request, wait_for};
use overtime_test_support::ports::{Started, says_address_in_use};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_overtime");

pub fn fixture(incident: &str, file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(incident)
        .join(file)
}

/// `overtime serve --config <file> --ready-file …`, killed (SIGKILL) and
/// reaped on drop. Its config says port 0 wherever it can (the test picks
/// no port for it): the ports it bound are read from its ready file.
pub struct Serve {
    pub child: Child,
    /// The API's port.
    pub port: u16,
    /// The OTLP/HTTP receiver's port (`None`: off).
    pub otlp_http: Option<u16>,
    /// The OTLP/gRPC receiver's port (`None`: off).
    pub otlp_grpc: Option<u16>,
    /// The PostgreSQL wire protocol's port (`None`: off).
    pub postgres: Option<u16>,
    _ready_dir: tempfile::TempDir,
}

impl Serve {
    /// Starts the collector ([`serve_command`]) and waits until it is
    /// ready: its ready file written, `/readyz` answering 200.
    pub fn start(config: &Path) -> Serve {
        Serve::start_command(serve_command(config))
    }

    /// Spawns `cmd` (see [`serve_command`]) with `--ready-file`, and waits
    /// until it is ready; panics if it exits first.
    pub fn start_command(cmd: Command) -> Serve {
        match Serve::spawn(cmd, None) {
            Started::Up(s) => s,
            Started::PortTaken(why) => panic!("overtime serve: {why}"),
        }
    }

    /// [`Serve::start_command`] for a config that names its ports (a
    /// collector whose peers must know its address), its stderr going to
    /// `stderr_log`: [`Started::PortTaken`] when it exits because a port
    /// was in use, to be started again ([`overtime_test_support::ports`]).
    pub fn try_start_command(cmd: Command, stderr_log: &Path) -> Started<Serve> {
        Serve::spawn(cmd, Some(stderr_log))
    }

    fn spawn(mut cmd: Command, stderr_log: Option<&Path>) -> Started<Serve> {
        let ready_dir = tempfile::tempdir().unwrap();
        let ready = ready_dir.path().join("ready.json");
        let child = cmd
            .arg("--ready-file")
            .arg(&ready)
            .spawn()
            .expect("overtime serve starts");
        let mut s = Serve {
            child,
            port: 0,
            otlp_http: None,
            otlp_grpc: None,
            postgres: None,
            _ready_dir: ready_dir,
        };
        let mut bound = None;
        let mut exited = None;
        wait_for(60, "overtime serve to write its ready file", || {
            if let Ok(Some(st)) = s.child.try_wait() {
                exited = Some(st);
                return true;
            }
            bound = read_ready_file(&ready);
            bound.is_some()
        });
        if let Some(st) = exited {
            let said = stderr_log
                .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                .unwrap_or_default();
            if says_address_in_use(&said) {
                return Started::PortTaken(said);
            }
            panic!("overtime serve exited before it was ready: {st}\n{said}");
        }
        let b = bound.unwrap();
        let port = |key: &str| -> Option<u16> {
            let a: std::net::SocketAddr = b[key].as_str()?.parse().ok()?;
            Some(a.port())
        };
        s.port = port("api").expect("the ready file names the API's address");
        s.otlp_http = port("otlp_http");
        s.otlp_grpc = port("otlp_grpc");
        s.postgres = port("postgres");
        assert_eq!(b["pid"], s.child.id(), "the ready file is this process's");
        wait_for(60, "overtime serve to answer /readyz", || {
            matches!(get(s.port, "/readyz"), Some((200, _)))
        });
        Started::Up(s)
    }

    /// The OTLP/HTTP receiver's port; panics when the config turned it off.
    pub fn otlp(&self) -> u16 {
        self.otlp_http
            .expect("the config has an OTLP/HTTP listener (http_listen = \"127.0.0.1:0\")")
    }

    /// kill -9, then reap.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// The ready file's JSON object, once it is there whole.
pub fn read_ready_file(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that answers `/r/<n>` with 503 when n % 10 == 0, else 200.
pub fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&seen);
                let n: u64 = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.strip_prefix("/r/"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                let status = if n.is_multiple_of(10) {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
            });
        }
    });
    port
}

/// `POST /api/sql` (JSON); panics unless it answers 200. The rows.
pub fn sql_rows(port: u16, token: Option<&str>, sql: &str) -> Vec<serde_json::Value> {
    let a =
        sql_answer(port, token, sql).unwrap_or_else(|| panic!("POST /api/sql {sql}: no answer"));
    assert_eq!(a.status, 200, "POST /api/sql {sql}: {}", a.text());
    a.json()["rows"].as_array().cloned().unwrap_or_default()
}

/// `POST /api/sql` with `{"sql": …}`; whatever it answers.
pub fn sql_answer(port: u16, token: Option<&str>, sql: &str) -> Option<Answer> {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    request(port, "POST", "/api/sql", &headers, body.as_bytes())
}

/// The one number a `SELECT count(*) AS n …` returns.
pub fn sql_count(port: u16, token: Option<&str>, sql: &str) -> u64 {
    sql_rows(port, token, sql)[0]["n"]
        .as_u64()
        .unwrap_or_else(|| panic!("{sql}: no count"))
}

/// `overtime serve --config <file>` as [`Serve::start`] runs it: no token
/// in the environment, stdout discarded, stderr inherited. Adjust it and
/// hand it to [`Serve::start_command`] (which adds `--ready-file`).
pub fn serve_command(config: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("OVERTIME_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

impl Serve {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size of the process now, KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// `VmRSS` of `pid` in KiB (0 when the process is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds since the epoch, now.
/// The peak RSS of a process, sampled every 20 ms until stopped.
pub struct PeakRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    sampler: std::thread::JoinHandle<()>,
}

impl PeakRss {
    /// Starts sampling `pid`; the peak is at least `floor_kib`.
    pub fn start(pid: u32, floor_kib: u64) -> PeakRss {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let peak = std::sync::Arc::new(AtomicU64::new(floor_kib));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    peak.fetch_max(rss_kib(pid), Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        PeakRss {
            stop,
            peak,
            sampler,
        }
    }

    /// The peak so far, in KiB.
    pub fn so_far(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops sampling; the peak in KiB.
    pub fn stop(self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.stop.store(true, Relaxed);
        self.sampler.join().unwrap();
        self.peak.load(Relaxed)
    }
}

pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// One failing trace in OTLP JSON, trace id `prefix` + `n` (32 hex): an
/// agent root span and a tool call that timed out, span ids unique per n.
pub fn otlp_failing_trace(prefix: u128, n: u64) -> (String, String) {
    let trace = format!("{:032x}", (prefix << 64) + n as u128);
    let end = now_ns();
    let start = end - 2_000_000_000;
    let (root, child) = (format!("{:016x}", 1 + n * 2), format!("{:016x}", 2 + n * 2));
    let body = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent-api"}}]},
        "scopeSpans": [{"spans": [
            {"traceId": trace, "spanId": root, "name": "POST /v1/agent", "kind": 2,
             "startTimeUnixNano": start.to_string(), "endTimeUnixNano": end.to_string(),
             "status": {"code": 2, "message": "tool timed out"}},
            {"traceId": trace, "spanId": child, "parentSpanId": root,
             "name": "execute_tool weather_api", "kind": 3,
             "startTimeUnixNano": (start + 100_000_000).to_string(), "endTimeUnixNano": (end - 100_000_000).to_string(),
             "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.tool.name", "value": {"stringValue": "weather_api"}},
                {"key": "agent.timeout_ms", "value": {"intValue": "1800"}},
                {"key": "error.type", "value": {"stringValue": "timeout"}}],
             "status": {"code": 2}}
        ]}]
    }]});
    (trace, body.to_string())
}

/// One gateway line in the built-in `overtime` format, written now, with
/// `$request_id` = `rid` (32 hex, so it is also the trace id) and `uri`.
pub fn overtime_line(rid: &str, uri: &str, status: u16) -> String {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
    let (rt, us) = if status == 504 {
        ("60.001", "504")
    } else {
        ("0.120", "200")
    };
    format!(
        "10.0.0.1 [{now}] \"POST {uri} HTTP/1.1\" {status} 167 rt={rt} uct=\"0.001\" \
         uht=\"0.100\" urt=\"{rt}\" us=\"{us}\" ua=\"10.0.0.5:8000\" rid={rid} \
         tp=\"-\" mw=\"-\" llm=\"-\" llmd=\"-\"\n"
    )
}

/// Rows of `gateway_requests` by `uri`, through `POST /api/sql`: what a
/// no-loss, no-duplicate check compares with the lines written.
pub fn stored_per_uri(api: u16) -> std::collections::BTreeMap<String, u64> {
    sql_rows(
        api,
        None,
        "SELECT uri, count(*) AS n FROM gateway_requests GROUP BY uri",
    )
    .iter()
    .map(|r| {
        (
            r["uri"].as_str().unwrap().to_string(),
            r["n"].as_u64().unwrap(),
        )
    })
    .collect()
}

/// Asserts that no span is stored twice and that every acknowledged trace
/// id is in `spans`; returns the trace ids stored. `when` prefixes failures.
pub fn spans_once_none_lost(
    api: u16,
    acked: &std::collections::BTreeSet<String>,
    when: &str,
) -> std::collections::BTreeSet<String> {
    let dup = sql_rows(
        api,
        None,
        "SELECT trace_id, span_id FROM spans GROUP BY trace_id, span_id HAVING count(*) > 1",
    );
    assert!(dup.is_empty(), "{when}: spans stored twice: {dup:.5?}");
    let stored: std::collections::BTreeSet<String> =
        sql_rows(api, None, "SELECT DISTINCT trace_id FROM spans")
            .iter()
            .map(|r| r["trace_id"].as_str().unwrap().to_string())
            .collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{when}: {} acknowledged traces lost: {lost:.5?}",
        lost.len()
    );
    stored
}
