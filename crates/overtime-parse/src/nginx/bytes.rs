//! Byte searches for the hot loop, inlined and without libc calls: access-log
//! values are short (most under 40 bytes), where a call to `memchr`/`memcmp`
//! costs more than the search, yet user agents and URIs can be kilobytes, so
//! the byte search still goes eight bytes at a time (SWAR).

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Position of the first `byte` in `hay`.
///
/// ```text
/// find_byte(b"abc\"def", b'"') == Some(3)
/// ```
#[inline]
pub(crate) fn find_byte(hay: &[u8], byte: u8) -> Option<usize> {
    let pat = LO * u64::from(byte);
    let mut i = 0;
    for chunk in hay.chunks_exact(8) {
        let w: [u8; 8] = chunk.try_into().unwrap_or([0; 8]);
        let x = u64::from_le_bytes(w) ^ pat;
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            // The lowest flagged byte is the first match (borrows only
            // propagate upwards, so lower flags are exact).
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    while i < hay.len() {
        if hay[i] == byte {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Does `hay` hold `needle` at `at`?
#[inline]
pub(crate) fn eq_at(hay: &[u8], at: usize, needle: &[u8]) -> bool {
    match hay.get(at..at + needle.len()) {
        Some(h) => h.iter().zip(needle).all(|(a, b)| a == b),
        None => false,
    }
}

/// First occurrence of `needle` in `hay`. Positions found in valid UTF-8 for
/// a valid UTF-8 needle are always character boundaries.
#[inline]
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, _)) = needle.split_first() else {
        return Some(0);
    };
    let mut from = 0;
    while let Some(k) = find_byte(&hay[from..], first) {
        let at = from + k;
        if eq_at(hay, at, needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `s` without leading and trailing spaces.
#[inline]
pub(crate) fn trim_spaces(s: &str) -> &str {
    let b = s.as_bytes();
    let mut a = 0;
    let mut e = b.len();
    while a < e && b[a] == b' ' {
        a += 1;
    }
    while e > a && b[e - 1] == b' ' {
        e -= 1;
    }
    &s[a..e]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_search_agrees_with_naive() {
        let hay: Vec<u8> = (0..200u32).map(|i| (i * 7 % 13) as u8 + b'a').collect();
        for b in b'a'..=b'p' {
            for start in 0..20 {
                let h = &hay[start..];
                assert_eq!(
                    find_byte(h, b),
                    h.iter().position(|&c| c == b),
                    "{b} {start}"
                );
            }
        }
        assert_eq!(find_byte(b"\x80\x81\x22", b'"'), Some(2));
        assert_eq!(find_byte(b"aaaaaaaa\"", b'"'), Some(8));
        assert_eq!(
            find_byte(b"\x01\x00\x01\x02\x03\x04\x05\x06\x07\n", b'\n'),
            Some(9)
        );
    }

    #[test]
    fn needles_and_trim() {
        assert_eq!(find(b"a\" b\" rid=x", b"\" rid="), Some(4));
        assert_eq!(find(b"abc", b"cd"), None);
        assert_eq!(find("é x é y".as_bytes(), "é y".as_bytes()), Some(5));
        assert_eq!(find(b"abc", b""), Some(0));
        assert!(eq_at(b"abc", 1, b"bc") && !eq_at(b"abc", 2, b"cd"));
        assert_eq!(trim_spaces("  a b "), "a b");
        assert_eq!(trim_spaces("   "), "");
    }
}
