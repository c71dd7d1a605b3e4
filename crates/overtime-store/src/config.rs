//! [`StoreConfig`]: where the store keeps its files and how much memory it
//! may hold. It is the `[store]` section of overtime's TOML config itself
//! (`overtime-config` embeds this type), so each key, its default and its
//! documentation are written once, here.
//!
//! Design rules:
//! - The defaults are those of a collector (`overtime serve` with no
//!   config, docs/store.md): a week of retention, 10 GiB of Parquet, a
//!   flush a minute. Tests and tools override what they need with
//!   `..Default::default()`.
//! - Unknown keys are refused (`deny_unknown_fields`): a misspelt option is
//!   an error at load, not a silent default.
//! - [`StoreConfig::validate`] holds the bounds a config file must keep;
//!   [`Store::open`](crate::Store::open) accepts any value, so tests can
//!   run with tiny budgets.
//!
//! ```
//! use overtime_store::StoreConfig;
//! let cfg: StoreConfig = toml::from_str(r#"data_dir = "/var/lib/overtime""#).unwrap();
//! assert_eq!(cfg.memtable_bytes, 256 << 20);
//! assert_eq!(cfg.segment_seconds, 3600);
//! assert_eq!(cfg.retention_age_hours, Some(168));
//! assert!(cfg.fsync);
//! ```

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the store lays out and bounds its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Root of the WAL, the manifest and the Parquet files (created if
    /// missing). Default `overtime-data`, relative to the working
    /// directory.
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
    /// [`Store::flush`](crate::Store::flush)). Default 60 000 (1 min).
    pub flush_interval_ms: u64,
    /// Drop whole bucket files older than this many hours. Default 168
    /// (a week); none: keep them.
    pub retention_age_hours: Option<i64>,
    /// Keep the Parquet files under this many bytes, dropping the oldest
    /// first. Default 10 GiB; none: no bound.
    pub retention_bytes: Option<u64>,
    /// fsync the WAL before acknowledging a write. Default true; turning it
    /// off trades crash safety (not process-crash safety) for speed.
    pub fsync: bool,
    /// Where the Parquet files go: `s3://bucket/prefix` (S3 or an
    /// S3-compatible server; credentials, region and endpoint from the
    /// environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`) or
    /// `file:///path` (a directory, e.g. a shared mount). Files there are
    /// laid out by table, date and hour and named by collector, so several
    /// collectors can share one prefix and each queries all of it. The WAL
    /// and the manifest stay in `data_dir`. Default none: the Parquet files
    /// live in `data_dir/parquet`, one collector's own.
    pub url: Option<String>,
    /// The name of this collector's files under `url` (letters, digits,
    /// `-`, `_`, `.`). Default none: a generated id (`<hostname>-<random>`)
    /// kept in `data_dir/COLLECTOR_ID`, stable across restarts.
    pub collector_id: Option<String>,
    /// Bytes of the bucket's objects that SQL scans keep in memory across
    /// queries (blocks of 256 KiB, least recently used dropped first), so
    /// a dashboard refreshing the same scans reads the bucket once. Only
    /// with `url`; `0` turns it off. Default 256 MiB.
    pub read_cache_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: PathBuf::from("overtime-data"),
            memtable_bytes: 256 << 20,
            segment_seconds: 3600,
            flush_interval_ms: 60_000,
            retention_age_hours: Some(168),
            retention_bytes: Some(10 << 30),
            fsync: true,
            url: None,
            collector_id: None,
            read_cache_bytes: 256 << 20,
        }
    }
}

impl StoreConfig {
    /// The bounds a config file must keep: a memtable of at least 1 MiB.
    ///
    /// ```
    /// let small = overtime_store::StoreConfig { memtable_bytes: 1000, ..Default::default() };
    /// assert!(small.validate().unwrap_err().contains("memtable_bytes"));
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        if self.memtable_bytes < 1024 * 1024 {
            return Err("store.memtable_bytes must be at least 1 MiB".into());
        }
        if let Some(u) = &self.url
            && !["s3://", "s3a://", "file:///"]
                .iter()
                .any(|s| u.starts_with(s))
        {
            return Err(format!(
                "store.url {u:?} must be s3://bucket/prefix or file:///path"
            ));
        }
        if let Some(id) = &self.collector_id
            && !crate::objects::valid_collector_id(id)
        {
            return Err(format!(
                "store.collector_id {id:?} must be 1-64 letters, digits, '-', '_' or '.'"
            ));
        }
        Ok(())
    }

    /// [`StoreConfig::retention_age_hours`] in seconds.
    pub fn retention_age_s(&self) -> Option<i64> {
        self.retention_age_hours.map(|h| h.saturating_mul(3600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_full_section() {
        let d: StoreConfig = toml::from_str("").unwrap();
        assert_eq!(d, StoreConfig::default());
        assert_eq!(d.data_dir, PathBuf::from("overtime-data"));
        assert_eq!(
            (d.flush_interval_ms, d.retention_age_s(), d.retention_bytes),
            (60_000, Some(168 * 3600), Some(10 * 1024 * 1024 * 1024))
        );
        let c: StoreConfig = toml::from_str(
            r#"
            data_dir = "/var/lib/overtime"
            memtable_bytes = 2097152
            segment_seconds = 600
            flush_interval_ms = 0
            retention_age_hours = 2
            retention_bytes = 1000
            fsync = false
            url = "s3://overtime/prod"
            collector_id = "web-1"
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            (c.memtable_bytes, c.segment_seconds, c.flush_interval_ms),
            (2 << 20, 600, 0)
        );
        assert_eq!(
            (c.retention_age_s(), c.retention_bytes),
            (Some(7200), Some(1000))
        );
        assert!(!c.fsync);
        assert_eq!(c.url.as_deref(), Some("s3://overtime/prod"));
        assert_eq!(c.collector_id.as_deref(), Some("web-1"));
    }

    #[test]
    fn unknown_keys_and_small_budgets_are_refused() {
        let e = toml::from_str::<StoreConfig>("retention_age_s = 5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("retention_age_s"), "{e}");
        let c: StoreConfig = toml::from_str("memtable_bytes = 5").unwrap();
        assert!(c.validate().unwrap_err().contains("at least 1 MiB"));
        let c: StoreConfig = toml::from_str("url = \"gs://b\"").unwrap();
        assert!(c.validate().unwrap_err().contains("s3://bucket/prefix"));
        let c: StoreConfig = toml::from_str("collector_id = \"a/b\"").unwrap();
        assert!(c.validate().unwrap_err().contains("collector_id"));
    }
}
