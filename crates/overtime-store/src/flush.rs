//! Flush (memtable → Parquet, then WAL truncation) and retention.
//!
//! A flush, step by step; a crash after any step loses nothing and
//! duplicates nothing:
//! 1. under the exclusive write gate: seal the WAL segment (fsync), start
//!    the next one, freeze the memtable (still visible to reads);
//! 2. write one Parquet file per table per time bucket, named with the
//!    sealed segment's sequence (temp file, fsync, rename);
//! 3. save the manifest: `flushed_through` = that sequence, with the
//!    checkpoints as of the seal (atomic rename); with a bucket, publish it
//!    there first (one PUT): that is the flush's commit record for every
//!    other collector (`published.rs`);
//! 4. under the state lock: publish the files and drop the frozen
//!    memtable in one step, so a query sees each row exactly once;
//! 5. delete the WAL segments `<=` the sealed one.
//!
//! Crash before 3: open deletes the files (sequence past the manifest) and
//! replays the WAL. Crash after 3: open keeps the files and deletes the
//! segments the manifest covers. Crash between the bucket's manifest and
//! the local one: open takes the bucket's, the later one.
//!
//! ```
//! use overtime_model::{RecordSink, Table, RejectedColumns, RejectedRecord};
//! use overtime_store::{Store, StoreConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(StoreConfig { data_dir: dir.path().into(), flush_interval_ms: 0, ..Default::default() }).unwrap();
//! let mut c = RejectedColumns::new();
//! c.append(&RejectedRecord::new("edge.log", 1, "format_mismatch", "bad", b"x"));
//! store.write(Table::Rejected, c.finish(), None).unwrap();
//! let report = store.flush().unwrap();
//! assert_eq!(report.files.len(), 1);
//! assert_eq!(store.memtable_bytes(), 0);
//! assert_eq!(store.stats().tables["rejected"].parquet_rows, 1);
//! ```

use crate::StoreError;
use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::objects::{ObjectReader, object_key};
use crate::published::Commit;
use crate::segment::Source;
use crate::segment::{self, SegmentFile};
use crate::store::{Inner, Store};
use crate::tables::idx;
use crate::wal::sync_dir;
use overtime_model::Table;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What a flush wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlushReport {
    /// The Parquet files written.
    pub files: Vec<PathBuf>,
    /// Rows written per table.
    pub rows: BTreeMap<String, u64>,
    /// Bytes of the new files.
    pub bytes: u64,
    /// WAL segments deleted afterwards.
    pub wal_segments_removed: u64,
}

/// What retention removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    /// The Parquet files deleted (paths, or `s3://` URLs of objects).
    pub files_removed: Vec<PathBuf>,
    /// Rows those files held.
    pub rows_removed: u64,
    /// Bytes those files took.
    pub bytes_removed: u64,
}

impl Store {
    /// Moves the memtable to Parquet: one file per table per time bucket,
    /// rows sorted by time, a bloom filter on `trace_id`, page and
    /// row-group statistics; then deletes the WAL segments it covered.
    pub fn flush(&self) -> Result<FlushReport, StoreError> {
        self.inner.flush()
    }

    /// Deletes whole bucket files older than `retention_age_hours` (relative
    /// to `now_us`), then the oldest files until the Parquet total is
    /// under `retention_bytes`.
    pub fn enforce_retention(&self, now_us: i64) -> Result<RetentionReport, StoreError> {
        self.inner.enforce_retention(now_us)
    }
}

impl Inner {
    pub(crate) fn flush(&self) -> Result<FlushReport, StoreError> {
        let _one_flush = self.flush_lock.lock().expect("flush lock");
        let (sealed, frozen, checkpoints) = {
            let _g = self.gate.write().expect("gate lock");
            let mut st = self.state.write().expect("state lock");
            // Nothing written since the last flush (replayable writes are in
            // the memtable and the checkpoints only).
            if self.wal.bytes() == 0
                && st.active.bytes() == 0
                && st.checkpoints == st.flushed_checkpoints
            {
                return Ok(FlushReport::default());
            }
            let sealed = self.wal.rotate()?;
            let frozen = std::mem::take(&mut st.active);
            st.frozen = Some(frozen.clone());
            (sealed, frozen, st.checkpoints.clone())
        };
        let written = match self.write_files(&frozen, sealed, &checkpoints) {
            Ok(w) => w,
            Err(e) => {
                let mut st = self.state.write().expect("state lock");
                st.frozen = None;
                st.active.prepend(frozen);
                *self.last_flush_error.lock().expect("error lock") = Some(e.to_string());
                return Err(e);
            }
        };
        let mut report = FlushReport::default();
        {
            let mut st = self.state.write().expect("state lock");
            for f in written {
                *report.rows.entry(f.table.to_string()).or_default() += f.rows;
                report.bytes += f.bytes;
                report.files.push(f.path.clone());
                st.files[idx(f.table)].push(Arc::new(f));
            }
            st.frozen = None;
            st.flushed_through = sealed;
            st.flushed_checkpoints = checkpoints;
        }
        self.reserved.fetch_sub(frozen.bytes(), Ordering::SeqCst);
        self.flushes.fetch_add(1, Ordering::Relaxed);
        report.wal_segments_removed = self.wal.remove_through(sealed)?;
        Ok(report)
    }

    /// Steps 2 and 3; on failure removes what it wrote (with a bucket,
    /// what cannot be removed yet is left for the next flush to clear).
    fn write_files(
        &self,
        frozen: &Memtable,
        sealed: u64,
        checkpoints: &BTreeMap<String, String>,
    ) -> Result<Vec<SegmentFile>, StoreError> {
        if let Some(b) = &self.bucket {
            self.clear_orphans(b)?;
        }
        let bucket_us = self.cfg.segment_seconds * 1_000_000;
        let mut written: Vec<SegmentFile> = Vec::new();
        let wrote = (|| {
            for t in Table::ALL {
                let dir = &self.parquet_dirs[idx(t)];
                for (start, rows) in segment::sort_and_bucket(t, frozen.batches(t), bucket_us)? {
                    written.push(match &self.bucket {
                        Some(b) => segment::write_object(
                            ObjectReader {
                                bucket: b.clone(),
                                key: object_key(b.prefix(), t, &self.collector_id, start, sealed)
                                    .into(),
                                size: 0,
                            },
                            &self.collector_id,
                            t,
                            start,
                            &rows,
                        )?,
                        None => {
                            segment::write_segment(dir, t, start, sealed, &rows, self.cfg.fsync)?
                        }
                    });
                }
                if self.bucket.is_none() && self.cfg.fsync {
                    sync_dir(dir)?;
                }
            }
            Ok(())
        })();
        let manifest = Manifest {
            flushed_through: sealed,
            checkpoints: checkpoints.clone(),
        };
        let outcome = match (wrote, &self.bucket) {
            (Err(e), _) => Commit::No(e),
            (Ok(()), None) => match manifest.save(&self.root, self.cfg.fsync) {
                Ok(()) => Commit::Yes,
                Err(e) => Commit::No(e),
            },
            (Ok(()), Some(b)) => self.publish_flush(b, &manifest),
        };
        match outcome {
            Commit::Yes => Ok(written),
            Commit::No(e) => {
                for f in written {
                    if remove(&f).is_err() && self.bucket.is_some() {
                        self.orphans.lock().expect("orphans lock").push(f);
                    }
                }
                Err(e)
            }
            Commit::Unknown(e) => {
                self.orphans.lock().expect("orphans lock").extend(written);
                Err(e)
            }
        }
    }

    pub(crate) fn enforce_retention(&self, now_us: i64) -> Result<RetentionReport, StoreError> {
        let _one = self.flush_lock.lock().expect("flush lock");
        // Held to the end: a listing must not bring back what we delete.
        let mut listed = self.listed.lock().expect("list lock");
        self.refresh(&mut listed, false)?;
        let bucket_us = self.cfg.segment_seconds * 1_000_000;
        let mut doomed: Vec<Arc<SegmentFile>> = Vec::new();
        {
            let mut st = self.state.write().expect("state lock");
            if let Some(age) = self.cfg.retention_age_s() {
                let cutoff = now_us.saturating_sub(age.saturating_mul(1_000_000));
                for list in st.files.iter_mut() {
                    list.retain(|f| {
                        let expired = f.bucket_start_us.saturating_add(bucket_us) <= cutoff;
                        if expired {
                            doomed.push(f.clone());
                        }
                        !expired
                    });
                }
            }
            // Age applies to every file the store sees (a collector that
            // is gone leaves nothing behind forever); bytes to its own.
            if let Some(max) = self.cfg.retention_bytes {
                let own = |f: &&Arc<SegmentFile>| self.owns(f);
                let mut total: u64 = st.files.iter().flatten().filter(own).map(|f| f.bytes).sum();
                let mut all: Vec<Arc<SegmentFile>> =
                    st.files.iter().flatten().filter(own).cloned().collect();
                all.sort_by_key(|f| (f.bucket_start_us, f.flush_seq));
                let mut oldest = all.into_iter();
                while total > max {
                    let Some(f) = oldest.next() else { break };
                    total -= f.bytes;
                    st.files[idx(f.table)].retain(|g| g.path != f.path);
                    doomed.push(f);
                }
            }
        }
        let mut report = RetentionReport::default();
        for f in &doomed {
            remove(f)?;
            report.files_removed.push(f.path.clone());
            report.rows_removed += f.rows;
            report.bytes_removed += f.bytes;
        }
        drop(listed);
        if self.cfg.fsync && !doomed.is_empty() && self.bucket.is_none() {
            for d in &self.parquet_dirs {
                sync_dir(d)?;
            }
        }
        Ok(report)
    }
}

/// Deletes a file or object; one already gone is not an error.
pub(crate) fn remove(f: &SegmentFile) -> Result<(), StoreError> {
    match &f.source {
        Source::File(p) => match fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("removing expired file", p, e)),
        },
        Source::Object(o) => o.bucket.delete(o.key.as_ref()),
    }
}
