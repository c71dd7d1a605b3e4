//! A real nginx writes the tailed access log (the `overtime` log_format),
//! proxying to a tiny upstream in this test; the log is rotated mid-test by
//! rename + `nginx -s reopen`, and every request's line must arrive exactly
//! once.

use crate::common;

use common::{TestSink, wait_for};
use overtime_ingest::file_tail::{FileKind, FileSourceConfig, spawn_file_tail};
use overtime_parse::nginx::{LogFormat, OVERTIME_LOG_FORMAT};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const NGINX: &str = "/usr/sbin/nginx";

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

struct Nginx {
    child: Child,
    prefix: String,
    conf: String,
}

impl Nginx {
    fn start(dir: &Path, log: &Path, port: u16, upstream: u16) -> Nginx {
        assert!(
            Path::new(NGINX).exists(),
            "nginx is not installed: apt-get install -y nginx"
        );
        // As root, workers run as root too, so they can reopen the log in
        // the private temp dir.
        let user = if is_root() { "user root;" } else { "" };
        let conf = format!(
            "{user}\nworker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\n\
             error_log {dir}/error.log info;\nevents {{ worker_connections 64; }}\n\
             http {{\n  {fmt}\n  access_log {log} overtime;\n\
               client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
               server {{ listen 127.0.0.1:{port};\n\
                 location / {{ proxy_pass http://127.0.0.1:{upstream}; }} }}\n}}\n",
            dir = dir.display(),
            log = log.display(),
            fmt = OVERTIME_LOG_FORMAT,
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let prefix = dir.display().to_string();
        let conf = conf_path.display().to_string();
        let child = Command::new(NGINX)
            .args(["-p", &prefix, "-c", &conf])
            .spawn()
            .expect("starting nginx");
        let n = Nginx {
            child,
            prefix,
            conf,
        };
        wait_for(10, "nginx to listen", || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        n
    }

    /// `nginx -s reopen`: SIGUSR1 to the master, which reopens the logs.
    fn reopen(&self) {
        let st = Command::new(NGINX)
            .args(["-p", &self.prefix, "-c", &self.conf, "-s", "reopen"])
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new(NGINX)
            .args(["-p", &self.prefix, "-c", &self.conf, "-s", "stop"])
            .status();
        let _ = self.child.wait();
    }
}

fn get(port: u16, i: u32) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /r/{i} HTTP/1.1\r\nHost: x\r\nX-Max-Wait: 60s\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

#[test]
fn real_nginx_rotated_by_rename_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let port = free_port();
    let nginx = Nginx::start(dir.path(), &log, port, upstream());

    let sink = Arc::new(TestSink::new());
    let stop = CancellationToken::new();
    let cfg = FileSourceConfig {
        batch_lines: 16,
        poll_interval_ms: 20,
        rotate_wait_ms: 300,
        ..FileSourceConfig::new(
            &log,
            FileKind::Nginx {
                format: LogFormat::builtin("overtime").unwrap(),
                layer: "edge".into(),
                layer_index: 0,
            },
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
    wait_for(10, "nginx to create the new log", || log.exists());
    for i in 150..300 {
        get(port, i);
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    wait_for(20, "300 rows", || {
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
