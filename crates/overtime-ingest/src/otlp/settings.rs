//! The `[otlp]` section of overtime's TOML config: [`OtlpSettings`], read
//! by serde as it is written, and [`OtlpSettings::build`], which makes the
//! [`OtlpConfig`] both receivers run with.
//!
//! Design rules:
//! - One TOML type, owned here: `overtime-config` embeds it as it is, so
//!   every key, its default and its documentation are written once, in
//!   this file; a default shared with [`OtlpConfig`] is one constant.
//!   Unknown keys are refused (`deny_unknown_fields`).
//! - The token itself is never in the file: `token_env` names the
//!   variable, the caller reads it (overtime-config's `Secrets`, the one
//!   place secrets are read) and hands it to `build`.

use super::{BearerToken, DEFAULT_MAX_BODY_BYTES, OtlpConfig};
use serde::{Deserialize, Serialize};

/// The `[otlp]` section: where the receivers listen and their limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSettings {
    /// OTLP/HTTP; empty disables. Default `127.0.0.1:4318`.
    pub http_listen: String,
    /// OTLP/gRPC; empty disables. Default `127.0.0.1:4317`.
    pub grpc_listen: String,
    /// Largest request body (default 16 MiB).
    pub max_body_bytes: usize,
    /// Requests decoded at once per receiver (twice as many wait, more
    /// are refused with 429); 0 (the default) means twice the CPUs.
    pub max_concurrent_decodes: usize,
    /// Environment variable holding a bearer token the receivers require.
    /// Unset or empty: no token (usual for collectors inside a cluster).
    /// Default `OVERTIME_OTLP_TOKEN`.
    pub token_env: String,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        OtlpSettings {
            http_listen: "127.0.0.1:4318".into(),
            grpc_listen: "127.0.0.1:4317".into(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_concurrent_decodes: 0,
            token_env: "OVERTIME_OTLP_TOKEN".into(),
        }
    }
}

impl OtlpSettings {
    /// What the receivers run with; `token` is the value of the variable
    /// `token_env` names (`None`: no token required).
    ///
    /// ```
    /// use overtime_ingest::otlp::{OtlpConfig, OtlpSettings};
    /// let s: OtlpSettings = toml::from_str("max_body_bytes = 1048576").unwrap();
    /// let cfg = s.build(Some("t0ken".into()));
    /// assert_eq!(cfg.max_body_bytes, 1 << 20);
    /// // 0: the library's default concurrency, twice the CPUs.
    /// assert_eq!(cfg.max_concurrent_decodes, OtlpConfig::default().max_concurrent_decodes);
    /// assert!(cfg.token.is_some_and(|t| t.admits(Some("Bearer t0ken"))));
    /// ```
    pub fn build(&self, token: Option<String>) -> OtlpConfig {
        let defaults = OtlpConfig::default();
        OtlpConfig {
            max_body_bytes: self.max_body_bytes,
            max_concurrent_decodes: match self.max_concurrent_decodes {
                0 => defaults.max_concurrent_decodes,
                n => n,
            },
            token: token.map(BearerToken::new),
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_receivers_defaults() {
        let s: OtlpSettings = toml::from_str("").unwrap();
        assert_eq!(s, OtlpSettings::default());
        assert_eq!(s.build(None), OtlpConfig::default());
        assert_eq!(s.max_body_bytes, 16 * 1024 * 1024);
        assert_eq!(
            (s.http_listen.as_str(), s.grpc_listen.as_str()),
            ("127.0.0.1:4318", "127.0.0.1:4317")
        );
        assert_eq!(s.token_env, "OVERTIME_OTLP_TOKEN");
    }

    #[test]
    fn a_full_section() {
        let s: OtlpSettings = toml::from_str(
            r#"
            http_listen = "0.0.0.0:4318"
            grpc_listen = ""
            max_body_bytes = 4096
            max_concurrent_decodes = 3
            token_env = "MY_TOKEN"
            "#,
        )
        .unwrap();
        assert!(s.grpc_listen.is_empty());
        assert_eq!(s.token_env, "MY_TOKEN");
        let cfg = s.build(Some("abc".into()));
        assert_eq!((cfg.max_body_bytes, cfg.max_concurrent_decodes), (4096, 3));
        let token = cfg.token.unwrap();
        assert!(token.admits(Some("Bearer abc")) && !token.admits(None));
        // The token is not printed with the config.
        assert!(!format!("{token:?}").contains("abc"));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<OtlpSettings>("max_body_byte = 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_body_byte"), "{e}");
    }
}
