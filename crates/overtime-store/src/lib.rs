//! # overtime-store
//!
//! overtime's durable store (ARCHITECTURE.md: "WAL before ack, one global
//! byte budget with backpressure, hourly Parquet sorted by time with a
//! trace_id bloom filter, DataFusion over memtable ∪ files").
//!
//! ```text
//! write(table, batch, checkpoint)
//!   ├─ over the memtable budget? → SinkError::Full { retry_after_ms }
//!   ├─ WAL record [len][crc32][table, time, checkpoint, Arrow IPC] → fsync (group commit)
//!   └─ memtable (per table, in arrival order)                       → Ok
//! flush (timer, half budget, or on demand)
//!   └─ one Parquet file per table per hour: sorted by time, bloom(trace_id),
//!      page statistics → manifest(flushed_through, checkpoints) → WAL truncated
//! read: trace(id) · scan(table, from, to) · register(ctx) for SQL
//!   (each optionally joined with peers' unflushed rows: unflushed())
//! ```
//!
//! Files under `data_dir`: `wal/<seq>.wal`, `MANIFEST.json`,
//! `parquet/<table>/<bucket>-<seq>.parquet`; with `[store] url` the
//! Parquet goes to object storage instead, laid out by table, date and
//! hour and named by collector ([`format::object_key`]). See `docs/store.md`.
//!
//! ```
//! use overtime_model::{RecordSink, GatewayColumns, GatewayRecord, Table};
//! use overtime_store::{Store, StoreConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(StoreConfig { data_dir: dir.path().into(), flush_interval_ms: 0, ..Default::default() }).unwrap();
//! let mut cols = GatewayColumns::new();
//! cols.append(&GatewayRecord { status: Some(504), time_us: 1_764_446_400_000_000, ..Default::default() });
//! store.write(Table::GatewayRequests, cols.finish(), None).unwrap();
//! assert!(store.wal_bytes() > 0);
//! store.flush().unwrap();
//! assert_eq!(store.wal_bytes(), 0);
//! assert!(store.parquet_bytes() > 0);
//! ```

#![warn(missing_docs)]

mod config;
mod error;
mod flush;
mod manifest;
mod memtable;
mod objects;
mod peers;
mod provider;
mod published;
mod read;
mod read_cache;
mod segment;
mod store;
mod tables;
mod wal;

pub use config::StoreConfig;
pub use error::StoreError;
pub use flush::{FlushReport, RetentionReport};
pub use peers::{PeerSource, Unflushed};
pub use store::{RETRY_AFTER_MS, Store, StoreStats, TableStats};

/// The formats on disk and in the bucket, for the crash, recovery and
/// schema-upgrade tests and for a tool that reads a data directory
/// without opening a [`Store`]: the WAL's framing and payload, the Parquet
/// segment files and the object keys. A caller that only writes and
/// queries needs none of it.
pub mod format {
    pub use crate::objects::{Bucket, ParsedKey, object_key, parse_key};
    pub use crate::published::{manifest_key, parse_manifest_key};
    pub use crate::segment::{SegmentFile, Source, list_files, open_segment, write_segment};
    pub use crate::wal::{
        HEADER_LEN, WalRecord, decode_payload, encode_payload, list_segments, segment_path,
    };
}
