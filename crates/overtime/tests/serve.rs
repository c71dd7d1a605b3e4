//! `overtime serve` as an SRE runs it: a config that tails incident C's
//! gateway log and span log; the service's verdicts, read back over its
//! API, are exactly those of `overtime diagnose` on the same files.

use crate::support;

use overtime_test_support::net::get;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{BIN, Serve, fixture as incident_file};

fn fixture(f: &str) -> std::path::PathBuf {
    incident_file("c_dns_retry", f)
}

#[test]
fn serve_gives_the_verdicts_of_diagnose() {
    let dir = tempfile::tempdir().unwrap();
    let format = std::fs::read_to_string(fixture("log_format.txt")).unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n[otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n[sql]\nmax_rows = 5\n\n[[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = {format:?}\nlayer = \"access\"\n\n[[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
        data = dir.path().join("data").display().to_string(),
        log = fixture("access.log").display().to_string(),
        spans = fixture("spans.jsonl").display().to_string(),
    );
    let cfg_path = dir.path().join("overtime.toml");
    std::fs::write(&cfg_path, config).unwrap();
    let serve = Serve::start(&cfg_path);
    let port = serve.port;

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

    // Asked of the server, a result cut at its max_rows says so, as a
    // local one does; a whole one does not.
    for (sql, rows, cut) in [
        ("SELECT span_id FROM spans", 5, true),
        ("SELECT span_id FROM spans LIMIT 2", 2, false),
    ] {
        let out = Command::new(BIN)
            .args(["query", "--server", &format!("http://127.0.0.1:{port}")])
            .args(["-o", "json", sql])
            .env_remove("OVERTIME_TOKEN")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), rows);
        assert_eq!(
            err.contains("the result was cut at the row limit"),
            cut,
            "{sql}: {err}"
        );
    }

    // The data dir belongs to the running collector: a local query is
    // refused with the way out named, and goes through once it stopped.
    let data = dir.path().join("data");
    let query = |sql: &str| {
        Command::new(BIN)
            .args([
                "query",
                "--data-dir",
                data.to_str().unwrap(),
                "-o",
                "json",
                sql,
            ])
            .output()
            .unwrap()
    };
    let busy = query("SELECT count(*) AS n FROM spans");
    assert_eq!(busy.status.code(), Some(1));
    let err = String::from_utf8_lossy(&busy.stderr);
    assert!(err.contains("in use") && err.contains("--server"), "{err}");
    serve.kill9();
    let out = query("SELECT count(*) AS n FROM verdicts WHERE outcome = 'gateway_timeout'");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want_504 = want
        .iter()
        .filter(|v| v["outcome"] == "gateway_timeout")
        .count();
    assert_eq!(
        row["n"], want_504,
        "verdicts diagnosed from the stored records"
    );
}
