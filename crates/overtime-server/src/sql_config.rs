//! `[sql]`: the bounds of the read-only SQL endpoint (docs/interfaces.md),
//! owned here, where they are enforced; overtime-config composes it.
//! `[sql.postgres]`: the same SQL over the PostgreSQL wire protocol
//! (docs/postgres.md), off unless it names a listen address.

use serde::{Deserialize, Serialize};

/// How long, how many rows and how much memory one SQL query may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SqlConfig {
    /// A query still running after this long is cancelled (`408 sql_timeout`).
    pub timeout_ms: u64,
    /// At most this many rows are returned.
    pub max_rows: usize,
    /// The query's memory pool, in bytes.
    pub memory_bytes: usize,
    /// The PostgreSQL front door to the same SQL.
    pub postgres: PostgresConfig,
}

impl Default for SqlConfig {
    fn default() -> Self {
        SqlConfig {
            timeout_ms: 10_000,
            max_rows: 100_000,
            memory_bytes: 256 * 1024 * 1024,
            postgres: PostgresConfig::default(),
        }
    }
}

/// `[sql.postgres]`: where the PostgreSQL wire protocol listens, its TLS
/// and how many clients it serves at once. The password is the API's
/// bearer token (`[server] token_env`), under any user name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// `host:port` (port 0: any free port, reported in the ready file);
    /// empty (the default): off.
    pub listen: String,
    /// A PEM certificate chain; with `tls_key`, clients are served over
    /// TLS only (`sslmode=require`), and a client that does not ask for
    /// TLS is refused. Both empty: no TLS.
    pub tls_cert: String,
    /// The PEM private key of `tls_cert`.
    pub tls_key: String,
    /// At most this many connections at once; one more is closed at once.
    pub max_connections: usize,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            listen: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            max_connections: 64,
        }
    }
}

impl PostgresConfig {
    /// Whether both TLS files are named, or neither (one alone is a
    /// mistake worth refusing at load).
    pub fn validate(&self) -> Result<(), String> {
        if self.tls_cert.is_empty() != self.tls_key.is_empty() {
            return Err(
                "[sql.postgres] tls_cert and tls_key go together: set both or neither".into(),
            );
        }
        if self.max_connections == 0 {
            return Err("[sql.postgres] max_connections must be at least 1".into());
        }
        Ok(())
    }
}
