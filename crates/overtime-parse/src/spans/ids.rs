//! Trace and span ids: validation, hex encoding of OTLP's raw bytes, and the
//! base64 some OTLP JSON writers use instead of hex.

/// Which id a value is, and so how many bytes it must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// 16 bytes, 32 hex digits.
    Trace,
    /// 8 bytes, 16 hex digits (span and parent span ids).
    Span,
}

impl IdKind {
    /// Length of the id in bytes.
    pub fn bytes(self) -> usize {
        match self {
            IdKind::Trace => 16,
            IdKind::Span => 8,
        }
    }
}

/// Normalises a textual id: lowercase hex of the right length, not all
/// zeros. A trace id written as a UUID (`8-4-4-4-12` with dashes) is
/// accepted. Returns `None` when the value is not a valid id.
pub fn normalize_hex_id(s: &str, kind: IdKind) -> Option<String> {
    let s = s.trim();
    let want = kind.bytes() * 2;
    let uuid_dashes = [8, 13, 18, 23];
    let hex: String = if kind == IdKind::Trace
        && s.len() == 36
        && uuid_dashes.iter().all(|&i| s.as_bytes()[i] == b'-')
    {
        s.chars().filter(|&c| c != '-').collect()
    } else {
        s.to_string()
    };
    (hex.len() == want
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && hex.bytes().any(|b| b != b'0'))
    .then(|| hex.to_ascii_lowercase())
}

/// Reads an id from OTLP JSON: hex (the OTLP/JSON rule) or, failing that,
/// standard/URL-safe base64 of exactly the right number of bytes (what
/// protobuf's generic JSON mapping writes). Returns the raw bytes.
pub fn id_bytes_from_json(s: &str, kind: IdKind) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() == kind.bytes() * 2 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return decode_hex(s);
    }
    decode_base64(s).filter(|b| b.len() == kind.bytes())
}

/// Hex-encodes OTLP id bytes and checks them: `Ok(None)` for an empty id
/// (absent, e.g. the parent of a root), `Err` for a wrong length or all
/// zeros.
pub fn hex_id_from_bytes(b: &[u8], kind: IdKind) -> Result<Option<String>, String> {
    if b.is_empty() {
        return Ok(None);
    }
    if b.len() != kind.bytes() {
        return Err(format!(
            "{} bytes, expected {}: {}",
            b.len(),
            kind.bytes(),
            encode_hex(b)
        ));
    }
    if b.iter().all(|&x| x == 0) {
        return Err("all zeros".into());
    }
    Ok(Some(encode_hex(b)))
}

/// Lowercase hex of bytes.
pub fn encode_hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 15) as usize] as char);
    }
    s
}

/// Decodes hex (either case, even length).
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

/// Decodes base64, standard (`+/`) or URL-safe (`-_`) alphabet, with or
/// without `=` padding. Whitespace is not allowed.
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let body = s.trim_end_matches('=');
    if s.len() - body.len() > 2 || body.len() % 4 == 1 {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_case() {
        let b = decode_hex("0AF7651916CD43DD8448EB211C80319C").unwrap();
        assert_eq!(encode_hex(&b), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
    }

    #[test]
    fn base64_trace_id_of_16_bytes() {
        // base64 of 0af7651916cd43dd8448eb211c80319c
        let b = id_bytes_from_json("CvdlGRbNQ92ESOshHIAxnA==", IdKind::Trace).unwrap();
        assert_eq!(encode_hex(&b), "0af7651916cd43dd8448eb211c80319c");
        let url_safe = id_bytes_from_json("CvdlGRbNQ92ESOshHIAxnA", IdKind::Trace).unwrap();
        assert_eq!(b, url_safe);
        // A span-sized value is not a trace id.
        assert_eq!(id_bytes_from_json("APBnqgupArc=", IdKind::Trace), None);
        assert_eq!(decode_base64("a==="), None);
        assert_eq!(decode_base64("ab!d"), None);
    }

    #[test]
    fn uuid_only_for_trace_ids_and_wrong_lengths_rejected() {
        assert_eq!(normalize_hex_id("0af76519-16cd-43dd", IdKind::Span), None);
        assert_eq!(
            normalize_hex_id("0af7651916cd43dd8448eb211c80319", IdKind::Trace),
            None
        );
        assert_eq!(
            normalize_hex_id(" 0AF7651916CD43DD8448EB211C80319C ", IdKind::Trace).as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn normalize_hex_id_example() {
        use crate::spans::ids::{IdKind, normalize_hex_id};
        assert_eq!(
            normalize_hex_id("B7AD6B7169203331", IdKind::Span).as_deref(),
            Some("b7ad6b7169203331")
        );
        assert_eq!(
            normalize_hex_id("0af76519-16cd-43dd-8448-eb211c80319c", IdKind::Trace).as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        assert_eq!(normalize_hex_id("0000000000000000", IdKind::Span), None);
        assert_eq!(normalize_hex_id("xyz", IdKind::Span), None);
    }

    #[test]
    fn id_bytes_from_json_example() {
        use crate::spans::ids::{IdKind, id_bytes_from_json};
        assert_eq!(
            id_bytes_from_json("00f067aa0ba902b7", IdKind::Span),
            Some(vec![0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert_eq!(
            id_bytes_from_json("APBnqgupArc=", IdKind::Span),
            Some(vec![0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert_eq!(id_bytes_from_json("nope", IdKind::Span), None);
    }

    #[test]
    fn hex_id_from_bytes_example() {
        use crate::spans::ids::{IdKind, hex_id_from_bytes};
        assert_eq!(
            hex_id_from_bytes(&[0xab; 8], IdKind::Span),
            Ok(Some("abababababababab".into()))
        );
        assert_eq!(hex_id_from_bytes(&[], IdKind::Span), Ok(None));
        assert!(hex_id_from_bytes(&[0; 16], IdKind::Trace).is_err());
        assert!(hex_id_from_bytes(&[1; 7], IdKind::Span).is_err());
    }

    #[test]
    fn decode_base64_example() {
        use crate::spans::ids::decode_base64;
        assert_eq!(decode_base64("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(decode_base64("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(decode_base64("a"), None);
    }
}
