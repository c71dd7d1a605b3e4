//! The judge of refusals in the generated-format round trip: in how many
//! ways could nginx have written a line? Found by brute force — every
//! place each value could end — against what nginx can write for each
//! variable, written here from nginx's source independently of the
//! parser's own rules (`nginx/domain.rs`, `nginx/search.rs`), so a refusal
//! is only accepted when this count says the line is truly ambiguous.
//!
//! What nginx can write (`escape=default` / `escape=json`):
//! - every variable: `-` when it has no value (nothing with `escape=json`);
//! - `$status` three digits; `$request_time`, `$msec` and the per-try
//!   times `%d.%03d`; lengths and byte counts digits; `$remote_addr` an IP
//!   address or `unix:`; `$request_id` 32 lowercase hex digits;
//!   `$time_local` / `$time_iso8601` a time of that shape;
//!   `$upstream_cache_status` one of nginx's seven words;
//! - `$upstream_*` lists: items joined by `", "` and `" : "`, all lists of
//!   one line with the same separators in the same places (one per
//!   upstream state); addresses `IPv4:port`, `[IPv6]:port`, `unix:path`
//!   or an upstream's name;
//! - anything else is text: with `escape=default` printable ASCII but `"`
//!   and `\`, which appear only as `\xHH`; with `escape=json` no raw `"`,
//!   no control byte, a `\` only as an escape.

use crate::nginx::{Escape, Segment};
use chrono::DateTime;

/// Readings counted at most (two is "ambiguous").
const ENOUGH: usize = 2;

/// Values tried at most: a generated line needs far fewer.
const MAX_STEPS: usize = 5_000_000;

/// How many ways (0, 1, or 2 meaning "two or more") nginx could have
/// written `line` in `format`.
pub fn nginx_readings(format: &crate::nginx::LogFormat, line: &[u8]) -> usize {
    readings(format.segments(), line, format.escape())
}

/// How many ways (0, 1, or 2 meaning "two or more") nginx could have
/// written `line` in the format `segs` with escape `esc`.
pub(crate) fn readings(segs: &[Segment], line: &[u8], esc: Escape) -> usize {
    let mut steps = 0;
    let n = count(segs, 0, 0, line, esc, None, &mut steps);
    assert!(
        steps <= MAX_STEPS,
        "judging {:?} took over {MAX_STEPS} steps",
        String::from_utf8_lossy(line)
    );
    n
}

fn count(
    segs: &[Segment],
    i: usize,
    pos: usize,
    line: &[u8],
    esc: Escape,
    shape: Option<Vec<u8>>,
    steps: &mut usize,
) -> usize {
    *steps += 1;
    if *steps > MAX_STEPS {
        return ENOUGH;
    }
    match segs.get(i) {
        None => usize::from(pos == line.len()),
        Some(Segment::Literal(l)) => {
            if line[pos..].starts_with(l.as_bytes()) {
                count(segs, i + 1, pos + l.len(), line, esc, shape, steps)
            } else {
                0
            }
        }
        Some(Segment::Variable(var)) => {
            let mut total = 0;
            for end in pos..=line.len() {
                let fits = match segs.get(i + 1) {
                    None => end == line.len(),
                    Some(Segment::Literal(l)) => line[end..].starts_with(l.as_bytes()),
                    Some(Segment::Variable(_)) => true,
                };
                if !fits {
                    continue;
                }
                let Some(sh) = could_write(var, &line[pos..end], esc) else {
                    continue;
                };
                let next = match (&shape, sh) {
                    (Some(a), Some(b)) if *a != b => continue,
                    (None, Some(b)) => Some(b),
                    _ => shape.clone(),
                };
                total += count(segs, i + 1, end, line, esc, next, steps);
                if total >= ENOUGH {
                    return ENOUGH;
                }
            }
            total
        }
    }
}

/// Could nginx write `v` for `var`? `Some(Some(separators))` for a list.
fn could_write(var: &str, v: &[u8], esc: Escape) -> Option<Option<Vec<u8>>> {
    let list = matches!(
        var,
        "upstream_addr"
            | "upstream_status"
            | "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_response_time"
            | "upstream_queue_time"
            | "upstream_response_length"
            | "upstream_bytes_received"
            | "upstream_bytes_sent"
    );
    let none = v == b"-" || (v.is_empty() && esc == Escape::Json);
    if none {
        return Some(list.then(Vec::new));
    }
    if list {
        return list_seps(var, v).map(Some);
    }
    let s = std::str::from_utf8(v).ok();
    let ok = match var {
        "status" => v.len() == 3 && v.iter().all(u8::is_ascii_digit),
        "request_time" | "msec" => s.is_some_and(secs),
        "body_bytes_sent" | "request_length" | "bytes_sent" => {
            !v.is_empty() && v.iter().all(u8::is_ascii_digit)
        }
        "remote_addr" => s.is_some_and(|s| s == "unix:" || s.parse::<std::net::IpAddr>().is_ok()),
        "request_id" => v.len() == 32 && v.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
        // Fixed widths: `%02d/%s/%d:%02d:%02d:%02d %c%02i%02i`.
        "time_local" => s.is_some_and(|s| {
            s.len() == 26 && DateTime::parse_from_str(s, "%d/%b/%Y:%H:%M:%S %z").is_ok()
        }),
        "time_iso8601" => {
            s.is_some_and(|s| s.len() == 25 && DateTime::parse_from_rfc3339(s).is_ok())
        }
        "upstream_cache_status" => matches!(
            v,
            b"MISS" | b"BYPASS" | b"EXPIRED" | b"STALE" | b"UPDATING" | b"REVALIDATED" | b"HIT"
        ),
        _ => text(v, esc),
    };
    ok.then_some(None)
}

/// `%d.%03d`.
fn secs(s: &str) -> bool {
    s.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.len() == 3
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

/// The separators of a list `v` of `var`'s items (`b','` or `b':'` each).
fn list_seps(var: &str, v: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(v).ok()?;
    let mut seps = Vec::new();
    let mut rest = s;
    loop {
        let next = [(", ", b','), (" : ", b':')]
            .into_iter()
            .filter_map(|(sep, k)| rest.find(sep).map(|at| (at, sep, k)))
            .min_by_key(|x| x.0);
        let (item, after) = match next {
            Some((at, sep, k)) => {
                seps.push(k);
                (&rest[..at], Some(&rest[at + sep.len()..]))
            }
            None => (rest, None),
        };
        if !item_ok(var, item) {
            return None;
        }
        match after {
            Some(a) => rest = a,
            None => return Some(seps),
        }
    }
}

fn item_ok(var: &str, item: &str) -> bool {
    if item == "-" {
        return true;
    }
    match var {
        "upstream_addr" => peer(item),
        "upstream_status"
        | "upstream_response_length"
        | "upstream_bytes_received"
        | "upstream_bytes_sent" => !item.is_empty() && item.bytes().all(|c| c.is_ascii_digit()),
        _ => secs(item),
    }
}

/// `10.0.0.1:80`, `[fd00::1]:80`, `unix:/path` or an upstream's name.
fn peer(item: &str) -> bool {
    if let Some(path) = item.strip_prefix("unix:") {
        return !path.is_empty() && !path.contains([' ', ',', '"']);
    }
    if let Some(rest) = item.strip_prefix('[') {
        return rest.split_once("]:").is_some_and(|(a, p)| {
            a.parse::<std::net::Ipv6Addr>().is_ok() && p.parse::<u16>().is_ok()
        });
    }
    match item.rsplit_once(':') {
        Some((a, p)) if a.parse::<std::net::Ipv4Addr>().is_ok() => p.parse::<u16>().is_ok(),
        Some((name, p)) => name_ok(name) && p.parse::<u16>().is_ok(),
        None => name_ok(item),
    }
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
}

/// Text as nginx escapes it.
fn text(v: &[u8], esc: Escape) -> bool {
    match esc {
        Escape::Default => {
            let mut i = 0;
            while i < v.len() {
                match v[i] {
                    b'\\' => {
                        let hex = |k: usize| v.get(k).is_some_and(|c| c.is_ascii_hexdigit());
                        if v.get(i + 1) != Some(&b'x') || !hex(i + 2) || !hex(i + 3) {
                            return false;
                        }
                        i += 4;
                    }
                    b'"' => return false,
                    c if (0x20..0x7f).contains(&c) => i += 1,
                    _ => return false,
                }
            }
            true
        }
        Escape::Json => {
            let mut i = 0;
            while i < v.len() {
                match v[i] {
                    b'\\' => match v.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') if v.len() >= i + 6 => i += 6,
                        _ => return false,
                    },
                    b'"' => return false,
                    c if c < 0x20 => return false,
                    _ => i += 1,
                }
            }
            true
        }
        Escape::None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nginx::LogFormat;

    fn n(fmt: &str, line: &str) -> usize {
        let f = LogFormat::compile(fmt).unwrap();
        readings(f.segments(), line.as_bytes(), f.escape())
    }

    #[test]
    fn the_judge_counts_the_ways_nginx_could_have_written_a_line() {
        let f = "'$status|$upstream_addr|$upstream_status|$upstream_connect_time'";
        assert_eq!(
            n(f, "200|10.0.0.1:80, 10.0.0.2:80|502, 200|0.100, 0.000"),
            1
        );
        assert_eq!(n("'$http_a $http_b'", "x y z"), 2);
        assert_eq!(n("'$http_a $http_b'", "x y"), 1);
        assert_eq!(n("'$http_a$status'", "acme200"), 1);
        assert_eq!(n("'$http_a$http_b'", "ab"), 2);
        assert_eq!(n("'$status $status'", "200 20"), 0);
        assert_eq!(n("'$upstream_addr|$http_x'", "unix:/a|b|c"), 2);
        assert_eq!(n("'$upstream_addr|$http_x'", "10.0.0.1:80|b|c"), 1);
    }
}
