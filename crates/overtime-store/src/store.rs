//! [`Store`]: open (recovery), the durable write path ([`RecordSink`]),
//! checkpoints, sizes and statistics. Flush and retention are in
//! `flush.rs`, reads in `read.rs`, SQL in `provider.rs`.
//!
//! Write path, in order: schema check → reserve budget bytes (or
//! `Full`) → WAL append → fsync (group commit) → memtable → `Ok`.
//! A flush takes the write gate exclusively for a moment to rotate the WAL
//! and freeze the memtable, so every record in a sealed WAL segment is in
//! the frozen memtable the flush writes out.

use crate::manifest::Manifest;
use crate::memtable::Memtable;
use crate::objects::{self, Bucket, LIST_CACHE, ObjectReader, parse_key};
use crate::published;
use crate::segment::{self, SegmentFile};
use crate::tables::{conform, idx};
use crate::wal::{self, Wal};
use crate::{StoreConfig, StoreError};
use arrow::record_batch::RecordBatch;
use overtime_model::{Checkpoint, CommitPoints, RecordSink, SinkError, Table};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a refused writer should wait before trying again.
pub const RETRY_AFTER_MS: u64 = 250;

/// Rows, files and bytes of one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// Rows written but not flushed yet (durable in the WAL).
    pub memtable_rows: u64,
    /// Rows in the table's Parquet files (in object storage: every
    /// collector's files this store has listed).
    pub parquet_rows: u64,
    /// The table's Parquet files.
    pub parquet_files: u64,
    /// Their size on disk or in the bucket, in bytes.
    pub parquet_bytes: u64,
}

/// A point-in-time view of the store, for metrics and the API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Keyed by table name.
    pub tables: BTreeMap<String, TableStats>,
    /// Bytes the memtable holds (counted as written to the WAL); writes
    /// are refused while this is at the budget.
    pub memtable_bytes: u64,
    /// The budget, `[store] memtable_bytes`.
    pub memtable_budget_bytes: u64,
    /// Size of the WAL segments on disk, in bytes.
    pub wal_bytes: u64,
    /// WAL segment files on disk (the current one included).
    pub wal_segments: u64,
    /// Size of every table's Parquet files, in bytes.
    pub parquet_bytes: u64,
    /// Every table's Parquet files.
    pub parquet_files: u64,
    /// Writes refused with `Full` since open.
    pub backpressure_events: u64,
    /// Parquet files opened by scans, lookups and SQL since open.
    pub files_scanned: u64,
    /// Flushes that completed since open.
    pub flushes: u64,
    /// Why the last flush failed (its rows stay in the memtable and the
    /// WAL and are retried); `None` once a flush succeeds again.
    pub last_flush_error: Option<String>,
    /// Why the last durable write failed (e.g. the disk is full); `None`
    /// once a write succeeds again.
    pub last_write_error: Option<String>,
}

pub(crate) struct State {
    pub active: Memtable,
    /// The memtable a running flush is writing out; still visible to reads.
    pub frozen: Option<Memtable>,
    pub files: [Vec<Arc<SegmentFile>>; 4],
    pub checkpoints: BTreeMap<String, String>,
    /// The checkpoints as of the last published flush (the manifest's):
    /// with a bucket, what every collector can read back
    /// ([`CommitPoints::commit_point`]).
    pub flushed_checkpoints: BTreeMap<String, String>,
    /// The flush sequence of the newest published flush (the manifest's
    /// `flushed_through`): our files up to it are visible, rows after it
    /// are in the memtable. Peers are told it with their unflushed rows.
    pub flushed_through: u64,
}

#[derive(Default)]
pub(crate) struct Kick {
    pub kicked: bool,
    /// A write was refused since the last flush: flush whatever is held.
    pub refused: bool,
    pub stop: bool,
}

pub(crate) struct Inner {
    pub cfg: StoreConfig,
    pub root: PathBuf,
    /// `data_dir/parquet/<table>` (no `[store] url`).
    pub parquet_dirs: [PathBuf; 4],
    /// Object storage (`[store] url`): the Parquet files live there.
    pub bucket: Option<Arc<Bucket>>,
    /// This store's name in object keys (empty without a bucket).
    pub collector_id: String,
    /// When the bucket's prefix was last listed; held while listing (and
    /// by retention, so a listing never brings back a file it deleted).
    pub listed: Mutex<Option<Instant>>,
    pub wal: Wal,
    /// Writers share it across WAL append + memtable insert; a flush takes
    /// it exclusively to rotate the WAL and freeze the memtable together.
    pub gate: RwLock<()>,
    pub state: RwLock<State>,
    /// Budget bytes held by the memtable plus writes in flight.
    pub reserved: AtomicU64,
    pub flush_lock: Mutex<()>,
    /// The collectors' manifests last read from the bucket.
    pub manifests: published::ManifestCache,
    /// Objects of failed flushes not deleted yet (published.rs).
    pub orphans: Mutex<Vec<SegmentFile>>,
    pub backpressure: AtomicU64,
    pub files_scanned: AtomicU64,
    /// Footers and page indexes of the Parquet files SQL read, kept across
    /// queries (each query's session is new): `provider.rs`.
    pub footers: Arc<datafusion::execution::cache::cache_manager::FileMetadataCache>,
    /// Bytes of the bucket's objects SQL read (`read_cache.rs`).
    pub read_cache: Arc<crate::read_cache::ReadCache>,
    pub flushes: AtomicU64,
    pub last_flush_error: Mutex<Option<String>>,
    pub last_write_error: Mutex<Option<String>>,
    /// Set with `last_write_error`, so a good write clears it cheaply.
    pub write_failing: std::sync::atomic::AtomicBool,
    pub kick: (Mutex<Kick>, Condvar),
}

/// The durable store: WAL, memtable, Parquet files. Cheap to share in an
/// `Arc`; every method takes `&self`.
///
/// ```
/// use overtime_model::{RecordSink, Checkpoint, Table, RejectedColumns, RejectedRecord};
/// use overtime_store::{Store, StoreConfig};
/// let dir = tempfile::tempdir().unwrap();
/// let cfg = StoreConfig { data_dir: dir.path().into(), flush_interval_ms: 0, ..Default::default() };
/// let store = Store::open(cfg.clone()).unwrap();
/// let mut c = RejectedColumns::new();
/// c.append(&RejectedRecord::new("edge.log", 1, "format_mismatch", "bad", b"x"));
/// let ck = Checkpoint { source: "file:edge.log".into(), position: "offset=2".into() };
/// store.write(Table::Rejected, c.finish(), Some(ck)).unwrap();
/// drop(store);
/// let store = Store::open(cfg).unwrap(); // replays the WAL
/// assert_eq!(store.stats().tables["rejected"].memtable_rows, 1);
/// assert_eq!(store.checkpoint("file:edge.log").as_deref(), Some("offset=2"));
/// ```
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
    /// The data dir's `LOCK` file, held exclusively while this store (the
    /// one writer) is open: two writers on one WAL would corrupt it.
    /// Readers that outlive the store (DataFusion tables) do not hold it.
    _lock: fs::File,
}

pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

mod open;

impl Store {
    /// Budget bytes held by the memtable (including a flush in progress).
    pub fn memtable_bytes(&self) -> u64 {
        let st = self.inner.state.read().expect("state lock");
        st.active.bytes() + st.frozen.as_ref().map_or(0, |m| m.bytes())
    }

    /// Bytes in the live WAL segments.
    pub fn wal_bytes(&self) -> u64 {
        self.inner.wal.bytes()
    }

    /// Bytes of all Parquet files.
    pub fn parquet_bytes(&self) -> u64 {
        let st = self.inner.state.read().expect("state lock");
        st.files.iter().flatten().map(|f| f.bytes).sum()
    }

    /// Whether the Parquet files are on object storage (`[store] url`),
    /// where every collector of the prefix reads them.
    pub fn shared(&self) -> bool {
        self.inner.bucket.is_some()
    }

    /// The data directory (absolute).
    pub fn data_dir(&self) -> &Path {
        &self.inner.root
    }

    /// Why the store cannot take data right now: the last durable write
    /// failed (e.g. no space left on the device), or the last flush to
    /// Parquet did (the memtable cannot drain). `None` when healthy.
    pub fn failing(&self) -> Option<String> {
        let i = &self.inner;
        if let Some(e) = i.last_write_error.lock().expect("error lock").clone() {
            return Some(format!("writes fail: {e}"));
        }
        i.last_flush_error
            .lock()
            .expect("error lock")
            .clone()
            .map(|e| format!("flushing to Parquet fails: {e}"))
    }

    /// Rows per table in the memtable and in Parquet, files, bytes and
    /// counters.
    pub fn stats(&self) -> StoreStats {
        let i = &self.inner;
        let st = i.state.read().expect("state lock");
        let mut tables = BTreeMap::new();
        for t in Table::ALL {
            let files = &st.files[idx(t)];
            tables.insert(
                t.to_string(),
                TableStats {
                    memtable_rows: st.active.rows(t) + st.frozen.as_ref().map_or(0, |m| m.rows(t)),
                    parquet_rows: files.iter().map(|f| f.rows).sum(),
                    parquet_files: files.len() as u64,
                    parquet_bytes: files.iter().map(|f| f.bytes).sum(),
                },
            );
        }
        StoreStats {
            memtable_bytes: st.active.bytes() + st.frozen.as_ref().map_or(0, |m| m.bytes()),
            memtable_budget_bytes: i.cfg.memtable_bytes,
            wal_bytes: i.wal.bytes(),
            wal_segments: i.wal.segments() as u64,
            parquet_bytes: tables.values().map(|t| t.parquet_bytes).sum(),
            parquet_files: tables.values().map(|t| t.parquet_files).sum(),
            backpressure_events: i.backpressure.load(Ordering::Relaxed),
            files_scanned: i.files_scanned.load(Ordering::Relaxed),
            flushes: i.flushes.load(Ordering::Relaxed),
            last_flush_error: i.last_flush_error.lock().expect("error lock").clone(),
            last_write_error: i.last_write_error.lock().expect("error lock").clone(),
            tables,
        }
    }

    /// A write under the shared gate (a flush cannot rotate the WAL between
    /// its append and its memtable insert); nothing at all is a no-op.
    fn write_gated(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
        durable: bool,
    ) -> Result<(), SinkError> {
        if batch.num_rows() == 0 && checkpoint.is_none() {
            return Ok(());
        }
        let _g = self.inner.gate.read().expect("gate lock");
        self.write_inner(table, batch, checkpoint, durable)
    }

    /// A write; `durable`: in the WAL (fsynced) before `Ok`, else in the
    /// memtable only (a replayable write to a store with a bucket).
    fn write_inner(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
        durable: bool,
    ) -> Result<(), SinkError> {
        let i = &self.inner;
        let written = now_us();
        let batch = conform(table, batch, written).map_err(|e| SinkError::Failed(e.to_string()))?;
        // A checkpoint-only write (no rows) costs nothing and adds no batch.
        let cost = if batch.num_rows() == 0 {
            0
        } else {
            batch.get_array_memory_size() as u64
        };
        let budget = i.cfg.memtable_bytes;
        // A batch larger than the whole budget (a big Kafka batch, a large
        // OTLP request) would never fit: it is admitted once the memtable
        // is at most half full, so memory peaks at half the budget plus
        // that one batch, and the source is never stuck.
        let limit = if cost > budget {
            budget / 2 + cost
        } else {
            budget
        };
        let before = i.reserved.fetch_add(cost, Ordering::SeqCst);
        if before + cost > limit {
            i.reserved.fetch_sub(cost, Ordering::SeqCst);
            i.backpressure.fetch_add(1, Ordering::Relaxed);
            // A refused write must not wait for the periodic flush.
            i.kick_flusher_now();
            return Err(SinkError::Full {
                retry_after_ms: RETRY_AFTER_MS,
            });
        }
        let result = if durable {
            self.append_durably(table, &batch, checkpoint.as_ref(), written)
        } else {
            Ok(())
        };
        match result {
            Ok(()) => {
                let mut st = i.state.write().expect("state lock");
                if batch.num_rows() > 0 {
                    st.active.push(table, batch, cost);
                }
                if let Some(c) = checkpoint {
                    st.checkpoints.insert(c.source, c.position);
                }
            }
            Err(e) => {
                i.reserved.fetch_sub(cost, Ordering::SeqCst);
                *i.last_write_error.lock().expect("error lock") = Some(e.to_string());
                i.write_failing.store(true, Ordering::Relaxed);
                return Err(SinkError::Failed(e.to_string()));
            }
        }
        // Writes succeed again (space came back): no longer failing.
        if i.write_failing.swap(false, Ordering::Relaxed) {
            *i.last_write_error.lock().expect("error lock") = None;
        }
        if (before + cost) * 2 >= budget {
            i.kick_flusher();
        }
        Ok(())
    }

    fn append_durably(
        &self,
        table: Table,
        batch: &RecordBatch,
        checkpoint: Option<&Checkpoint>,
        written: i64,
    ) -> Result<(), StoreError> {
        let framed = wal::frame(&wal::encode_payload(table, written, checkpoint, batch)?);
        let ticket = self.inner.wal.append(&framed)?;
        self.inner.wal.commit(ticket)
    }
}

impl RecordSink for Store {
    /// Durable write: `Full` when the memtable budget is used up (retry
    /// later), `Failed` on a schema mismatch or an I/O error; `Ok` only
    /// after the WAL record (batch and checkpoint together) is fsynced.
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        self.write_gated(table, batch, checkpoint, true)
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        let st = self.inner.state.read().expect("state lock");
        st.checkpoints.get(source).cloned()
    }

    /// With a bucket: into the memtable only, visible at once and flushed
    /// with the rest, but with no WAL record — the source reads it again
    /// after a crash, from [`CommitPoints::commit_point`], so a restart never
    /// replays rows another collector has read again meanwhile. Without a
    /// bucket: [`RecordSink::write`].
    fn write_replayable(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        let durable = self.inner.bucket.is_none();
        self.write_gated(table, batch, checkpoint, durable)
    }

    /// Pushes back early when less than an eighth of the memtable budget
    /// is free: a request of typical size would be refused anyway, and
    /// refusing it before it is decoded keeps overload cheap. Kicks the
    /// flusher, which frees the budget.
    fn backpressure(&self) -> Option<u64> {
        let i = &self.inner;
        let budget = i.cfg.memtable_bytes;
        let free = budget.saturating_sub(i.memtable_bytes());
        if free >= budget / 8 {
            return None;
        }
        i.kick_flusher_now();
        Some(RETRY_AFTER_MS)
    }
}

/// Kafka's commit semantics over the store: with a bucket, what the last
/// flush published; without one, the durable checkpoint.
impl CommitPoints for Store {
    /// With a bucket, the checkpoint as of the last flush: what the other
    /// collectors read. Without one, the durable checkpoint.
    fn commit_point(&self, source: &str) -> Option<String> {
        if self.inner.bucket.is_none() {
            return self.checkpoint(source);
        }
        let st = self.inner.state.read().expect("state lock");
        st.flushed_checkpoints.get(source).cloned()
    }

    /// With a bucket, a flush (the memtable to the bucket); without one,
    /// nothing (the WAL is the copy that counts).
    fn publish(&self) -> Result<(), SinkError> {
        if self.inner.bucket.is_none() {
            return Ok(());
        }
        self.inner
            .flush()
            .map(drop)
            .map_err(|e| SinkError::Failed(e.to_string()))
    }

    /// With a bucket, every collector's published checkpoints.
    fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, SinkError> {
        self.inner
            .shared_checkpoints()
            .map_err(|e| SinkError::Failed(e.to_string()))
    }
}

impl Inner {
    pub(crate) fn kick_flusher(&self) {
        if self.cfg.flush_interval_ms == 0 {
            return;
        }
        let (m, cv) = &self.kick;
        m.lock().expect("kick lock").kicked = true;
        cv.notify_one();
    }

    /// Like [`Inner::kick_flusher`], but the flush happens even below half
    /// the budget (as long as the memtable holds anything): a write was
    /// refused, and its source waits for room.
    pub(crate) fn kick_flusher_now(&self) {
        if self.cfg.flush_interval_ms == 0 {
            return;
        }
        let (m, cv) = &self.kick;
        let mut k = m.lock().expect("kick lock");
        k.kicked = true;
        k.refused = true;
        cv.notify_one();
    }

    /// The memtable rows (frozen, then active) and the files of `t`,
    /// taken together so each row is seen exactly once.
    /// With a bucket, the files other collectors flushed are listed first
    /// (at most every [`LIST_CACHE`]).
    pub(crate) fn snapshot(
        &self,
        t: Table,
    ) -> Result<(Vec<RecordBatch>, Vec<Arc<SegmentFile>>), StoreError> {
        if self.bucket.is_some() {
            let mut listed = self.listed.lock().expect("list lock");
            self.refresh(&mut listed, false)?;
        }
        let st = self.state.read().expect("state lock");
        let mut batches = Vec::new();
        if let Some(f) = &st.frozen {
            batches.extend_from_slice(f.batches(t));
        }
        batches.extend_from_slice(st.active.batches(t));
        Ok((batches, st.files[idx(t)].clone()))
    }

    /// Is `f` this store's own file (flushed by it, bounded by its
    /// `retention_bytes`)?
    pub(crate) fn owns(&self, f: &SegmentFile) -> bool {
        f.collector.as_ref().is_none_or(|c| *c == self.collector_id)
    }

    /// Lists the bucket's prefix unless `listed` is recent (or `force`):
    /// other collectors' new files are opened (footer and bloom filters)
    /// and added, the ones gone (their retention) dropped; files past
    /// their collector's published manifest are not read (published.rs). Our own files
    /// are never taken from a listing: a flush publishes them together
    /// with dropping their rows from the memtable.
    pub(crate) fn refresh(
        &self,
        listed: &mut Option<Instant>,
        force: bool,
    ) -> Result<(), StoreError> {
        let Some(b) = &self.bucket else {
            return Ok(());
        };
        if !force && listed.is_some_and(|t| t.elapsed() < LIST_CACHE) {
            return Ok(());
        }
        let known: std::collections::HashSet<PathBuf> = {
            let st = self.state.read().expect("state lock");
            st.files.iter().flatten().map(|f| f.path.clone()).collect()
        };
        // Manifests first: every object a manifest covers was written
        // before it, so the listing after it holds them all.
        let manifests = published::read_all(b, &self.manifests)?;
        let mut seen = std::collections::HashSet::new();
        let mut new = Vec::new();
        for (key, size) in b.list()? {
            let Some(p) = parse_key(b.prefix(), &key) else {
                continue;
            };
            let committed = manifests
                .get(&p.collector)
                .is_none_or(|m| p.seq <= m.flushed_through);
            if p.collector == self.collector_id || !committed {
                continue;
            }
            let path = PathBuf::from(b.display_key(&key));
            if !known.contains(&path) {
                let obj = ObjectReader {
                    bucket: b.clone(),
                    key: key.into(),
                    size,
                };
                new.push(Arc::new(segment::open_object(
                    p.table,
                    obj,
                    Some(p.collector),
                )?));
            }
            seen.insert(path);
        }
        let mut st = self.state.write().expect("state lock");
        for list in st.files.iter_mut() {
            list.retain(|f| self.owns(f) || seen.contains(&f.path));
        }
        for f in new {
            st.files[idx(f.table)].push(f);
        }
        *listed = Some(Instant::now());
        Ok(())
    }

    fn memtable_bytes(&self) -> u64 {
        self.reserved.load(Ordering::SeqCst)
    }
}

fn flusher_loop(inner: &Arc<Inner>) {
    let interval = Duration::from_millis(inner.cfg.flush_interval_ms);
    let mut last = Instant::now();
    loop {
        let refused;
        {
            let (m, cv) = &inner.kick;
            let mut k = m.lock().expect("kick lock");
            loop {
                if k.stop {
                    return;
                }
                if k.kicked {
                    k.kicked = false;
                    break;
                }
                let left = interval.saturating_sub(last.elapsed());
                if left.is_zero() {
                    break;
                }
                k = cv.wait_timeout(k, left).expect("kick lock").0;
            }
            refused = std::mem::take(&mut k.refused);
        }
        let due = last.elapsed() >= interval;
        let held = inner.memtable_bytes();
        let wanted = due || (refused && held > 0) || held * 2 >= inner.cfg.memtable_bytes;
        if !wanted {
            continue;
        }
        let r = inner
            .flush()
            .and_then(|_| inner.enforce_retention(now_us()));
        *inner.last_flush_error.lock().expect("error lock") = r.err().map(|e| e.to_string());
        last = Instant::now();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(h) = self.flusher.take() {
            let (m, cv) = &self.inner.kick;
            m.lock().expect("kick lock").stop = true;
            cv.notify_one();
            let _ = h.join();
        }
    }
}
