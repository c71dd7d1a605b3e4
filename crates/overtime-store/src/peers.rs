//! Rows other collectors hold but have not flushed yet, and how they join
//! this store's reads so that each row is seen exactly once.
//!
//! Collectors that share a bucket see each other's Parquet through the
//! listing; what a peer has only in its WAL and memtable it hands over on
//! request ([`Store::unflushed`], served by `overtime-server`), as an
//! [`Unflushed`]: its rows plus the sequence of its newest *published*
//! flush. The reader then takes, for that peer:
//!
//! - its files with a flush sequence `<= flushed_through`, and
//! - the rows it handed over,
//!
//! and never the peer's files past `flushed_through`: those belong to a
//! flush that was in flight when the peer answered, and their rows are in
//! the answer (the peer's frozen memtable). If the listing this store holds
//! has no file of that peer at `flushed_through` yet, it is refreshed
//! before reading, so a flush that finished just before the answer is not
//! missed either.
//!
//! Which peers to ask, how long to wait and what to say about a peer that
//! did not answer belong to the caller (a [`PeerSource`]): the store only
//! merges what it is given.
//!
//! ```
//! use overtime_model::{RecordSink, SpanColumns, SpanRecord, Table};
//! use overtime_store::{Store, StoreConfig};
//! let (a_dir, b_dir, bucket) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
//! let url = format!("file://{}", bucket.path().display());
//! let open = |dir: &std::path::Path, id: &str| Store::open(StoreConfig {
//!     data_dir: dir.into(), url: Some(url.clone()), collector_id: Some(id.into()),
//!     flush_interval_ms: 0, ..Default::default() }).unwrap();
//! let (a, b) = (open(a_dir.path(), "collector-a"), open(b_dir.path(), "collector-b"));
//! let tid = "0af7651916cd43dd8448eb211c80319c";
//! let mut c = SpanColumns::new();
//! c.append(&SpanRecord::new(tid, "b7ad6b7169203331", "agent", "chat", 1_000, 2_000));
//! a.write(Table::Spans, c.finish(), None).unwrap();
//! // Not flushed: b sees the span only through a's answer.
//! assert!(b.trace(tid).unwrap().1.is_empty());
//! let from_a = a.unflushed(Table::Spans, None, None, Some(tid)).unwrap();
//! let (_, spans) = b.trace_with(tid, &[], &[from_a]).unwrap();
//! assert_eq!(spans.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
//! ```

use crate::StoreError;
use crate::memtable::{filter_requests, filter_time, filter_trace};
use crate::segment::SegmentFile;
use crate::store::{Inner, Store};
use crate::tables::{idx, stored_schema};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use overtime_model::Table;
use std::sync::Arc;

/// One table's rows a collector holds in its WAL and memtable, not yet in
/// the bucket, as of one moment.
#[derive(Debug, Clone, Default)]
pub struct Unflushed {
    /// The collector's id (`[store] collector_id`), as in its file names.
    pub collector_id: String,
    /// The sequence of its newest published flush: its files up to this
    /// sequence hold everything it flushed; its files past it (a flush in
    /// flight) are ignored, their rows are in `batches`.
    pub flushed_through: u64,
    /// The rows, in the table's stored schema.
    pub batches: Vec<RecordBatch>,
}

/// Where a query gets the peers' unflushed rows of one table: given the
/// time range and trace id the query is known to need (either may be
/// absent), it answers with one [`Unflushed`] per peer that answered.
/// An implementation bounds its wait and keeps its own account of the
/// peers that did not answer.
#[async_trait]
pub trait PeerSource: Send + Sync + std::fmt::Debug {
    /// The peers' unflushed rows of `table` within `[from_us, to_us)`
    /// (µs since the epoch) and, when `trace_id` is given, of that trace
    /// only.
    async fn unflushed(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        trace_id: Option<&str>,
    ) -> Vec<Unflushed>;

    /// The peers' unflushed rows of `table` within `[from_us, to_us)`
    /// whose request id is one of `request_ids` (how records keyed by
    /// request id on one collector find the trace another holds). A source
    /// that cannot ask by request id answers nothing.
    async fn unflushed_requests(
        &self,
        _table: Table,
        _from_us: Option<i64>,
        _to_us: Option<i64>,
        _request_ids: &[String],
    ) -> Vec<Unflushed> {
        Vec::new()
    }
}

impl Store {
    /// This store's id in object keys (empty without `[store] url`).
    pub fn collector_id(&self) -> &str {
        &self.inner.collector_id
    }

    /// The rows of `table` not yet flushed (the memtable, and the one a
    /// running flush is writing), within `[from_us, to_us)` and of
    /// `trace_id` when given, with the sequence of the newest published
    /// flush — taken under one lock, so that together with this store's
    /// files up to that sequence they are every row exactly once.
    pub fn unflushed(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        trace_id: Option<&str>,
    ) -> Result<Unflushed, StoreError> {
        let (mem, flushed_through) = {
            let st = self.inner.state.read().expect("state lock");
            let mut mem = Vec::new();
            if let Some(f) = &st.frozen {
                mem.extend_from_slice(f.batches(table));
            }
            mem.extend_from_slice(st.active.batches(table));
            (mem, st.flushed_through)
        };
        let mut batches = Vec::new();
        for b in &mem {
            let b = filter_time(table, b, from_us, to_us)?;
            let b = match trace_id {
                Some(id) => filter_trace(table, &b, id)?,
                None => Some(b),
            };
            if let Some(b) = b.filter(|b| b.num_rows() > 0) {
                batches.push(b);
            }
        }
        Ok(Unflushed {
            collector_id: self.inner.collector_id.clone(),
            flushed_through,
            batches,
        })
    }
}

impl Store {
    /// [`Store::unflushed`] of the rows whose request id is one of
    /// `request_ids` (none for `rejected`).
    pub fn unflushed_requests(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        request_ids: &[String],
    ) -> Result<Unflushed, StoreError> {
        let mut u = self.unflushed(table, from_us, to_us, None)?;
        let wanted: std::collections::HashSet<String> = request_ids.iter().cloned().collect();
        let mut kept = Vec::new();
        for b in &u.batches {
            if let Some(b) = filter_requests(table, b, &wanted)? {
                kept.push(b);
            }
        }
        u.batches = kept;
        Ok(u)
    }
}

impl Inner {
    /// [`Inner::snapshot`] joined with the peers' answers for table `t`
    /// (module docs): their rows are added to the in-memory side, their
    /// files past `flushed_through` dropped, and the listing refreshed
    /// first when it lacks a peer's newest published flush. Answers from
    /// this store itself, or without a collector id, are ignored.
    pub(crate) fn snapshot_with(
        &self,
        t: Table,
        peers: &[Unflushed],
    ) -> Result<(Vec<RecordBatch>, Vec<Arc<SegmentFile>>), StoreError> {
        let peers: Vec<&Unflushed> = peers
            .iter()
            .filter(|p| !p.collector_id.is_empty() && p.collector_id != self.collector_id)
            .collect();
        if self.bucket.is_some() && !peers.is_empty() {
            let stale = {
                let st = self.state.read().expect("state lock");
                peers.iter().any(|p| {
                    p.flushed_through > 0
                        && !st.files[idx(t)].iter().any(|f| {
                            f.collector.as_deref() == Some(p.collector_id.as_str())
                                && f.flush_seq >= p.flushed_through
                        })
                })
            };
            if stale {
                let mut listed = self.listed.lock().expect("list lock");
                self.refresh(&mut listed, true)?;
            }
        }
        let (mut mem, mut files) = self.snapshot(t)?;
        files.retain(|f| {
            !peers.iter().any(|p| {
                f.collector.as_deref() == Some(p.collector_id.as_str())
                    && f.flush_seq > p.flushed_through
            })
        });
        let schema = stored_schema(t);
        for p in peers {
            for b in &p.batches {
                // A peer on another version may send other columns: its
                // rows are refused with the reason, never read shifted.
                let refuse = |why: String| StoreError::Schema {
                    table: t.to_string(),
                    detail: format!("rows from collector {}: {why}", p.collector_id),
                };
                let names = |s: &arrow::datatypes::Schema| -> Vec<String> {
                    s.fields().iter().map(|f| f.name().clone()).collect()
                };
                if names(&b.schema()) != names(&schema) {
                    return Err(refuse(format!(
                        "columns {:?}, expected {:?}",
                        names(&b.schema()),
                        names(&schema)
                    )));
                }
                let b = RecordBatch::try_new(schema.clone(), b.columns().to_vec())
                    .map_err(|e| refuse(e.to_string()))?;
                mem.push(b);
            }
        }
        Ok((mem, files))
    }
}
