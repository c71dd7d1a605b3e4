//! A real nginx writes the tailed access log (the `overtime` log_format),
//! proxying to a tiny upstream in this test; the log is rotated mid-test by
//! rename + `nginx -s reopen`, and every request's line must arrive exactly
//! once.

use overtime_ingest::file_tail::{FileSourceConfig, spawn_file_tail};
use overtime_parse::nginx::{LogFormat, OVERTIME_LOG_FORMAT};
use overtime_parse::record::RecordFormat;
use overtime_test_support::net::{request, wait_for};
use overtime_test_support::nginx::Nginx;
use overtime_test_support::sink::RecordingSink;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Seconds a wait for the tail to catch up may take before the test calls
/// it a hang: generous, so a slow, loaded machine still passes.
const PATIENCE_SECS: u64 = 60;

/// Answers every request with a small 200, one connection at a time.
fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-LLM-Reason: decode_loop=1ms\r\nConnection: close\r\n\r\nok",
            );
        }
    });
    port
}

/// `GET /r/<i>` through nginx, which must answer 200.
fn get(port: u16, i: u32) {
    let a = request(
        port,
        "GET",
        &format!("/r/{i}"),
        &[("X-Max-Wait", "60s")],
        b"",
    )
    .expect("nginx answers");
    assert_eq!(a.status, 200, "{}", a.text());
}

#[test]
fn real_nginx_rotated_by_rename_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let nginx = Nginx::proxy(dir.path(), OVERTIME_LOG_FORMAT, &log, upstream(), "");
    let port = nginx.port();

    let sink = Arc::new(RecordingSink::new());
    let stop = CancellationToken::new();
    let cfg = FileSourceConfig {
        batch_lines: 16,
        poll_interval_ms: 20,
        rotate_wait_ms: 300,
        ..FileSourceConfig::new(
            &log,
            RecordFormat::nginx(LogFormat::builtin("overtime").unwrap(), "edge", 0),
        )
    };
    let tail = spawn_file_tail(cfg, sink.clone(), stop.clone());

    for i in 0..100 {
        get(port, i);
    }
    // Rotate the way logrotate does without copytruncate: rename, then
    // ask nginx to reopen. Requests in between still go to the old file.
    std::fs::rename(&log, dir.path().join("access.log.1")).unwrap();
    for i in 100..150 {
        get(port, i);
    }
    nginx.reopen();
    wait_for(PATIENCE_SECS, "nginx to create the new log", || {
        log.exists()
    });
    for i in 150..300 {
        get(port, i);
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    wait_for(PATIENCE_SECS, "300 rows", || {
        sink.rows(overtime_model::Table::GatewayRequests) >= 300
    });
    std::thread::sleep(Duration::from_millis(200));

    let rows = sink.gateway();
    let mut per_uri = BTreeMap::new();
    for r in &rows {
        *per_uri.entry(r.uri.clone().unwrap()).or_insert(0) += 1;
        assert_eq!(r.status, Some(200));
        assert_eq!(r.max_wait_ms, Some(60000.0));
        assert_eq!(r.upstream_status.as_slice(), [Some(200)]);
    }
    let expected: BTreeMap<String, i32> = (0..300).map(|i| (format!("/r/{i}"), 1)).collect();
    assert_eq!(per_uri, expected);
    assert!(sink.rejected().is_empty(), "{:?}", sink.rejected());
    assert_eq!(tail.stats().rotations.load(Relaxed), 1);
    stop.cancel();
    tail.join().unwrap();
    drop(nginx);
}
