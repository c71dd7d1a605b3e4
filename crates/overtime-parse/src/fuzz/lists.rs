//! Fuzz target `nginx_lists`: formats with unquoted `$upstream_*` lists
//! (ingress-nginx's `upstreaminfo` and others). Lines generated from the
//! fuzz bytes exactly as nginx writes them — retries (`", "`), internal
//! redirects (`" : "`), `-` entries, IPv6 and UNIX-socket upstreams,
//! hostile user agents and request ids — must parse back to exactly the
//! values written, or (only where the line is ambiguous) be rejected with a
//! reason; arbitrary lines against the same formats must each be a row or
//! a counted rejection.

use super::nginx::{check_gateway_record, check_lines};
use super::roundtrip::{default_escaped, logged, time};
use super::unstructured::Unstructured;
use crate::nginx::{GatewayParser, LogFormat};
use overtime_model::{gateway_records, rejected_records};

/// Formats with unquoted lists for the arbitrary-lines half.
pub const LIST_FORMATS: &[&str] = &[
    crate::nginx::INGRESS_NGINX_LOG_FORMAT,
    "'$upstream_addr $upstream_status $upstream_response_time $upstream_connect_time $upstream_header_time $upstream_response_length $upstream_bytes_received $upstream_bytes_sent $upstream_cache_status $request_id'",
    "'$status [$upstream_addr] ${upstream_response_time}s $upstream_status $http_x_tag'",
];

/// First byte even: a generated ingress-nginx line round trip; odd:
/// arbitrary lines against one of [`LIST_FORMATS`].
pub fn check_nginx_lists(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    if sel % 2 == 1 {
        let text = LIST_FORMATS[usize::from(sel / 2) % LIST_FORMATS.len()];
        return check_lines(
            LogFormat::compile(text).expect("fuzz formats compile"),
            body,
        );
    }
    ingress_round_trip(&mut Unstructured::new(body));
}

/// One list of `n` tries with the shared separators `seps`.
fn list<T>(
    seps: &[&str],
    u: &mut Unstructured,
    mut item: impl FnMut(&mut Unstructured) -> Option<(String, T)>,
) -> (String, Vec<Option<T>>) {
    if seps.is_empty() {
        return ("-".into(), Vec::new());
    }
    let mut text = String::new();
    let mut want = Vec::new();
    for (i, sep) in seps.iter().enumerate() {
        if i > 0 {
            text.push_str(sep);
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
    if text == "-" {
        return (text, Vec::new());
    }
    (text, want)
}

fn ingress_round_trip(u: &mut Unstructured) {
    let (t, time_us) = time(u);
    let addr = match u.pick(2) {
        0 => format!("{}.{}.{}.{}", u.byte(), u.byte(), u.byte(), u.byte()),
        _ => format!("fd00::{:x}", u.u32() & 0xffff),
    };
    let user = u.text(b"abcxyz_", 8);
    let (request, split) = match u.pick(4) {
        0 => ("PATCHp /products/42 HTTP/1.1".to_string(), false),
        _ => {
            let uri = format!("/{}", u.text(b"abc019/.?=&%+", 30));
            (format!("GET {uri} HTTP/1.1"), true)
        }
    };
    let status = u.range(100, 599);
    let bytes = u64::from(u.u32());
    let referer = u.any_string(60);
    let agent = u.any_string(120);
    let request_length = u.range(0, 99_999);
    let (rt, rt_ms) = u.nginx_secs(3_600_000);
    let name = u.text(b"abcdefg-0123", 20);
    let alt = u.text(b"abcdefg-0123", 20);
    // The separators every list shares: nginx writes all of them from the
    // same tries.
    let n = u.pick(5);
    let seps: Vec<&str> = (0..n)
        .map(|i| match i {
            0 => "",
            _ if u.pick(3) == 0 => " : ",
            _ => ", ",
        })
        .collect();
    let (addrs, addrs_v) = list(&seps, u, |u| {
        let a = match u.pick(4) {
            0 => format!("10.0.{}.{}:{}", u.byte(), u.byte(), u.range(1, 65_535)),
            1 => format!("[fd00::{:x}]:8080", u.u32() & 0xffff),
            2 => "unix:/var/run/php-fpm.sock".to_string(),
            _ => format!("default-{}-80", u.text(b"abcdef", 8)),
        };
        Some((a.clone(), a))
    });
    let (lengths, _) = list(&seps, u, |u| {
        let v = u.range(0, 9_999_999);
        Some((v.to_string(), v))
    });
    let (times, times_v) = list(&seps, u, |u| (u.pick(5) > 0).then(|| u.nginx_secs(600_000)));
    let (statuses, statuses_v) = list(&seps, u, |u| {
        (u.pick(5) > 0).then(|| {
            let s = u.range(100, 599) as u16;
            (s.to_string(), s)
        })
    });
    // As written, as nginx had it: nginx's own hex id, or a client's.
    let (req_id, want_id) = match u.pick(3) {
        0 => {
            let h = u.hex(32);
            (h.clone(), h)
        }
        1 => {
            let t = u.text(b"abc :,-", 24);
            (t.clone(), t)
        }
        _ => {
            let t = u.any_string(40);
            (default_escaped(&t), t)
        }
    };
    let line = format!(
        "{addr} - {} [{}] \"{request}\" {status} {bytes} \"{}\" \"{}\" {request_length} {rt} \
         [{name}] [{alt}] {addrs} {lengths} {times} {statuses} {req_id}",
        if user.is_empty() { "-" } else { &user },
        t.format("%d/%b/%Y:%H:%M:%S %z"),
        if referer.is_empty() {
            "-".to_string()
        } else {
            default_escaped(&referer)
        },
        default_escaped(&agent),
    );
    if line.contains('\n') || line.ends_with(['\r', ' ', '\t']) {
        return;
    }
    let format = LogFormat::builtin("ingress-nginx").expect("builtin");
    let mut p = GatewayParser::new(format, "fuzz", 0);
    p.push_line(line.as_bytes(), 1);
    let (good, bad) = p.finish();
    let rejected = rejected_records(&bad).expect("rejected batch reads back");
    if let Some(r) = rejected.first() {
        // A line nginx wrote is only ever rejected when it is ambiguous.
        let ways = super::readings::nginx_readings(
            &LogFormat::builtin("ingress-nginx").expect("builtin"),
            line.as_bytes(),
        );
        assert!(
            ways >= 2,
            "nginx's own line rejected ({ways} reading): {line:?}: {r:?}"
        );
        assert_eq!(r.reason, "format_mismatch", "{line:?}: {r:?}");
        return;
    }
    let recs = gateway_records(&good).expect("gateway batch reads back");
    assert_eq!(recs.len(), 1, "{line:?}");
    let r = &recs[0];
    check_gateway_record(r);
    let ctx = &line;
    assert_eq!(r.time_us, time_us, "{ctx}");
    assert_eq!(r.remote_addr.as_deref(), Some(addr.as_str()), "{ctx}");
    assert_eq!(r.extra("remote_user"), logged(&user), "{ctx}");
    if split {
        let got = format!(
            "{} {} {}",
            r.method.as_deref().unwrap_or("?"),
            r.uri.as_deref().unwrap_or("?"),
            r.protocol.as_deref().unwrap_or("?")
        );
        assert_eq!(got, request, "{ctx}");
    } else {
        assert_eq!(
            (r.method.as_deref(), r.extra("request")),
            (None, Some(request.as_str()))
        );
    }
    assert_eq!(r.status, Some(status as u16), "{ctx}");
    assert_eq!(r.body_bytes_sent, Some(bytes as i64), "{ctx}");
    assert_eq!(r.extra("http_referer"), logged(&referer), "{ctx}");
    assert_eq!(r.extra("http_user_agent"), logged(&agent), "{ctx}");
    let rl = request_length.to_string();
    assert_eq!(r.extra("request_length"), Some(rl.as_str()), "{ctx}");
    assert_eq!(r.request_time_ms, Some(rt_ms), "{ctx}");
    assert_eq!(r.extra("proxy_upstream_name"), logged(&name), "{ctx}");
    assert_eq!(
        r.extra("proxy_alternative_upstream_name"),
        logged(&alt),
        "{ctx}"
    );
    assert_eq!(r.upstream_addr, addrs_v, "{ctx}");
    assert_eq!(
        r.extra("upstream_response_length"),
        logged(&lengths),
        "{ctx}"
    );
    assert_eq!(r.upstream_response_ms, times_v, "{ctx}");
    assert_eq!(r.upstream_status, statuses_v, "{ctx}");
    assert_eq!(r.request_id.as_deref(), logged(&want_id), "{ctx}");
}
