//! `[sql]`: the bounds of the read-only SQL endpoint (docs/interfaces.md),
//! owned here, where they are enforced; overtime-config composes it.

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
}

impl Default for SqlConfig {
    fn default() -> Self {
        SqlConfig {
            timeout_ms: 10_000,
            max_rows: 100_000,
            memory_bytes: 256 * 1024 * 1024,
        }
    }
}
