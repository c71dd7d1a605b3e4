//! A real nginx writing formats of the kinds the generated-format round
//! trip draws (`overtime_parse::fuzz::check_nginx_formats`): unquoted
//! `$upstream_*` lists between pipes (issue 37's line), spaces, `key=`
//! pairs with `;`, tabs, commas, brackets, `escape=json`, and `combined` —
//! for requests retried across a dead upstream (a UNIX socket nobody
//! listens on) and one answering 502, an internal redirect to another
//! upstream (`" : "` groups), a request with no upstream, hostile header
//! text, a request line nginx refuses and a TLS hello sent to the plain
//! port. The same requests are logged with every variable in its own JSON
//! string by the same nginx: every line of every format must parse to
//! exactly those values (`overtime_parse::fuzz::compare_written`), with no
//! line refused.
//!
//! nginx listens on a UNIX socket in the test's temp dir: no port is
//! picked for it. Needs the Debian package `nginx` (`/usr/sbin/nginx`).

use crate::real_nginx::read_lines;
use crate::real_nginx_ingress::upstream;
use overtime_model::{gateway_records, rejected_records};
use overtime_parse::fuzz::{compare_written, nginx_readings};
use overtime_parse::nginx::{COMBINED_BODY, GatewayParser, LogFormat};
use overtime_test_support::nginx::{Nginx, temp_paths, user_directive};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The formats under test, as written in nginx.conf.
const FORMATS: &[(&str, &str)] = &[
    (
        "pipes",
        "'$status|$upstream_addr|$upstream_status|$upstream_connect_time'",
    ),
    (
        "spaces",
        "'$remote_addr $upstream_addr $upstream_status $upstream_response_time \
         $upstream_header_time $upstream_bytes_received $request_time $http_user_agent'",
    ),
    (
        "keyed",
        "'t=$msec;s=$status;a=$upstream_addr;st=$upstream_status;ct=$upstream_connect_time;\
         ht=$upstream_header_time;rt=$upstream_response_time;rl=$upstream_response_length;\
         ua=$http_user_agent;rid=$request_id'",
    ),
    (
        "tabs",
        "'$time_iso8601\\t$request\\t$status\\t$request_time\\t$upstream_addr\\t\
         $upstream_status\\t$upstream_bytes_sent\\t$http_x_tenant'",
    ),
    (
        "commas",
        "'$time_local,$status,$upstream_addr,$upstream_status,$upstream_response_time,$http_referer'",
    ),
    (
        "brackets",
        "'[$time_local] \"$request\" $status [$upstream_addr] [$upstream_status] \
         $body_bytes_sent $http_x_tenant'",
    ),
    (
        "json",
        "escape=json '{\"t\":$msec,\"s\":$status,\"r\":\"$request\",\"a\":\"$upstream_addr\",\
         \"st\":\"$upstream_status\",\"ct\":\"$upstream_connect_time\",\
         \"rt\":\"$upstream_response_time\",\"ua\":\"$http_user_agent\",\"x\":\"$http_x_tenant\"}'",
    ),
];

/// Every variable of [`FORMATS`] and `combined`, each in its own JSON string.
const TRUTH_VARS: &[&str] = &[
    "remote_addr",
    "remote_user",
    "time_local",
    "time_iso8601",
    "msec",
    "status",
    "body_bytes_sent",
    "request_time",
    "request_id",
    "http_user_agent",
    "http_referer",
    "http_x_tenant",
    "upstream_addr",
    "upstream_status",
    "upstream_connect_time",
    "upstream_header_time",
    "upstream_response_time",
    "upstream_response_length",
    "upstream_bytes_received",
    "upstream_bytes_sent",
];

fn conf(dir: &Path, bad: u16, good: u16) -> String {
    let d = dir.display();
    let (user, temp) = (user_directive(), temp_paths(dir));
    let truth: Vec<String> = TRUTH_VARS
        .iter()
        .map(|v| format!("\"{v}\":\"${v}\""))
        .collect();
    let truth = truth.join(",");
    let mut logs = String::new();
    // nginx predefines `combined`: the same body under another name.
    for (name, body) in FORMATS.iter().chain(&[("comb", COMBINED_BODY)]) {
        logs.push_str(&format!(
            "    log_format {name} {body};\n    access_log {d}/{name}.log {name};\n"
        ));
    }
    format!(
        r#"{user}
worker_processes 1;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    {temp}
{logs}
    log_format truth escape=json '{{{truth}}}';
    access_log {d}/truth.log truth;
    # Nobody listens on dead.sock: every try of it fails at once.
    upstream rotate {{
        server unix:{d}/dead.sock max_fails=0;
        server 127.0.0.1:{bad} max_fails=0;
        server 127.0.0.1:{good} max_fails=0;
    }}
    upstream dead_then_good {{
        server unix:{d}/dead.sock max_fails=0;
        server 127.0.0.1:{good} backup;
    }}
    upstream all_bad {{
        server unix:{d}/dead.sock max_fails=0;
        server 127.0.0.1:{bad} max_fails=0;
    }}
    upstream good {{ server 127.0.0.1:{good}; }}
    server {{
        listen unix:{d}/nginx.sock;
        proxy_next_upstream error timeout http_502 non_idempotent;
        proxy_connect_timeout 2s;
        proxy_read_timeout 5s;
        location /rotate {{ proxy_pass http://rotate; }}
        location /dead-then-good {{ proxy_pass http://dead_then_good; }}
        location /all-bad {{ proxy_pass http://all_bad; }}
        # A custom error page served by another upstream: an internal
        # redirect, so the lists get a " : " between the two groups.
        location /redirect {{
            proxy_intercept_errors on;
            error_page 502 = @good;
            proxy_pass http://all_bad;
        }}
        location @good {{ proxy_pass http://good; }}
        location /static {{ return 200 "no upstream"; }}
        location / {{ proxy_pass http://good; }}
    }}
}}
"#
    )
}

fn send(sock: &Path, raw: &[u8]) {
    let mut s = UnixStream::connect(sock).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(raw).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
}

/// The requests, in the order nginx logs them.
fn requests() -> Vec<Vec<u8>> {
    let req = |method: &str, path: &str, headers: &str| {
        let body = if method == "POST" { "{\"q\":1}" } else { "" };
        format!(
            "{method} {path} HTTP/1.1\r\nHost: gw.test\r\n{headers}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let ua = "User-Agent: curl/8.5 | a; b, c \"q\" \\ x\r\n";
    let tenant = "X-Tenant: acme : eu, 1|2\r\n";
    let referer = "Referer: https://shop.test/a,b;c|d e\r\n";
    let mut out = Vec::new();
    for i in 0..4 {
        out.push(req(
            "GET",
            &format!("/rotate/{i}?q=a|b"),
            &format!("{ua}{tenant}"),
        ));
        out.push(req("POST", &format!("/rotate/p{i}"), referer));
    }
    out.push(req("GET", "/dead-then-good", &format!("{ua}{referer}")));
    out.push(req("GET", "/all-bad", tenant));
    out.push(req(
        "GET",
        "/redirect/page",
        "User-Agent: tab\there caf\u{e9}\r\n",
    ));
    out.push(req("GET", "/plain", ""));
    out.push(req("GET", "/static", ua));
    out.push(b"PATCHp /products/42 HTTP/1.1\r\nHost: gw.test\r\n\r\n".to_vec());
    // The first bytes of a TLS ClientHello, sent to the plain-HTTP socket.
    out.push(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x8e\xa1".to_vec());
    out
}

/// The `$request` of each `combined` (`comb`) line: the quoted field, `\xHH`
/// undone into the bytes nginx had.
fn requests_logged(combined: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8(combined.to_vec()).expect("escape=default writes ASCII");
    text.lines()
        .map(|l| {
            let q = l.split('"').nth(1).expect("a quoted $request");
            let b = q.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') {
                    out.push(u8::from_str_radix(&q[i + 2..i + 4], 16).unwrap());
                    i += 4;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            out
        })
        .collect()
}

#[test]
fn real_nginx_lines_of_generated_kinds_of_formats_parse_to_what_nginx_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (bad, good) = (
        upstream("502 Bad Gateway", "down"),
        upstream("200 OK", "hello"),
    );
    let sock = dir.path().join("nginx.sock");
    let nginx = Nginx::start_unix(dir.path(), &conf(dir.path(), bad, good), &sock);
    let reqs = requests();
    for r in &reqs {
        send(&sock, r);
    }
    let n = reqs.len();
    let conf_text = std::fs::read_to_string(dir.path().join("nginx.conf")).unwrap();
    let truth: Vec<Value> = read_lines(&dir.path().join("truth.log"), n)
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        // The TLS hello's bytes are raw in JSON; its $request is taken
        // from `combined` below.
        .map(|l| serde_json::from_str(&String::from_utf8_lossy(l)).unwrap())
        .collect();
    let logged = requests_logged(&read_lines(&dir.path().join("comb.log"), n));
    assert_eq!((truth.len(), logged.len()), (n, n), "{}", nginx.error_log());
    let all = |k: &'static str| truth.iter().filter_map(move |t| t[k].as_str());
    assert!(
        all("upstream_addr").any(|a| a.matches(", ").count() >= 2),
        "a request tried three servers"
    );
    assert!(
        all("upstream_addr").any(|a| a.contains(" : ")),
        "an internal redirect"
    );
    assert!(
        all("upstream_status").any(str::is_empty),
        "a request with no upstream"
    );
    assert!(
        logged.iter().any(|r| std::str::from_utf8(r).is_err()),
        "a request that is not text"
    );
    for (name, _) in FORMATS.iter().chain(&[("comb", "")]) {
        let format = LogFormat::from_nginx_conf(&conf_text, name).unwrap();
        let data = read_lines(&dir.path().join(format!("{name}.log")), n);
        let lines: Vec<&[u8]> = data
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let mut p = GatewayParser::new(format.clone(), name, 0);
        p.push_bytes(&data, 1);
        let (g, r) = p.finish();
        let rej = rejected_records(&r).unwrap();
        if let Some(j) = rej.first() {
            let line = lines[j.line as usize - 1];
            panic!(
                "{name}: nginx's own line refused ({} way(s) to read it): {j:?}",
                nginx_readings(&format, line)
            );
        }
        let rows = gateway_records(&g).unwrap();
        assert_eq!(rows.len(), n, "{name}");
        let mut vars: Vec<&str> = format.variables().collect();
        vars.dedup();
        for (i, row) in rows.iter().enumerate() {
            let written: Vec<(String, Option<Vec<u8>>)> = vars
                .iter()
                .map(|&v| {
                    let value = match v {
                        "request" => Some(logged[i].clone()),
                        _ => truth[i][v]
                            .as_str()
                            .unwrap_or_else(|| panic!("truth has ${v}"))
                            .as_bytes()
                            .to_vec()
                            .into(),
                    };
                    (v.to_string(), value)
                })
                .collect();
            if let Err(e) = compare_written(row, &written, format.escape()) {
                panic!(
                    "{name} line {}: {e}\n{:?}",
                    i + 1,
                    String::from_utf8_lossy(lines[i])
                );
            }
        }
    }
    drop(nginx);
}
