//! Direct reads without SQL: the trace point lookup behind
//! `GET /api/traces/{id}`, and time-range scans of one table.
//!
//! A lookup scans the memtable (a vectorised string compare per batch) and
//! asks each Parquet file's in-memory bloom filters which row groups may
//! hold the trace; only those row groups are read, the `trace_id` column
//! first and the other columns only for matching rows.
//!
//! ```
//! use overtime_model::{RecordSink, SpanColumns, SpanRecord, Table};
//! use overtime_store::{Store, StoreConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(StoreConfig { data_dir: dir.path().into(), flush_interval_ms: 0, ..Default::default() }).unwrap();
//! let tid = "0af7651916cd43dd8448eb211c80319c";
//! let mut c = SpanColumns::new();
//! c.append(&SpanRecord::new(tid, "b7ad6b7169203331", "agent", "chat", 1_000, 2_000));
//! store.write(Table::Spans, c.finish(), None).unwrap();
//! store.flush().unwrap();
//! let (gateway, spans) = store.trace(tid).unwrap();
//! assert!(gateway.is_empty());
//! assert_eq!(spans.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
//! assert_eq!(store.scan(Table::Spans, Some(0), Some(1_500)).unwrap()[0].num_rows(), 1);
//! assert!(store.scan(Table::Spans, Some(1_500), None).unwrap().is_empty());
//! ```

use crate::StoreError;
use crate::memtable::{filter_requests, filter_time, filter_trace};
use crate::peers::Unflushed;
use crate::store::{Inner, Store};
use arrow::record_batch::RecordBatch;
use overtime_model::Table;
use std::sync::atomic::Ordering;

impl Store {
    /// Every `gateway_requests` row and every `spans` row of `trace_id`
    /// (memtable and Parquet).
    pub fn trace(
        &self,
        trace_id: &str,
    ) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>), StoreError> {
        self.trace_with(trace_id, &[], &[])
    }

    /// [`Store::trace`] joined with the peers' unflushed rows of the trace
    /// (`gateway` and `spans`: their answers for each table; see
    /// [`Store::unflushed`]): every row of the trace, wherever it is, once.
    pub fn trace_with(
        &self,
        trace_id: &str,
        gateway: &[Unflushed],
        spans: &[Unflushed],
    ) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>), StoreError> {
        Ok((
            self.inner
                .trace_rows(Table::GatewayRequests, trace_id, gateway)?,
            self.inner.trace_rows(Table::Spans, trace_id, spans)?,
        ))
    }

    /// The `gateway_requests` rows in `[from_us, to_us)` whose request id
    /// is one of `request_ids`: memtable, every collector's Parquet and the
    /// peers' unflushed rows of that range (`peers`, as
    /// [`Store::trace_with`] takes them), each row once. How the gateway
    /// lines of a trace that logged no trace id are found: by the request
    /// id its spans carry.
    pub fn requests_with(
        &self,
        request_ids: &[String],
        from_us: i64,
        to_us: i64,
        peers: &[Unflushed],
    ) -> Result<Vec<RecordBatch>, StoreError> {
        self.by_request_with(Table::GatewayRequests, request_ids, from_us, to_us, peers)
    }

    /// The rows of `table` (`gateway_requests` or `spans`) in
    /// `[from_us, to_us)` whose `request_id` is one of `request_ids`:
    /// memtable, every collector's Parquet (only the row groups whose
    /// request id bloom filter allows one) and the peers' unflushed rows
    /// (`peers`), each row once. How a gateway line that logged no trace id
    /// and the spans that captured its request id find each other when
    /// they are on different collectors.
    pub fn by_request_with(
        &self,
        table: Table,
        request_ids: &[String],
        from_us: i64,
        to_us: i64,
        peers: &[Unflushed],
    ) -> Result<Vec<RecordBatch>, StoreError> {
        if request_ids.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: std::collections::HashSet<String> = request_ids.iter().cloned().collect();
        let (mem, files) = self.inner.snapshot_with(table, peers)?;
        let (from, to) = (Some(from_us), Some(to_us));
        let mut out = Vec::new();
        for f in files
            .iter()
            .filter(|f| f.may_hold_requests(request_ids, from, to))
        {
            self.inner.files_scanned.fetch_add(1, Ordering::Relaxed);
            for b in f.read_requests(request_ids, from, to)? {
                if let Some(b) = filter_time_some(table, &b, from, to)? {
                    out.push(b);
                }
            }
        }
        for b in &mem {
            if let Some(b) = filter_requests(table, &filter_time(table, b, from, to)?, &wanted)? {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// Rows of `table` whose time column is in `[from_us, to_us)` (either
    /// bound optional), memtable and Parquet. Files and row groups outside
    /// the range are not read. Parquet rows come first, in time order.
    pub fn scan(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        self.scan_where(table, from_us, to_us, |_| true)
    }

    /// [`Store::scan`] of this collector's own rows only: its memtable and
    /// the files it flushed, not the other collectors' in a shared bucket.
    /// What a restart replays into the live diagnosis: the others judge
    /// (and count) their own.
    pub fn scan_own(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        self.scan_where(table, from_us, to_us, |f| self.inner.owns(f))
    }

    fn scan_where(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        keep: impl Fn(&crate::segment::SegmentFile) -> bool,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        let (mem, files) = self.inner.snapshot(table)?;
        let mut out = Vec::new();
        for f in files
            .iter()
            .filter(|f| keep(f) && f.overlaps(from_us, to_us))
        {
            self.inner.files_scanned.fetch_add(1, Ordering::Relaxed);
            out.extend(f.read_range(from_us, to_us)?);
        }
        for b in &mem {
            let b = filter_time(table, b, from_us, to_us)?;
            if b.num_rows() > 0 {
                out.push(b);
            }
        }
        Ok(out)
    }
}

impl Inner {
    fn trace_rows(
        &self,
        t: Table,
        trace_id: &str,
        peers: &[Unflushed],
    ) -> Result<Vec<RecordBatch>, StoreError> {
        let (mem, files) = self.snapshot_with(t, peers)?;
        let mut out = Vec::new();
        for f in files.iter().filter(|f| f.may_hold_trace(trace_id)) {
            self.files_scanned.fetch_add(1, Ordering::Relaxed);
            out.extend(f.read_trace(trace_id)?);
        }
        for b in &mem {
            if let Some(b) = filter_trace(t, b, trace_id)? {
                out.push(b);
            }
        }
        Ok(out)
    }
}

/// Rows of `b` in `[from, to)`, `None` when none is.
fn filter_time_some(
    t: Table,
    b: &RecordBatch,
    from: Option<i64>,
    to: Option<i64>,
) -> Result<Option<RecordBatch>, StoreError> {
    let b = filter_time(t, b, from, to)?;
    Ok((b.num_rows() > 0).then_some(b))
}
