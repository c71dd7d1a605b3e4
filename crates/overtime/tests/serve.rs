//! `overtime serve` as an SRE runs it: a config that tails incident C's
//! gateway log and span log; the service's verdicts, read back over its
//! API, are exactly those of `overtime diagnose` on the same files.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_overtime");

fn fixture(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents/c_dns_retry")
        .join(f)
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split(' ').nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n")?.1.to_string();
    // Chunked bodies: keep it simple, the API answers with Content-Length.
    Some((status, body))
}

#[test]
fn serve_gives_the_verdicts_of_diagnose() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let format = std::fs::read_to_string(fixture("log_format.txt")).unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\ndata_dir = {data:?}\nfsync = false\n[otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n\n[[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = {format:?}\nlayer = \"access\"\n\n[[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
        data = dir.path().join("data").display().to_string(),
        log = fixture("access.log").display().to_string(),
        spans = fixture("spans.jsonl").display().to_string(),
    );
    let cfg_path = dir.path().join("overtime.toml");
    std::fs::write(&cfg_path, config).unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--config", cfg_path.to_str().unwrap()])
        .env_remove("OVERTIME_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("overtime serve starts");
    let _guard = Killed(child);

    // Wait until every failing trace has its verdict (bounded).
    let deadline = Instant::now() + Duration::from_secs(90);
    let list = loop {
        assert!(
            Instant::now() < deadline,
            "overtime serve gave no verdicts within 90 s"
        );
        if let Some((200, body)) = get(port, "/api/traces?limit=1000") {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if v["total"].as_u64() == Some(23) {
                break v;
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    };

    let out = Command::new(BIN)
        .args([
            "diagnose",
            "--nginx-log",
            fixture("access.log").to_str().unwrap(),
            "--log-format",
            &format,
            "--layer-name",
            "access",
        ])
        .args([
            "--spans",
            fixture("spans.jsonl").to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let batch: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = batch["verdicts"].as_array().unwrap();
    assert_eq!(list["traces"].as_array().unwrap().len(), want.len());
    for w in want {
        let id = w["trace_id"].as_str().unwrap();
        let (status, body) = get(port, &format!("/api/traces/{id}")).expect("trace answers");
        assert_eq!(status, 200, "{body}");
        let mut got: serde_json::Value = serde_json::from_str(&body).unwrap();
        got.as_object_mut().unwrap().remove("revision");
        assert_eq!(&got, w, "trace {id}: service and diagnose differ");
    }
    let (status, body) = get(port, "/api/incidents").unwrap();
    assert_eq!(status, 200);
    let inc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        inc["incidents"][0]["headline"],
        batch["incidents"][0]["headline"]
    );
    assert_eq!(get(port, "/healthz").unwrap().0, 200);
}
