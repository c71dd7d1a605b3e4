//! The collector as it lives in production: a real nginx writes the
//! tailed log (rotated mid-test by rename + reopen), services post OTLP
//! spans, and the collector is killed with SIGKILL mid-ingest and started
//! again. Afterwards, read back with `overtime query --server`:
//! - every nginx line is stored exactly once (the tail resumed from its
//!   checkpoint, across the rotation and the crash);
//! - every span the collector acknowledged (HTTP 200) is stored exactly
//!   once, and nothing is stored twice;
//! - every failing trace has exactly one verdict.

use crate::support;

use overtime_parse::nginx::OVERTIME_LOG_FORMAT;
use overtime_test_support::net::{get_json, http, wait_for};
use overtime_test_support::nginx::Nginx;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// Seconds a wait for something to happen may take before the test calls
/// it a hang: generous, so a slow, loaded machine still passes. Waits on a
/// whole backlog get twice as long.
const PATIENCE_SECS: u64 = 60;

fn nginx_get(port: u16, i: u32) {
    let (status, _) =
        http(port, "GET", &format!("/r/{i}"), "text/plain", b"").expect("nginx answers");
    assert!(status == 200 || status == 503, "nginx answered {status}");
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// One failing trace in OTLP JSON: the agent's root span and a tool call
/// that timed out.
fn otlp_trace(n: u32) -> (String, String) {
    let trace = format!("{:032x}", 0xab00_0000_0000u128 + n as u128);
    let end = now_ns();
    let start = end - 2_000_000_000;
    let body = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent-api"}}]},
        "scopeSpans": [{"spans": [
            {"traceId": trace, "spanId": format!("{:016x}", 1 + n as u64 * 2), "name": "POST /v1/agent", "kind": 2,
             "startTimeUnixNano": start.to_string(), "endTimeUnixNano": end.to_string(),
             "status": {"code": 2, "message": "tool timed out"}},
            {"traceId": trace, "spanId": format!("{:016x}", 2 + n as u64 * 2), "parentSpanId": format!("{:016x}", 1 + n as u64 * 2),
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

fn query(port: u16, sql: &str) -> Vec<serde_json::Value> {
    let out = Command::new(BIN)
        .args([
            "query",
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "-o",
            "json",
            sql,
        ])
        .env_remove("OVERTIME_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "overtime query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn kill_9_mid_ingest_with_rotation_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let nginx = Nginx::proxy(
        dir.path(),
        OVERTIME_LOG_FORMAT,
        &log,
        upstream(),
        "proxy_read_timeout 30s;",
    );
    let ngx = nginx.port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nflush_interval_ms = 700\n\
         [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 500\n\n\
         [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"edge\"\n",
        data = dir.path().join("data").display().to_string(),
        log = log.display().to_string(),
    );
    let cfg_path = dir.path().join("overtime.toml");
    std::fs::write(&cfg_path, config).unwrap();

    let serve = Serve::start(&cfg_path);
    // Each start binds fresh ports (port 0 in the config): the sender
    // reads the receiver's port here, 0 while the collector is down.
    let otlp = Arc::new(AtomicU16::new(serve.otlp()));
    // OTLP senders run through the crash; only 200s count as acknowledged.
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (acked, stop, otlp) = (acked.clone(), stop.clone(), otlp.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            let mut refused = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let port = otlp.load(Ordering::Relaxed);
                if port == 0 {
                    refused += 1; // down: a post now would be refused
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let (trace, body) = otlp_trace(n);
                if let Some((200, _)) = http(
                    port,
                    "POST",
                    "/v1/traces",
                    "application/json",
                    body.as_bytes(),
                ) {
                    acked.lock().unwrap().insert(trace);
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (n, refused)
        })
    };
    for i in 0..100 {
        nginx_get(ngx, i);
    }
    std::fs::rename(&log, dir.path().join("access.log.1")).unwrap();
    for i in 100..150 {
        nginx_get(ngx, i);
    }
    nginx.reopen();
    wait_for(PATIENCE_SECS, "nginx to create the new log", || {
        log.exists()
    });
    for i in 150..200 {
        nginx_get(ngx, i);
    }
    wait_for(PATIENCE_SECS, "some spans acknowledged", || {
        acked.lock().unwrap().len() >= 50
    });
    serve.kill9();
    otlp.store(0, Ordering::Relaxed);
    // While the collector is down nginx keeps logging.
    for i in 200..250 {
        nginx_get(ngx, i);
    }
    let serve = Serve::start(&cfg_path);
    otlp.store(serve.otlp(), Ordering::Relaxed);
    let api = serve.port;
    for i in 250..300 {
        nginx_get(ngx, i);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (sent, refused) = sender.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        refused > 0 || acked.len() < sent as usize,
        "the crash refused some posts: {} of {sent} acknowledged, {refused} while it was down",
        acked.len()
    );

    wait_for(2 * PATIENCE_SECS, "all 300 nginx lines stored", || {
        query(api, "SELECT count(*) AS n FROM gateway_requests")[0]["n"] == 300
    });
    let per_uri = query(
        api,
        "SELECT uri, count(*) AS n FROM gateway_requests GROUP BY uri",
    );
    let per_uri: BTreeMap<String, u64> = per_uri
        .iter()
        .map(|r| {
            (
                r["uri"].as_str().unwrap().to_string(),
                r["n"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: BTreeMap<String, u64> = (0..300).map(|i| (format!("/r/{i}"), 1)).collect();
    assert_eq!(per_uri, want, "every nginx line exactly once");

    let dup = query(
        api,
        "SELECT trace_id, span_id, count(*) AS n FROM spans GROUP BY trace_id, span_id HAVING count(*) > 1",
    );
    assert!(dup.is_empty(), "spans stored twice: {dup:?}");
    let stored: BTreeSet<String> = query(api, "SELECT DISTINCT trace_id FROM spans")
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap().to_string())
        .collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged traces lost: {lost:?}",
        lost.len()
    );

    // Every failing trace: the 30 upstream 503s and each stored OTLP trace,
    // one verdict each.
    let expected = 30 + stored.len();
    wait_for(PATIENCE_SECS, "every failing trace diagnosed", || {
        get_json(api, "/api/traces?limit=10000")["total"].as_u64() == Some(expected as u64)
    });
    let list = get_json(api, "/api/traces?limit=10000");
    let ids: Vec<&str> = list["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trace_id"].as_str().unwrap())
        .collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "a trace has two verdicts");
    for t in &acked {
        let v = get_json(api, &format!("/api/traces/{t}"));
        assert_eq!(v["root_cause"]["component"], "weather_api", "{v}");
    }
    drop(serve);
    drop(nginx);
}
