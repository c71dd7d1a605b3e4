//! Where an `$upstream_*` list ends when nginx writes it unquoted.
//!
//! nginx writes every variable it documents as a list (`$upstream_addr`,
//! `$upstream_status`, the `$upstream_*_time`s, `$upstream_response_length`,
//! `$upstream_bytes_*`, `$upstream_cache_status`) as items separated by
//! `", "` (servers tried) and `" : "` (upstream groups, after an internal
//! redirect). Those separators belong to the value, so a literal that
//! follows the variable — typically a space — cannot simply end it at its
//! first occurrence: `172.17.0.6:8080, 172.17.0.7:8080 61, 100` is one
//! address list and then one length list.
//!
//! The rule: an item is a run of bytes other than space and comma; a list
//! is items joined by exact separators. The value ends at a place where
//! a *complete* list (not ending inside a separator) is followed by the
//! next literal. When several such places exist (a `" : "` separator starts
//! with the space that also follows the list), the ones after which the
//! next variable could not start are dropped (an address, a number or a
//! list never starts with `:`); if several remain, the one whose item count
//! equals that of the line's first list wins (nginx writes every
//! `$upstream_*` list from the same tries, so they have the same shape).
//! Anything else is ambiguous and the line is rejected, never guessed.

use super::bytes::{Lit, eq_at};
use super::plan::Shape;

/// Variables nginx writes as `", "` / `" : "` separated lists.
pub(crate) fn is_list_var(var: &str) -> bool {
    matches!(
        var,
        "upstream_addr"
            | "upstream_status"
            | "upstream_response_time"
            | "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_response_length"
            | "upstream_bytes_received"
            | "upstream_bytes_sent"
            | "upstream_cache_status"
    )
}

/// What the items of a list variable look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Items {
    /// Seconds with a fraction (`0.100`) or `-`.
    Secs,
    /// Unsigned integers (statuses, lengths, byte counts) or `-`.
    Ints,
    /// Anything without a space or a comma (addresses, cache states).
    Text,
}

impl Items {
    /// The items of list variable `var`.
    pub(crate) fn of(var: &str) -> Items {
        match var {
            "upstream_response_time" | "upstream_connect_time" | "upstream_header_time" => {
                Items::Secs
            }
            "upstream_status"
            | "upstream_response_length"
            | "upstream_bytes_received"
            | "upstream_bytes_sent" => Items::Ints,
            _ => Items::Text,
        }
    }

    fn ok(self, item: &[u8]) -> bool {
        match self {
            _ if item == b"-" => true,
            Items::Secs => {
                !item.is_empty() && item.iter().all(|&c| c.is_ascii_digit() || c == b'.')
            }
            Items::Ints => !item.is_empty() && item.iter().all(u8::is_ascii_digit),
            Items::Text => !item.is_empty(),
        }
    }

    /// Are all items of the list `l` (separators exact) of this kind?
    fn all_ok(self, l: &[u8]) -> bool {
        if self == Items::Text {
            return true;
        }
        let mut start = 0;
        let mut i = 0;
        while i < l.len() {
            let sep = if l[i..].starts_with(b", ") {
                2
            } else if l[i..].starts_with(b" : ") {
                3
            } else {
                0
            };
            if sep > 0 {
                if !self.ok(&l[start..i]) {
                    return false;
                }
                i += sep;
                start = i;
            } else {
                i += 1;
            }
        }
        self.ok(&l[start..])
    }
}

#[inline]
fn item_byte(b: u8) -> bool {
    b != b' ' && b != b','
}

/// Could a value of `shape` start with byte `b`? (`-` is every variable's
/// "no value".)
#[inline]
fn may_start(shape: Shape, b: u8) -> bool {
    match shape {
        Shape::List => item_byte(b) && b != b':',
        s => b == b'-' || s.accepts(b),
    }
}

/// The end of the list of `kind` items starting at `pos` and followed by
/// `lit`; `next` is the shape of the variable after the literal, if known,
/// and `ref_items` the item count of the first list already cut on this
/// line (set by the first call). `Err` says why no unique end exists.
pub(crate) fn list_end(
    b: &[u8],
    pos: usize,
    lit: &Lit,
    kind: Items,
    next: Option<Shape>,
    ref_items: &mut Option<usize>,
) -> Result<usize, &'static str> {
    let n = b.len();
    // The greedy extent: items joined by separators, as far as they go.
    let mut p = pos;
    let m = loop {
        let mut q = p;
        while q < n && item_byte(b[q]) {
            q += 1;
        }
        if q == p {
            break q;
        }
        let sep = if eq_at(b, q, b", ") {
            2
        } else if eq_at(b, q, b" : ") {
            3
        } else {
            0
        };
        if sep == 0 || q + sep >= n || !item_byte(b[q + sep]) {
            break q;
        }
        p = q + sep;
    };
    let first = lit.text.as_bytes().first().copied().unwrap_or(b' ');
    // Candidates at the end of an item, rightmost first: (end, items).
    let mut found: [(usize, usize); 8] = [(0, 0); 8];
    let mut count = 0;
    // The rightmost place where the literal starts inside an item (`s` of
    // `${upstream_response_time}s`, `]` of `[$upstream_addr]`): used only
    // when no item end is followed by the literal.
    let mut inside = None;
    let mut k = m;
    while k > pos {
        if b.get(k) == Some(&first)
            && lit.is_at(b, k)
            && item_byte(b[k - 1])
            && !(b[k - 1] == b':' && k >= pos + 2 && b[k - 2] == b' ')
        {
            let at_item_end = k == m || !item_byte(b[k]);
            let s = k + lit.len();
            let next_ok = match next {
                Some(shape) => s < n && may_start(shape, b[s]),
                None => true,
            };
            if !kind.all_ok(&b[pos..k]) {
                // Not a list of this variable's items: not an end.
            } else if !at_item_end {
                inside = inside.or(Some(k));
            } else if next_ok {
                if count == found.len() {
                    return Err("too many places where the list could end");
                }
                found[count] = (k, 0);
                count += 1;
            }
        }
        k -= 1;
    }
    let items = |end: usize| {
        1 + b[pos..end]
            .windows(2)
            .filter(|w| w == b", " || w == b" :")
            .count()
    };
    let end = match count {
        0 => inside.ok_or("no complete list followed by the next literal")?,
        1 => found[0].0,
        _ => {
            let Some(want) = *ref_items else {
                return Err("the list could end at several places");
            };
            let mut pick = None;
            for &(k, _) in &found[..count] {
                if items(k) == want {
                    if pick.is_some() {
                        return Err("the list could end at several places");
                    }
                    pick = Some(k);
                }
            }
            pick.ok_or("the list could end at several places, none like the line's other lists")?
        }
    };
    if ref_items.is_none() {
        *ref_items = Some(items(end));
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(s: &str, lit: &str, next: Option<Shape>) -> Result<String, &'static str> {
        let mut r = None;
        let k = list_end(
            s.as_bytes(),
            0,
            &Lit::new(lit.into()),
            Items::Text,
            next,
            &mut r,
        )?;
        Ok(s[..k].to_string())
    }

    #[test]
    fn a_list_ends_where_a_complete_list_meets_the_literal() {
        let s = "172.17.0.6:8080, 172.17.0.7:8080 61, 100 0.100";
        assert_eq!(
            end(s, " ", Some(Shape::List)).unwrap(),
            "172.17.0.6:8080, 172.17.0.7:8080"
        );
        assert_eq!(end("- 200", " ", Some(Shape::List)).unwrap(), "-");
        assert_eq!(
            end("0.100, 0.004s rt=1", "s rt=", None).unwrap(),
            "0.100, 0.004"
        );
        assert_eq!(
            end("[::1]:80, [::2]:80] x", "]", None).unwrap(),
            "[::1]:80, [::2]:80"
        );
        assert_eq!(
            end("unix:/run/a.sock : 10.0.0.1:80 -", " ", Some(Shape::List)).unwrap(),
            "unix:/run/a.sock : 10.0.0.1:80"
        );
        assert!(end("0.100,", " ", None).is_err());
        assert!(end("", " ", None).is_err());
    }

    #[test]
    fn a_group_separator_is_resolved_by_the_next_shape_or_the_first_list() {
        // After "502" a space follows, but so does ": 200": a status list
        // followed by an unknown variable is ambiguous on its own...
        assert!(end("502 : 200 abc", " ", None).is_err());
        // ... not when the next variable cannot start with ':' ...
        assert_eq!(
            end("502 : 200 61", " ", Some(Shape::Digits)).unwrap(),
            "502 : 200"
        );
        // ... nor when the line's first list had two items.
        let mut r = Some(2);
        let s = b"502 : 200 abc";
        let sp = Lit::new(" ".into());
        let k = list_end(s, 0, &sp, Items::Ints, None, &mut r).unwrap();
        assert_eq!(&s[..k], b"502 : 200");
        let mut r = Some(1);
        let k = list_end(s, 0, &sp, Items::Ints, None, &mut r).unwrap();
        assert_eq!(&s[..k], b"502");
        let mut r = Some(3);
        assert!(list_end(s, 0, &sp, Items::Ints, None, &mut r).is_err());
    }

    #[test]
    fn an_end_inside_an_item_must_leave_items_of_the_variable() {
        // `${upstream_response_time}\'`: the first `\'` ends the time.
        let s = br"0.001\'v\' x";
        let mut r = None;
        let k = list_end(s, 0, &Lit::new(r"\'".into()), Items::Secs, None, &mut r).unwrap();
        assert_eq!(&s[..k], b"0.001");
        let s = b"200, 503x";
        let mut r = None;
        let k = list_end(s, 0, &Lit::new("x".into()), Items::Ints, None, &mut r).unwrap();
        assert_eq!(&s[..k], b"200, 503");
        assert!(Items::Secs.all_ok(b"0.100, - : 2"));
        assert!(!Items::Ints.all_ok(b"200, 0.1"));
    }
}
