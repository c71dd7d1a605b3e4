//! Parquet segment files: one per table per time bucket per flush, rows
//! sorted by the table's time column, bloom filters on `trace_id` and
//! `request_id`, page and row-group statistics, and the bucket's bounds in
//! the footer.
//!
//! Layout: `<data_dir>/parquet/<table>/<bucket start, UTC>-<flush seq>.parquet`,
//! e.g. `parquet/spans/20261129T200000Z-0000000000000007.parquet`. The flush
//! sequence is the last WAL segment the file's rows came from: a file whose
//! sequence is past the manifest's `flushed_through` belongs to a flush that
//! did not finish, and is deleted on open (its rows are still in the WAL).
//!
//! Each open file keeps its footer, its per-row-group time bounds and its
//! trace id and request id bloom filters in memory, so a point lookup (by
//! trace, or by the request ids a trace's other records carry) decides
//! which row groups to read without touching the disk.

use crate::StoreError;
use crate::objects::ObjectReader;
use crate::tables::{request_column, time_column, trace_column};
use arrow::array::{Array, AsArray, BooleanArray, Scalar, StringArray};
use arrow::compute::kernels::cmp;
use arrow::compute::{filter_record_batch, sort_to_indices, take_record_batch};
use arrow::datatypes::TimestampMicrosecondType;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use overtime_model::Table;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    RowFilter,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{ChunkReader, Length};
use parquet::schema::types::ColumnPath;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Rows per row group: the unit a bloom filter and time statistics prune.
pub const ROW_GROUP_ROWS: usize = 65_536;
/// Rows per batch read back.
const BATCH_ROWS: usize = 8192;
const KEY_BUCKET: &str = "overtime.bucket_start_us";
const KEY_MIN: &str = "overtime.min_time_us";
const KEY_MAX: &str = "overtime.max_time_us";

/// Where a segment file's bytes are read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file under `data_dir/parquet` (no `[store] url`).
    File(PathBuf),
    /// An object under `[store] url`, read by ranged GETs.
    Object(ObjectReader),
}

/// A [`ChunkReader`] over any [`Source`], or over bytes just written.
enum Reader {
    File(File),
    Object(ObjectReader),
    Mem(Bytes),
}

impl Length for Reader {
    fn len(&self) -> u64 {
        match self {
            Reader::File(f) => f.len(),
            Reader::Object(o) => o.len(),
            Reader::Mem(b) => b.len() as u64,
        }
    }
}

impl ChunkReader for Reader {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            Reader::File(f) => Box::new(f.get_read(start)?),
            Reader::Object(o) => Box::new(o.get_read(start)?),
            Reader::Mem(b) => Box::new(b.get_read(start)?),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            Reader::File(f) => f.get_bytes(start, length),
            Reader::Object(o) => o.get_bytes(start, length),
            Reader::Mem(b) => b.get_bytes(start, length),
        }
    }
}

/// One Parquet file the store sees, with what pruning needs.
#[derive(Debug)]
pub struct SegmentFile {
    /// The table whose rows the file holds.
    pub table: Table,
    /// The file's path, or for an object its URL (`s3://bucket/key`).
    pub path: PathBuf,
    /// Where its bytes are read from.
    pub source: Source,
    /// The collector that wrote it (objects only; `None`: a file in
    /// `data_dir`, this store's own).
    pub collector: Option<String>,
    /// Start of the time bucket (the hour, by default) its rows fall in,
    /// µs since the epoch.
    pub bucket_start_us: i64,
    /// The last WAL segment its rows came from (the name's sequence).
    pub flush_seq: u64,
    /// Earliest row time, µs since the epoch.
    pub min_us: i64,
    /// Latest row time, µs since the epoch.
    pub max_us: i64,
    /// Rows in the file.
    pub rows: u64,
    /// Size of the file, in bytes.
    pub bytes: u64,
    /// Time bounds of each row group.
    pub rg_time: Vec<(i64, i64)>,
    /// The trace id bloom filter of each row group, if the table has one.
    pub blooms: Vec<Option<Sbbf>>,
    /// The request id bloom filter of each row group, if the table (and
    /// the file: older ones have none, and are read) has one.
    pub request_blooms: Vec<Option<Sbbf>>,
    /// The footer, kept so a read does not fetch it again.
    pub meta: ArrowReaderMetadata,
}

/// `YYYYMMDDTHHMMSSZ` of a bucket start.
pub fn bucket_name(start_us: i64) -> String {
    let secs = start_us.div_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days → (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The flush sequence in a segment file name, if it is one of ours.
pub fn parse_seq(path: &Path) -> Option<u64> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".parquet")?;
    stem.rsplit_once('-')?.1.parse().ok()
}

/// Sorts `batches` of `t` by time and splits them into buckets of
/// `bucket_us`: (bucket start, sorted rows).
pub fn sort_and_bucket(
    t: Table,
    batches: &[RecordBatch],
    bucket_us: i64,
) -> Result<Vec<(i64, RecordBatch)>, StoreError> {
    if batches.is_empty() {
        return Ok(Vec::new());
    }
    let ctx = || format!("sorting `{t}` for a flush");
    let all = arrow::compute::concat_batches(&batches[0].schema(), batches)
        .map_err(|e| StoreError::arrow(ctx(), e))?;
    let tcol = all
        .column_by_name(time_column(t))
        .expect("stored schema has the time column");
    let idx = sort_to_indices(tcol, None, None).map_err(|e| StoreError::arrow(ctx(), e))?;
    let sorted = take_record_batch(&all, &idx).map_err(|e| StoreError::arrow(ctx(), e))?;
    let ts = sorted
        .column_by_name(time_column(t))
        .expect("time column")
        .as_primitive::<TimestampMicrosecondType>()
        .clone();
    let bucket_of = |i: usize| ts.value(i).div_euclid(bucket_us) * bucket_us;
    let mut out = Vec::new();
    let mut start = 0;
    // Nulls sort first; a null time belongs to bucket 0 (the epoch).
    while start < sorted.num_rows() {
        let b = if ts.is_null(start) {
            0
        } else {
            bucket_of(start)
        };
        let mut end = start + 1;
        while end < sorted.num_rows() && (if ts.is_null(end) { 0 } else { bucket_of(end) }) == b {
            end += 1;
        }
        out.push((b, sorted.slice(start, end - start)));
        start = end;
    }
    Ok(out)
}

fn writer_props(t: Table, bucket_start_us: i64, min_us: i64, max_us: i64) -> WriterProperties {
    let schema = crate::tables::stored_schema(t);
    let time_idx = schema.index_of(time_column(t)).expect("time column") as i32;
    let mut b = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_sorting_columns(Some(vec![SortingColumn {
            column_idx: time_idx,
            descending: false,
            nulls_first: true,
        }]))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(KEY_BUCKET.into(), bucket_start_us.to_string()),
            KeyValue::new(KEY_MIN.into(), min_us.to_string()),
            KeyValue::new(KEY_MAX.into(), max_us.to_string()),
        ]));
    for c in [trace_column(t), request_column(t)].into_iter().flatten() {
        let path = ColumnPath::from(c);
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, ROW_GROUP_ROWS as u64);
    }
    b.build()
}

/// The earliest and latest event time (µs) of a segment's rows, by the
/// table's time column; the bucket's start for an empty batch.
fn row_time_bounds(t: Table, bucket_start_us: i64, rows: &RecordBatch) -> (i64, i64) {
    let ts = rows
        .column_by_name(time_column(t))
        .expect("time column")
        .as_primitive::<TimestampMicrosecondType>();
    (
        arrow::compute::min(ts).unwrap_or(bucket_start_us),
        arrow::compute::max(ts).unwrap_or(bucket_start_us),
    )
}

/// Writes one sorted bucket as `dir/<bucket>-<seq>.parquet` (temp file,
/// fsync, rename) and returns it opened.
pub fn write_segment(
    dir: &Path,
    t: Table,
    bucket_start_us: i64,
    flush_seq: u64,
    rows: &RecordBatch,
    fsync: bool,
) -> Result<SegmentFile, StoreError> {
    let (min_us, max_us) = row_time_bounds(t, bucket_start_us, rows);
    let name = format!("{}-{flush_seq:016}.parquet", bucket_name(bucket_start_us));
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    let written = (|| {
        let file = File::create(&tmp).map_err(|e| StoreError::io("creating", &tmp, e))?;
        let props = writer_props(t, bucket_start_us, min_us, max_us);
        let mut w = ArrowWriter::try_new(file, rows.schema(), Some(props))
            .map_err(|e| StoreError::parquet(&tmp, e))?;
        w.write(rows).map_err(|e| StoreError::parquet(&tmp, e))?;
        let file = w.into_inner().map_err(|e| StoreError::parquet(&tmp, e))?;
        if fsync {
            file.sync_all()
                .map_err(|e| StoreError::io("fsyncing", &tmp, e))?;
        }
        drop(file);
        fs::rename(&tmp, &path).map_err(|e| StoreError::io("renaming", &tmp, e))
    })();
    if let Err(e) = written {
        // A half-written file (e.g. the disk filled up) must not keep its
        // space until the next restart: every retry would leave another.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    open_segment(t, &path)
}

fn kv(meta: &ArrowReaderMetadata, key: &str) -> Option<i64> {
    meta.metadata()
        .file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|k| k.key == key)?
        .value
        .as_deref()?
        .parse()
        .ok()
}

/// Opens an existing segment file: footer, time bounds, bloom filters.
pub fn open_segment(t: Table, path: &Path) -> Result<SegmentFile, StoreError> {
    let file = File::open(path).map_err(|e| StoreError::io("opening", path, e))?;
    load(
        t,
        path,
        Source::File(path.to_path_buf()),
        None,
        &Reader::File(file),
    )
}

/// Opens an object: its footer, time bounds and bloom filters by ranged
/// GETs (two for the footer, one or two per row group's bloom filter).
pub fn open_object(
    t: Table,
    obj: ObjectReader,
    collector: Option<String>,
) -> Result<SegmentFile, StoreError> {
    let path = PathBuf::from(obj.bucket.display_key(obj.key.as_ref()));
    let reader = Reader::Object(obj.clone());
    load(t, &path, Source::Object(obj), collector, &reader)
}

/// Writes one sorted bucket as an object (`key`) and returns it opened,
/// its footer and bloom filters read from the bytes just written.
pub fn write_object(
    obj: ObjectReader,
    collector: &str,
    t: Table,
    bucket_start_us: i64,
    rows: &RecordBatch,
) -> Result<SegmentFile, StoreError> {
    let (min_us, max_us) = row_time_bounds(t, bucket_start_us, rows);
    let key = obj.key.to_string();
    let path = PathBuf::from(obj.bucket.display_key(&key));
    let props = writer_props(t, bucket_start_us, min_us, max_us);
    let mut w = ArrowWriter::try_new(Vec::new(), rows.schema(), Some(props))
        .map_err(|e| StoreError::parquet(&path, e))?;
    w.write(rows).map_err(|e| StoreError::parquet(&path, e))?;
    let body = Bytes::from(w.into_inner().map_err(|e| StoreError::parquet(&path, e))?);
    obj.bucket.put(&key, body.clone())?;
    let obj = ObjectReader {
        size: body.len() as u64,
        ..obj
    };
    load(
        t,
        &path,
        Source::Object(obj),
        Some(collector.to_string()),
        &Reader::Mem(body),
    )
}

fn load(
    t: Table,
    path: &Path,
    source: Source,
    collector: Option<String>,
    file: &Reader,
) -> Result<SegmentFile, StoreError> {
    let bytes = file.len();
    let meta = ArrowReaderMetadata::load(file, ArrowReaderOptions::new())
        .map_err(|e| StoreError::parquet(path, e))?;
    let pq = meta.metadata().clone();
    let descr = pq.file_metadata().schema_descr();
    let leaf =
        |name: &str| (0..descr.num_columns()).find(|i| descr.column(*i).path().string() == name);
    let time_leaf = leaf(time_column(t));
    let trace_leaf = trace_column(t).and_then(leaf);
    let request_leaf = request_column(t).and_then(leaf);
    let mut rg_time = Vec::with_capacity(pq.num_row_groups());
    let mut blooms = Vec::with_capacity(pq.num_row_groups());
    let mut request_blooms = Vec::with_capacity(pq.num_row_groups());
    for rg in pq.row_groups() {
        let bounds = time_leaf
            .and_then(|i| rg.column(i).statistics())
            .and_then(|s| match s {
                parquet::file::statistics::Statistics::Int64(v) => {
                    Some((*v.min_opt()?, *v.max_opt()?))
                }
                _ => None,
            })
            .unwrap_or((i64::MIN, i64::MAX));
        rg_time.push(bounds);
        let bloom_of = |leaf: Option<usize>| match leaf {
            Some(i) => Sbbf::read_from_column_chunk(rg.column(i), file)
                .map_err(|e| StoreError::parquet(path, e)),
            None => Ok(None),
        };
        blooms.push(bloom_of(trace_leaf)?);
        request_blooms.push(bloom_of(request_leaf)?);
    }
    let min_us = kv(&meta, KEY_MIN).unwrap_or(i64::MIN);
    let max_us = kv(&meta, KEY_MAX).unwrap_or(i64::MAX);
    Ok(SegmentFile {
        table: t,
        path: path.to_path_buf(),
        source,
        collector,
        bucket_start_us: kv(&meta, KEY_BUCKET).unwrap_or(min_us),
        flush_seq: parse_seq(path).unwrap_or(0),
        min_us,
        max_us,
        rows: pq.file_metadata().num_rows() as u64,
        bytes,
        rg_time,
        blooms,
        request_blooms,
        meta,
    })
}

impl SegmentFile {
    /// Could this file hold rows with time in `[from_us, to_us)`?
    pub fn overlaps(&self, from_us: Option<i64>, to_us: Option<i64>) -> bool {
        from_us.is_none_or(|f| self.max_us >= f) && to_us.is_none_or(|e| self.min_us < e)
    }

    /// Row groups that may hold `trace_id` (bloom filter says maybe).
    pub fn row_groups_for_trace(&self, trace_id: &str) -> Vec<usize> {
        (0..self.blooms.len())
            .filter(|i| self.blooms[*i].as_ref().is_none_or(|b| b.check(trace_id)))
            .collect()
    }

    /// Could any row group hold `trace_id`?
    pub fn may_hold_trace(&self, trace_id: &str) -> bool {
        self.blooms
            .iter()
            .any(|b| b.as_ref().is_none_or(|b| b.check(trace_id)))
    }

    /// Reads the rows of `trace_id` from the row groups whose bloom filter
    /// allows it, decoding other columns only for matching rows.
    pub fn read_trace(&self, trace_id: &str) -> Result<Vec<RecordBatch>, StoreError> {
        let Some(col) = trace_column(self.table) else {
            return Ok(Vec::new());
        };
        let rgs = self.row_groups_for_trace(trace_id);
        if rgs.is_empty() {
            return Ok(Vec::new());
        }
        let descr = self.meta.metadata().file_metadata().schema_descr_ptr();
        let Some(leaf) = (0..descr.num_columns()).find(|i| descr.column(*i).path().string() == col)
        else {
            return Ok(Vec::new());
        };
        let needle = Scalar::new(StringArray::from(vec![trace_id.to_string()]));
        let pred = ArrowPredicateFn::new(ProjectionMask::leaves(&descr, [leaf]), move |b| {
            cmp::eq(b.column(0), &needle)
        });
        self.read(rgs, Some(RowFilter::new(vec![Box::new(pred)])))
    }

    /// Row groups with rows in `[from_us, to_us)` that may hold one of
    /// `request_ids` (request id bloom filter says maybe; a row group
    /// without one may).
    fn row_groups_for_requests(
        &self,
        request_ids: &[String],
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> Vec<usize> {
        (0..self.rg_time.len())
            .filter(|i| {
                let (lo, hi) = self.rg_time[*i];
                from_us.is_none_or(|f| hi >= f) && to_us.is_none_or(|e| lo < e)
            })
            .filter(|i| {
                self.request_blooms
                    .get(*i)
                    .and_then(Option::as_ref)
                    .is_none_or(|b| request_ids.iter().any(|id| b.check(id.as_str())))
            })
            .collect()
    }

    /// Could a row group with rows in `[from_us, to_us)` hold one of
    /// `request_ids`?
    pub fn may_hold_requests(
        &self,
        request_ids: &[String],
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> bool {
        request_column(self.table).is_some()
            && self.overlaps(from_us, to_us)
            && !self
                .row_groups_for_requests(request_ids, from_us, to_us)
                .is_empty()
    }

    /// Reads the rows whose request id is one of `request_ids` from the row
    /// groups in `[from_us, to_us)` whose bloom filter allows one, decoding
    /// other columns only for matching rows.
    pub fn read_requests(
        &self,
        request_ids: &[String],
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        let Some(col) = request_column(self.table) else {
            return Ok(Vec::new());
        };
        let rgs = self.row_groups_for_requests(request_ids, from_us, to_us);
        if rgs.is_empty() {
            return Ok(Vec::new());
        }
        let descr = self.meta.metadata().file_metadata().schema_descr_ptr();
        let Some(leaf) = (0..descr.num_columns()).find(|i| descr.column(*i).path().string() == col)
        else {
            return Ok(Vec::new());
        };
        let wanted: std::collections::HashSet<String> = request_ids.iter().cloned().collect();
        let pred = ArrowPredicateFn::new(ProjectionMask::leaves(&descr, [leaf]), move |b| {
            Ok(crate::memtable::in_set(b.column(0), &wanted))
        });
        self.read(rgs, Some(RowFilter::new(vec![Box::new(pred)])))
    }

    /// Reads rows with time in `[from_us, to_us)`, skipping row groups by
    /// their statistics.
    pub fn read_range(
        &self,
        from_us: Option<i64>,
        to_us: Option<i64>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        let rgs: Vec<usize> = (0..self.rg_time.len())
            .filter(|i| {
                let (lo, hi) = self.rg_time[*i];
                from_us.is_none_or(|f| hi >= f) && to_us.is_none_or(|e| lo < e)
            })
            .collect();
        if rgs.is_empty() {
            return Ok(Vec::new());
        }
        let whole =
            from_us.is_none_or(|f| self.min_us >= f) && to_us.is_none_or(|e| self.max_us < e);
        let batches = self.read(rgs, None)?;
        if whole {
            return Ok(batches);
        }
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            let ts = b
                .column_by_name(time_column(self.table))
                .expect("time column")
                .as_primitive::<TimestampMicrosecondType>();
            let mask: BooleanArray = ts
                .iter()
                .map(|v| {
                    Some(v.is_some_and(|v| {
                        from_us.is_none_or(|f| v >= f) && to_us.is_none_or(|e| v < e)
                    }))
                })
                .collect();
            let f = filter_record_batch(&b, &mask)
                .map_err(|e| StoreError::arrow(format!("filtering {}", self.path.display()), e))?;
            if f.num_rows() > 0 {
                out.push(f);
            }
        }
        Ok(out)
    }

    fn read(
        &self,
        rgs: Vec<usize>,
        filter: Option<RowFilter>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        let batches = match &self.source {
            Source::Object(o) => o
                .read_row_groups(self.meta.clone(), rgs, filter, BATCH_ROWS)
                .map_err(|e| StoreError::parquet(&self.path, e))?,
            Source::File(p) => {
                let file = File::open(p).map_err(|e| StoreError::io("opening", p, e))?;
                let mut b =
                    ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
                        .with_row_groups(rgs)
                        .with_batch_size(BATCH_ROWS);
                if let Some(f) = filter {
                    b = b.with_row_filter(f);
                }
                let reader = b.build().map_err(|e| StoreError::parquet(&self.path, e))?;
                reader
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| StoreError::arrow(format!("reading {}", self.path.display()), e))?
            }
        };
        // A file written by an older version gets the current schema.
        Ok(batches
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| crate::tables::upgrade(self.table, b))
            .collect())
    }
}

/// Sorted Parquet files under `dir` (non-recursive).
pub fn list_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| StoreError::io("listing", dir, e))? {
        let p = e.map_err(|e| StoreError::io("listing", dir, e))?.path();
        if p.extension().is_some_and(|x| x == "parquet")
            || p.to_string_lossy().ends_with(".parquet.tmp")
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod module_example {
    use super::bucket_name;

    #[test]
    fn bucket_name_is_the_hours_start_in_utc() {
        assert_eq!(bucket_name(1_764_446_400_000_000), "20251129T200000Z");
    }
}
