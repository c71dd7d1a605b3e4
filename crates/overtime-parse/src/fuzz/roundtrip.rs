//! The nginx round trip: a request generated from the fuzz bytes, written
//! the way nginx writes it (the `overtime` format, an `escape=json`
//! format, or `combined` with `escape=default` `\xHH` escapes), must parse
//! back to exactly that request.

use super::nginx::check_gateway_record;
use super::unstructured::Unstructured;
use crate::llm_reason::parse_llm_reason;
use crate::nginx::{GatewayParser, LogFormat};
use chrono::{DateTime, FixedOffset};
use overtime_model::{GatewayRecord, gateway_records, rejected_records};

/// The `escape=json` format of the round trip.
const JSON_FORMAT: &str = r#"escape=json '{"t":$msec,"s":$status,"ua":"$http_user_agent","ref":"$http_referer","rt":$request_time}'"#;

/// First byte: 0 the `overtime` format, 1 `escape=json`, 2 `combined`;
/// the rest generates the request. See the module doc.
pub fn check_nginx_roundtrip(data: &[u8]) {
    let mut u = Unstructured::new(data);
    match u.pick(3) {
        0 => overtime_format(&mut u),
        1 => json_format(&mut u),
        _ => combined_format(&mut u),
    }
}

/// Parses one line and returns its row, failing on a rejection.
fn parse_one(format: LogFormat, line: &str) -> GatewayRecord {
    let mut p = GatewayParser::new(format, "rt", 0);
    p.push_line(line.as_bytes(), 1);
    let (good, bad) = p.finish();
    let rej = rejected_records(&bad).expect("rejected batch reads back");
    assert!(rej.is_empty(), "rendered line rejected: {line:?}: {rej:?}");
    let mut recs = gateway_records(&good).expect("gateway batch reads back");
    assert_eq!(recs.len(), 1, "{line:?}");
    let r = recs.remove(0);
    check_gateway_record(&r);
    r
}

/// A time between 1970 and 2100 with a UTC offset in quarter hours.
pub(crate) fn time(u: &mut Unstructured) -> (DateTime<FixedOffset>, i64) {
    let secs = u.range(0, 4_102_444_799) as i64;
    let off = (u.range(0, 112) as i32 - 56) * 900;
    let tz = FixedOffset::east_opt(off).expect("offset within ±14h");
    let t = DateTime::from_timestamp(secs, 0)
        .expect("in range")
        .with_timezone(&tz);
    (t, secs * 1_000_000)
}

/// An `$upstream_*` list of `n` tries (`-` for a missing value), with the
/// expected parsed items; `sep_group` puts a `" : "` before the last try.
fn list<T>(
    n: usize,
    u: &mut Unstructured,
    sep_group: bool,
    mut item: impl FnMut(&mut Unstructured) -> Option<(String, T)>,
) -> (String, Vec<Option<T>>) {
    let mut text = String::new();
    let mut want = Vec::new();
    for i in 0..n {
        if i > 0 {
            text.push_str(if sep_group && i + 1 == n { " : " } else { ", " });
        }
        match item(u) {
            Some((s, v)) => {
                text.push_str(&s);
                want.push(Some(v));
            }
            None => {
                text.push('-');
                want.push(None);
            }
        }
    }
    if text.is_empty() || text == "-" {
        return ("-".into(), Vec::new());
    }
    (text, want)
}

fn overtime_format(u: &mut Unstructured) {
    let (t, time_us) = time(u);
    let addr = format!("{}.{}.{}.{}", u.byte(), u.byte(), u.byte(), u.byte());
    let method = u.choose(&["GET", "POST", "PUT", "DELETE", "PATCH"]);
    let uri = format!("/{}", u.text(b"abcxyz0189/._~-?=&%", 40));
    let status = u.range(100, 599) as u16;
    let bytes = u64::from(u.u32());
    let (rt, rt_ms) = u.nginx_secs(10_000_000);
    let tries = u.pick(4);
    let group = u.pick(2) == 1;
    let secs = |u: &mut Unstructured| (u.pick(4) > 0).then(|| u.nginx_secs(600_000));
    let (uct, uct_v) = list(tries, u, group, secs);
    let (uht, uht_v) = list(tries, u, group, secs);
    let (urt, urt_v) = list(tries, u, group, secs);
    let (us, us_v) = list(tries, u, group, |u| {
        let s = u.range(100, 599) as u16;
        (u.pick(4) > 0).then(|| (s.to_string(), s))
    });
    let (ua, ua_v) = list(tries, u, group, |u| {
        let a = match u.pick(3) {
            0 => format!("10.0.0.{}:8000", u.byte()),
            1 => format!("[fd00::{:x}]:443", u.byte()),
            _ => "unix:/run/llm.sock".to_string(),
        };
        (u.pick(4) > 0).then(|| (a.clone(), a))
    });
    let rid = if u.pick(2) == 0 {
        "-".into()
    } else {
        u.hex(32)
    };
    let tp = match u.pick(3) {
        0 => "-".to_string(),
        1 => format!("00-{}-{}-01", u.hex(32), u.hex(16)),
        _ => format!("00-{}-{}-01", u.hex(32).to_uppercase(), u.hex(16)),
    };
    let (mw, mw_v) = match u.pick(4) {
        0 => ("-".to_string(), None),
        1 => {
            let n = u.range(0, 100_000);
            (format!("{n}ms"), Some(n as f64))
        }
        2 => {
            let n = u.range(0, 10_000);
            (n.to_string(), Some(n as f64 * 1000.0))
        }
        _ => {
            let (s, ms) = u.nginx_secs(1_000_000);
            (format!("{s}s"), Some(ms))
        }
    };
    let names = ["queue", "kv_cache_build", "decode_loop", "io_wait"];
    let mut phases = Vec::new();
    for name in names {
        if u.pick(2) == 1 {
            let ms = u.range(0, 999_999);
            phases.push((name, ms as f64));
        }
    }
    let llm = if phases.is_empty() {
        "-".to_string()
    } else {
        let parts: Vec<String> = phases.iter().map(|(n, ms)| format!("{n}={ms}ms")).collect();
        parts.join(",")
    };
    let (llmd, llmd_v) = match u.pick(2) {
        0 => ("-".to_string(), None),
        _ => {
            let (s, ms) = u.nginx_secs(1_000_000);
            (format!("{s}s"), Some(ms))
        }
    };
    let line = format!(
        "{addr} [{}] \"{method} {uri} HTTP/1.1\" {status} {bytes} rt={rt} uct=\"{uct}\" \
         uht=\"{uht}\" urt=\"{urt}\" us=\"{us}\" ua=\"{ua}\" rid={rid} tp=\"{tp}\" \
         mw=\"{mw}\" llm=\"{llm}\" llmd=\"{llmd}\"",
        t.format("%Y-%m-%dT%H:%M:%S%:z")
    );
    let r = parse_one(LogFormat::builtin("overtime").expect("builtin"), &line);
    let ctx = &line;
    assert_eq!(r.time_us, time_us, "{ctx}");
    assert_eq!(r.remote_addr.as_deref(), Some(addr.as_str()), "{ctx}");
    assert_eq!(r.method.as_deref(), Some(method), "{ctx}");
    assert_eq!(r.uri.as_deref(), Some(uri.as_str()), "{ctx}");
    assert_eq!(r.protocol.as_deref(), Some("HTTP/1.1"), "{ctx}");
    assert_eq!(r.status, Some(status), "{ctx}");
    assert_eq!(r.body_bytes_sent, Some(bytes as i64), "{ctx}");
    assert_eq!(r.request_time_ms, Some(rt_ms), "{ctx}");
    assert_eq!(r.upstream_connect_ms, uct_v, "{ctx}");
    assert_eq!(r.upstream_header_ms, uht_v, "{ctx}");
    assert_eq!(r.upstream_response_ms, urt_v, "{ctx}");
    assert_eq!(r.upstream_status, us_v, "{ctx}");
    assert_eq!(r.upstream_addr, ua_v, "{ctx}");
    assert_eq!(r.request_id, (rid != "-").then_some(rid), "{ctx}");
    let tid = overtime_model::trace_id_from_traceparent(&tp);
    assert_eq!(r.trace_id, tid, "{ctx}");
    assert_eq!(r.max_wait_ms, mw_v, "{ctx}");
    assert_eq!(r.llm_duration_ms, llmd_v, "{ctx}");
    let got = parse_llm_reason(r.llm_reason.as_deref().unwrap_or("-"));
    let want: Vec<(&str, f64)> = ["queue", "prefill", "decode", "io"]
        .into_iter()
        .zip(names)
        .filter_map(|(short, long)| phases.iter().find(|p| p.0 == long).map(|p| (short, p.1)))
        .collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), want, "{ctx}");
    assert!(!got.malformed, "{ctx}");
}

/// An arbitrary header value as nginx writes it with `escape=json`.
fn json_escaped(s: &str) -> String {
    let q = serde_json::to_string(s).expect("strings serialize");
    q[1..q.len() - 1].to_string()
}

fn json_format(u: &mut Unstructured) {
    let secs = u.range(0, 4_102_444_799);
    let ms = u.range(0, 999);
    let status = u.range(100, 599) as u16;
    let (rt, rt_ms) = u.nginx_secs(10_000_000);
    let ua = u.any_string(200);
    let referer = u.any_string(200);
    let line = format!(
        r#"{{"t":{secs}.{ms:03},"s":{status},"ua":"{}","ref":"{}","rt":{rt}}}"#,
        json_escaped(&ua),
        json_escaped(&referer)
    );
    let r = parse_one(LogFormat::compile(JSON_FORMAT).expect("compiles"), &line);
    assert_eq!(r.time_us, (secs * 1000 + ms) as i64 * 1000, "{line}");
    assert_eq!(r.status, Some(status), "{line}");
    assert_eq!(r.request_time_ms, Some(rt_ms), "{line}");
    assert_eq!(r.extra("http_user_agent"), logged(&ua), "{line}");
    assert_eq!(r.extra("http_referer"), logged(&referer), "{line}");
}

/// A value as overtime keeps it: `-` and empty are nginx's "no value".
pub(crate) fn logged(s: &str) -> Option<&str> {
    (!s.is_empty() && s != "-").then_some(s)
}

/// A value as nginx writes it with `escape=default`: `"`, `\`, control
/// bytes and every byte from 0x7f as `\xHH`.
pub(crate) fn default_escaped(s: &str) -> String {
    let mut out = String::new();
    for &b in s.as_bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

fn combined_format(u: &mut Unstructured) {
    let (t, time_us) = time(u);
    let addr = format!("{}.{}.{}.{}", u.byte(), u.byte(), u.byte(), u.byte());
    let uri = format!("/{}", u.text(b"abc019/.?=&%", 30));
    let status = u.range(100, 599) as u16;
    let bytes = u64::from(u.u32());
    let ua = u.any_string(200);
    let referer = u.any_string(200);
    let line = format!(
        "{addr} - - [{}] \"GET {uri} HTTP/2.0\" {status} {bytes} \"{}\" \"{}\"",
        t.format("%d/%b/%Y:%H:%M:%S %z"),
        default_escaped(&referer),
        default_escaped(&ua)
    );
    let r = parse_one(LogFormat::builtin("combined").expect("builtin"), &line);
    assert_eq!(r.time_us, time_us, "{line}");
    assert_eq!(r.uri.as_deref(), Some(uri.as_str()), "{line}");
    assert_eq!(r.protocol.as_deref(), Some("HTTP/2.0"), "{line}");
    assert_eq!(r.status, Some(status), "{line}");
    assert_eq!(r.body_bytes_sent, Some(bytes as i64), "{line}");
    assert_eq!(r.extra("http_user_agent"), logged(&ua), "{line}");
    assert_eq!(r.extra("http_referer"), logged(&referer), "{line}");
}
