//! Line-parser tests: the `overtime` and `combined` formats, upstream lists,
//! the three time variables, escapes and bad lines.

use super::{GatewayParser, LogFormat};
use overtime_model::{GatewayRecord, RejectedRecord, gateway_records, rejected_records};

const T0: i64 = 1_795_946_400_000_000; // 2026-11-29T10:00:00Z

fn parse(fmt: LogFormat, text: &str) -> (Vec<GatewayRecord>, Vec<RejectedRecord>) {
    let mut p = GatewayParser::new(fmt, "edge", 1);
    p.push_bytes(text.as_bytes(), 1);
    let (g, r) = p.finish();
    (gateway_records(&g).unwrap(), rejected_records(&r).unwrap())
}

fn overtime(text: &str) -> (Vec<GatewayRecord>, Vec<RejectedRecord>) {
    parse(LogFormat::builtin("overtime").unwrap(), text)
}

/// An `overtime` line with the upstream fields given.
fn ot_line(status: &str, rt: &str, uct: &str, uht: &str, urt: &str, us: &str, ua: &str) -> String {
    format!(
        "2001:db8::7 [2026-11-29T10:00:00+00:00] \"POST /v1/agents/run?x=1 HTTP/1.1\" {status} 512 \
         rt={rt} uct=\"{uct}\" uht=\"{uht}\" urt=\"{urt}\" us=\"{us}\" ua=\"{ua}\" \
         rid=9f2c4b1e8d7a6f5e4d3c2b1a0f9e8d7c tp=\"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\" \
         mw=\"90s\" llm=\"kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s\" llmd=\"47.2\""
    )
}

#[test]
fn overtime_format_fills_every_column() {
    let line = ot_line(
        "504",
        "60.001",
        "0.001, 0.000",
        "-, -",
        "30.000, 30.001",
        "504, 504",
        "10.0.0.5:8000, 10.0.0.6:8000",
    );
    let (rows, rej) = overtime(&line);
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert_eq!((r.source.as_str(), r.layer, r.line), ("edge", 1, 1));
    assert_eq!((r.time_us, r.time_precision_us), (T0, 1_000_000));
    assert_eq!(r.start_us(), T0 - 60_001_000);
    assert_eq!(r.remote_addr.as_deref(), Some("2001:db8::7"));
    assert_eq!(r.method.as_deref(), Some("POST"));
    assert_eq!(r.uri.as_deref(), Some("/v1/agents/run?x=1"));
    assert_eq!(r.protocol.as_deref(), Some("HTTP/1.1"));
    assert_eq!((r.status, r.body_bytes_sent), (Some(504), Some(512)));
    assert_eq!(r.request_time_ms, Some(60001.0));
    assert_eq!(r.upstream_connect_ms, vec![Some(1.0), Some(0.0)]);
    assert_eq!(r.upstream_header_ms, vec![None, None]);
    assert_eq!(r.upstream_response_ms, vec![Some(30000.0), Some(30001.0)]);
    assert_eq!(r.upstream_status, vec![Some(504), Some(504)]);
    assert_eq!(r.upstream_status_raw.as_deref(), Some("504, 504"));
    assert_eq!(
        r.upstream_addr,
        vec![Some("10.0.0.5:8000".into()), Some("10.0.0.6:8000".into())]
    );
    assert_eq!(
        r.request_id.as_deref(),
        Some("9f2c4b1e8d7a6f5e4d3c2b1a0f9e8d7c")
    );
    assert_eq!(
        r.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(r.max_wait_ms, Some(90_000.0));
    assert_eq!(
        r.llm_reason.as_deref(),
        Some("kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s")
    );
    assert_eq!(r.llm_duration_ms, Some(47_200.0));
    assert!(r.extra.is_empty());
}

#[test]
fn sums_and_tries_are_written_to_arrow() {
    use arrow::array::{AsArray, Float64Array, UInt32Array};
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    let line = ot_line(
        "502",
        "1.503",
        "-, 0.001",
        "-, 0.500",
        "1.0, 0.5 : 2.0",
        "502, 502 : 200",
        "a:1, b:2 : c:3",
    );
    p.push_line(line.as_bytes(), 7);
    let (g, _) = p.finish();
    let sum = g.column_by_name("upstream_response_ms_sum").unwrap();
    let sum: &Float64Array = sum.as_primitive();
    assert_eq!(sum.value(0), 3500.0);
    let hsum = g.column_by_name("upstream_header_ms_sum").unwrap();
    assert_eq!(
        hsum.as_primitive::<arrow::datatypes::Float64Type>()
            .value(0),
        500.0
    );
    let tries = g.column_by_name("upstream_tries").unwrap();
    let tries: &UInt32Array = tries.as_primitive();
    assert_eq!(tries.value(0), 3);
    let r = &gateway_records(&g).unwrap()[0];
    assert_eq!(r.line, 7);
    assert_eq!(r.upstream_connect_ms, vec![None, Some(1.0)]);
    assert_eq!(r.upstream_status, vec![Some(502), Some(502), Some(200)]);
    assert_eq!(r.upstream_addr.len(), 3);
}

#[test]
fn retried_statuses_and_null_tries() {
    let line = ot_line(
        "504",
        "60.002",
        "0.001, 0.002",
        "-, 0.001",
        "30.000, 30.001",
        "502, 504",
        "10.0.0.5:8000, 10.0.0.6:8000",
    );
    let (rows, rej) = overtime(&line);
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert_eq!(r.upstream_status, vec![Some(502), Some(504)]);
    assert_eq!(r.upstream_status_raw.as_deref(), Some("502, 504"));
    assert_eq!(
        r.upstream_header_ms,
        vec![None, Some(1.0)],
        "\"-, 0.001\": a null try then 1 ms"
    );
    assert_eq!(r.upstream_header_sum_ms(), Some(1.0));
    assert_eq!(r.upstream_connect_sum_ms(), Some(3.0));
    assert_eq!(r.upstream_tries(), 2);
}

#[test]
fn dash_alone_is_an_empty_list_and_dash_scalars_are_null() {
    let line = ot_line("400", "0.000", "-", "-", "-", "-", "-")
        .replace("rid=9f2c4b1e8d7a6f5e4d3c2b1a0f9e8d7c", "rid=-")
        .replace("mw=\"90s\"", "mw=\"-\"");
    let (rows, rej) = overtime(&line);
    assert!(rej.is_empty(), "{rej:?}");
    let r = &rows[0];
    assert!(
        r.upstream_connect_ms.is_empty()
            && r.upstream_status.is_empty()
            && r.upstream_addr.is_empty()
    );
    assert_eq!(r.upstream_tries(), 0);
    assert_eq!(r.upstream_status_raw, None);
    assert_eq!(r.upstream_response_sum_ms(), None);
    assert_eq!((r.request_id.as_deref(), r.max_wait_ms), (None, None));
}

#[test]
fn combined_format_with_quotes_and_binary_probe() {
    let text = concat!(
        "203.0.113.9 - alice [29/Nov/2026:10:00:00 +0000] \"GET /search?q=a\\x22b HTTP/1.1\" 200 1234 \"https://ex.com/\" \"Mozilla/5.0 (X11; Linux) \\x22quoted\\x22 agent\"\n",
        "198.51.100.4 - - [29/Nov/2026:10:00:01 +0000] \"\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xFC\\x03\\x03\" 400 157 \"-\" \"-\"\n",
    );
    let (rows, rej) = parse(LogFormat::builtin("combined").unwrap(), text);
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(rows.len(), 2);
    let a = &rows[0];
    assert_eq!(a.time_us, T0);
    assert_eq!(a.uri.as_deref(), Some("/search?q=a\"b"));
    assert_eq!(a.extra("remote_user"), Some("alice"));
    assert_eq!(
        a.extra("http_user_agent"),
        Some("Mozilla/5.0 (X11; Linux) \"quoted\" agent")
    );
    assert_eq!(a.extra("http_referer"), Some("https://ex.com/"));
    let b = &rows[1];
    assert_eq!(
        (b.status, b.method.as_deref(), b.uri.as_deref()),
        (Some(400), None, None)
    );
    assert_eq!(b.time_us, T0 + 1_000_000);
    assert_eq!(b.extra("http_referer"), None, "`-` is no value");
}

#[test]
fn a_refused_request_line_keeps_its_bytes_exactly_as_nginx_wrote_them() {
    // A TLS hello sent to a plain-HTTP port: nginx answers 400 and logs the
    // bytes it read as `\xHH`. They are not UTF-8 text, so the kept
    // request is the text nginx wrote, not U+FFFD in place of each byte.
    let hello = r"\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03";
    let line =
        format!("198.51.100.4 - - [29/Nov/2026:10:00:01 +0000] \"{hello}\" 400 157 \"-\" \"-\"");
    let (rows, rej) = parse(LogFormat::builtin("combined").unwrap(), &line);
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(
        (rows[0].status, rows[0].method.as_deref()),
        (Some(400), None)
    );
    assert_eq!(rows[0].extra("request"), Some(hello));
    // Bytes that are text are unescaped as before.
    let (rows, _) = parse(
        LogFormat::builtin("combined").unwrap(),
        &line.replace(hello, r"PATCHp /caf\xC3\xA9 HTTP/1.1"),
    );
    assert_eq!(rows[0].extra("request"), Some("PATCHp /café HTTP/1.1"));
    // With escape=json nginx writes such bytes raw: kept as `\xHH` too, in
    // the row and in a rejection's raw line.
    let f = LogFormat::compile(r#"escape=json '{"s":$status,"r":"$request"}'"#).unwrap();
    let mut p = GatewayParser::new(f, "edge", 0);
    p.push_line(b"{\"s\":400,\"r\":\"\\u0016\xfc\\u0003\"}", 1);
    p.push_line(b"{\"s\":x,\"r\":\"\xfc\"}", 2);
    let (g, r) = p.finish();
    let rows = gateway_records(&g).unwrap();
    assert_eq!(rows[0].extra("request"), Some("\u{16}\\xFC\u{3}"));
    let rej = rejected_records(&r).unwrap();
    assert_eq!(rej[0].raw, r#"{"s":x,"r":"\xFC"}"#);
}

#[test]
fn three_time_variables_and_their_precision() {
    let f = |s: &str| LogFormat::compile(s).unwrap();
    let (r, _) = parse(f("'$msec $status'"), "1795946400.123 200");
    assert_eq!((r[0].time_us, r[0].time_precision_us), (T0 + 123_000, 1000));
    let (r, _) = parse(
        f("'[$time_local] $status'"),
        "[29/Nov/2026:11:00:00 +0100] 200",
    );
    assert_eq!((r[0].time_us, r[0].time_precision_us), (T0, 1_000_000));
    let (r, _) = parse(
        f("'$time_iso8601 $msec $status'"),
        "2026-11-29T10:00:00+00:00 1795946400.999 200",
    );
    assert_eq!(r[0].time_us, T0 + 999_000, "$msec is preferred");
    assert_eq!(
        r[0].extra("time_iso8601"),
        Some("2026-11-29T10:00:00+00:00")
    );
    let (r, _) = parse(f("'$status $request_time'"), "200 0.250");
    assert_eq!((r[0].time_us, r[0].time_precision_us), (0, 0));
    let (_, rej) = parse(
        f("'$time_iso8601 $status'"),
        "2026-11-29T25:00:00+00:00 200",
    );
    assert_eq!(rej[0].reason, "bad_time");
    assert!(rej[0].detail.contains("$time_iso8601"), "{}", rej[0].detail);
}

#[test]
fn json_escape_format() {
    let f = LogFormat::compile(
        "escape=json '{\"time\":\"$time_iso8601\",\"req\":\"$request\",\"ua\":\"$http_user_agent\",\"s\":$status}'",
    )
    .unwrap();
    let line = r#"{"time":"2026-11-29T10:00:00+00:00","req":"GET /caf\u00e9?a=\"b\" HTTP/2.0","ua":"curl/8 \\ tab\there","s":200}"#;
    let (r, rej) = parse(f, line);
    assert!(rej.is_empty(), "{rej:?}");
    assert_eq!(r[0].uri.as_deref(), Some("/café?a=\"b\""));
    assert_eq!(r[0].protocol.as_deref(), Some("HTTP/2.0"));
    assert_eq!(r[0].extra("http_user_agent"), Some("curl/8 \\ tab\there"));
}

#[test]
fn escape_none_keeps_backslashes_and_raw_bytes() {
    let f = LogFormat::compile("escape=none '$status \"$http_user_agent\"'").unwrap();
    let mut p = GatewayParser::new(f, "x", 0);
    p.push_line(b"200 \"a\\x22b \xff\"", 1);
    let (g, _) = p.finish();
    let r = &gateway_records(&g).unwrap()[0];
    // The raw byte that is not UTF-8 is kept as `\xFF`, not lost as U+FFFD.
    assert_eq!(r.extra("http_user_agent"), Some("a\\x22b \\xFF"));
}

#[test]
fn bad_lines_are_rejected_with_reason_and_line_number() {
    let good = ot_line(
        "200",
        "0.100",
        "0.001",
        "0.050",
        "0.099",
        "200",
        "10.0.0.5:8000",
    );
    let text = [
        good.clone(),
        good.replace(" 200 512 ", " 2x0 512 "),
        good.replace("rt=0.100", "rt=fast"),
        good.replace("us=\"200\"", "us=\"200, oops\""),
        good.replace("2026-11-29T10", "2026-11-29X10"),
        good[..good.len() / 2].to_string(),
        "   \t".to_string(),
        String::new(),
        good.clone(),
    ]
    .join("\n");
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    assert_eq!(p.push_bytes(text.as_bytes(), 100), 9);
    p.push_line(b"\xc3\x28 not utf8", 200);
    assert_eq!((p.rows(), p.rejected_rows()), (2, 6));
    let counts: Vec<_> = p
        .rejected_by_reason()
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("bad_number", 3),
            ("bad_time", 1),
            ("format_mismatch", 1),
            ("not_utf8", 1)
        ]
    );
    let (g, r) = p.finish();
    let lines: Vec<u64> = gateway_records(&g)
        .unwrap()
        .iter()
        .map(|r| r.line)
        .collect();
    assert_eq!(lines, vec![100, 108]);
    let rej = rejected_records(&r).unwrap();
    let got: Vec<_> = rej.iter().map(|r| (r.line, r.reason.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (101, "bad_number"),
            (102, "bad_number"),
            (103, "bad_number"),
            (104, "bad_time"),
            (105, "format_mismatch"),
            (200, "not_utf8")
        ]
    );
    assert!(rej[0].detail.contains("$status"), "{}", rej[0].detail);
    assert!(rej[1].detail.contains("$request_time"), "{}", rej[1].detail);
    assert!(rej[2].detail.contains("oops"), "{}", rej[2].detail);
    assert_eq!(rej[0].raw, text.lines().nth(1).unwrap());
    assert_eq!(rej[0].source, "edge");
    assert_eq!(
        p.rejected_by_reason().values().sum::<u64>(),
        6,
        "counts survive finish()"
    );
    assert_eq!(p.rows(), 0);
}

#[test]
fn unparsable_headers_keep_the_line_and_the_raw_value() {
    let line = ot_line("200", "0.1", "-", "-", "-", "-", "-")
        .replace("mw=\"90s\"", "mw=\"soon\"")
        .replace("llmd=\"47.2\"", "llmd=\"n/a\"");
    let (r, rej) = overtime(&line);
    assert!(rej.is_empty());
    assert_eq!((r[0].max_wait_ms, r[0].llm_duration_ms), (None, None));
    assert_eq!(r[0].extra("http_x_max_wait"), Some("soon"));
    assert_eq!(r[0].extra("upstream_http_x_llm_duration"), Some("n/a"));
}

#[test]
fn request_parts_and_fallback_variables() {
    let f = LogFormat::compile(
        "'$request_method $scheme://$host$request_uri $http_x_request_id $bytes_sent $status'",
    )
    .unwrap();
    let (r, rej) = parse(f, "PUT https://api.ex.com/v1/x?y=1 req-77 900 201");
    assert!(rej.is_empty(), "{rej:?}");
    let r = &r[0];
    assert_eq!(
        (r.method.as_deref(), r.uri.as_deref()),
        (Some("PUT"), Some("/v1/x?y=1"))
    );
    assert_eq!(r.request_id.as_deref(), Some("req-77"));
    assert_eq!(r.body_bytes_sent, Some(900));
    assert_eq!(r.extra("host"), Some("api.ex.com"));
    assert_eq!(r.extra("scheme"), Some("https"));
}

#[test]
fn very_long_lines_are_kept_and_raw_is_cut() {
    let long_uri = "/".to_string() + &"a".repeat(100_000);
    let f = LogFormat::builtin("combined").unwrap();
    let line = format!(
        "10.0.0.1 - - [29/Nov/2026:10:00:00 +0000] \"GET {long_uri} HTTP/1.1\" 414 0 \"-\" \"-\""
    );
    let (r, _) = parse(f.clone(), &line);
    assert_eq!(r[0].uri.as_deref().map(str::len), Some(100_001));
    let (_, rej) = parse(f, &line.replace(" 414 ", " 4_4 "));
    assert_eq!(rej[0].raw.len(), overtime_model::RAW_KEEP);
}
