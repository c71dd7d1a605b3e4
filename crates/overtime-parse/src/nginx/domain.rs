//! What nginx can write for a variable, as the value stands in the line
//! (still escaped): the test the line cutter (`search.rs`) applies to every
//! way of cutting a line, so that a line is read the one way nginx could
//! have written it — or refused when there are several.
//!
//! The rule: a domain must hold *every* value nginx can write for the
//! variable (else a real line could be refused or cut wrong), and should
//! hold as little else as possible (else a line that nginx could write
//! only one way is called ambiguous). `-` is every variable's "no value";
//! an empty value is possible where nginx writes a variable that is set
//! but empty (free text) and, with `escape=json`, for every variable nginx
//! has no value for.
//!
//! ```text
//! $status            exactly three digits        $request_time, $msec    digits.ddd (%T.%03M)
//! $time_local        dd/Mon/yyyy:hh:mm:ss +hhmm  $time_iso8601           yyyy-mm-ddThh:mm:ss±hh:mm
//! $request_uri, $uri a path: starts with `/`     $upstream_*             a list (lists.rs)
//! $remote_addr       an IP address or `unix:`    $request_id             32 hex digits
//! lengths, counts    digits                      $upstream_cache_status  MISS, HIT, ... (7 words)
//! anything else      free text as the escape writes it: with escape=default printable
//!                    ASCII, `"` and `\` only as `\xHH`; with escape=json no raw `"`
//!                    or control byte, `\` only as an escape; with none anything
//! ```
//!
//! Values nginx does not write that way (a `0.5` a proxy in front wrote,
//! say) are still read: when no reading of a line fits these domains, the
//! line is cut at the first occurrence of each literal, as a format
//! without open values always is.

use super::bytes::find_byte;
use super::format::Escape;
use super::lists::{Items, is_list_var, list_extent, list_shape};
use super::plan::Shape;

/// What one variable's value may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Domain {
    /// Anything the escape lets through.
    Text,
    /// A path: starts with `/`, then anything the escape lets through.
    Path,
    /// `$status`: exactly three digits.
    Status,
    /// One or more bytes of a [`Shape`]'s class.
    Class(Shape),
    /// An IP address (IPv6 with a zone), or `unix:`.
    Addr,
    /// `$time_local`: `29/Nov/2026:10:00:00 +0000`.
    TimeLocal,
    /// `$time_iso8601`: `2026-11-29T10:00:00+00:00`.
    TimeIso,
    /// `$request_time`, `$msec`: `%T.%03M`.
    Secs,
    /// `$request_id`: 32 hex digits.
    Id,
    /// `$upstream_cache_status`: one of nginx's seven words.
    Cache,
    /// An `$upstream_*` list of these items.
    List(Items),
}

impl Domain {
    /// The domain of variable `var`.
    pub(crate) fn of(var: &str) -> Domain {
        if is_list_var(var) {
            return Domain::List(Items::of(var));
        }
        match var {
            "status" => Domain::Status,
            "time_local" => Domain::TimeLocal,
            "time_iso8601" => Domain::TimeIso,
            "request_uri" | "uri" | "document_uri" => Domain::Path,
            "remote_addr" | "realip_remote_addr" | "server_addr" => Domain::Addr,
            "upstream_cache_status" => Domain::Cache,
            "request_time" | "msec" => Domain::Secs,
            // nginx's own id; `$http_x_request_id` and the like are text.
            "request_id" => Domain::Id,
            _ => match Shape::of(var) {
                Some(s @ (Shape::Digits | Shape::Alpha | Shape::Host)) => Domain::Class(s),
                _ => Domain::Text,
            },
        }
    }

    /// Can `c` stand anywhere in a value of this domain? A value holds
    /// only such bytes, so the first byte that cannot stand there ends
    /// every value that starts before it.
    #[inline]
    pub(crate) fn byte(self, c: u8, esc: Escape) -> bool {
        match self {
            Domain::Text | Domain::Path => text_byte(c, esc),
            Domain::Status => c.is_ascii_digit() || c == b'-',
            Domain::Secs => c.is_ascii_digit() || c == b'.' || c == b'-',
            Domain::Id => c.is_ascii_hexdigit() || c == b'-',
            Domain::Cache => c.is_ascii_uppercase() || c == b'-',
            Domain::Class(s) => c == b'-' || s.accepts(c),
            Domain::Addr => c.is_ascii_alphanumeric() || matches!(c, b'.' | b':' | b'%' | b'-'),
            Domain::TimeLocal => {
                c.is_ascii_alphanumeric() || matches!(c, b'/' | b':' | b' ' | b'+' | b'-')
            }
            Domain::TimeIso => {
                c.is_ascii_digit() || matches!(c, b'-' | b'T' | b':' | b'+' | b'Z' | b'.')
            }
            Domain::List(k) => k.item_byte(c, esc != Escape::None) || c == b' ' || c == b',',
        }
    }

    /// Where a value starting at `pos` must end at the latest: at the first
    /// byte it cannot hold (with `escape=json`, at the first quote not
    /// escaped by a backslash). Every end of the value lies at or before it.
    /// `printable_line`: every byte of `b` is printable ASCII (a quote
    /// included), which makes a text's extent its next quote.
    pub(crate) fn extent(self, b: &[u8], pos: usize, esc: Escape, printable_line: bool) -> usize {
        let rest = &b[pos..];
        // One tight loop per case: this runs over most bytes of a line.
        let n = match (self, esc) {
            (Domain::List(k), _) => return list_extent(b, pos, k, esc != Escape::None),
            // In a line of printable bytes (every line nginx writes with
            // escape=default), the first `"`, found eight bytes at a time.
            (Domain::Text | Domain::Path, Escape::Default) if printable_line => {
                find_byte(rest, b'"')
            }
            (Domain::Text | Domain::Path, Escape::Default) => {
                rest.iter().position(|&c| !printable(c))
            }
            (Domain::Text | Domain::Path, Escape::None) => None,
            (Domain::Text | Domain::Path, Escape::Json) => {
                let mut slashes = 0;
                rest.iter().position(|&c| {
                    let end = (c == b'"' && slashes % 2 == 0) || c < 0x20;
                    slashes = if c == b'\\' { slashes + 1 } else { 0 };
                    end
                })
            }
            _ => rest.iter().position(|&c| !self.byte(c, esc)),
        };
        pos + n.unwrap_or(rest.len())
    }

    /// Is `b[pos..end]` a whole value of this domain? Lists also give their
    /// shape ([`list_shape`]; every other value 1, as a one-item list).
    /// `loose` also takes values nginx writes otherwise but that look the
    /// part: times with any number of decimals, ids of any length,
    /// addresses of any text in a list. `bytes_ok`: the caller knows every
    /// byte is one the domain can hold ([`byte`](Self::byte)).
    pub(crate) fn value(
        self,
        b: &[u8],
        pos: usize,
        end: usize,
        esc: Escape,
        loose: bool,
        bytes_ok: bool,
    ) -> Option<u64> {
        let v = &b[pos..end];
        if v == b"-" {
            return Some(1);
        }
        if v.is_empty() {
            return (esc == Escape::Json || self == Domain::Text).then_some(1);
        }
        if let Domain::List(k) = self {
            return list_shape(v, k, esc != Escape::None, loose);
        }
        let bytes_ok = bytes_ok
            || match (self, esc) {
                // Branch-free over the whole value: it vectorizes.
                (Domain::Text | Domain::Path, Escape::Default) => {
                    v.iter().fold(true, |ok, &c| ok & printable(c))
                }
                _ => self.extent(&b[..end], pos, esc, false) == end,
            };
        if !bytes_ok {
            return None;
        }
        let digits = |r: std::ops::Range<usize>| v[r].iter().all(u8::is_ascii_digit);
        let ok = match self {
            Domain::Text => escapes_whole(v, esc),
            Domain::Path => v[0] == b'/' && escapes_whole(v, esc),
            Domain::Class(s) => v.iter().all(|&c| s.accepts(c)),
            Domain::List(_) => true,
            Domain::Status => v.len() == 3 && digits(0..3),
            Domain::Secs if loose => match v.iter().position(|&c| c == b'.') {
                Some(k) => k > 0 && k + 1 < v.len() && digits(0..k) && digits(k + 1..v.len()),
                None => digits(0..v.len()),
            },
            Domain::Secs => {
                let n = v.len();
                n >= 5 && v[n - 4] == b'.' && digits(0..n - 4) && digits(n - 3..n)
            }
            Domain::Id => loose || v.len() == 32,
            Domain::Cache => matches!(
                v,
                b"MISS" | b"BYPASS" | b"EXPIRED" | b"STALE" | b"UPDATING" | b"REVALIDATED" | b"HIT"
            ),
            Domain::Addr => is_addr(v),
            Domain::TimeLocal => v.len() == 26 && v[2] == b'/' && v[6] == b'/' && v[20] == b' ',
            Domain::TimeIso => {
                v.len() == 25
                    && v[4] == b'-'
                    && v[7] == b'-'
                    && v[10] == b'T'
                    && v[13] == b':'
                    && v[16] == b':'
                    && matches!(v[19], b'+' | b'-')
                    && v[22] == b':'
            }
        };
        ok.then_some(1)
    }
}

/// Is every byte of `b` printable ASCII (`"` included)? Branch-free.
pub(crate) fn all_printable(b: &[u8]) -> bool {
    b.iter()
        .fold(true, |ok, &c| ok & (c.wrapping_sub(0x20) < 0x5f))
}

/// A byte `escape=default` writes as it is: printable ASCII but `"`.
#[inline]
fn printable(c: u8) -> bool {
    (c.wrapping_sub(0x20) < 0x5f) & (c != b'"')
}

/// A byte nginx can write inside a value with escape `esc`: with
/// `escape=default` printable ASCII but `"` (`\xHH` for the rest), with
/// `escape=json` no raw `"` or control byte, with `none` anything.
#[inline]
fn text_byte(c: u8, esc: Escape) -> bool {
    match esc {
        Escape::Default => printable(c),
        Escape::Json => c >= 0x20 && c != b'"',
        Escape::None => true,
    }
}

/// Does every `\` of `v` start a whole escape (`\xHH` for
/// `escape=default`, a JSON escape for `escape=json`)? A value never
/// starts or ends inside one.
fn escapes_whole(v: &[u8], esc: Escape) -> bool {
    if esc == Escape::None || !v.contains(&b'\\') {
        return true;
    }
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' {
            i += 1;
            continue;
        }
        let hex = |k: usize| v.get(k).is_some_and(u8::is_ascii_hexdigit);
        i += match (esc, v.get(i + 1)) {
            // With escape=json a byte that is not UTF-8 reaches the cutter
            // as `\xHH` too (`utf8_or_escaped`).
            (_, Some(b'x')) if hex(i + 2) && hex(i + 3) => 4,
            (Escape::Json, Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')) => 2,
            (Escape::Json, Some(b'u')) if (2..6).all(|k| hex(i + k)) => 6,
            _ => return false,
        };
    }
    true
}

/// An IPv4 or IPv6 address (a zone allowed) or `unix:`.
fn is_addr(v: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(v) else {
        return false;
    };
    if s == "unix:" {
        return true;
    }
    let addr = s.split_once('%').map_or(s, |(a, _)| a);
    addr.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(var: &str, v: &str) -> bool {
        let b = v.as_bytes();
        Domain::of(var)
            .value(b, 0, b.len(), Escape::Default, false, false)
            .is_some()
    }

    #[test]
    fn domains_hold_what_nginx_writes() {
        for (var, v) in [
            ("status", "504"),
            ("request_time", "60.001"),
            ("msec", "1795946400.123"),
            ("time_local", "29/Nov/2026:10:00:00 +0000"),
            ("time_iso8601", "2026-11-29T10:00:00+00:00"),
            ("request_uri", "/v1/chat?q=a b"),
            ("remote_addr", "2001:db8::7"),
            ("remote_addr", "unix:"),
            ("request_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
            (
                "upstream_addr",
                "10.0.0.1:80, [::1]:80 : unix:/run/a|b.sock",
            ),
            ("upstream_status", "502, - : 200"),
            ("http_user_agent", "Mozilla/5.0 (X11) \\x22q\\x22 | ; ,"),
            ("request_time", "0.000"),
            ("http_user_agent", ""),
            ("upstream_cache_status", "HIT"),
            ("host", "api.example.com:8443"),
        ] {
            assert!(whole(var, v), "${var} = {v:?}");
        }
    }

    #[test]
    fn domains_hold_little_else() {
        for (var, v) in [
            ("status", "20"),
            ("status", "200 "),
            ("request_time", "0.1 2"),
            ("body_bytes_sent", "2-3"),
            ("time_local", "29/Nov/2026:10:00:00"),
            ("request_uri", "v1/chat"),
            ("remote_addr", "example.com"),
            ("upstream_status", "502, 200 :"),
            ("http_user_agent", "a\"b"),
            ("request_time", ""),
            ("request_time", "0.1"),
            ("msec", "1795946400"),
            ("http_user_agent", "a \\x2"),
            ("http_user_agent", "a \\ b"),
            ("request_id", "4bf92f35"),
            ("time_iso8601", "2026-11-29T10:00:00+00:001"),
        ] {
            assert!(!whole(var, v), "${var} = {v:?}");
        }
    }

    #[test]
    fn a_json_value_ends_at_its_first_unescaped_quote() {
        let b = br#"a \"q\" \\"x"#;
        assert_eq!(Domain::Text.extent(b, 0, Escape::Json, false), 10);
        assert_eq!(Domain::Text.extent(b, 0, Escape::Default, true), 3);
    }
}
