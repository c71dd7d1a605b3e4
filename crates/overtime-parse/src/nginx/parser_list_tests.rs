//! Line-parser tests of unquoted `$upstream_*` lists (the
//! ingress-nginx format), text outside the format, and `$request` lines
//! nginx itself refused.

use super::{GatewayParser, LogFormat};
use overtime_model::{GatewayRecord, RejectedRecord, gateway_records, rejected_records};

fn parse(fmt: &str, text: &str) -> (Vec<GatewayRecord>, Vec<RejectedRecord>) {
    let f = LogFormat::builtin(fmt)
        .or_else(|| LogFormat::compile(fmt).ok())
        .unwrap();
    let mut p = GatewayParser::new(f, "edge", 0);
    p.push_bytes(text.as_bytes(), 1);
    let (g, r) = p.finish();
    (gateway_records(&g).unwrap(), rejected_records(&r).unwrap())
}

/// An ingress-nginx line with the given request and upstream part.
fn ingress(request: &str, status: &str, upstream: &str) -> String {
    format!(
        "192.168.64.14 - - [07/Feb/2020:12:02:42 +0000] \"{request}\" {status} 61 \"-\" \
         \"Mozilla/5.0 (Macintosh; Intel Mac OS X 10.14; rv:72.0) Gecko/20100101 Firefox/72.0\" \
         348 0.001 [default-web2-8080] [] {upstream}"
    )
}

const T: i64 = 1_581_076_962_000_000; // 2020-02-07T12:02:42Z

#[test]
fn a_retried_ingress_request_keeps_every_upstream_in_order() {
    // The exact line of the issue (Beats' ingress_controller test log).
    let line = ingress(
        "GET /v2/some HTTP/1.1",
        "200",
        "172.17.0.6:8080, 172.17.0.7:8080 61, 100 0.100, 0.004 200, 203 835136ae24486dbb4156dcbe21f5d402",
    );
    let (rows, rej) = parse("ingress-nginx", &line);
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert_eq!(r.time_us, T);
    assert_eq!(r.remote_addr.as_deref(), Some("192.168.64.14"));
    assert_eq!(
        (r.method.as_deref(), r.uri.as_deref(), r.protocol.as_deref()),
        (Some("GET"), Some("/v2/some"), Some("HTTP/1.1"))
    );
    assert_eq!((r.status, r.body_bytes_sent), (Some(200), Some(61)));
    assert_eq!(r.request_time_ms, Some(1.0));
    assert_eq!(
        r.upstream_addr,
        vec![
            Some("172.17.0.6:8080".to_string()),
            Some("172.17.0.7:8080".to_string())
        ]
    );
    assert_eq!(r.upstream_response_ms, vec![Some(100.0), Some(4.0)]);
    assert_eq!(r.upstream_status, vec![Some(200), Some(203)]);
    assert_eq!(r.upstream_status_raw.as_deref(), Some("200, 203"));
    assert_eq!(r.upstream_tries(), 2);
    assert_eq!(
        r.request_id.as_deref(),
        Some("835136ae24486dbb4156dcbe21f5d402")
    );
    assert_eq!(r.extra("upstream_response_length"), Some("61, 100"));
    assert_eq!(r.extra("request_length"), Some("348"));
    assert_eq!(r.extra("proxy_upstream_name"), Some("default-web2-8080"));
    assert_eq!(
        r.extra("proxy_alternative_upstream_name"),
        None,
        "[] is empty"
    );
    assert_eq!(r.extra("remote_user"), None);
}

#[test]
fn an_internal_redirect_in_ingress_keeps_both_groups() {
    // A custom error page: the second group is the default backend. The
    // request id is the client's X-Request-ID, spaces included.
    let line = ingress(
        "GET / HTTP/1.1",
        "404",
        "10.0.0.1:80 : 10.0.0.2:8080 0 : 21 0.002 : 0.001 503 : 404 my request id",
    );
    let (rows, rej) = parse("ingress-nginx", &line);
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert_eq!(r.upstream_addr.len(), 2);
    assert_eq!(r.upstream_response_ms, vec![Some(2.0), Some(1.0)]);
    assert_eq!(r.upstream_status, vec![Some(503), Some(404)]);
    assert_eq!(r.extra("upstream_response_length"), Some("0 : 21"));
    assert_eq!(r.request_id.as_deref(), Some("my request id"));
}

#[test]
fn a_list_that_cannot_be_split_without_guessing_is_rejected() {
    // Alone, "502 : 200 abc" could be "502" then ": 200 abc", or
    // "502 : 200" then "abc".
    let (rows, rej) = parse("'$upstream_status $http_x_tag'", "502 : 200 abc");
    assert!(rows.is_empty());
    assert_eq!(rej[0].reason, "format_mismatch");
    assert!(
        rej[0].detail.contains("$upstream_status"),
        "{}",
        rej[0].detail
    );
    // A missing list (one value short) never shifts the others.
    let short = ingress(
        "GET / HTTP/1.1",
        "200",
        "172.17.0.5:8080 0.000 200 0f76ea730f282d5759018eb756b23b14",
    );
    let (rows, rej) = parse("ingress-nginx", &short);
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(rej[0].reason, "format_mismatch");
    assert!(rej[0].detail.contains("$upstream_"), "{}", rej[0].detail);
}

#[test]
fn unquoted_lists_parse_the_same_as_quoted_ones() {
    let q = "'$status \"$upstream_addr\" \"$upstream_response_time\" \"$upstream_status\" x'";
    let u = "'$status $upstream_addr $upstream_response_time $upstream_status x'";
    let vals = ["a:1, b:2 : c:3", "1.0, 0.5 : 2.0", "502, 502 : 200"];
    let (rq, e1) = parse(
        q,
        &format!("200 \"{}\" \"{}\" \"{}\" x", vals[0], vals[1], vals[2]),
    );
    let (ru, e2) = parse(u, &format!("200 {} {} {} x", vals[0], vals[1], vals[2]));
    assert!(e1.is_empty() && e2.is_empty(), "{e1:?} {e2:?}");
    assert_eq!(rq[0].upstream_addr, ru[0].upstream_addr);
    assert_eq!(rq[0].upstream_response_ms, ru[0].upstream_response_ms);
    assert_eq!(ru[0].upstream_status, vec![Some(502), Some(502), Some(200)]);
}

#[test]
fn text_after_the_format_is_a_mismatch_not_part_of_the_user_agent() {
    let line = "10.0.0.1 - - [29/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"curl/8.0\" \"-\"";
    let (rows, rej) = parse("combined", line);
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(rej[0].reason, "format_mismatch");
    assert!(
        rej[0].detail.contains("$http_user_agent"),
        "{}",
        rej[0].detail
    );
    // Without the extra text the line is good.
    let good = line.strip_suffix(" \"-\"").unwrap();
    let (rows, rej) = parse("combined", good);
    assert!(rej.is_empty());
    assert_eq!(rows[0].extra("http_user_agent"), Some("curl/8.0"));
}

#[test]
fn text_before_the_format_is_a_mismatch_not_the_remote_address() {
    let tail = " - - [29/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"curl/8.0\"";
    for prefix in [
        "example.com 10.0.0.1",
        "203.0.113.7, 10.0.0.1",
        "example.com",
    ] {
        let (rows, rej) = parse("combined", &format!("{prefix}{tail}"));
        assert!(rows.is_empty(), "{prefix}: {rows:?}");
        assert_eq!(rej[0].reason, "format_mismatch", "{prefix}");
        assert!(rej[0].detail.contains("$remote_addr"), "{}", rej[0].detail);
    }
    for addr in ["10.0.0.1", "2a02:cf40::", "unix:"] {
        let (rows, rej) = parse("combined", &format!("{addr}{tail}"));
        assert!(rej.is_empty(), "{addr}: {rej:?}");
        assert_eq!(rows[0].remote_addr.as_deref(), Some(addr));
    }
}

#[test]
fn a_request_nginx_refused_is_kept_raw_without_method_or_uri() {
    for raw in [
        "PATCHp /products/42 HTTP/1.1",
        "geti /products/42 HTTP/1.1",
        "hello",
    ] {
        let line = ingress(raw, "400", "- - - - 4c7d2079340e68353c7d0dfff00b904b");
        let (rows, rej) = parse("ingress-nginx", &line);
        assert!(rej.is_empty(), "{rej:?}");
        let r = &rows[0];
        assert_eq!(
            (r.method.as_deref(), r.uri.as_deref(), r.protocol.as_deref()),
            (None, None, None)
        );
        assert_eq!(r.extra("request"), Some(raw));
        assert!(r.upstream_addr.is_empty() && r.upstream_status.is_empty());
    }
    let (rows, _) = parse(
        "ingress-nginx",
        &ingress("GET /ok HTTP/1.1", "200", "- - - - x"),
    );
    assert_eq!(
        rows[0].extra("request"),
        None,
        "a good request line is split, not kept"
    );
}

#[test]
fn text_after_a_format_ending_in_a_number_is_a_mismatch_but_a_bad_number_is_not() {
    let f = "'$status rt=$request_time'";
    let (rows, rej) = parse(f, "504 rt=60.001 \"-\"");
    assert!(rows.is_empty());
    assert_eq!(rej[0].reason, "format_mismatch");
    assert!(rej[0].detail.contains("$request_time"), "{}", rej[0].detail);
    let (_, rej) = parse(f, "504 rt=slow");
    assert_eq!(rej[0].reason, "bad_number");
}

#[test]
fn three_unquoted_lists_in_a_row_between_pipes_keep_every_try() {
    // Issue 37: nginx writes this whenever it retried an upstream; any two
    // of these lists in a row parsed, three were refused as a mismatch.
    let f = "'$status|$upstream_addr|$upstream_status|$upstream_connect_time'";
    let (rows, rej) = parse(f, "200|10.0.0.1:80, 10.0.0.2:80|502, 200|0.1, 0.000");
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert_eq!(r.status, Some(200));
    assert_eq!(
        r.upstream_addr,
        vec![
            Some("10.0.0.1:80".to_string()),
            Some("10.0.0.2:80".to_string())
        ]
    );
    assert_eq!(r.upstream_status, vec![Some(502), Some(200)]);
    assert_eq!(r.upstream_connect_ms, vec![Some(100.0), Some(0.0)]);
    // The same with three tries across two upstream groups, and with one.
    let (rows, rej) = parse(
        f,
        "504|10.0.0.1:80, 10.0.0.2:80 : unix:/run/b.sock|502, 502 : 504|0.001, - : 0.002",
    );
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(
        rows[0].upstream_status,
        vec![Some(502), Some(502), Some(504)]
    );
    assert_eq!(
        rows[0].upstream_connect_ms,
        vec![Some(1.0), None, Some(2.0)]
    );
    let (rows, rej) = parse(f, "200|10.0.0.1:80|200|0.000");
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(rows[0].upstream_addr, vec![Some("10.0.0.1:80".to_string())]);
}

#[test]
fn a_line_nginx_could_have_written_two_ways_is_refused_not_guessed() {
    // An address may hold a `|` (a UNIX socket path), and so may a
    // header: "a, b|c|d" is addresses "a, b" then tag "c|d", or "a, b|c"
    // then "d". Nothing on the line tells which.
    let f = "'$upstream_addr|$http_x_tag'";
    let (rows, rej) = parse(f, "10.0.0.1:80, unix:/s|c|d");
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(rej[0].reason, "format_mismatch");
    assert!(
        rej[0].detail.contains("$upstream_addr"),
        "{}",
        rej[0].detail
    );
    // Told apart by the other lists: all of a line's lists have one shape,
    // so one address (one status) cannot be "10.0.0.1:80|x, y".
    let g = "'$upstream_addr|$http_x_tag|$upstream_status'";
    let (rows, rej) = parse(g, "10.0.0.1:80|x, y|z|502");
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(rows[0].extra("http_x_tag"), Some("x, y|z"));
}
