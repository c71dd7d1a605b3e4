//! The receivers' optional bearer token.
//!
//! Design rules:
//! - Off unless configured (collectors usually take OTLP unauthenticated
//!   inside the cluster); when set, every export must carry
//!   `Authorization: Bearer <token>` (gRPC: `authorization` metadata), as
//!   OTLP exporters send with `OTEL_EXPORTER_OTLP_HEADERS`.
//! - Compared in constant time; never printed (`Debug` is redacted) and
//!   never echoed in an answer.

use std::fmt;

/// A bearer token the receivers require.
///
/// ```
/// use overtime_ingest::otlp::BearerToken;
/// let t = BearerToken::new("s3cret");
/// assert!(t.admits(Some("Bearer s3cret")));
/// assert!(!t.admits(Some("Bearer s3cre")));
/// assert!(!t.admits(None));
/// assert_eq!(format!("{t:?}"), "BearerToken(<redacted>)");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    /// The token a request must carry (`Authorization: Bearer <token>`).
    pub fn new(token: impl Into<String>) -> Self {
        BearerToken(token.into())
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let given = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        constant_time_eq(given.as_bytes(), self.0.as_bytes())
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let t = BearerToken::new("abc");
        assert!(t.admits(Some("Bearer abc")));
        assert!(t.admits(Some("Bearer abc ")));
        for bad in [
            "Bearer ab",
            "Bearer abcd",
            "Basic abc",
            "abc",
            "Bearer ",
            "",
        ] {
            assert!(!t.admits(Some(bad)), "{bad:?} admitted");
        }
    }
}
