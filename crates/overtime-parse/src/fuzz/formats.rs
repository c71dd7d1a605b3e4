//! Fuzz target `nginx_formats`: the generated-format round trip. From the
//! fuzz bytes: a `log_format` of nginx's variables (every `$upstream_*`
//! list, the three time variables, `$request`, `$status`, headers, ids,
//! addresses, lengths) joined by the separators people use (`|`, `;`, `,`,
//! tab, space, ` | `, `key=` prefixes, quotes or brackets around some
//! values, now and then two variables with nothing between them, a JSON
//! object with `escape=json`), and one request's values — retries and
//! upstream groups shared by every list, `-` for what is missing, hostile
//! header text, refused and binary request lines. The line is rendered
//! exactly as nginx renders it (`\xHH` for `escape=default`, JSON escapes
//! for `escape=json`) and must parse back to exactly the values written
//! (`written.rs`). The only refusal allowed is of a line nginx could have
//! written in two ways or more, counted by brute force (`readings.rs`).

use super::nginx::check_gateway_record;
use super::readings::readings;
use super::unstructured::Unstructured;
use super::written::compare_written;
use crate::nginx::{Escape, GatewayParser, LogFormat};
use chrono::{DateTime, FixedOffset};
use overtime_model::{gateway_records, rejected_records};

/// How a variable's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Time,
    Request,
    Status,
    Secs,
    Digits,
    Addr,
    Hex,
    List,
    Cache,
    Text,
}

/// The variables formats are drawn from.
const VARS: &[(&str, Kind)] = &[
    ("msec", Kind::Time),
    ("time_local", Kind::Time),
    ("time_iso8601", Kind::Time),
    ("request", Kind::Request),
    ("status", Kind::Status),
    ("request_time", Kind::Secs),
    ("body_bytes_sent", Kind::Digits),
    ("request_length", Kind::Digits),
    ("remote_addr", Kind::Addr),
    ("request_id", Kind::Hex),
    ("upstream_addr", Kind::List),
    ("upstream_status", Kind::List),
    ("upstream_connect_time", Kind::List),
    ("upstream_header_time", Kind::List),
    ("upstream_response_time", Kind::List),
    ("upstream_queue_time", Kind::List),
    ("upstream_response_length", Kind::List),
    ("upstream_bytes_received", Kind::List),
    ("upstream_bytes_sent", Kind::List),
    ("upstream_cache_status", Kind::Cache),
    ("http_user_agent", Kind::Text),
    ("http_referer", Kind::Text),
    ("http_x_tenant", Kind::Text),
    ("remote_user", Kind::Text),
];

/// The separators between values, as people write formats.
const SEPARATORS: &[&str] = &[" ", " ", "|", ";", ",", "\t", " | ", "; ", ", "];

/// One generated case.
pub(crate) struct Case {
    /// The `log_format` body as written in nginx.conf.
    pub format: String,
    /// The line nginx writes.
    pub line: Vec<u8>,
    /// Each variable and the value nginx had for it (`None`: no value).
    pub written: Vec<(String, Option<Vec<u8>>)>,
    pub escape: Escape,
}

/// See the module doc.
pub fn check_nginx_formats(data: &[u8]) {
    let case = generate(&mut Unstructured::new(data));
    let format = LogFormat::compile(&case.format)
        .unwrap_or_else(|e| panic!("generated format {:?} does not compile: {e}", case.format));
    let shown = String::from_utf8_lossy(&case.line).into_owned();
    let ctx = format!("format {}\nline   {shown:?}", case.format);
    let mut p = GatewayParser::new(format.clone(), "fuzz", 0);
    p.push_line(&case.line, 1);
    let (good, bad) = p.finish();
    let rejected = rejected_records(&bad).expect("rejected batch reads back");
    if case.line.iter().all(u8::is_ascii_whitespace) {
        // Only empty text: skipped like every blank line, as documented.
        assert_eq!((good.num_rows(), rejected.len()), (0, 0), "{ctx}");
        return;
    }
    let ways = readings(format.segments(), &case.line, case.escape);
    assert!(
        ways >= 1,
        "the judge finds no way nginx wrote its own line\n{ctx}"
    );
    if let Some(r) = rejected.first() {
        assert!(
            ways >= 2,
            "a line nginx could write only one way was refused\n{ctx}\n{r:?}"
        );
        assert_eq!(r.reason, "format_mismatch", "{ctx}\n{r:?}");
        return;
    }
    let recs = gateway_records(&good).expect("gateway batch reads back");
    assert_eq!(recs.len(), 1, "{ctx}");
    check_gateway_record(&recs[0]);
    if let Err(e) = compare_written(&recs[0], &case.written, case.escape) {
        panic!("{e}\n{ctx}\n(the line reads {ways} way(s))");
    }
}

/// The upstream states of one request: the separator before each
/// (`""`, `", "` or `" : "`), shared by every list.
fn states(u: &mut Unstructured) -> Vec<&'static str> {
    (0..u.pick(5))
        .map(|i| match i {
            0 => "",
            _ if u.pick(4) == 0 => " : ",
            _ => ", ",
        })
        .collect()
}

fn secs(u: &mut Unstructured, max_ms: u64) -> String {
    u.nginx_secs(max_ms).0
}

/// A list of `var` over `states`, as nginx has it.
fn list(u: &mut Unstructured, var: &str, states: &[&str]) -> Option<Vec<u8>> {
    if states.is_empty() {
        return None;
    }
    let mut s = String::new();
    for sep in states {
        s.push_str(sep);
        let missing = u.pick(5) == 0;
        let item = match var {
            "upstream_addr" => match u.pick(5) {
                0 => format!("[fd00::{:x}]:8080", u.u32() & 0xffff),
                1 => "unix:/run/llm.sock".to_string(),
                2 => format!("backend-{}", u.pick(10)),
                _ => format!("10.0.{}.{}:{}", u.byte(), u.byte(), u.range(1, 65_535)),
            },
            _ if missing => "-".to_string(),
            "upstream_status" => u.range(100, 599).to_string(),
            "upstream_response_length" | "upstream_bytes_received" | "upstream_bytes_sent" => {
                u.range(0, 9_999_999).to_string()
            }
            _ => secs(u, 600_000),
        };
        s.push_str(&item);
    }
    Some(s.into_bytes())
}

/// Header text: separators, quotes, backslashes, a tab, non-ASCII, a byte
/// that is not UTF-8 — or no header at all.
fn text(u: &mut Unstructured) -> Option<Vec<u8>> {
    const PIECES: &[&[u8]] = &[
        b"a",
        b"Z",
        b"7",
        b" ",
        b" ",
        b"|",
        b";",
        b",",
        b"=",
        b":",
        b"\t",
        b"\"",
        b"\\",
        b"-",
        b"[",
        b"]",
        b"{",
        b"}",
        b"/",
        b".",
        b"\xc3\xa9",
        b"\xff",
        b", ",
        b" : ",
        b"ua=",
    ];
    if u.pick(6) == 0 {
        return None;
    }
    let n = u.pick(13);
    Some((0..n).flat_map(|_| u.choose(PIECES).to_vec()).collect())
}

fn request(u: &mut Unstructured) -> Vec<u8> {
    match u.pick(8) {
        0 => b"PATCHp /products/42 HTTP/1.1".to_vec(),
        1 => b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        2 => b"GET /a b HTTP/1.1".to_vec(),
        _ => {
            let method = u.choose(&["GET", "POST", "PUT", "DELETE", "OPTIONS"]);
            let path = u.text(b"abcxyz0189/._~-?=&%+\"|;,", 30);
            let minor = u.pick(2);
            format!("{method} /{path} HTTP/1.{minor}").into_bytes()
        }
    }
}

/// The value nginx has for `var` in this request.
fn value(
    u: &mut Unstructured,
    var: &str,
    kind: Kind,
    t: &DateTime<FixedOffset>,
    states: &[&str],
) -> Option<Vec<u8>> {
    let s = match kind {
        Kind::Time => match var {
            "msec" => format!("{}.{:03}", t.timestamp(), t.timestamp_subsec_millis()),
            "time_local" => t.format("%d/%b/%Y:%H:%M:%S %z").to_string(),
            _ => t.format("%Y-%m-%dT%H:%M:%S%:z").to_string(),
        },
        Kind::Request => return Some(request(u)),
        Kind::Status => u.range(100, 599).to_string(),
        Kind::Secs => secs(u, 3_600_000),
        Kind::Digits => u.range(0, 99_999_999).to_string(),
        Kind::Addr => match u.pick(3) {
            0 => format!("2001:db8::{:x}", u.u32() & 0xffff),
            _ => format!("{}.{}.{}.{}", u.byte(), u.byte(), u.byte(), u.byte()),
        },
        Kind::Hex => u.hex(32),
        Kind::List => return list(u, var, states),
        Kind::Cache => {
            let w = ["MISS", "HIT", "EXPIRED", "BYPASS", "STALE"];
            return (u.pick(3) > 0).then(|| u.choose(&w).as_bytes().to_vec());
        }
        Kind::Text => return text(u),
    };
    Some(s.into_bytes())
}

/// A value as nginx writes it with `escape=json` (`ngx_escape_json`).
fn json_escaped(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in v {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out
}

/// A value as nginx writes it: escaped, `-` (or nothing with
/// `escape=json`) when there is none.
fn rendered(v: &Option<Vec<u8>>, esc: Escape) -> Vec<u8> {
    match (v, esc) {
        (None, Escape::Json) => Vec::new(),
        (None, _) => b"-".to_vec(),
        (Some(v), Escape::Json) => json_escaped(v),
        (Some(v), _) => super::written::default_escaped_bytes(v).into_bytes(),
    }
}

/// A piece of a generated format: a literal or the `i`-th chosen variable.
enum Piece {
    Lit(String),
    Var(usize),
}

pub(crate) fn generate(u: &mut Unstructured) -> Case {
    let secs = u.range(0, 4_102_444_799) as i64;
    let ms = u.range(0, 999) as u32;
    let off = (u.range(0, 112) as i32 - 56) * 900;
    let tz = FixedOffset::east_opt(off).expect("offset within ±14h");
    let t = DateTime::from_timestamp(secs, ms * 1_000_000)
        .expect("in range")
        .with_timezone(&tz);
    let states = states(u);
    let mut pool: Vec<usize> = (0..VARS.len()).collect();
    let mut chosen = Vec::new();
    for _ in 0..1 + u.pick(8) {
        chosen.push(pool.remove(u.pick(pool.len())));
    }
    let written: Vec<(String, Option<Vec<u8>>)> = chosen
        .iter()
        .map(|&k| {
            let (var, kind) = VARS[k];
            (var.to_string(), value(u, var, kind, &t, &states))
        })
        .collect();
    let json = u.pick(4) == 0;
    let escape = if json { Escape::Json } else { Escape::Default };
    let mut pieces = Vec::new();
    if json {
        pieces.push(Piece::Lit("{".into()));
        for (i, &k) in chosen.iter().enumerate() {
            let (var, kind) = VARS[k];
            let bare = matches!(kind, Kind::Status | Kind::Secs | Kind::Digits) && u.pick(2) == 0;
            let q = if bare { "" } else { "\"" };
            let comma = if i == 0 { "" } else { "," };
            pieces.push(Piece::Lit(format!("{comma}\"{var}\":{q}")));
            pieces.push(Piece::Var(i));
            if !bare {
                pieces.push(Piece::Lit(q.into()));
            }
        }
        pieces.push(Piece::Lit("}".into()));
    } else {
        let sep = u.choose(SEPARATORS);
        let keyed = u.pick(3) == 0;
        if u.pick(4) == 0 {
            pieces.push(Piece::Lit(u.choose(&["gw ", "[", "> "]).into()));
        }
        for (i, &k) in chosen.iter().enumerate() {
            let (var, kind) = VARS[k];
            if i > 0 && u.pick(10) > 0 {
                pieces.push(Piece::Lit(sep.into()));
            }
            if keyed {
                pieces.push(Piece::Lit(format!("{}=", &var[..var.len().min(4)])));
            }
            let free = matches!(kind, Kind::Text | Kind::Request | Kind::List | Kind::Time);
            let (open, close) = match u.pick(if free { 3 } else { 8 }) {
                0 => ("\"", "\""),
                1 if kind == Kind::Time || kind == Kind::List => ("[", "]"),
                _ => ("", ""),
            };
            if !open.is_empty() {
                pieces.push(Piece::Lit(open.into()));
            }
            pieces.push(Piece::Var(i));
            if !close.is_empty() {
                pieces.push(Piece::Lit(close.into()));
            }
        }
        if u.pick(4) == 0 {
            pieces.push(Piece::Lit(u.choose(&[" end", "]", ";"]).into()));
        }
    }
    let mut body = String::new();
    let mut line = Vec::new();
    for p in &pieces {
        match p {
            Piece::Lit(l) => {
                body.push_str(l);
                line.extend_from_slice(l.as_bytes());
            }
            Piece::Var(i) => {
                body.push_str(&format!("${{{}}}", written[*i].0));
                line.extend_from_slice(&rendered(&written[*i].1, escape));
            }
        }
    }
    let format = match escape {
        Escape::Json => format!("escape=json '{body}'"),
        _ => format!("'{body}'"),
    };
    Case {
        format,
        line,
        written,
        escape,
    }
}
