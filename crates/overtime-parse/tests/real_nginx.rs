//! A real nginx in front of a small local upstream: a fast answer, a real
//! 504 from `proxy_read_timeout`, and a real failover from a dead server to
//! a live one. Both log formats are read back from the nginx.conf the test
//! wrote, and every column is checked against what nginx really logged.
//!
//! Needs the Debian package `nginx` (`/usr/sbin/nginx`).

use overtime_model::{GatewayRecord, gateway_records, rejected_records};
use overtime_parse::nginx::{Escape, GatewayParser, LogFormat, OVERTIME_LOG_FORMAT};
use overtime_test_support::nginx::{Nginx, temp_paths, user_directive};
use overtime_test_support::ports::ClosedPort;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TRACE: [&str; 3] = [
    "0af7651916cd43dd8448eb211c80319c",
    "4bf92f3577b34da6a3ce929d0e0e4736",
    "5ce0a1e7d8b34c1a9f0e2d3c4b5a6978",
];

/// The upstream: `/fast…` and `/failover` answer at once with the model
/// server's headers; `/slow` answers after 4 s (nginx gives up after 1 s).
fn start_upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            thread::spawn(move || serve(conn));
        }
    });
    port
}

fn serve(mut conn: TcpStream) {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&req);
    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
    if path.starts_with("/slow") {
        thread::sleep(Duration::from_secs(4));
    }
    let body = "ok";
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         X-LLM-Reason: kv_cache_build=0.2s,decode_loop=0.1s\r\nX-LLM-Duration: 0.3s\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes());
}

/// One HTTP/1.1 request through nginx; returns the status code.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: llm.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

const CUSTOM: &str = r#"log_format custom escape=json
        '{"t":$msec,"m":"$request_method","u":"$request_uri","s":$status,'
        '"rt":$request_time,"urt":"$upstream_response_time","us":"$upstream_status",'
        '"ua":"$upstream_addr","rid":"$http_x_request_id","tp":"$http_traceparent",'
        '"tenant":"$http_x_tenant","agent":"$http_user_agent","mw":"$http_x_max_wait"}';"#;

fn write_conf(dir: &Path, port: u16, up: u16, dead: u16) -> String {
    let d = dir.display();
    let (user, temp) = (user_directive(), temp_paths(dir));
    format!(
        r#"{user}
worker_processes 1;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    {temp}
    # The recommended format, exactly as `overtime nginx-format` prints it.
    {OVERTIME_LOG_FORMAT}
    {CUSTOM}
    upstream live {{ server 127.0.0.1:{up}; }}
    # A dead server first, the live one second: nginx fails over.
    upstream failover {{
        server 127.0.0.1:{dead};
        server 127.0.0.1:{up} backup;
    }}
    server {{
        listen 127.0.0.1:{port};
        access_log {d}/overtime.log overtime;
        access_log {d}/custom.log custom;
        proxy_connect_timeout 2s;
        proxy_read_timeout 1s;
        location /failover {{ proxy_pass http://failover; }}
        location / {{ proxy_pass http://live; }}
    }}
}}
"#
    )
}

/// Waits until `path` holds `n` lines.
pub(crate) fn read_lines(path: &Path, n: usize) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let data = std::fs::read(path).unwrap_or_default();
        if data.iter().filter(|&&b| b == b'\n').count() >= n || Instant::now() > deadline {
            return data;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn parse(format: LogFormat, source: &str, data: &[u8]) -> Vec<GatewayRecord> {
    let mut p = GatewayParser::new(format, source, 0);
    p.push_bytes(data, 1);
    let (g, r) = p.finish();
    let rej = rejected_records(&r).unwrap();
    assert!(
        rej.is_empty(),
        "{source}: nginx's own lines rejected: {rej:?}"
    );
    gateway_records(&g).unwrap()
}

fn by_path<'a>(rows: &'a [GatewayRecord], prefix: &str) -> &'a GatewayRecord {
    rows.iter()
        .find(|r| r.uri.as_deref().is_some_and(|u| u.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no row for {prefix}: {rows:#?}"))
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

#[test]
fn real_nginx_logs_parse_into_every_column() {
    let dir = tempfile::tempdir().unwrap();
    // The dead server: a port held closed (refused, and nobody else's).
    let (up, closed) = (start_upstream(), ClosedPort::new());
    let dead = closed.port();
    let t_start = now_us();
    let nginx = Nginx::start(dir.path(), |port| write_conf(dir.path(), port, up, dead));
    let port = nginx.port();
    let conf_path = dir.path().join("nginx.conf");

    let agent = "Mozilla/5.0 (\"quoted\" agent; caf\u{e9})";
    let hdr = |i: usize, mw: &'static str, rid: &'static str| {
        vec![
            (
                "traceparent",
                format!("00-{}-00f067aa0ba902b7-01", TRACE[i]),
            ),
            ("X-Max-Wait", mw.to_string()),
            ("X-Request-Id", rid.to_string()),
            ("X-Tenant", "acme corp".to_string()),
            ("User-Agent", agent.to_string()),
        ]
    };
    let send = |path: &str, h: Vec<(&str, String)>| {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        get(port, path, &h)
    };
    assert_eq!(
        send("/fast?q=a%20b&x=\"y\"", hdr(0, "90s", "req-fast")),
        200
    );
    let t_slow = Instant::now();
    assert_eq!(send("/slow", hdr(1, "1500ms", "req-slow")), 504);
    assert!(t_slow.elapsed() >= Duration::from_millis(900));
    assert_eq!(send("/failover", hdr(2, "120", "req-failover")), 200);
    let t_end = now_us();

    // Read both formats back from the conf the test wrote.
    let conf = std::fs::read_to_string(&conf_path).unwrap();
    let ot_fmt = LogFormat::from_nginx_conf(&conf, "overtime").unwrap();
    assert_eq!(ot_fmt, LogFormat::builtin("overtime").unwrap());
    let custom_fmt = LogFormat::from_nginx_conf(&conf, "custom").unwrap();
    assert_eq!(custom_fmt.escape(), Escape::Json);

    let ot = parse(
        ot_fmt,
        "edge",
        &read_lines(&dir.path().join("overtime.log"), 3),
    );
    let cu = parse(
        custom_fmt,
        "custom",
        &read_lines(&dir.path().join("custom.log"), 3),
    );
    assert_eq!(
        (ot.len(), cu.len()),
        (3, 3),
        "error.log: {}",
        nginx.error_log()
    );
    let live = format!("127.0.0.1:{up}");
    let dead_addr = format!("127.0.0.1:{dead}");

    for r in &ot {
        assert_eq!(r.time_precision_us, 1_000_000);
        assert!(
            r.time_us >= t_start - 2_000_000 && r.time_us <= t_end + 2_000_000,
            "time {}",
            r.time_us
        );
        assert_eq!(r.remote_addr.as_deref(), Some("127.0.0.1"));
        assert_eq!(
            (r.method.as_deref(), r.protocol.as_deref()),
            (Some("GET"), Some("HTTP/1.1"))
        );
        let rid = r.request_id.as_deref().unwrap();
        assert!(
            rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit()),
            "nginx $request_id {rid}"
        );
        assert!(r.body_bytes_sent.is_some());
    }

    // (1) Fast: one try, the model server's headers, the client's budget.
    let f = by_path(&ot, "/fast");
    assert_eq!(
        f.uri.as_deref(),
        Some("/fast?q=a%20b&x=\"y\""),
        "escape=default \\x22 undone"
    );
    assert_eq!(f.status, Some(200));
    assert!(f.request_time_ms.unwrap() < 900.0);
    assert_eq!(
        (
            f.upstream_connect_ms.len(),
            f.upstream_header_ms.len(),
            f.upstream_response_ms.len()
        ),
        (1, 1, 1)
    );
    assert!(f.upstream_header_ms[0].is_some() && f.upstream_response_ms[0].unwrap() < 900.0);
    assert_eq!(f.upstream_status, vec![Some(200)]);
    assert_eq!(f.upstream_status_raw.as_deref(), Some("200"));
    assert_eq!(f.upstream_addr, vec![Some(live.clone())]);
    assert_eq!(f.trace_id.as_deref(), Some(TRACE[0]));
    assert_eq!(f.max_wait_ms, Some(90_000.0));
    assert_eq!(
        f.llm_reason.as_deref(),
        Some("kv_cache_build=0.2s,decode_loop=0.1s")
    );
    assert_eq!(f.llm_duration_ms, Some(300.0));

    // (2) Slow: nginx's own 504 after proxy_read_timeout 1s.
    let s = by_path(&ot, "/slow");
    assert_eq!(s.status, Some(504));
    let rt = s.request_time_ms.unwrap();
    assert!((900.0..5000.0).contains(&rt), "request_time {rt}");
    assert_eq!(s.start_us(), s.time_us - (rt * 1000.0).round() as i64);
    assert_eq!(s.upstream_status, vec![Some(504)]);
    // nginx writes a lone "-": null, which is an empty list (docs/inputs.md#nginx-access-logs).
    assert!(
        s.upstream_header_ms.is_empty(),
        "no header before the timeout"
    );
    assert_eq!(s.upstream_header_sum_ms(), None);
    assert_eq!(s.upstream_tries(), 1);
    assert!(s.upstream_response_ms[0].is_some_and(|v| v >= 900.0));
    assert_eq!(s.upstream_addr, vec![Some(live.clone())]);
    assert_eq!(s.trace_id.as_deref(), Some(TRACE[1]));
    assert_eq!(s.max_wait_ms, Some(1500.0));
    assert_eq!((s.llm_reason.as_deref(), s.llm_duration_ms), (None, None));

    // (3) Failover: two tries, the dead one first.
    let fo = by_path(&ot, "/failover");
    assert_eq!(fo.status, Some(200));
    assert_eq!(fo.upstream_tries(), 2);
    assert_eq!(
        fo.upstream_addr,
        vec![Some(dead_addr.clone()), Some(live.clone())]
    );
    assert_eq!(fo.upstream_status, vec![Some(502), Some(200)]);
    assert_eq!(fo.upstream_status_raw.as_deref(), Some("502, 200"));
    assert_eq!(fo.upstream_connect_ms.len(), 2);
    assert_eq!(fo.upstream_connect_ms[0], None, "refused: no connect time");
    assert!(fo.upstream_connect_ms[1].is_some());
    assert_eq!(fo.upstream_header_ms.len(), 2);
    assert_eq!(fo.upstream_response_ms.len(), 2);
    assert!(fo.upstream_response_sum_ms().is_some());
    assert_eq!(fo.trace_id.as_deref(), Some(TRACE[2]));
    assert_eq!(fo.max_wait_ms, Some(120_000.0));
    assert_eq!(fo.llm_duration_ms, Some(300.0));

    // The JSON format: $msec time, request_id from X-Request-Id, extras.
    for (i, (path, rid, status)) in [
        ("/fast", "req-fast", 200),
        ("/slow", "req-slow", 504),
        ("/failover", "req-failover", 200),
    ]
    .into_iter()
    .enumerate()
    {
        let c = by_path(&cu, path);
        let o = by_path(&ot, path);
        assert_eq!(c.time_precision_us, 1000);
        assert!(
            (c.time_us - o.time_us).abs() < 1_000_000,
            "same request, same end"
        );
        assert_eq!(c.method.as_deref(), Some("GET"));
        assert_eq!(c.status, Some(status));
        assert_eq!(c.request_time_ms, o.request_time_ms);
        assert_eq!(c.upstream_response_ms, o.upstream_response_ms);
        assert_eq!(c.upstream_status, o.upstream_status);
        assert_eq!(c.upstream_addr, o.upstream_addr);
        assert_eq!(c.request_id.as_deref(), Some(rid));
        assert_eq!(c.trace_id.as_deref(), Some(TRACE[i]));
        assert_eq!(c.max_wait_ms, o.max_wait_ms);
        assert_eq!(c.extra("http_x_tenant"), Some("acme corp"));
        assert_eq!(
            c.extra("http_user_agent"),
            Some(agent),
            "JSON escapes undone, UTF-8 kept"
        );
        assert_eq!(c.protocol, None, "not in this format");
    }
    assert_eq!(
        by_path(&cu, "/fast").uri.as_deref(),
        Some("/fast?q=a%20b&x=\"y\"")
    );
    if std::env::var_os("OVERTIME_SHOW_NGINX_LOGS").is_some() {
        for f in ["overtime.log", "custom.log"] {
            eprintln!("{}", std::fs::read_to_string(dir.path().join(f)).unwrap());
        }
    }
    drop(nginx);
}
