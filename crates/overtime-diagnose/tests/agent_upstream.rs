//! A small agent service for the real-nginx tests: it listens on
//! 127.0.0.1 (a port of its own choosing), does what each request's path
//! asks, and writes JSONL spans of what it did (docs/inputs.md) — the
//! spans off-the-shelf instrumentation would write: a server span, a tool
//! span `execute_tool <name>`, a `chat` span, and for a streamed answer one
//! ASGI `http send` span per chunk and an `http receive` span with
//! `asgi.event.type` `http.disconnect` when the caller went away.
//!
//! Paths (query values in ms):
//! - `/run?hang_ms=H&cancel=1`: a tool with no timeout that runs `H`
//!   (`cancel=1`: until the caller goes away, as an ASGI app cancelled on
//!   disconnect), then 200;
//! - `/own504?tool_timeout_ms=T`: a tool whose own timeout `T` fires; the
//!   service answers `504 Gateway Timeout` itself;
//! - `/stream?chunks=K&silence_ms=S&beat_ms=B`: `K` chunks 100 ms apart,
//!   then a model call silent for `S` (a heartbeat chunk every `B` when
//!   `B` > 0), then the last chunk; it stops where the caller goes away.
//!
//! The service stops (and its thread ends) when the guard drops.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A running agent service.
pub struct Agent {
    pub port: u16,
    pub spans: PathBuf,
    busy: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    service: String,
    out: Mutex<File>,
    next_id: AtomicU64,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

impl Agent {
    /// Starts the service `service`, writing its spans to `dir/<file>`.
    pub fn start(dir: &Path, service: &str, file: &str) -> Agent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = dir.join(file);
        let shared = Arc::new(Shared {
            service: service.into(),
            out: Mutex::new(File::create(&spans).unwrap()),
            // Span ids unique across the services of one test.
            next_id: AtomicU64::new(u64::from(port) << 32),
        });
        let busy = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (busy.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                b.fetch_add(1, Ordering::SeqCst);
                let (sh, b) = (shared.clone(), b.clone());
                std::thread::spawn(move || {
                    handle(conn, &sh);
                    b.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Agent {
            port,
            spans,
            busy,
            stop,
            thread: Some(thread),
        }
    }

    /// Waits (20 s at most) until no request is being handled: every span
    /// is written.
    pub fn wait_idle(&self) {
        overtime_test_support::net::wait_for(
            20,
            "the agent service to finish its requests",
            || self.busy.load(Ordering::SeqCst) == 0,
        );
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request as read: path, query and headers (lowercase names).
struct Req {
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn ms(&self, key: &str) -> u64 {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    }
}

fn read_request(conn: &mut TcpStream) -> Option<Req> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let target = lines.next()?.split(' ').nth(1)?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end - 4;
    while have < len {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => have += n,
        }
    }
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(Req {
        path: path.to_string(),
        query,
        headers,
    })
}

/// The spans of one request, written when it ends.
struct Spans<'a> {
    sh: &'a Shared,
    trace: String,
    parent: Option<String>,
    lines: Vec<Value>,
}

impl<'a> Spans<'a> {
    fn id(&self) -> String {
        format!("{:016x}", self.sh.next_id.fetch_add(1, Ordering::SeqCst))
    }
    /// A span `id` under `parent` (None: under the caller's span).
    fn add(
        &mut self,
        id: &str,
        parent: Option<&str>,
        name: &str,
        start: i64,
        end: i64,
        mut f: Value,
    ) {
        let o = f.as_object_mut().unwrap();
        o.insert("trace_id".into(), json!(self.trace));
        o.insert("span_id".into(), json!(id));
        if let Some(p) = parent.map(String::from).or(self.parent.clone()) {
            o.insert("parent_span_id".into(), json!(p));
        }
        o.insert("service".into(), json!(self.sh.service));
        o.insert("name".into(), json!(name));
        o.insert("start_time".into(), json!(start));
        o.insert("end_time".into(), json!(end.max(start)));
        self.lines.push(f);
    }
}

impl Drop for Spans<'_> {
    fn drop(&mut self) {
        let mut out = self.sh.out.lock().unwrap();
        for l in &self.lines {
            writeln!(out, "{l}").unwrap();
        }
        out.flush().unwrap();
    }
}

/// Whether the caller closed the connection, looking for `wait` at most.
fn gone(conn: &mut TcpStream, wait: Duration) -> bool {
    conn.set_read_timeout(Some(wait.max(Duration::from_millis(1))))
        .unwrap();
    let mut b = [0u8; 64];
    match conn.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Runs until `until` or until the caller goes away (when `watch`);
/// returns whether it went away.
fn run_until(conn: &mut TcpStream, until: Instant, watch: bool) -> bool {
    while Instant::now() < until {
        let left = until - Instant::now();
        if watch {
            if gone(conn, left.min(Duration::from_millis(20))) {
                return true;
            }
        } else {
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }
    false
}

fn handle(mut conn: TcpStream, sh: &Shared) {
    let Some(req) = read_request(&mut conn) else {
        return;
    };
    let start = now_us();
    let tp = req.header("traceparent").unwrap_or_default().to_string();
    let mut parts = tp.split('-');
    let (trace, parent) = (parts.nth(1), parts.next());
    let Some(trace) = trace.map(String::from) else {
        return;
    };
    let mut spans = Spans {
        sh,
        trace,
        parent: parent.map(String::from),
        lines: Vec::new(),
    };
    let server = spans.id();
    let name = format!("POST {}", req.path);
    match req.path.as_str() {
        "/run" => {
            let tool = spans.id();
            let until = Instant::now() + Duration::from_millis(req.ms("hang_ms"));
            let cancelled = run_until(&mut conn, until, req.ms("cancel") == 1);
            let end = now_us();
            let status = if cancelled {
                json!({"status": "cancelled", "error_type": "CancelledError"})
            } else {
                json!({"status": "ok"})
            };
            let mut t = json!({"kind": "internal", "stage": "tool", "tool": "web_search", "timeout_ms": null});
            t.as_object_mut()
                .unwrap()
                .extend(status.as_object().unwrap().clone());
            spans.add(
                &tool,
                Some(&server),
                "execute_tool web_search",
                start + 500,
                end,
                t,
            );
            if !cancelled {
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
            let mut s = json!({"kind": "server", "status": "ok"});
            s.as_object_mut()
                .unwrap()
                .extend(status.as_object().unwrap().clone());
            spans.add(&server, None, &name, start, now_us(), s);
        }
        "/own504" => {
            let tool = spans.id();
            let t = req.ms("tool_timeout_ms");
            std::thread::sleep(Duration::from_millis(t));
            let end = now_us();
            spans.add(
                &tool,
                Some(&server),
                "execute_tool crm_api",
                start + 500,
                end,
                json!({"kind": "internal", "stage": "tool", "tool": "crm_api", "timeout_ms": t,
                       "status": "timeout", "error_type": "httpx.ReadTimeout"}),
            );
            let body = "tool crm_api timed out";
            let _ = conn.write_all(format!("HTTP/1.1 504 Gateway Timeout\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes());
            spans.add(&server, None, &name, start, now_us(),
                json!({"kind": "server", "status": "error", "attributes": {"http.response.status_code": 504}}));
        }
        "/stream" => stream(&mut conn, &req, &mut spans, &server, &name, start),
        _ => {
            let _ = conn.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
}

/// One chunk of a chunked answer and its ASGI `http send` span; false
/// when the write failed.
fn send(
    conn: &mut TcpStream,
    spans: &mut Spans,
    server: &str,
    name: &str,
    data: &[u8],
    more: bool,
) -> bool {
    let t = now_us();
    let mut frame = Vec::new();
    if !data.is_empty() {
        frame.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        frame.extend_from_slice(data);
        frame.extend_from_slice(b"\r\n");
    }
    if !more {
        frame.extend_from_slice(b"0\r\n\r\n");
    }
    let ok = conn.write_all(&frame).is_ok();
    let id = spans.id();
    spans.add(&id, Some(server), &format!("{name} http send"), t, now_us(),
        json!({"kind": "internal", "attributes": {"asgi.event.type": "http.response.body", "asgi.event.more_body": more}}));
    ok
}

fn stream(
    conn: &mut TcpStream,
    req: &Req,
    spans: &mut Spans,
    server: &str,
    name: &str,
    start: i64,
) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let _ = conn.write_all(head.as_bytes());
    let id = spans.id();
    spans.add(&id, Some(server), &format!("{name} http send"), now_us(), now_us(),
        json!({"kind": "internal", "attributes": {"asgi.event.type": "http.response.start", "http.response.status_code": 200}}));
    for i in 0..req.ms("chunks") {
        std::thread::sleep(Duration::from_millis(100));
        send(
            conn,
            spans,
            server,
            name,
            format!("data: token {i}\n\n").as_bytes(),
            true,
        );
    }
    // The model call: silent for `silence_ms`, a heartbeat every `beat_ms`.
    let chat = spans.id();
    let chat_start = now_us();
    let until = Instant::now() + Duration::from_millis(req.ms("silence_ms"));
    let beat = req.ms("beat_ms");
    let mut left = false;
    while Instant::now() < until && !left {
        let next = if beat > 0 {
            (Instant::now() + Duration::from_millis(beat)).min(until)
        } else {
            until
        };
        left = run_until(conn, next, true);
        if !left && beat > 0 && Instant::now() < until {
            send(conn, spans, server, name, b": heartbeat\n\n", true);
        }
    }
    let chat_fields = if left {
        json!({"kind": "client", "stage": "llm", "model": "deepseek-v4", "status": "cancelled", "error_type": "CancelledError"})
    } else {
        json!({"kind": "client", "stage": "llm", "model": "deepseek-v4", "status": "ok"})
    };
    spans.add(
        &chat,
        Some(server),
        "chat deepseek-v4",
        chat_start,
        now_us(),
        chat_fields,
    );
    if !left {
        send(conn, spans, server, name, b"data: [DONE]\n\n", true);
        send(conn, spans, server, name, b"", false);
    }
    let end = now_us();
    // The ASGI app listened for the disconnect from the start: the caller
    // went away, or the listener was cancelled when the answer was done.
    let receive = spans.id();
    let fields = if left {
        json!({"kind": "internal", "attributes": {"asgi.event.type": "http.disconnect"}})
    } else {
        json!({"kind": "internal", "status": "cancelled"})
    };
    spans.add(
        &receive,
        Some(server),
        &format!("{name} http receive"),
        start + 200,
        end,
        fields,
    );
    spans.add(
        server,
        None,
        name,
        start,
        end,
        json!({"kind": "server", "status": "ok", "attributes": {"http.response.status_code": 200}}),
    );
}
