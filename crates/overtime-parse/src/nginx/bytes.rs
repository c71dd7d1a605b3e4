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

/// Does `hay` contain `byte`? No early exit: a branch-free pass the
/// compiler can vectorize, faster than a search when the byte is rare.
#[inline]
pub(crate) fn has_byte(hay: &[u8], byte: u8) -> bool {
    let pat = LO * u64::from(byte);
    let mut acc = 0u64;
    let chunks = hay.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) ^ pat;
        acc |= x.wrapping_sub(LO) & !x & HI;
    }
    acc != 0 || tail.contains(&byte)
}

/// Does `hay` hold `needle` at `at`?
#[inline]
pub(crate) fn eq_at(hay: &[u8], at: usize, needle: &[u8]) -> bool {
    match hay.get(at..at + needle.len()) {
        Some(h) => h.iter().zip(needle).all(|(a, b)| a == b),
        None => false,
    }
}

/// A format literal, with its first eight bytes as a masked word so that
/// checking it at a position is one load and one compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lit {
    pub text: String,
    word: u64,
    mask: u64,
}

impl Lit {
    pub(crate) fn new(text: String) -> Lit {
        let b = text.as_bytes();
        let n = b.len().min(8);
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&b[..n]);
        let mask = if n == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * n)) - 1
        };
        Lit {
            word: u64::from_le_bytes(w),
            mask,
            text,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.text.len()
    }

    /// Does `hay` hold this literal at `at`?
    #[inline]
    pub(crate) fn is_at(&self, hay: &[u8], at: usize) -> bool {
        let b = self.text.as_bytes();
        match hay.get(at..at + 8) {
            Some(chunk) => {
                let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
                w & self.mask == self.word && (b.len() <= 8 || eq_at(hay, at + 8, &b[8..]))
            }
            None => eq_at(hay, at, b),
        }
    }

    /// First occurrence at or after `from`. Positions found in valid UTF-8
    /// for a valid UTF-8 literal are always character boundaries.
    #[inline]
    pub(crate) fn find(&self, hay: &[u8], from: usize) -> Option<usize> {
        let Some(&first) = self.text.as_bytes().first() else {
            return Some(from);
        };
        let mut from = from;
        while let Some(k) = find_byte(hay.get(from..)?, first) {
            let at = from + k;
            if self.is_at(hay, at) {
                return Some(at);
            }
            from = at + 1;
        }
        None
    }
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
        for start in 0..40 {
            let h = &hay[start..];
            for b in [b'a', b'm', b'z', b'\\'] {
                assert_eq!(has_byte(h, b), h.contains(&b), "{b} {start}");
            }
        }
    }

    #[test]
    fn needles_and_trim() {
        let find = |hay: &[u8], lit: &str| Lit::new(lit.to_string()).find(hay, 0);
        assert_eq!(find(b"a\" b\" rid=x", "\" rid="), Some(4));
        assert_eq!(find(b"abc", "cd"), None);
        assert_eq!(find("é x é y".as_bytes(), "é y"), Some(5));
        assert_eq!(find(b"abc", ""), Some(0));
        let long = "\" upstream_addr=\"";
        assert_eq!(find(format!("0.5{long}x").as_bytes(), long), Some(3));
        assert_eq!(find(b"0.5\" upstream_addr=x", long), None);
        assert_eq!(Lit::new(" rt=".into()).find(b"12 rt=0.1 rt=", 4), Some(9));
        assert!(Lit::new("ab".into()).is_at(b"xab", 1) && !Lit::new("ab".into()).is_at(b"xab", 2));
        assert!(eq_at(b"abc", 1, b"bc") && !eq_at(b"abc", 2, b"cd"));
        assert_eq!(trim_spaces("  a b "), "a b");
        assert_eq!(trim_spaces("   "), "");
    }
}
