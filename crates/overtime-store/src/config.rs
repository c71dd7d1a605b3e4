//! [`StoreConfig`]: where the store keeps its files and how much memory it
//! may hold. One typed struct, read from the `[store]` table of the TOML
//! config; every field has a default.
//!
//! ```
//! use overtime_store::StoreConfig;
//! let cfg: StoreConfig = serde_json::from_str(r#"{"data_dir": "/var/lib/overtime"}"#).unwrap();
//! assert_eq!(cfg.memtable_bytes, 256 << 20);
//! assert_eq!(cfg.segment_seconds, 3600);
//! assert!(cfg.fsync);
//! ```

use serde::Deserialize;
use std::path::PathBuf;

/// How the store lays out and bounds its data.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Root of the WAL, the manifest and the Parquet files (created if missing).
    pub data_dir: PathBuf,
    /// The one global byte budget of the memtable (all tables together).
    /// A write that would pass it is refused with `SinkError::Full`
    /// (backpressure) until a flush makes room. Default 256 MiB.
    pub memtable_bytes: u64,
    /// Width of a Parquet time bucket in seconds (one file per table per
    /// bucket per flush). Default 3600: hourly files.
    pub segment_seconds: i64,
    /// How often the background flusher moves the memtable to Parquet, in
    /// ms; it also flushes early once the memtable holds half its budget.
    /// `0` disables the background flusher (the owner calls
    /// [`Store::flush`](crate::Store::flush)). Default 300 000 (5 min).
    pub flush_interval_ms: u64,
    /// Drop whole bucket files older than this many seconds. Default none.
    pub retention_age_s: Option<i64>,
    /// Keep the Parquet files under this many bytes, dropping the oldest
    /// first. Default none.
    pub retention_bytes: Option<u64>,
    /// fsync the WAL before acknowledging a write. Default true; turning it
    /// off trades crash safety (not process-crash safety) for speed.
    pub fsync: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: PathBuf::from("data"),
            memtable_bytes: 256 << 20,
            segment_seconds: 3600,
            flush_interval_ms: 300_000,
            retention_age_s: None,
            retention_bytes: None,
            fsync: true,
        }
    }
}
