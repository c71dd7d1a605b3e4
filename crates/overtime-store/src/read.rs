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
use crate::memtable::{filter_time, filter_trace};
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
        let t = Table::GatewayRequests;
        let (mem, files) = self.inner.snapshot_with(t, peers)?;
        let (from, to) = (Some(from_us), Some(to_us));
        let mut out = Vec::new();
        let mut keep = |b: RecordBatch| -> Result<(), StoreError> {
            if let Some(b) = filter_requests(&b, request_ids)? {
                out.push(b);
            }
            Ok(())
        };
        for f in files.iter().filter(|f| f.overlaps(from, to)) {
            self.inner.files_scanned.fetch_add(1, Ordering::Relaxed);
            for b in f.read_range(from, to)? {
                keep(b)?;
            }
        }
        for b in &mem {
            keep(filter_time(t, b, from, to)?)?;
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
        let (mem, files) = self.inner.snapshot(table)?;
        let mut out = Vec::new();
        for f in files.iter().filter(|f| f.overlaps(from_us, to_us)) {
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

/// The rows of a `gateway_requests` batch whose `request_id` is one of `ids`.
fn filter_requests(b: &RecordBatch, ids: &[String]) -> Result<Option<RecordBatch>, StoreError> {
    let ctx = || "filtering `gateway_requests` by request id".to_string();
    let Some(col) = b.column_by_name("request_id") else {
        return Ok(None);
    };
    let col = arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8)
        .map_err(|e| StoreError::arrow(ctx(), e))?;
    let col = arrow::array::cast::as_string_array(col.as_ref());
    let mask: arrow::array::BooleanArray = col
        .iter()
        .map(|v| Some(v.is_some_and(|v| ids.iter().any(|id| id == v))))
        .collect();
    if mask.true_count() == 0 {
        return Ok(None);
    }
    arrow::compute::filter_record_batch(b, &mask)
        .map(Some)
        .map_err(|e| StoreError::arrow(ctx(), e))
}
