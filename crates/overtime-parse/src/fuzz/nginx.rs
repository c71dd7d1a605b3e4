//! Fuzz targets for the nginx side: the `log_format` compiler, the
//! access-line parser, and round trips of lines nginx would write.

use super::{assert_duration, lines};
use crate::llm_reason::parse_llm_reason;
use crate::nginx::{Escape, GatewayParser, LogFormat, Segment};
use overtime_model::{GatewayRecord, gateway_records, rejected_records};
use std::collections::BTreeSet;

/// The formats arbitrary lines are parsed against (the first input byte
/// picks one): the `overtime` format, nginx's `combined`, an
/// `escape=json` format with `$msec`, a `$time_local` format with every
/// upstream list, adjacent variables split by shape, and `escape=none`.
pub const LINE_FORMATS: &[&str] = &[
    crate::nginx::OVERTIME_LOG_FORMAT,
    crate::nginx::COMBINED_BODY,
    r#"escape=json '{"t":$msec,"s":$status,"rt":$request_time,"urt":"$upstream_response_time","us":"$upstream_status","tp":"$http_traceparent","ua":"$http_user_agent","mw":"$http_x_max_wait"}'"#,
    r#"'$remote_addr - [$time_local] "$request" $status $body_bytes_sent $request_time "$upstream_connect_time" "$upstream_header_time" "$upstream_addr" $http_x_request_id "$upstream_http_x_llm_reason" $upstream_http_x_llm_duration'"#,
    "'$scheme://$host$request_uri $status$request_time $tenant$status [$time_iso8601]'",
    "escape=none '$msec|$status|$uri|$http_user_agent'",
];

/// Rejection reasons the line parser may give.
const LINE_REASONS: &[&str] = &["format_mismatch", "bad_time", "bad_number", "not_utf8"];

/// Compiles arbitrary text as a `log_format` (bare body and whole
/// nginx.conf). A compiled format has no empty or adjacent literals and
/// only `[a-z0-9_]+` variable names, prints back to text that compiles to
/// the same format, builds a parser, and a line rendered from it with a
/// plausible value per variable parses into one row (when the format is
/// one the documented cutting rules can read back unambiguously).
pub fn check_log_format(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match LogFormat::compile(&text) {
        Ok(f) => check_compiled(&f),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let name = text.split_whitespace().nth(1).unwrap_or("main");
    if let Ok(f) = LogFormat::from_nginx_conf(&text, name) {
        check_compiled(&f);
    }
}

fn check_compiled(f: &LogFormat) {
    let segs = f.segments();
    assert!(!segs.is_empty(), "a compiled format has segments");
    for (i, s) in segs.iter().enumerate() {
        match s {
            Segment::Literal(l) => {
                assert!(!l.is_empty(), "empty literal in {segs:?}");
                assert!(
                    !matches!(segs.get(i + 1), Some(Segment::Literal(_))),
                    "adjacent literals not merged: {segs:?}"
                );
            }
            Segment::Variable(v) => assert!(
                !v.is_empty()
                    && v.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "bad variable name {v:?}"
            ),
        }
    }
    let printed = f.to_string();
    let again = LogFormat::compile(&printed)
        .unwrap_or_else(|e| panic!("printed format {printed:?} does not compile: {e}"));
    assert_eq!(&again, f, "printed as {printed:?}");
    check_rendered_line(f);
}

/// A value nginx could log for `var`, valid for the column it feeds.
fn sample(var: &str) -> &'static str {
    match var {
        "status" | "upstream_status" => "200",
        "msec" => "1795946400.123",
        "time_iso8601" => "2026-11-29T10:00:00+00:00",
        "time_local" => "29/Nov/2026:10:00:00 +0000",
        "request_time"
        | "upstream_connect_time"
        | "upstream_header_time"
        | "upstream_response_time" => "0.001",
        "body_bytes_sent" | "bytes_sent" => "5",
        "request" => "GET /a HTTP/1.1",
        "request_uri" | "uri" => "/a",
        "request_method" => "GET",
        "server_protocol" => "HTTP/1.1",
        "remote_addr" => "10.0.0.1",
        "server_addr" | "realip_remote_addr" => "10.0.0.3",
        "binary_remote_addr" => "0a000001",
        "connection"
        | "connection_requests"
        | "request_length"
        | "pid"
        | "server_port"
        | "remote_port"
        | "content_length" => "7",
        "upstream_response_length" | "upstream_bytes_received" | "upstream_bytes_sent" => "5",
        "upstream_addr" => "10.0.0.2:80",
        "request_id" | "http_x_request_id" => "4bf92f3577b34da6a3ce929d0e0e4736",
        "http_traceparent" => "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "http_x_max_wait" | "upstream_http_x_llm_duration" => "2s",
        "upstream_http_x_llm_reason" => "decode=1s",
        _ => "v",
    }
}

/// Renders one line of `f` and checks it parses, when no value can be cut
/// short by the literal after it and no two variables touch.
fn check_rendered_line(f: &LogFormat) {
    let segs = f.segments();
    let mut line = String::new();
    for (i, s) in segs.iter().enumerate() {
        match s {
            Segment::Literal(l) => line.push_str(l),
            Segment::Variable(v) => {
                let value = sample(v);
                match segs.get(i + 1) {
                    Some(Segment::Variable(_)) => return,
                    Some(Segment::Literal(l))
                        if format!("{value}{l}").find(l.as_str()) != Some(value.len()) =>
                    {
                        return;
                    }
                    _ => {}
                }
                line.push_str(value);
            }
        }
    }
    if line.contains('\n') || line.ends_with('\r') || line.trim().is_empty() {
        return;
    }
    let mut p = GatewayParser::new(f.clone(), "fuzz", 0);
    p.push_line(line.as_bytes(), 1);
    let (good, bad) = p.finish();
    let rejected = rejected_records(&bad).expect("rejected batch reads back");
    assert!(
        rejected.is_empty(),
        "format {f} rejected its own line {line:?}: {rejected:?}"
    );
    let recs = gateway_records(&good).expect("gateway batch reads back");
    assert_eq!(recs.len(), 1, "{line:?}");
    if f.variables().any(|v| v == "status") {
        assert_eq!(recs[0].status, Some(200), "format {f}, line {line:?}");
    }
}

/// Parses arbitrary bytes as access-log lines of one of
/// [`LINE_FORMATS`] (first byte), or, when the first byte is 0xff, of
/// the format written on the input's first line. Every non-blank line is
/// exactly one row or one rejection with a known reason; counters agree;
/// every row's durations are finite and non-negative, its trace id is
/// 32 lowercase hex digits, its start is not after its end.
pub fn check_nginx_line(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let (format, body) = if sel == 0xff {
        let (head, rest) = match body.iter().position(|&b| b == b'\n') {
            Some(k) => (&body[..k], &body[k + 1..]),
            None => (body, &body[body.len()..]),
        };
        match LogFormat::compile(&String::from_utf8_lossy(head)) {
            Ok(f) => (f, rest),
            Err(_) => return,
        }
    } else {
        let text = LINE_FORMATS[usize::from(sel) % LINE_FORMATS.len()];
        (
            LogFormat::compile(text).expect("fuzz formats compile"),
            body,
        )
    };
    check_lines(format, body);
}

pub(crate) fn check_lines(format: LogFormat, body: &[u8]) {
    let escape = format.escape();
    let mut p = GatewayParser::new(format, "fuzz", 0);
    let split = lines(body);
    assert_eq!(p.push_bytes(body, 1), split.len() as u64, "lines consumed");
    let wanted: BTreeSet<u64> = split.iter().filter(|l| !l.2).map(|l| l.0).collect();
    assert_eq!(
        p.total_rows() + p.total_rejected(),
        wanted.len() as u64,
        "good + rejected == non-blank lines in"
    );
    assert_eq!(p.rows() + p.rejected_rows(), wanted.len());
    let by_reason: u64 = p.rejected_by_reason().values().sum();
    assert_eq!(by_reason, p.total_rejected());
    let (good, bad) = p.finish();
    let recs = gateway_records(&good).expect("gateway batch reads back");
    let rejected = rejected_records(&bad).expect("rejected batch reads back");
    let mut seen = BTreeSet::new();
    for r in &rejected {
        assert!(LINE_REASONS.contains(&r.reason.as_str()), "{r:?}");
        assert!(r.reason != "not_utf8" || escape == Escape::Default, "{r:?}");
        assert!(!r.detail.is_empty());
        assert!(seen.insert(r.line), "line {} counted twice", r.line);
    }
    for r in &recs {
        check_gateway_record(r);
        assert!(seen.insert(r.line), "line {} counted twice", r.line);
    }
    assert_eq!(seen, wanted, "every non-blank line is a row or a rejection");
}

/// What every parsed gateway row must satisfy.
pub(crate) fn check_gateway_record(r: &GatewayRecord) {
    assert_duration("request_time_ms", r.request_time_ms);
    for (what, list) in [
        ("upstream_connect_ms", &r.upstream_connect_ms),
        ("upstream_header_ms", &r.upstream_header_ms),
        ("upstream_response_ms", &r.upstream_response_ms),
    ] {
        list.iter().for_each(|v| assert_duration(what, *v));
    }
    assert_duration("upstream_response_sum_ms", r.upstream_response_sum_ms());
    assert_duration("max_wait_ms", r.max_wait_ms);
    assert_duration("llm_duration_ms", r.llm_duration_ms);
    assert!(
        [0, 1_000, 1_000_000].contains(&r.time_precision_us),
        "{r:?}"
    );
    let rt_us = (r.request_time_ms.unwrap_or(0.0) * 1000.0).round() as i64;
    assert!(
        r.time_us.checked_sub(rt_us).is_some(),
        "start = time - request_time overflows: {r:?}"
    );
    if let Some(t) = &r.trace_id {
        assert!(
            t.len() == 32
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && t.bytes().any(|b| b != b'0'),
            "bad trace id {t:?}"
        );
    }
    for (k, v) in &r.extra {
        assert!(
            !k.is_empty() && v != "-" && !v.is_empty(),
            "extra {k}={v:?}"
        );
    }
    let phases = parse_llm_reason(r.llm_reason.as_deref().unwrap_or("-"));
    phases.iter().for_each(|(n, v)| assert_duration(n, Some(v)));
}

pub use super::roundtrip::check_nginx_roundtrip;
