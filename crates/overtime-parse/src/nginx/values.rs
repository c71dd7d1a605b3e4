//! Value readers for the line parser: nginx numbers, the three time
//! variables, `$upstream_*` lists, and nginx's two escapes (`$request` is
//! in `request.rs`).
//! All are allocation-free except unescaping, which writes into a buffer
//! the caller reuses.

use super::bytes::trim_spaces;
use crate::duration::parse_duration_ms;
use std::borrow::Cow;

/// `-` (or empty) is nginx's "no value".
#[inline]
pub(crate) fn is_null(s: &str) -> bool {
    s.is_empty() || s == "-"
}

/// `digits[.digits]` → (integer, fraction, fraction digits); at most 18
/// digits on each side.
#[inline]
fn decimal(s: &[u8]) -> Option<(u64, u64, u32)> {
    let mut i = 0;
    let mut int: u64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        int = int * 10 + u64::from(s[i] - b'0');
        i += 1;
        if i > 18 {
            return None;
        }
    }
    if i == 0 {
        return None;
    }
    if i == s.len() {
        return Some((int, 0, 0));
    }
    if s[i] != b'.' {
        return None;
    }
    let f0 = i + 1;
    let mut frac: u64 = 0;
    let mut j = f0;
    while j < s.len() && s[j].is_ascii_digit() {
        frac = frac * 10 + u64::from(s[j] - b'0');
        j += 1;
        if j - f0 > 18 {
            return None;
        }
    }
    (j == s.len()).then_some((int, frac, (j - f0) as u32))
}

/// nginx seconds (`0.123`, `60.001`, `-`) → milliseconds; exact for up to
/// three decimals. `Err` when not a number.
///
/// ```text
/// "60.001" → Some(60001.0)   "-" → None   "1.5e3" → Some(1500000.0)   "fast" → Err
/// ```
#[inline]
pub(crate) fn secs_to_ms(s: &str) -> Result<Option<f64>, ()> {
    if is_null(s) {
        return Ok(None);
    }
    if let Some((int, frac, fd)) = decimal(s.as_bytes()) {
        let ms = if fd <= 3 && int < 1_000_000_000_000_000 {
            (int * 1000 + frac * 10u64.pow(3 - fd)) as f64
        } else {
            int as f64 * 1000.0 + frac as f64 / 10f64.powi(fd as i32 - 3)
        };
        return Ok(Some(ms));
    }
    // `1e308` seconds is finite, but not in ms: out of range, not a number.
    match s.trim().parse::<f64>().map(|v| v * 1000.0) {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(Some(ms)),
        _ => Err(()),
    }
}

/// A duration header (`X-Max-Wait`, `X-LLM-Duration`) → ms: `120s`, `120`
/// (seconds), `1500ms`, `900us` read exactly here; anything else through
/// [`parse_duration_ms`] (same meaning, slower). `None` when unreadable.
///
/// ```text
/// "120s" → 120000   "90" → 90000   "1500ms" → 1500   "0.3s" → 300   "soon" → None
/// ```
#[inline]
pub(crate) fn duration_ms(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let n = b
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b'.')
        .count();
    let scale_ms = match &b[n..] {
        b"" | b"s" => Some(1000u64),
        b"ms" => Some(1),
        _ => None,
    };
    match (decimal(&b[..n]), scale_ms) {
        (Some((int, frac, fd)), Some(k)) if fd <= 3 && int < 1_000_000_000_000 => {
            let milli = (int * 1000 + frac * 10u64.pow(3 - fd)) * k;
            Some(milli as f64 / 1000.0)
        }
        _ => parse_duration_ms(s, 1000.0),
    }
}

/// An unsigned integer of type `T` (`-` → `None`).
#[inline]
pub(crate) fn uint<T: TryFrom<u64>>(s: &str) -> Result<Option<T>, ()> {
    if is_null(s) {
        return Ok(None);
    }
    match decimal(s.as_bytes()) {
        Some((v, 0, 0)) => T::try_from(v).map(Some).map_err(|_| ()),
        _ => Err(()),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let s = b.get(at..at + n)?;
    s.iter().try_fold(0i64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

/// Days in month `mo` of year `y` (proleptic Gregorian).
fn month_days(y: i64, mo: i64) -> i64 {
    match mo {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A date nginx could write (no 31 February: that would silently become
/// 3 March), as µs since the epoch.
fn epoch_us(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, off_s: i64) -> Option<i64> {
    let ok =
        (1..=12).contains(&mo) && d >= 1 && d <= month_days(y, mo) && h < 24 && mi < 60 && s <= 60;
    ok.then(|| ((days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s) - off_s) * 1_000_000)
}

/// `±HH:MM`, `±HHMM` or `Z` → offset in seconds.
fn offset_s(b: &[u8]) -> Option<i64> {
    match b {
        [b'Z'] => Some(0),
        [sign @ (b'+' | b'-'), ..] => {
            let (h, m) = match b.len() {
                6 if b[3] == b':' => (num(b, 1, 2)?, num(b, 4, 2)?),
                5 => (num(b, 1, 2)?, num(b, 3, 2)?),
                _ => return None,
            };
            let v = h * 3600 + m * 60;
            Some(if *sign == b'-' { -v } else { v })
        }
        _ => None,
    }
}

/// `$msec` (`1732874400.123`) → µs since the epoch.
pub(crate) fn msec_us(s: &str) -> Option<i64> {
    let (int, frac, fd) = decimal(s.as_bytes())?;
    let frac_us = if fd <= 6 {
        frac * 10u64.pow(6 - fd)
    } else {
        frac / 10u64.pow(fd - 6)
    };
    i64::try_from(int.checked_mul(1_000_000)?.checked_add(frac_us)?).ok()
}

/// `$time_iso8601` (`2026-11-29T10:00:00+00:00`; `Z` and fractions
/// accepted) → µs since the epoch.
pub(crate) fn iso8601_us(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let mut rest = &b[19..];
    let mut frac_us = 0;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let digits = &rest[1..1 + n];
        frac_us = digits
            .iter()
            .take(6)
            .fold(0i64, |a, &c| a * 10 + i64::from(c - b'0'))
            * 10i64.pow(6 - n.min(6) as u32);
        rest = &rest[1 + n..];
    }
    let t = epoch_us(
        num(b, 0, 4)?,
        num(b, 5, 2)?,
        num(b, 8, 2)?,
        num(b, 11, 2)?,
        num(b, 14, 2)?,
        num(b, 17, 2)?,
        offset_s(rest)?,
    )?;
    Some(t + frac_us)
}

/// `$time_local` (`29/Nov/2026:10:00:00 +0000`) → µs since the epoch.
pub(crate) fn time_local_us(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 26
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || b[14] != b':'
        || b[17] != b':'
        || b[20] != b' '
    {
        return None;
    }
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let mo = MONTHS.iter().position(|m| m[..] == b[3..6])? as i64 + 1;
    epoch_us(
        num(b, 7, 4)?,
        mo,
        num(b, 0, 2)?,
        num(b, 12, 2)?,
        num(b, 15, 2)?,
        num(b, 18, 2)?,
        offset_s(&b[21..])?,
    )
}

/// Items of an `$upstream_*` value: `", "` separates servers tried and
/// `" : "` upstream groups (both flatten); items are trimmed. A whole value
/// of `-` has no items (see [`is_null`]); a `-` item is the caller's null.
///
/// ```text
/// "1.0, 0.5 : 2.0" → ["1.0", "0.5", "2.0"]     "[::1]:80, unix:/s" → ["[::1]:80", "unix:/s"]
/// ```
pub(crate) struct ListItems<'a> {
    rest: Option<&'a str>,
}

impl<'a> ListItems<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        ListItems {
            rest: (!is_null(s)).then_some(s),
        }
    }
}

impl<'a> Iterator for ListItems<'a> {
    type Item = &'a str;
    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let s = self.rest?;
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b',' => {
                    self.rest = Some(&s[i + 1..]);
                    return Some(trim_spaces(&s[..i]));
                }
                b':' if i > 0 && b[i - 1] == b' ' && b.get(i + 1) == Some(&b' ') => {
                    self.rest = Some(&s[i + 1..]);
                    return Some(trim_spaces(&s[..i]));
                }
                _ => i += 1,
            }
        }
        self.rest = None;
        Some(trim_spaces(s))
    }
}

/// The trace id of a `traceparent`, exactly as
/// [`overtime_model::trace_id_from_traceparent`] gives it, but borrowed
/// when already lowercase (the common case) instead of allocated.
#[inline]
pub(crate) fn trace_id(tp: &str) -> Option<Cow<'_, str>> {
    // The common shape `vv-<32 hex>-…`, checked in one pass.
    let b = tp.as_bytes();
    if b.len() >= 35
        && b[0].is_ascii_alphanumeric()
        && b[1].is_ascii_alphanumeric()
        && b[2] == b'-'
        && (b.len() == 35 || b[35] == b'-')
    {
        // Branch-free: random hex digits defeat the branch predictor.
        let (mut ok, mut nonzero) = (true, 0u8);
        for &c in &b[3..35] {
            ok &= (c.wrapping_sub(b'0') < 10) | (c.wrapping_sub(b'a') < 6);
            nonzero |= c ^ b'0';
        }
        if ok && nonzero != 0 {
            return Some(Cow::Borrowed(&tp[3..35]));
        }
    }
    // Anything else exactly as the model reads it.
    overtime_model::trace_id_from_traceparent(tp).map(Cow::Owned)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Undoes nginx's `escape=default` (`\xHH`) into `out`; `tmp` is scratch.
/// When the bytes are not UTF-8 text (a TLS hello sent to a plain-HTTP
/// port, a Latin-1 header) nothing is written and the answer is false: the
/// caller keeps the value exactly as nginx wrote it, escapes and all, so
/// no byte is lost (a U+FFFD would lose it).
pub(crate) fn unescape_default(s: &str, tmp: &mut Vec<u8>, out: &mut String) -> bool {
    tmp.clear();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let (Some(h), Some(l)) = (
                b.get(i + 2).and_then(|&c| hex(c)),
                b.get(i + 3).and_then(|&c| hex(c)),
            )
        {
            tmp.push(h << 4 | l);
            i += 4;
            continue;
        }
        tmp.push(b[i]);
        i += 1;
    }
    match std::str::from_utf8(tmp) {
        Ok(t) => {
            out.push_str(t);
            true
        }
        Err(_) => false,
    }
}

/// `b` as text, each byte that is not part of UTF-8 written `\xHH` the way
/// nginx's `escape=default` writes it (not U+FFFD, which would lose it).
///
/// ```text
/// b"GET /\xfc x" → "GET /\\xFC x"
/// ```
pub(crate) fn utf8_or_escaped(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for &x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02X}"));
        }
    }
    out
}

/// Undoes JSON string escapes (`escape=json`) into `out`; a malformed
/// escape is kept as written.
pub(crate) fn unescape_json(s: &str, out: &mut String) {
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let save = chars.clone();
        let r = match chars.next() {
            Some('"') => Some('"'),
            Some('\\') => Some('\\'),
            Some('/') => Some('/'),
            Some('b') => Some('\u{8}'),
            Some('f') => Some('\u{c}'),
            Some('n') => Some('\n'),
            Some('r') => Some('\r'),
            Some('t') => Some('\t'),
            Some('u') => json_u(&mut chars),
            _ => None,
        };
        match r {
            Some(c) => out.push(c),
            None => {
                out.push('\\');
                chars = save;
            }
        }
    }
}

fn json_u(chars: &mut std::str::Chars<'_>) -> Option<char> {
    let hex4 = |it: &mut std::str::Chars<'_>| -> Option<u32> {
        let s: String = it.by_ref().take(4).collect();
        (s.len() == 4)
            .then(|| u32::from_str_radix(&s, 16).ok())
            .flatten()
    };
    let hi = hex4(chars)?;
    if (0xD800..0xDC00).contains(&hi) {
        let mut look = chars.clone();
        if look.next() == Some('\\')
            && look.next() == Some('u')
            && let Some(lo) = hex4(&mut look).filter(|lo| (0xDC00..0xE000).contains(lo))
        {
            *chars = look;
            return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
        }
        return Some('\u{FFFD}');
    }
    Some(char::from_u32(hi).unwrap_or('\u{FFFD}'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_to_ms_exactly() {
        assert_eq!(secs_to_ms("60.001"), Ok(Some(60001.0)));
        assert_eq!(secs_to_ms("0.000"), Ok(Some(0.0)));
        assert_eq!(secs_to_ms("1.5"), Ok(Some(1500.0)));
        assert_eq!(secs_to_ms("2"), Ok(Some(2000.0)));
        assert_eq!(secs_to_ms("0.0001"), Ok(Some(0.1)));
        assert_eq!(secs_to_ms("-"), Ok(None));
        assert_eq!(secs_to_ms("1.5e3"), Ok(Some(1_500_000.0)));
        assert_eq!(secs_to_ms("fast"), Err(()));
        assert_eq!(secs_to_ms("-1"), Err(()));
        // Found by fuzzing: finite seconds, infinite milliseconds.
        assert_eq!(secs_to_ms("1e308"), Err(()));
        assert!(secs_to_ms("99999999999999999999999").is_ok_and(|v| v > Some(9.9e25)));
        assert_eq!(uint::<u16>("504"), Ok(Some(504)));
        assert_eq!(uint::<u16>("70000"), Err(()));
        assert_eq!(uint::<u16>("5x4"), Err(()));
        assert_eq!(uint::<i64>("-"), Ok(None));
    }

    #[test]
    fn durations_agree_with_the_shared_helper() {
        for s in [
            "120s", "120", "1500ms", "0.3s", "47.2", "900us", "2m", "1e3ms", "soon", "-1s", "",
            "s", ".5s", "5.",
        ] {
            let (fast, slow) = (duration_ms(s), parse_duration_ms(s, 1000.0));
            match (fast, slow) {
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-9, "{s}: {a} vs {b}"),
                (a, b) => assert_eq!(a, b, "{s}"),
            }
        }
        assert_eq!(duration_ms("0.3s"), Some(300.0));
        assert_eq!(duration_ms("1500ms"), Some(1500.0));
    }

    #[test]
    fn three_time_variables() {
        let t = 1_795_946_400_000_000; // 2026-11-29T10:00:00Z
        assert_eq!(iso8601_us("2026-11-29T10:00:00+00:00"), Some(t));
        assert_eq!(iso8601_us("2026-11-29T11:00:00+01:00"), Some(t));
        assert_eq!(iso8601_us("2026-11-29T10:00:00Z"), Some(t));
        assert_eq!(iso8601_us("2026-11-29T10:00:00.250Z"), Some(t + 250_000));
        assert_eq!(iso8601_us("2026-13-29T10:00:00+00:00"), None);
        assert_eq!(
            iso8601_us("2026-02-29T10:00:00+00:00"),
            None,
            "not a leap year"
        );
        assert!(iso8601_us("2028-02-29T10:00:00+00:00").is_some());
        assert_eq!(time_local_us("31/Apr/2026:10:00:00 +0000"), None);
        assert_eq!(iso8601_us("2026-11-29"), None);
        assert_eq!(time_local_us("29/Nov/2026:10:00:00 +0000"), Some(t));
        assert_eq!(time_local_us("29/Nov/2026:05:00:00 -0500"), Some(t));
        assert_eq!(time_local_us("29/Foo/2026:10:00:00 +0000"), None);
        assert_eq!(msec_us("1795946400.123"), Some(t + 123_000));
        assert_eq!(msec_us("1795946400"), Some(t));
        assert_eq!(msec_us("yesterday"), None);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn upstream_lists_flatten_both_separators() {
        let v: Vec<_> = ListItems::new("1.0, 0.5 : 2.0").collect();
        assert_eq!(v, vec!["1.0", "0.5", "2.0"]);
        assert_eq!(ListItems::new("-").count(), 0);
        assert_eq!(
            ListItems::new("-, 0.001").collect::<Vec<_>>(),
            vec!["-", "0.001"]
        );
        let a: Vec<_> = ListItems::new("[::1]:8080, 10.0.0.2:80 : unix:/run/llm.sock").collect();
        assert_eq!(a, vec!["[::1]:8080", "10.0.0.2:80", "unix:/run/llm.sock"]);
    }

    #[test]
    fn trace_id_agrees_with_the_model() {
        for tp in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "-",
            "garbage",
            "00-0af7651916cd43dd8448eb211c80319c",
            "00-0af7651916cd43dd8448eb211c80319cx-1",
            "000-af7651916cd43dd8448eb211c80319c-1",
            "-0-0af7651916cd43dd8448eb211c80319c-1",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319-x",
        ] {
            assert_eq!(
                trace_id(tp).map(|c| c.into_owned()),
                overtime_model::trace_id_from_traceparent(tp),
                "{tp}"
            );
        }
    }

    #[test]
    fn escapes() {
        let (mut tmp, mut out) = (Vec::new(), String::new());
        unescape_default(
            r"say \x22hi\x22 \x5C \xD0\xBF\x16 \q \x1",
            &mut tmp,
            &mut out,
        );
        assert_eq!(out, "say \"hi\" \\ п\u{16} \\q \\x1");
        out.clear();
        assert!(!unescape_default(r"\xFC\x03", &mut tmp, &mut out));
        assert_eq!(out, "", "not UTF-8: left to the caller, nothing lost");
        assert_eq!(utf8_or_escaped(b"a\xfc\xd0\xbf\xd0"), "a\\xFC\u{43f}\\xD0");
        out.clear();
        unescape_json(r#"a\"b\\c\/\n\u0001\ud83d\ude00\x"#, &mut out);
        assert_eq!(out, "a\"b\\c/\n\u{1}😀\\x");
    }
}
