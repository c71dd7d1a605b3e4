//! What a value must look like for the line to be nginx's own: the checks
//! that turn text outside the format, or a value cut in the wrong place,
//! into a `format_mismatch` rejection instead of a wrong field.
//!
//! The rule (documented in docs/nginx-formats.md):
//! - The line must start with the format's first literal and end with its
//!   last one ([`Plan::split`](super::plan::Plan::split)).
//! - Text before the format can only land in the first value and text after
//!   it in the last: with `escape=default` or `escape=json` nginx never
//!   writes a raw `"` inside a value (it writes `\x22` or `\"`), so a first
//!   or last value holding one is text outside the format. So is a first or
//!   last value that does not have its variable's shape (an address with a
//!   space, a number followed by words).
//! - Addresses (`$remote_addr`, `$realip_remote_addr`, `$server_addr`) are
//!   IPv4, IPv6 or `unix:` wherever they stand — never a host name or an
//!   `X-Forwarded-For` list.
//! - Numbers and lists nginx writes (`$request_length`,
//!   `$upstream_response_length`, …) must be numbers even when they are
//!   only kept in `extra`, so a shifted value cannot hide there.

use super::lists::is_list_var;
use super::plan::Shape;
use super::values::is_null;

/// One check of one variable occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// No raw `"` (escape=default/json): first or last free-text value.
    NoQuote,
    /// No space and no `"`: a first or last value whose column reads it as
    /// a number or a time (that reading then says `bad_number`/`bad_time`
    /// for a bad value; text outside the format always brings a space or
    /// a quote).
    Token,
    /// The whole value has this shape (or is `-`).
    Shape(Shape),
    /// An IP address or `unix:`.
    Addr,
    /// A list of unsigned integers (`-` items allowed).
    IntList,
}

/// The checks a variable gets: `edge` when it is the first or last value
/// of the line, `typed` when its column reads it as a number or a time,
/// `quote_free` when nginx escapes `"` in values.
pub(crate) fn check_for(
    var: &str,
    shape: Option<Shape>,
    edge: bool,
    typed: bool,
    quote_free: bool,
) -> Option<Check> {
    if matches!(var, "remote_addr" | "realip_remote_addr" | "server_addr") {
        return Some(Check::Addr);
    }
    if matches!(
        var,
        "upstream_response_length" | "upstream_bytes_received" | "upstream_bytes_sent"
    ) {
        return Some(Check::IntList);
    }
    match shape {
        // `$request_id`-shaped values are checked by their column.
        Some(Shape::Digits) if !edge && !typed => Some(Check::Shape(Shape::Digits)),
        Some(s) if edge && (s == Shape::List || is_list_var(var)) => None,
        Some(_) if edge && typed => Some(Check::Token),
        // A request id at the edge: ids reach the log from clients and
        // other proxies in many forms (`r-17`, UUIDs), so only what text
        // outside the format always brings — a space or a quote — rejects.
        Some(Shape::Hex) if edge => Some(Check::Token),
        Some(s) if edge => Some(Check::Shape(s)),
        None if edge && quote_free => Some(Check::NoQuote),
        _ => None,
    }
}

/// Does `v`, as written in the line (still escaped), pass `c`? With
/// `escape=json` a `"` after an odd number of backslashes is escaped.
pub(crate) fn passes(c: Check, v: &str, json: bool) -> bool {
    let b = v.as_bytes();
    match c {
        Check::NoQuote if !json => !b.contains(&b'"'),
        Check::NoQuote => b.iter().enumerate().all(|(i, &x)| {
            x != b'"' || b[..i].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1
        }),
        Check::Token => !b.iter().any(|&x| x == b'"' || x.is_ascii_whitespace()),
        Check::Shape(s) => is_null(v) || b.iter().all(|&x| s.accepts(x)),
        Check::Addr => is_null(v) || is_addr(v),
        Check::IntList => {
            is_null(v)
                || super::values::ListItems::new(v)
                    .all(|i| i == "-" || (!i.is_empty() && i.bytes().all(|c| c.is_ascii_digit())))
        }
    }
}

/// An IPv4 or IPv6 address (an IPv6 zone `%eth0` allowed), or `unix:` (a
/// connection over a UNIX socket).
fn is_addr(v: &str) -> bool {
    if v == "unix:" {
        return true;
    }
    let b = v.as_bytes();
    if b.contains(&b':') {
        let (addr, zone) = match v.split_once('%') {
            Some((a, z)) => (a, Some(z)),
            None => (v, None),
        };
        zone.is_none_or(|z| !z.is_empty() && z.bytes().all(|c| c.is_ascii_alphanumeric()))
            && addr.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        v.parse::<std::net::Ipv4Addr>().is_ok()
    }
}

/// The rejection detail of a failed check.
pub(crate) fn detail(c: Check, var: &str, v: &str, first: bool) -> String {
    let shown: String = v.chars().take(64).collect();
    let where_ = if first { "before" } else { "after" };
    match c {
        Check::NoQuote => format!(
            "${var}: {shown:?} holds a raw '\"', which nginx never writes inside a value \
             (text {where_} the format?)"
        ),
        Check::Addr => format!("${var}: {shown:?} is not an IP address (text before the format?)"),
        Check::Token => {
            format!("${var}: {shown:?} holds a space or a '\"' (text {where_} the format?)")
        }
        Check::Shape(_) | Check::IntList => {
            format!("${var}: {shown:?} is not what nginx writes for ${var}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_ip_or_unix() {
        for ok in [
            "10.0.0.1",
            "2001:db8::7",
            "::1",
            "fe80::1%eth0",
            "unix:",
            "-",
        ] {
            assert!(passes(Check::Addr, ok, false), "{ok}");
        }
        for bad in [
            "example.com 10.0.0.1",
            "1.2.3.4, 10.0.0.1",
            "example.com",
            "10.0.0.256",
        ] {
            assert!(!passes(Check::Addr, bad, false), "{bad}");
        }
    }

    #[test]
    fn int_lists_and_quotes() {
        assert!(passes(Check::IntList, "61, 100 : 0", false));
        assert!(passes(Check::IntList, "-, 5", false));
        assert!(!passes(Check::IntList, "0.100, 0.004", false));
        assert!(!passes(Check::NoQuote, "Mozilla\" \"-", false));
        assert!(passes(Check::NoQuote, "a \\x22q\\x22", false));
        assert!(passes(Check::NoQuote, r#"a \"q\" \\"#, true));
        assert!(!passes(Check::NoQuote, r#"a \\" b"#, true));
        assert!(passes(Check::Shape(Shape::Digits), "42", false));
        assert!(!passes(Check::Shape(Shape::Digits), "42 x", false));
    }
}
