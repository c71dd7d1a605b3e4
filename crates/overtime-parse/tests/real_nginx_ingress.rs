//! A real nginx writing ingress-nginx's default `upstreaminfo` format (the
//! `ingress-nginx` built-in, byte for byte, with `$req_id`,
//! `$proxy_upstream_name` and `$proxy_alternative_upstream_name` set up as
//! the controller's template does), for requests retried across upstreams
//! (`", "` lists), internally redirected to another upstream (`" : "`
//! groups), with a client's X-Request-ID containing spaces, and with a
//! request line nginx refuses. The same requests are logged a second time
//! with every variable in its own JSON string: that is the truth each
//! parsed field must equal.
//!
//! Needs the Debian package `nginx` (`/usr/sbin/nginx`).

use crate::real_nginx::read_lines;
use overtime_model::{GatewayRecord, gateway_records, rejected_records};
use overtime_parse::nginx::{GatewayParser, INGRESS_NGINX_LOG_FORMAT, LogFormat};
use overtime_test_support::nginx::{Nginx, temp_paths, user_directive};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::Duration;

/// Every variable of the format, each in its own JSON string.
const TRUTH_VARS: [&str; 17] = [
    "remote_addr",
    "remote_user",
    "time_local",
    "request",
    "status",
    "body_bytes_sent",
    "http_referer",
    "http_user_agent",
    "request_length",
    "request_time",
    "proxy_upstream_name",
    "proxy_alternative_upstream_name",
    "upstream_addr",
    "upstream_response_length",
    "upstream_response_time",
    "upstream_status",
    "req_id",
];

/// An upstream that answers every request with `status` and `body`.
pub(crate) fn upstream(status: &'static str, body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(30))).ok();
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes());
            });
        }
    });
    port
}

fn conf(dir: &Path, port: u16, bad: u16, good: u16) -> String {
    let d = dir.display();
    let (user, temp) = (user_directive(), temp_paths(dir));
    let truth: Vec<String> = TRUTH_VARS
        .iter()
        .map(|v| format!("\"{v}\":\"${v}\""))
        .collect();
    let truth = truth.join(",");
    format!(
        r#"{user}
worker_processes 1;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    {temp}
    # As ingress-nginx's nginx.tmpl defines them.
    map $http_x_request_id $req_id {{
        default   $http_x_request_id;
        ""        $request_id;
    }}
    {INGRESS_NGINX_LOG_FORMAT}
    log_format truth escape=json '{{{truth}}}';
    # The first server answers 502: nginx tries the next one.
    upstream default-retry-80 {{
        server 127.0.0.1:{bad} max_fails=0;
        server 127.0.0.1:{good} backup;
    }}
    upstream default-bad-80 {{ server 127.0.0.1:{bad}; }}
    upstream default-good-80 {{ server 127.0.0.1:{good}; }}
    server {{
        listen 127.0.0.1:{port};
        set $proxy_upstream_name "-";
        set $proxy_alternative_upstream_name "";
        access_log {d}/ingress.log upstreaminfo;
        access_log {d}/truth.log truth;
        proxy_next_upstream error timeout http_502;
        proxy_connect_timeout 2s;
        proxy_read_timeout 5s;
        location /retry {{
            set $proxy_upstream_name "default-retry-80";
            proxy_pass http://default-retry-80;
        }}
        # A custom error page served by another upstream: an internal
        # redirect, so the lists get a " : " between the two groups.
        location /redirect {{
            set $proxy_upstream_name "default-bad-80";
            proxy_intercept_errors on;
            error_page 502 = @custom;
            proxy_pass http://default-bad-80;
        }}
        location @custom {{
            set $proxy_alternative_upstream_name "default-good-80";
            proxy_pass http://default-good-80;
        }}
        location / {{
            set $proxy_upstream_name "default-good-80";
            proxy_pass http://default-good-80;
        }}
    }}
}}
"#
    )
}

fn send(port: u16, raw: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
}

fn get(port: u16, path: &str, extra: &str) {
    send(
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: curl/8.5.0 (x86_64; \"q\")\r\n\
             Referer: https://shop.test/cart?a=1&b=2\r\n{extra}Connection: close\r\n\r\n"
        ),
    );
}

/// nginx's `-` (default escape) and `""` (JSON escape) are no value.
fn some(v: &str) -> Option<&str> {
    (!v.is_empty() && v != "-").then_some(v)
}

fn items(v: &str) -> Vec<&str> {
    if v.is_empty() || v == "-" {
        return Vec::new();
    }
    v.split(", ").flat_map(|g| g.split(" : ")).collect()
}

fn ms(v: &str) -> Option<f64> {
    some(v).map(|v| (v.parse::<f64>().unwrap() * 1000.0).round())
}

/// Every field of `r` against nginx's own values in `t`.
fn check(r: &GatewayRecord, t: &Value) {
    let f = |k: &str| t[k].as_str().unwrap_or_else(|| panic!("truth has {k}"));
    let at = f("request");
    assert_eq!(r.remote_addr.as_deref(), some(f("remote_addr")), "{at}");
    assert_eq!(r.extra("remote_user"), some(f("remote_user")), "{at}");
    let time = chrono::DateTime::parse_from_str(f("time_local"), "%d/%b/%Y:%H:%M:%S %z")
        .unwrap()
        .timestamp_micros();
    assert_eq!(r.time_us, time, "{at}");
    match (&r.method, &r.uri, &r.protocol) {
        (Some(m), Some(u), Some(p)) => assert_eq!(format!("{m} {u} {p}"), f("request")),
        _ => assert_eq!(r.extra("request"), some(f("request")), "{at}: kept raw"),
    }
    assert_eq!(
        r.status.map(|s| s.to_string()).as_deref(),
        some(f("status"))
    );
    assert_eq!(
        r.body_bytes_sent.map(|b| b.to_string()).as_deref(),
        some(f("body_bytes_sent"))
    );
    assert_eq!(r.extra("http_referer"), some(f("http_referer")), "{at}");
    assert_eq!(
        r.extra("http_user_agent"),
        some(f("http_user_agent")),
        "{at}"
    );
    assert_eq!(r.extra("request_length"), some(f("request_length")), "{at}");
    assert_eq!(r.request_time_ms, ms(f("request_time")), "{at}");
    for k in ["proxy_upstream_name", "proxy_alternative_upstream_name"] {
        assert_eq!(r.extra(k), some(f(k)), "{at}: {k}");
    }
    let addrs: Vec<Option<String>> = items(f("upstream_addr"))
        .iter()
        .map(|a| some(a).map(str::to_string))
        .collect();
    assert_eq!(r.upstream_addr, addrs, "{at}: upstream_addr");
    assert_eq!(
        r.extra("upstream_response_length"),
        some(f("upstream_response_length")),
        "{at}"
    );
    let times: Vec<Option<f64>> = items(f("upstream_response_time"))
        .into_iter()
        .map(ms)
        .collect();
    assert_eq!(
        r.upstream_response_ms, times,
        "{at}: upstream_response_time"
    );
    let statuses: Vec<Option<u16>> = items(f("upstream_status"))
        .iter()
        .map(|s| some(s).map(|s| s.parse().unwrap()))
        .collect();
    assert_eq!(r.upstream_status, statuses, "{at}: upstream_status");
    assert_eq!(r.request_id.as_deref(), some(f("req_id")), "{at}: req_id");
}

#[test]
fn real_nginx_in_the_ingress_format_parses_every_field_as_nginx_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let (bad, good) = (
        upstream("502 Bad Gateway", "down"),
        upstream("200 OK", "hello"),
    );
    let nginx = Nginx::start(dir.path(), |port| conf(dir.path(), port, bad, good));
    let port = nginx.port();
    let conf_path = dir.path().join("nginx.conf");

    get(
        port,
        "/retry?q=1",
        "X-Request-ID: 4bf92f3577b34da6a3ce929d0e0e4736\r\n",
    );
    get(port, "/redirect/page", "X-Request-ID: my request id\r\n");
    get(port, "/plain", "");
    send(
        port,
        "PATCHp /products/42 HTTP/1.1\r\nHost: shop.test\r\n\r\n",
    );
    let n = 4;

    let data = read_lines(&dir.path().join("ingress.log"), n);
    let truth = read_lines(&dir.path().join("truth.log"), n);
    let conf = std::fs::read_to_string(&conf_path).unwrap();
    let format = LogFormat::from_nginx_conf(&conf, "upstreaminfo").unwrap();
    assert_eq!(format, LogFormat::builtin("ingress-nginx").unwrap());
    let mut p = GatewayParser::new(format, "ingress", 0);
    p.push_bytes(&data, 1);
    let (g, rej) = p.finish();
    let rej = rejected_records(&rej).unwrap();
    assert!(
        rej.is_empty(),
        "nginx's own lines rejected: {rej:?}\n{}",
        nginx.error_log()
    );
    let rows = gateway_records(&g).unwrap();
    let truth: Vec<Value> = truth
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!((rows.len(), truth.len()), (n, n), "{}", nginx.error_log());
    for (r, t) in rows.iter().zip(&truth) {
        check(r, t);
    }
    // What the requests were for, so the checks above did not pass on
    // empty lists.
    let retry = &rows[0];
    assert_eq!(retry.upstream_tries(), 2, "{retry:?}");
    assert_eq!(retry.upstream_status, vec![Some(502), Some(200)]);
    assert_eq!(
        retry.upstream_addr,
        vec![
            Some(format!("127.0.0.1:{bad}")),
            Some(format!("127.0.0.1:{good}"))
        ]
    );
    let redirect = &rows[1];
    assert!(
        truth[1]["upstream_status"]
            .as_str()
            .unwrap()
            .contains(" : "),
        "an internal redirect: {}",
        truth[1]
    );
    assert_eq!(redirect.upstream_status, vec![Some(502), Some(200)]);
    assert_eq!(redirect.request_id.as_deref(), Some("my request id"));
    let plain = &rows[2];
    let rid = plain.request_id.as_deref().unwrap();
    assert!(
        rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit()),
        "$request_id {rid}"
    );
    let refused = &rows[3];
    assert_eq!(refused.status, Some(400));
    assert_eq!(
        (refused.method.as_deref(), refused.uri.as_deref()),
        (None, None)
    );
    drop(nginx);
}
