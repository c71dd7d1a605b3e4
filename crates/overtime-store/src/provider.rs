//! SQL: DataFusion tables `gateway_requests`, `spans` and `rejected`, each
//! the union of a memtable snapshot and the table's Parquet files.
//!
//! The snapshot (memtable batches + file list) is taken under one lock, so
//! a row that a concurrent flush moved to Parquet is read once, from one
//! side. Filters are pushed down honestly as `Inexact`: DataFusion still
//! applies them, the provider uses them to skip work:
//! - a time-column range (`time >= …`, `<`, `=`, `BETWEEN`) skips whole
//!   files by their time bounds before they are opened;
//! - `trace_id = '…'` skips files whose bloom filters rule the id out;
//! - every filter becomes the Parquet predicate, which prunes row groups
//!   (statistics, bloom filter) and pages (page index), and is evaluated
//!   while decoding (`pushdown_filters`, cheapest column first): the
//!   other columns are materialised only for the rows that pass. A
//!   selective filter over a wide scan (the 504 roots among every span)
//!   then decodes a few thousand trace ids instead of millions, and a
//!   hash join's dynamic filter (its build side's keys) reaches the probe
//!   side's scan the same way;
//! - footers and page indexes are read once per file and kept in the
//!   store ([`footer_cache`]), not once per query: every query of the
//!   server runs in a new session, and over a bucket each footer is two
//!   ranged GETs; the data read from a bucket is kept too, up to
//!   `[store] read_cache_bytes` (`read_cache.rs`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use datafusion::prelude::SessionContext;
//! use overtime_store::{Store, StoreConfig};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(StoreConfig { data_dir: dir.path().into(), flush_interval_ms: 0, ..Default::default() }).unwrap();
//! let ctx = SessionContext::new();
//! store.register(&ctx).unwrap();
//! let n = ctx.sql("SELECT count(*) FROM spans").await.unwrap().collect().await.unwrap();
//! assert_eq!(n[0].num_rows(), 1);
//! # }
//! ```

use crate::StoreError;
use crate::peers::PeerSource;
use crate::read_cache::CachingFactory;
use crate::segment::Source;
use crate::store::{Inner, Store};
use crate::tables::{stored_schema, time_column, trace_column};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, ParquetFileReaderFactory, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::cache::cache_manager::{
    DEFAULT_METADATA_CACHE_LIMIT, FileMetadataCache,
};
use datafusion::execution::cache::default_cache::DefaultCache;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::union::UnionExec;
use datafusion::prelude::SessionContext;
use overtime_model::Table;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Store {
    /// Registers `gateway_requests`, `spans` and `rejected` in `ctx`
    /// (replacing tables of those names), and with `[store] url` the
    /// object store the Parquet files are read from.
    pub fn register(&self, ctx: &SessionContext) -> Result<(), StoreError> {
        self.register_with_peers(ctx, None)
    }

    /// [`Store::register`], with every scan also asking `peers` for their
    /// unflushed rows in the scan's time range (and trace, when the query
    /// names one), merged as `peers.rs` describes.
    pub fn register_with_peers(
        &self,
        ctx: &SessionContext,
        peers: Option<Arc<dyn PeerSource>>,
    ) -> Result<(), StoreError> {
        if let Some(b) = &self.inner.bucket {
            let url = ObjectStoreUrl::parse(b.base()).map_err(|source| StoreError::DataFusion {
                table: b.base().to_string(),
                source,
            })?;
            ctx.register_object_store(url.as_ref(), b.store.clone());
        }
        for t in Table::ALL {
            let df = |source| StoreError::DataFusion {
                table: t.to_string(),
                source,
            };
            ctx.deregister_table(t.as_str()).map_err(df)?;
            let provider = StoreTable {
                table: t,
                inner: self.inner.clone(),
                peers: peers.clone(),
            };
            ctx.register_table(t.as_str(), Arc::new(provider))
                .map_err(df)?;
        }
        Ok(())
    }
}

/// One store table as a DataFusion [`TableProvider`].
pub struct StoreTable {
    table: Table,
    inner: Arc<Inner>,
    peers: Option<Arc<dyn PeerSource>>,
}

impl fmt::Debug for StoreTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreTable")
            .field("table", &self.table)
            .field("data_dir", &self.inner.root)
            .finish()
    }
}

/// A timestamp or integer literal as µs since the epoch (rounded down).
fn literal_us(e: &Expr) -> Option<i64> {
    let Expr::Literal(v, _) = e else { return None };
    match v {
        ScalarValue::TimestampMicrosecond(Some(x), _) | ScalarValue::Int64(Some(x)) => Some(*x),
        ScalarValue::TimestampNanosecond(Some(x), _) => Some(x.div_euclid(1000)),
        ScalarValue::TimestampMillisecond(Some(x), _) => x.checked_mul(1000),
        ScalarValue::TimestampSecond(Some(x), _) => x.checked_mul(1_000_000),
        _ => None,
    }
}

fn is_col(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Column(c) if c.name == name)
}

/// The time range `[lo, hi)` that the conjunction of `filters` implies for
/// column `col` (conservative: never narrower than the truth).
pub fn time_bounds(filters: &[Expr], col: &str) -> (Option<i64>, Option<i64>) {
    let (mut lo, mut hi): (Option<i64>, Option<i64>) = (None, None);
    let mut raise = |v: i64| lo = Some(lo.map_or(v, |l| l.max(v)));
    let mut lower = |v: i64| hi = Some(hi.map_or(v, |h| h.min(v)));
    let mut stack: Vec<&Expr> = filters.iter().collect();
    while let Some(e) = stack.pop() {
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                if *op == Operator::And {
                    stack.push(left);
                    stack.push(right);
                    continue;
                }
                let (op, v) = if is_col(left, col) {
                    match literal_us(right) {
                        Some(v) => (*op, v),
                        None => continue,
                    }
                } else if is_col(right, col) {
                    match (literal_us(left), op.swap()) {
                        (Some(v), Some(op)) => (op, v),
                        _ => continue,
                    }
                } else {
                    continue;
                };
                match op {
                    Operator::Gt | Operator::GtEq => raise(v),
                    Operator::Lt | Operator::LtEq => lower(v.saturating_add(1)),
                    Operator::Eq => {
                        raise(v);
                        lower(v.saturating_add(1));
                    }
                    _ => {}
                }
            }
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) if is_col(expr, col) => {
                if let Some(v) = literal_us(low) {
                    raise(v);
                }
                if let Some(v) = literal_us(high) {
                    lower(v.saturating_add(1));
                }
            }
            _ => {}
        }
    }
    (lo, hi)
}

/// The trace id of a top-level `col = '…'` filter, if any.
pub fn trace_literal<'a>(filters: &'a [Expr], col: &str) -> Option<&'a str> {
    filters.iter().find_map(|e| match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            let lit = if is_col(left, col) {
                right
            } else if is_col(right, col) {
                left
            } else {
                return None;
            };
            match lit.as_ref() {
                Expr::Literal(
                    ScalarValue::Utf8(Some(s))
                    | ScalarValue::Utf8View(Some(s))
                    | ScalarValue::LargeUtf8(Some(s)),
                    _,
                ) => Some(s.as_str()),
                _ => None,
            }
        }
        _ => None,
    })
}

/// The store's cache of Parquet footers and page indexes, shared by every
/// session that registers its tables (DataFusion's LRU cache, bounded at
/// its default 50 MiB). An entry is checked against the file's size, and
/// files are never rewritten in place.
pub(crate) fn footer_cache() -> Arc<FileMetadataCache> {
    Arc::new(DefaultCache::new(DEFAULT_METADATA_CACHE_LIMIT).with_name("overtime-store footers"))
}

/// Splits `items` round-robin into at most `n` non-empty groups.
fn spread<T: Clone>(items: &[T], n: usize) -> Vec<Vec<T>> {
    let n = n.clamp(1, items.len().max(1));
    let mut out = vec![Vec::new(); n];
    for (i, x) in items.iter().enumerate() {
        out[i % n].push(x.clone());
    }
    out.retain(|g| !g.is_empty());
    out
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        stored_schema(self.table)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = self.schema();
        let ext = |e: StoreError| DataFusionError::External(Box::new(e));
        let (lo, hi) = time_bounds(filters, time_column(self.table));
        let trace = trace_column(self.table).and_then(|c| trace_literal(filters, c));
        let answers = match &self.peers {
            Some(p) => p.unflushed(self.table, lo, hi, trace).await,
            None => Vec::new(),
        };
        let (mem, files) = if self.inner.bucket.is_some() {
            // Listing the bucket blocks: off the async worker.
            let (inner, table) = (self.inner.clone(), self.table);
            tokio::task::spawn_blocking(move || inner.snapshot_with(table, &answers))
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?
                .map_err(ext)?
        } else {
            self.inner
                .snapshot_with(self.table, &answers)
                .map_err(ext)?
        };
        let files: Vec<_> = files
            .into_iter()
            .filter(|f| f.overlaps(lo, hi) && trace.is_none_or(|t| f.may_hold_trace(t)))
            .collect();
        self.inner
            .files_scanned
            .fetch_add(files.len() as u64, Ordering::Relaxed);
        let parts = state.config_options().execution.target_partitions.max(1);

        let mem_parts: Vec<Vec<RecordBatch>> = if mem.is_empty() {
            vec![Vec::new()]
        } else {
            spread(&mem, parts)
        };
        let mem_exec: Arc<dyn ExecutionPlan> =
            MemorySourceConfig::try_new_exec(&mem_parts, schema.clone(), projection.cloned())?;
        let mut plans = vec![mem_exec];

        if !files.is_empty() {
            let mut opts = state.table_options().parquet.clone();
            opts.global.pushdown_filters = true;
            opts.global.reorder_filters = true;
            let url = match &self.inner.bucket {
                Some(b) => ObjectStoreUrl::parse(b.base())?,
                None => ObjectStoreUrl::local_filesystem(),
            };
            let footers = CachedParquetFileReaderFactory::new(
                state.runtime_env().object_store(&url)?,
                self.inner.footers.clone(),
            );
            let reader: Arc<dyn ParquetFileReaderFactory> =
                if self.inner.bucket.is_some() && self.inner.cfg.read_cache_bytes > 0 {
                    Arc::new(CachingFactory {
                        inner: footers,
                        cache: self.inner.read_cache.clone(),
                    })
                } else {
                    Arc::new(footers)
                };
            let mut source = ParquetSource::new(schema.clone())
                .with_table_parquet_options(opts)
                .with_parquet_file_reader_factory(reader);
            if let Some(expr) = conjunction(filters.to_vec()) {
                let df_schema = DFSchema::try_from(schema.clone())?;
                source = source.with_predicate(state.create_physical_expr(expr, &df_schema)?);
            }
            let pfiles: Vec<PartitionedFile> = files
                .iter()
                .map(|f| match &f.source {
                    Source::File(p) => {
                        PartitionedFile::new(p.to_string_lossy().into_owned(), f.bytes)
                    }
                    Source::Object(o) => PartitionedFile::new(o.key.to_string(), f.bytes),
                })
                .collect();
            let groups = spread(&pfiles, parts)
                .into_iter()
                .map(FileGroup::new)
                .collect();
            let conf = FileScanConfigBuilder::new(url, Arc::new(source))
                .with_file_groups(groups)
                .with_projection_indices(projection.cloned())?
                .with_limit(limit)
                .build();
            plans.push(DataSourceExec::from_data_source(conf));
        }
        UnionExec::try_new(plans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn ts(v: i64) -> Expr {
        lit(ScalarValue::TimestampMicrosecond(
            Some(v),
            Some("UTC".into()),
        ))
    }

    #[test]
    fn time_bounds_read_ranges_both_ways_round() {
        let f = [col("time").gt_eq(ts(10)), ts(20).gt(col("time"))];
        assert_eq!(time_bounds(&f, "time"), (Some(10), Some(21)));
        let f = [col("time")
            .between(ts(5), ts(7))
            .and(col("status").eq(lit(504)))];
        assert_eq!(time_bounds(&f, "time"), (Some(5), Some(8)));
        let f = [col("time").eq(ts(3))];
        assert_eq!(time_bounds(&f, "time"), (Some(3), Some(4)));
        // nanosecond literals round outwards, other columns are ignored
        let ns = lit(ScalarValue::TimestampNanosecond(Some(10_999), None));
        assert_eq!(time_bounds(&[col("time").lt(ns)], "time"), (None, Some(11)));
        assert_eq!(
            time_bounds(&[col("start_time").gt(ts(1))], "time"),
            (None, None)
        );
        // an OR is not a range
        let f = [col("time").gt(ts(1)).or(col("time").lt(ts(0)))];
        assert_eq!(time_bounds(&f, "time"), (None, None));
    }

    #[test]
    fn trace_literal_finds_equalities_only() {
        let f = [lit("abc").eq(col("trace_id"))];
        assert_eq!(trace_literal(&f, "trace_id"), Some("abc"));
        let f = [col("trace_id").not_eq(lit("abc"))];
        assert_eq!(trace_literal(&f, "trace_id"), None);
    }
}
