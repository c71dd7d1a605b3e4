//! nginx access logs judged by other projects' own test data
//! (`tests/fixtures/peers/`, see its README): Elastic Beats' Filebeat nginx
//! module (`access` and `ingress_controller` test logs with their expected
//! events) and Vector's VRL `parse_nginx_log` cases. Every field both sides
//! extract is compared; where overtime deliberately differs, the difference
//! is one of [`DIFFERENCES`] and the test checks overtime's side of it.

use overtime_model::{GatewayRecord, RejectedRecord, gateway_records, rejected_records};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where overtime and the peers part ways, on purpose.
pub const DIFFERENCES: &[(&str, &str)] = &[
    (
        "dash-is-no-value",
        "nginx writes `-` (and an empty string) for a variable with no value; \
         overtime stores no value (null, or no `extra` entry) where Beats and \
         VRL keep the text `-` or `\"\"`",
    ),
    (
        "refused-request-line",
        "nginx refuses a request line whose method is not upper case \
         (`PATCHp`, `geti`) with 400 and fills neither $request_method nor \
         $request_uri; overtime does the same and keeps the raw `$request` in \
         `extra[\"request\"]`, where Beats splits it anyway",
    ),
    (
        "address-list-before-the-format",
        "Beats' grok accepts an X-Forwarded-For list (or a host) before the \
         `-` of a combined line; nginx's combined format writes exactly one \
         $remote_addr, so such a line comes from another log_format: \
         overtime rejects it as format_mismatch naming $remote_addr rather \
         than guess which address is the client",
    ),
    (
        "text-after-combined",
        "a quoted field after the user agent (`\"-\"`, `\"2.75\"`) is not part \
         of nginx's combined format (it is `main`'s $http_x_forwarded_for or \
         `compression`'s $gzip_ratio); overtime rejects it under `combined` \
         (format_mismatch naming $http_user_agent) and reads it with the \
         format that has it",
    ),
    (
        "escapes-undone",
        "nginx writes bytes of a value as `\\xHH`; overtime undoes them when \
         they are UTF-8 text, VRL keeps the escaped text (so does overtime for \
         a value whose bytes are not text: no byte is lost)",
    ),
];

fn difference(name: &str) -> &'static str {
    DIFFERENCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
        .unwrap_or_else(|| panic!("undocumented difference {name}"))
}

fn peers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/peers")
}

fn json(path: &str) -> Value {
    let p = peers().join(path);
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"))).unwrap()
}

/// Each line parsed: its row or its rejection, by line number.
enum Out {
    Row(Box<GatewayRecord>),
    Rejected(RejectedRecord),
}

fn parse_all(format: LogFormat, data: &[u8]) -> BTreeMap<u64, Out> {
    let mut p = GatewayParser::new(format, "peer", 0);
    p.push_bytes(data, 1);
    let (g, r) = p.finish();
    let mut out = BTreeMap::new();
    for row in gateway_records(&g).unwrap() {
        out.insert(row.line, Out::Row(Box::new(row)));
    }
    for rej in rejected_records(&r).unwrap() {
        assert!(out.insert(rej.line, Out::Rejected(rej)).is_none());
    }
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(
        out.len() as u64,
        lines,
        "every line is a row or a rejection"
    );
    out
}

fn row(out: &BTreeMap<u64, Out>, line: u64) -> &GatewayRecord {
    match &out[&line] {
        Out::Row(r) => r,
        Out::Rejected(j) => panic!("line {line} rejected: {} {}", j.reason, j.detail),
    }
}

fn rejected(out: &BTreeMap<u64, Out>, line: u64) -> &RejectedRecord {
    match &out[&line] {
        Out::Rejected(j) => j,
        Out::Row(r) => panic!("line {line} accepted: {r:?}"),
    }
}

/// Line number (1-based) of each byte offset where a line starts.
fn line_of_offset(data: &[u8]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    let mut off = 0u64;
    for (i, l) in data.split(|&b| b == b'\n').enumerate() {
        m.insert(off, i as u64 + 1);
        off += l.len() as u64 + 1;
    }
    m
}

fn rfc3339_us(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_micros()
}

fn s<'a>(e: &'a Value, k: &str) -> Option<&'a str> {
    e.get(k).and_then(Value::as_str)
}

fn strs(e: &Value, k: &str) -> Option<Vec<String>> {
    e.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
}

/// A peer's `-`/`""`: no value on overtime's side.
fn peer_value(v: Option<&str>) -> Option<&str> {
    let _ = difference("dash-is-no-value");
    v.filter(|v| !v.is_empty() && *v != "-")
}

/// Seconds as nginx writes them ("0.100") or as a float (0.1) → ms.
fn ms(v: &Value) -> f64 {
    let secs = match v {
        Value::String(s) => s.parse::<f64>().unwrap(),
        v => v.as_f64().unwrap(),
    };
    (secs * 1000.0).round()
}

/// The request-line fields Beats extracts, against overtime's.
fn check_request(e: &Value, r: &GatewayRecord, at: &str) {
    let method = s(e, "http.request.method");
    let refused = method.is_some_and(|m| m.bytes().any(|b| b.is_ascii_lowercase()));
    if refused {
        let _ = difference("refused-request-line");
        assert_eq!(
            (r.method.as_deref(), r.uri.as_deref()),
            (None, None),
            "{at}"
        );
        let raw = r
            .extra("request")
            .unwrap_or_else(|| panic!("{at}: raw request kept"));
        assert!(raw.starts_with(method.unwrap()), "{at}: {raw}");
        assert!(raw.contains(s(e, "url.original").unwrap()), "{at}: {raw}");
        assert!(raw.ends_with(&format!("HTTP/{}", s(e, "http.version").unwrap())));
        return;
    }
    assert_eq!(r.method.as_deref(), method, "{at}: method");
    assert_eq!(r.uri.as_deref(), s(e, "url.original"), "{at}: url");
    let version = s(e, "http.version").map(|v| format!("HTTP/{v}"));
    assert_eq!(r.protocol, version, "{at}: version");
}

#[test]
fn beats_ingress_controller_events_match_field_for_field() {
    let data = std::fs::read(peers().join("beats/ingress_controller/test.log")).unwrap();
    let out = parse_all(LogFormat::builtin("ingress-nginx").unwrap(), &data);
    let lines = line_of_offset(&data);
    let expected = json("beats/ingress_controller/test.log-expected.json");
    let p = "nginx.ingress_controller.";
    for e in expected.as_array().unwrap() {
        let off = e["log.offset"].as_u64().unwrap();
        let line = lines[&off];
        let at = format!("line {line} (offset {off})");
        let r = row(&out, line);
        assert_eq!(r.time_us, rfc3339_us(s(e, "@timestamp").unwrap()), "{at}");
        assert_eq!(r.remote_addr.as_deref(), s(e, "source.address"), "{at}");
        check_request(e, r, &at);
        assert_eq!(
            r.status.map(u64::from),
            e["http.response.status_code"].as_u64(),
            "{at}"
        );
        assert_eq!(
            r.body_bytes_sent.map(|v| v as u64),
            e["http.response.body.bytes"].as_u64(),
            "{at}"
        );
        assert_eq!(
            r.extra("http_referer"),
            s(e, "http.request.referrer"),
            "{at}"
        );
        assert_eq!(
            r.extra("http_user_agent"),
            s(e, "user_agent.original"),
            "{at}"
        );
        assert_eq!(
            r.request_id.as_deref(),
            s(e, &format!("{p}http.request.id")),
            "{at}"
        );
        assert_eq!(
            r.extra("request_length").map(|v| v.parse::<u64>().unwrap()),
            e[&format!("{p}http.request.length")].as_u64(),
            "{at}"
        );
        assert_eq!(
            r.request_time_ms,
            Some(ms(&e[&format!("{p}http.request.time")])),
            "{at}"
        );
        assert_eq!(
            r.extra("proxy_upstream_name"),
            peer_value(s(e, &format!("{p}upstream.name"))),
            "{at}"
        );
        assert_eq!(
            r.extra("proxy_alternative_upstream_name"),
            peer_value(s(e, &format!("{p}upstream.alternative_name"))),
            "{at}"
        );
        let addrs = strs(e, &format!("{p}upstream_address_list")).unwrap_or_default();
        let got: Vec<String> = r.upstream_addr.iter().flatten().cloned().collect();
        assert_eq!(got, addrs, "{at}: upstream addresses, in order");
        let statuses =
            strs(e, &format!("{p}upstream.response.status_code_list")).unwrap_or_default();
        let got: Vec<String> = r
            .upstream_status
            .iter()
            .map(|s| s.unwrap().to_string())
            .collect();
        assert_eq!(got, statuses, "{at}: upstream statuses");
        let times: Vec<Option<f64>> = strs(e, &format!("{p}upstream.response.time_list"))
            .unwrap_or_default()
            .iter()
            .map(|t| Some(ms(&Value::String(t.clone()))))
            .collect();
        assert_eq!(r.upstream_response_ms, times, "{at}: upstream times");
        let lengths = strs(e, &format!("{p}upstream.response.length_list"));
        assert_eq!(
            r.extra("upstream_response_length"),
            lengths.map(|l| l.join(", ")).as_deref(),
            "{at}: upstream lengths"
        );
    }
    assert_eq!(expected.as_array().unwrap().len(), 23);
}

#[test]
fn beats_ingress_controller_lines_without_a_stored_expectation_match_their_text() {
    // Lines 24-30 were added to Beats' log after the newest expected file
    // stored here: each is checked against what the line itself says.
    let data = std::fs::read(peers().join("beats/ingress_controller/test.log")).unwrap();
    let out = parse_all(LogFormat::builtin("ingress-nginx").unwrap(), &data);
    let some = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    let r = row(&out, 24);
    assert_eq!(
        r.uri.as_deref(),
        Some("/A%20Beka%20G1%20Howe/029_AND_30/15%20reading%20elephants.mp4")
    );
    assert_eq!(r.upstream_status, vec![Some(200), Some(203)]);
    assert_eq!(r.upstream_response_ms, vec![Some(100.0), Some(4.0)]);
    let r = row(&out, 25);
    assert_eq!(r.remote_addr.as_deref(), Some("2a02:cf40::"));
    assert_eq!(r.extra("remote_user"), Some("remote_monitoring_user"));
    assert_eq!(
        r.extra("http_user_agent"),
        Some(
            "Elastic-metricbeat/7.16.3 (linux; amd64; e7cede6a62ed4452bd9044fc6f4947df; 2022-01-07 00:50:33 +0000 UTC)"
        )
    );
    assert_eq!(r.upstream_addr, some(&["[2a02:cf40::]:9200"]));
    assert_eq!(r.upstream_response_ms, vec![Some(36.0)]);
    assert_eq!(r.extra("upstream_response_length"), Some("470"));
    assert_eq!(r.request_time_ms, Some(33.0));
    let r = row(&out, 26);
    assert_eq!(r.protocol.as_deref(), Some("HTTP/2.0"));
    assert_eq!(
        r.upstream_addr,
        some(&["[2a02:cf40::7]:5000", "[2a02:cf40::4e36]:5000"])
    );
    assert_eq!(r.upstream_status, vec![Some(502), Some(502)]);
    assert_eq!(r.extra("upstream_response_length"), Some("0, 0"));
    // An upstream address nginx would never write is kept as written, not
    // "corrected".
    let r = row(&out, 27);
    assert_eq!(
        r.upstream_addr,
        some(&["[2a02:cf40::7]:5000", "[2a02:cf40::::::::4e36]:500000000"])
    );
    let r = row(&out, 28);
    assert_eq!(r.upstream_addr, some(&["unix:/var/run/php-fpm.sock"]));
    assert_eq!(r.upstream_response_ms, vec![Some(2.0)]);
    // Lists of different lengths: each exactly as written.
    let r = row(&out, 29);
    assert_eq!(
        r.upstream_addr,
        some(&["172.17.0.6:8080", "172.17.0.7:8080"])
    );
    assert_eq!(r.upstream_response_ms, vec![Some(100.0), None]);
    assert_eq!(r.upstream_status, vec![Some(200), None]);
    assert_eq!(r.extra("upstream_response_length"), None);
    assert_eq!(out.len(), 29);
}

#[test]
fn beats_access_events_match_or_are_rejected_for_a_documented_reason() {
    let data = std::fs::read(peers().join("beats/access/test.log")).unwrap();
    let combined = parse_all(LogFormat::builtin("combined").unwrap(), &data);
    let main = parse_all(LogFormat::compile(MAIN).unwrap(), &data);
    let lines = line_of_offset(&data);
    let expected = json("beats/access/test.log-expected.json");
    for e in expected.as_array().unwrap() {
        let off = e["log.offset"].as_u64().unwrap();
        let line = lines[&off];
        let at = format!("line {line} (offset {off})");
        let ips = strs(e, "nginx.access.remote_ip_list").unwrap();
        let r = match &combined[&line] {
            Out::Row(r) => r.as_ref(),
            Out::Rejected(j) if ips.len() > 1 => {
                let _ = difference("address-list-before-the-format");
                assert_eq!(j.reason, "format_mismatch", "{at}");
                assert!(j.detail.contains("$remote_addr"), "{at}: {}", j.detail);
                continue;
            }
            Out::Rejected(j) => {
                let _ = difference("text-after-combined");
                assert_eq!(j.reason, "format_mismatch", "{at}");
                assert!(j.detail.contains("$http_user_agent"), "{at}: {}", j.detail);
                row(&main, line)
            }
        };
        assert_eq!(r.remote_addr.as_deref(), s(e, "source.address"), "{at}");
        assert_eq!(r.time_us, rfc3339_us(s(e, "@timestamp").unwrap()), "{at}");
        check_request(e, r, &at);
        assert_eq!(
            r.status.map(u64::from),
            e["http.response.status_code"].as_u64()
        );
        assert_eq!(
            r.body_bytes_sent.map(|v| v as u64),
            e["http.response.body.bytes"].as_u64()
        );
        assert_eq!(
            r.extra("http_referer"),
            peer_value(s(e, "http.request.referrer")),
            "{at}"
        );
        assert_eq!(
            r.extra("remote_user"),
            peer_value(s(e, "user.name")),
            "{at}"
        );
        assert_eq!(
            r.extra("http_user_agent"),
            peer_value(s(e, "user_agent.original")),
            "{at}"
        );
    }
}

/// The `main` format of nginx's Docker image.
const MAIN: &str = r#"'$remote_addr - $remote_user [$time_local] "$request" '
    '$status $body_bytes_sent "$http_referer" '
    '"$http_user_agent" "$http_x_forwarded_for"'"#;

/// nginx's documented `compression` example (`$gzip_ratio` last).
const COMPRESSION: &str = r#"'$remote_addr - $remote_user [$time_local] "$request" $status $bytes_sent "$http_referer" "$http_user_agent" "$gzip_ratio"'"#;

/// Undoes nginx's `\xHH` escapes the way overtime does: only when the
/// bytes are UTF-8 text, else the value stays as written.
fn unescaped(s: &str) -> String {
    let _ = difference("escapes-undone");
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 2..i + 4], 16)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

#[test]
fn vrl_parse_nginx_log_cases_match_field_for_field() {
    let cases = json("vrl/parse_nginx_log.json");
    let mut compared = 0;
    for c in cases.as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let line = c["line"].as_str().unwrap();
        let format = match c["format"].as_str().unwrap() {
            "combined" => LogFormat::builtin("combined").unwrap(),
            "ingress_upstreaminfo" => LogFormat::builtin("ingress-nginx").unwrap(),
            "main" => LogFormat::compile(MAIN).unwrap(),
            f => panic!("{name}: format {f}"),
        };
        let out = parse_all(format, format!("{line}\n").as_bytes());
        let Some(want) = c.get("want") else {
            assert_eq!(rejected(&out, 1).reason, "format_mismatch", "{name}");
            continue;
        };
        let r = match &out[&1] {
            Out::Row(r) => r.as_ref().clone(),
            Out::Rejected(j) => {
                // VRL's combined also reads an optional "$gzip_ratio".
                let _ = difference("text-after-combined");
                assert_eq!(c["format"], "combined", "{name}: {j:?}");
                assert!(
                    j.detail.contains("$http_user_agent"),
                    "{name}: {}",
                    j.detail
                );
                let again = parse_all(
                    LogFormat::compile(COMPRESSION).unwrap(),
                    format!("{line}\n").as_bytes(),
                );
                row(&again, 1).clone()
            }
        };
        for (k, v) in want.as_object().unwrap() {
            let text = v.as_str();
            let at = format!("{name}: {k}");
            match k.as_str() {
                "client" | "remote_addr" => assert_eq!(r.remote_addr.as_deref(), text, "{at}"),
                "timestamp" => assert_eq!(r.time_us, rfc3339_us(text.unwrap()), "{at}"),
                "request" => {
                    let ours = match (&r.method, &r.uri, &r.protocol) {
                        (Some(m), Some(u), Some(p)) => Some(format!("{m} {u} {p}")),
                        _ => r.extra("request").map(str::to_string),
                    };
                    let theirs = peer_value(text).map(unescaped);
                    assert_eq!(ours, theirs, "{at}");
                }
                "status" => assert_eq!(r.status.map(u64::from), v.as_u64(), "{at}"),
                "upstream_status" => {
                    assert_eq!(
                        r.upstream_status,
                        vec![v.as_u64().map(|s| s as u16)],
                        "{at}"
                    )
                }
                "size" | "body_bytes_size" => {
                    assert_eq!(r.body_bytes_sent.map(|b| b as u64), v.as_u64(), "{at}")
                }
                "referer" | "http_referer" => {
                    assert_eq!(r.extra("http_referer"), peer_value(text), "{at}")
                }
                "agent" | "http_user_agent" => {
                    assert_eq!(r.extra("http_user_agent"), peer_value(text), "{at}")
                }
                "user" | "remote_user" => assert_eq!(r.extra("remote_user"), text, "{at}"),
                "compression" => assert_eq!(r.extra("gzip_ratio"), text, "{at}"),
                "http_x_forwarded_for"
                | "proxy_upstream_name"
                | "proxy_alternative_upstream_name" => {
                    assert_eq!(r.extra(k), text, "{at}")
                }
                "request_length" | "upstream_response_length" => {
                    assert_eq!(
                        r.extra(k).map(|x| x.parse::<u64>().unwrap()),
                        v.as_u64(),
                        "{at}"
                    )
                }
                "request_time" => assert_eq!(r.request_time_ms, Some(ms(v)), "{at}"),
                "upstream_response_time" => {
                    assert_eq!(r.upstream_response_ms, vec![Some(ms(v))], "{at}")
                }
                "upstream_addr" => {
                    let want: Vec<Option<String>> = peer_value(text)
                        .map(|a| Some(a.to_string()))
                        .into_iter()
                        .collect();
                    assert_eq!(r.upstream_addr, want, "{at}")
                }
                "req_id" => assert_eq!(r.request_id.as_deref(), text, "{at}"),
                other => panic!("{name}: VRL field {other} not compared"),
            }
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared} fields compared");
}
