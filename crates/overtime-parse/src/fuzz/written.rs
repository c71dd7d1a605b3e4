//! What a parsed gateway row must give back for each variable nginx wrote:
//! the comparison shared by the generated-format round trip
//! (`formats.rs`) and the test against a real nginx
//! (`tests/real_nginx_formats.rs`), which takes nginx's own values from a
//! JSON log of the same requests.
//!
//! The expectations, per variable, from the value nginx had (its bytes
//! before escaping):
//! - no value (written `-`, or nothing with `escape=json`), an empty value
//!   and a value of `-` are all "no value": a null column, no `extra` key,
//!   an empty per-try list;
//! - text is the value, unescaped — except bytes that are not UTF-8, which
//!   stay `\xHH` exactly as `escape=default` writes them (with
//!   `escape=json`/`none`, where nginx writes them raw, as `\xHH` too);
//! - numbers and times are exactly what the text says (`60.001` s is
//!   60 001 ms); lists are per try, `-` a null try;
//! - `$request` is method, URI and protocol when nginx's grammar splits
//!   it, else kept whole in `extra` as `request`;
//! - of several time variables the best feeds the row's time (`$msec`,
//!   then `$time_iso8601`, then `$time_local`); the others stay in `extra`.

use crate::nginx::Escape;
use crate::nginx::values::utf8_or_escaped;
use chrono::DateTime;
use overtime_model::GatewayRecord;

/// The text overtime keeps for a value nginx had as `v` and wrote with
/// escape `esc` (see the module doc); `None` for no value.
pub fn kept_text(v: Option<&[u8]>, esc: Escape) -> Option<String> {
    let v = v.filter(|v| !v.is_empty() && *v != b"-")?;
    Some(match (esc, std::str::from_utf8(v)) {
        (_, Ok(s)) => s.to_string(),
        (Escape::Default, Err(_)) => default_escaped_bytes(v),
        (_, Err(_)) => utf8_or_escaped(v),
    })
}

/// `v` as nginx's `escape=default` writes it.
pub fn default_escaped_bytes(v: &[u8]) -> String {
    let mut out = String::new();
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// nginx seconds with a fraction (`60.001`) in ms, exactly.
fn secs_ms(s: &str) -> Option<f64> {
    if s == "-" {
        return None;
    }
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let frac = format!("{frac:0<3}");
    let ms = int.parse::<u64>().ok()? * 1000 + frac[..3].parse::<u64>().ok()?;
    Some(ms as f64)
}

/// The items of an `$upstream_*` list (`", "` and `" : "` both separate).
fn items(s: &str) -> Vec<&str> {
    s.split(", ").flat_map(|g| g.split(" : ")).collect()
}

/// A time variable's value as µs since the epoch.
fn time_us(var: &str, s: &str) -> Option<i64> {
    match var {
        "msec" => {
            let (a, b) = s.split_once('.')?;
            Some(a.parse::<i64>().ok()? * 1_000_000 + b.parse::<i64>().ok()? * 1000)
        }
        "time_iso8601" => DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_micros()),
        _ => DateTime::parse_from_str(s, "%d/%b/%Y:%H:%M:%S %z")
            .ok()
            .map(|t| t.timestamp_micros()),
    }
}

/// Checks row `r`, read from a line written with escape `esc`, against
/// what nginx had for each variable (`written`: name, value before
/// escaping, `None` for no value). `Err` names the first difference.
pub fn compare_written(
    r: &GatewayRecord,
    written: &[(String, Option<Vec<u8>>)],
    esc: Escape,
) -> Result<(), String> {
    let has = |v: &str| written.iter().any(|(n, _)| n == v);
    let best_time = ["msec", "time_iso8601", "time_local"]
        .into_iter()
        .find(|v| has(v));
    for (var, value) in written {
        let text = kept_text(value.as_deref(), esc);
        let t = text.as_deref();
        let differ = |what: &str, got: String, want: String| {
            Err(format!(
                "${var} ({what}): parsed {got}, nginx wrote {want} (value {value:?})"
            ))
        };
        macro_rules! same {
            ($got:expr, $want:expr) => {{
                let (got, want) = ($got, $want);
                if got != want {
                    return differ(stringify!($got), format!("{got:?}"), format!("{want:?}"));
                }
            }};
        }
        match var.as_str() {
            "status" => same!(r.status, t.and_then(|s| s.parse::<u16>().ok())),
            "request_time" => same!(r.request_time_ms, t.and_then(secs_ms)),
            "body_bytes_sent" => same!(r.body_bytes_sent, t.and_then(|s| s.parse::<i64>().ok())),
            "remote_addr" => same!(r.remote_addr.as_deref(), t),
            "request_id" => same!(r.request_id.as_deref(), t),
            "request" => match (&r.method, &r.uri, &r.protocol) {
                (Some(m), Some(u), Some(p)) => same!(Some(format!("{m} {u} {p}")), text.clone()),
                _ => same!(r.extra("request"), t),
            },
            "msec" | "time_iso8601" | "time_local" if Some(var.as_str()) == best_time => {
                same!(Some(r.time_us), t.and_then(|s| time_us(var, s)))
            }
            "upstream_addr" => same!(
                r.upstream_addr.clone(),
                t.map_or(vec![], |s| items(s)
                    .into_iter()
                    .map(|i| (i != "-").then(|| i.to_string()))
                    .collect())
            ),
            "upstream_status" => same!(
                r.upstream_status.clone(),
                t.map_or(vec![], |s| items(s)
                    .into_iter()
                    .map(|i| i.parse().ok())
                    .collect())
            ),
            "upstream_connect_time" | "upstream_header_time" | "upstream_response_time" => {
                let got = match var.as_str() {
                    "upstream_connect_time" => &r.upstream_connect_ms,
                    "upstream_header_time" => &r.upstream_header_ms,
                    _ => &r.upstream_response_ms,
                };
                same!(
                    got.clone(),
                    t.map_or(vec![], |s| items(s)
                        .into_iter()
                        .map(secs_ms)
                        .collect::<Vec<_>>())
                )
            }
            name => same!(r.extra(name), t),
        }
    }
    Ok(())
}
