//! What an `$upstream_*` list looks like as nginx writes it, quoted or not.
//!
//! nginx writes every variable it documents as a list (`$upstream_addr`,
//! `$upstream_status`, the `$upstream_*_time`s, `$upstream_response_length`,
//! `$upstream_bytes_*`) as one item per upstream state: `", "` before a
//! server tried after another, `" : "` before the first server of another
//! upstream group (after an internal redirect), `-` for a missing value.
//! Every list of one line is written from the same states, so all of them
//! have the same *shape* — item count and where the `" : "` fall — which
//! [`list_shape`] returns; the line cutter (`search.rs`) uses it to tell
//! where an unquoted list ends when the literal after it (a space, `|`, `]`)
//! could also stand inside the list.
//!
//! ```text
//! "10.0.0.1:80, 10.0.0.2:80 : unix:/run/a.sock"   3 items, shape ", " then " : "
//! "502, 200"                                      2 items, shape ", "
//! "-"                                             1 item
//! ```
//!
//! Rules: an item is a run of bytes other than space and comma (and `"`
//! when nginx escapes values). Times are `%d.%03d` (`0.100`),
//! statuses and lengths digits, addresses what nginx names a peer by: an
//! IPv4 or `[IPv6]` address with its port, `unix:` and a socket path, or an
//! upstream's name (`backend`, `default-web-8080`: when no server of it
//! could be tried). `-` is every kind's missing value.

/// Variables nginx writes as `", "` / `" : "` separated lists.
pub(crate) fn is_list_var(var: &str) -> bool {
    matches!(
        var,
        "upstream_addr"
            | "upstream_status"
            | "upstream_response_time"
            | "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_queue_time"
            | "upstream_response_length"
            | "upstream_bytes_received"
            | "upstream_bytes_sent"
    )
}

/// What the items of a list variable look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Items {
    /// Seconds with three decimals (`0.100`) or `-`.
    Secs,
    /// Unsigned integers (statuses, lengths, byte counts) or `-`.
    Ints,
    /// Peer addresses (`$upstream_addr`).
    Addr,
}

impl Items {
    /// The items of list variable `var`.
    pub(crate) fn of(var: &str) -> Items {
        match var {
            "upstream_response_time"
            | "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_queue_time" => Items::Secs,
            "upstream_status"
            | "upstream_response_length"
            | "upstream_bytes_received"
            | "upstream_bytes_sent" => Items::Ints,
            _ => Items::Addr,
        }
    }

    /// Can byte `c` stand inside an item? (`quote_free`: nginx escapes `"`.)
    #[inline]
    pub(crate) fn item_byte(self, c: u8, quote_free: bool) -> bool {
        match self {
            Items::Secs => c.is_ascii_digit() || c == b'.' || c == b'-',
            Items::Ints => c.is_ascii_digit() || c == b'-',
            Items::Addr => c != b' ' && c != b',' && !(quote_free && c == b'"'),
        }
    }

    /// Is `item` one nginx writes (`loose`: or like one — a time with any
    /// number of decimals, an address of any text)?
    fn ok(self, item: &[u8], loose: bool) -> bool {
        let digits = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
        match self {
            _ if item == b"-" => true,
            // `%d.%03d`
            Items::Secs if !loose => {
                let n = item.len();
                n >= 5 && item[n - 4] == b'.' && digits(&item[..n - 4]) && digits(&item[n - 3..])
            }
            Items::Secs => match item.iter().position(|&c| c == b'.') {
                Some(k) => digits(&item[..k]) && digits(&item[k + 1..]),
                None => digits(item),
            },
            Items::Ints => digits(item),
            Items::Addr if loose => item.first().is_some_and(|&c| c != b':'),
            Items::Addr => is_peer(item),
        }
    }
}

/// How nginx names a peer: `10.0.0.1:80`, `[fd00::1]:80`, `unix:/run/a.sock`,
/// or an upstream's name (`backend`, `api.internal:8080`).
fn is_peer(item: &[u8]) -> bool {
    if item.starts_with(b"unix:") {
        return item.len() > 5;
    }
    if item.first() == Some(&b'[') {
        let Some(k) = item.windows(2).position(|w| w == b"]:") else {
            return false;
        };
        let addr = std::str::from_utf8(&item[1..k]).ok();
        return addr.is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
            && port(&item[k + 2..]);
    }
    // An IPv4 address is a name as far as bytes go.
    let (host, p) = match item.iter().rposition(|&c| c == b':') {
        Some(k) => (&item[..k], Some(&item[k + 1..])),
        None => (item, None),
    };
    !host.is_empty()
        && host
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
        && p.is_none_or(port)
}

/// A port: 1 to 5 digits, at most 65535.
fn port(p: &[u8]) -> bool {
    (1..=5).contains(&p.len())
        && p.iter().all(u8::is_ascii_digit)
        && p.iter().fold(0u32, |n, &c| n * 10 + u32::from(c - b'0')) <= 65_535
}

/// The shape of `v` read as a list of `kind` items (`None`: not such a
/// list): a number that two lists share exactly when they have the same
/// item count and the same separators in the same places. Separators
/// must be exact; items as nginx writes them (`loose`: or like them, see
/// [`Items::ok`]).
///
/// ```text
/// "502, 200"  → Some(shape of [", "])    "502 : 200" → Some(shape of [" : "])
/// "-"         → Some(1)                  "502,200"   → None
/// ```
pub(crate) fn list_shape(v: &[u8], kind: Items, quote_free: bool, loose: bool) -> Option<u64> {
    let mut shape: u64 = 1;
    let mut start = 0;
    let mut i = 0;
    while i < v.len() {
        let c = v[i];
        if kind.item_byte(c, quote_free) {
            i += 1;
            continue;
        }
        let sep = if v[i..].starts_with(b", ") {
            1
        } else if v[i..].starts_with(b" : ") {
            2
        } else {
            return None;
        };
        if !kind.ok(&v[start..i], loose) {
            return None;
        }
        shape = shape.wrapping_mul(3).wrapping_add(sep);
        i += if sep == 1 { 2 } else { 3 };
        start = i;
    }
    kind.ok(&v[start..], loose).then_some(shape)
}

/// How far from `pos` a list of `kind` items can reach in `b`: items
/// joined by exact separators, as far as they go. Every end of the list
/// lies at or before this.
pub(crate) fn list_extent(b: &[u8], pos: usize, kind: Items, quote_free: bool) -> usize {
    let n = b.len();
    let mut p = pos;
    loop {
        let mut q = p;
        while q < n && kind.item_byte(b[q], quote_free) {
            q += 1;
        }
        if q == p {
            return q;
        }
        let sep = if b[q..].starts_with(b", ") {
            2
        } else if b[q..].starts_with(b" : ") {
            3
        } else {
            return q;
        };
        if q + sep >= n || !kind.item_byte(b[q + sep], quote_free) {
            return q;
        }
        p = q + sep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_with_the_same_tries_have_the_same_shape() {
        let s = |v: &str, k| list_shape(v.as_bytes(), k, true, false);
        assert_eq!(
            s("10.0.0.1:80, 10.0.0.2:80", Items::Addr),
            s("502, 200", Items::Ints)
        );
        assert_eq!(s("0.100, 0.000", Items::Secs), s("502, 200", Items::Ints));
        assert_ne!(s("502 : 200", Items::Ints), s("502, 200", Items::Ints));
        assert_ne!(s("502", Items::Ints), s("502, 200", Items::Ints));
        assert_eq!(s("-", Items::Secs), s("0.001", Items::Secs));
        assert_eq!(
            s("unix:/run/a.sock : [::1]:80, -", Items::Addr),
            s("- : 0.100, 2.000", Items::Secs)
        );
    }

    #[test]
    fn what_is_not_a_list_has_no_shape() {
        let s = |v: &str, k| list_shape(v.as_bytes(), k, true, false);
        for (v, k) in [
            ("502,200", Items::Ints),
            ("502, ", Items::Ints),
            ("", Items::Ints),
            ("200, 0.1", Items::Ints),
            ("0.1.2", Items::Secs),
            ("0.1", Items::Secs),
            (".5", Items::Secs),
            ("a  b", Items::Addr),
            (": 10.0.0.1:80", Items::Addr),
            ("a\"b", Items::Addr),
            ("10.0.0.1:80|x", Items::Addr),
            ("[::1]", Items::Addr),
            ("unix:", Items::Addr),
        ] {
            assert_eq!(s(v, k), None, "{v:?}");
        }
        assert!(list_shape(b"unix:/a\"b", Items::Addr, false, false).is_some());
        assert!(list_shape(b"unix:/run/a|b.sock, backend", Items::Addr, true, false).is_some());
        assert!(list_shape(b"1.0, 0.5 : 2", Items::Secs, true, true).is_some());
        assert!(list_shape(b"a:1, b:2", Items::Addr, true, true).is_some());
        assert!(list_shape(b"1.0, 0.5 : 2", Items::Secs, true, false).is_none());
    }

    #[test]
    fn a_list_reaches_as_far_as_its_separators_go() {
        fn e(v: &str, k: Items) -> &str {
            &v[..list_extent(v.as_bytes(), 0, k, true)]
        }
        assert_eq!(
            e("10.0.0.1:80, 10.0.0.2:80|502, 200|0.1", Items::Addr),
            "10.0.0.1:80, 10.0.0.2:80|502, 200|0.1"
        );
        assert_eq!(e("502 : 200 61, 100", Items::Ints), "502 : 200");
        assert_eq!(e("0.100, 0.004s rt=1", Items::Secs), "0.100, 0.004");
        assert_eq!(e("0.100, rt", Items::Secs), "0.100");
        assert_eq!(e("a\" b", Items::Addr), "a");
    }
}
