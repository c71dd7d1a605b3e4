//! What the binary's integration tests share: ports, a plain HTTP/1.1
//! client, a bounded wait, a `overtime serve` process that is always
//! stopped, and a real nginx in a private prefix.
#![allow(dead_code)] // each test binary uses its own part

pub mod monitoring;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_overtime");
pub const NGINX: &str = "/usr/sbin/nginx";

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn fixture(incident: &str, file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(incident)
        .join(file)
}

/// Polls `f` every 100 ms until it holds; panics after `secs`.
pub fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 request, `Connection: close`; (status, body). `None` when
/// the server is not there or the answer is cut.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http(port, "GET", path, "text/plain", b"")
}

pub fn get_json(port: u16, path: &str) -> serde_json::Value {
    let (status, body) = get(port, path).unwrap_or_else(|| panic!("GET {path}: no answer"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `overtime serve --config <file>`, killed (SIGKILL) and reaped on drop.
pub struct Serve {
    pub child: Child,
    pub port: u16,
}

impl Serve {
    /// Starts the collector and waits until `/readyz` answers 200.
    pub fn start(config: &Path, port: u16) -> Serve {
        let child = Command::new(BIN)
            .args(["serve", "--config", config.to_str().unwrap()])
            .env_remove("OVERTIME_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("overtime serve starts");
        let s = Serve { child, port };
        wait_for(60, "overtime serve to be ready", || {
            matches!(get(port, "/readyz"), Some((200, _)))
        });
        s
    }

    /// kill -9, then reap.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// A real nginx in `dir` writing `log` in the `overtime` format, proxying
/// to `upstream` with the given read timeout.
pub struct Nginx {
    child: Child,
    prefix: String,
    conf: String,
}

impl Nginx {
    pub fn start(dir: &Path, log: &Path, port: u16, upstream: u16, read_timeout: &str) -> Nginx {
        assert!(
            Path::new(NGINX).exists(),
            "nginx is not installed: apt-get install -y nginx"
        );
        let user = if is_root() { "user root;" } else { "" };
        let conf = format!(
            "{user}\nworker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\n\
             error_log {dir}/error.log info;\nevents {{ worker_connections 256; }}\n\
             http {{\n  {fmt}\n  access_log {log} overtime;\n\
               client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
               server {{ listen 127.0.0.1:{port};\n\
                 location / {{ proxy_pass http://127.0.0.1:{upstream}; proxy_read_timeout {read_timeout}; }} }}\n}}\n",
            dir = dir.display(),
            log = log.display(),
            fmt = overtime_parse::nginx::OVERTIME_LOG_FORMAT,
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

    /// `nginx -s reopen` (what logrotate's postrotate does).
    pub fn reopen(&self) {
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
