//! The memtable: the hot window of batches not yet in Parquet, per table,
//! with the bytes they hold. Queries read a snapshot of it (cheap: batches
//! are reference-counted), so a flush never blocks a reader.

use crate::StoreError;
use crate::tables::{idx, time_column, trace_column};
use arrow::array::{AsArray, BooleanArray, Scalar, StringArray};
use arrow::compute::filter_record_batch;
use arrow::compute::kernels::cmp;
use arrow::datatypes::TimestampMicrosecondType;
use arrow::record_batch::RecordBatch;
use overtime_model::Table;

/// Batches of every table, in arrival order.
#[derive(Debug, Default, Clone)]
pub struct Memtable {
    batches: [Vec<RecordBatch>; 4],
    rows: [u64; 4],
    bytes: u64,
}

impl Memtable {
    /// Adds a batch that costs `bytes` of the budget.
    pub fn push(&mut self, t: Table, batch: RecordBatch, bytes: u64) {
        self.rows[idx(t)] += batch.num_rows() as u64;
        self.batches[idx(t)].push(batch);
        self.bytes += bytes;
    }
    pub fn batches(&self, t: Table) -> &[RecordBatch] {
        &self.batches[idx(t)]
    }
    pub fn rows(&self, t: Table) -> u64 {
        self.rows[idx(t)]
    }
    /// Budget bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Puts `older` in front of `self` (used when a flush fails).
    pub fn prepend(&mut self, older: Memtable) {
        for i in 0..3 {
            let mut v = older.batches[i].clone();
            v.append(&mut self.batches[i]);
            self.batches[i] = v;
            self.rows[i] += older.rows[i];
        }
        self.bytes += older.bytes;
    }
}

/// Rows of `b` whose time column is in `[from_us, to_us)`.
pub fn filter_time(
    t: Table,
    b: &RecordBatch,
    from_us: Option<i64>,
    to_us: Option<i64>,
) -> Result<RecordBatch, StoreError> {
    if from_us.is_none() && to_us.is_none() {
        return Ok(b.clone());
    }
    let ctx = || format!("filtering `{t}` by time");
    let col = b
        .column_by_name(time_column(t))
        .ok_or_else(|| StoreError::Schema {
            table: t.to_string(),
            detail: format!("no time column `{}`", time_column(t)),
        })?;
    let ts = col.as_primitive::<TimestampMicrosecondType>();
    let mask: BooleanArray = ts
        .iter()
        .map(|v| {
            Some(v.is_some_and(|v| from_us.is_none_or(|f| v >= f) && to_us.is_none_or(|e| v < e)))
        })
        .collect();
    filter_record_batch(b, &mask).map_err(|e| StoreError::arrow(ctx(), e))
}

/// Rows of `b` whose trace id equals `trace_id` (none for `rejected`).
pub fn filter_trace(
    t: Table,
    b: &RecordBatch,
    trace_id: &str,
) -> Result<Option<RecordBatch>, StoreError> {
    let Some(name) = trace_column(t) else {
        return Ok(None);
    };
    let Some(col) = b.column_by_name(name) else {
        return Ok(None);
    };
    let ctx = || format!("filtering `{t}` by trace id");
    let needle = Scalar::new(StringArray::from(vec![trace_id]));
    // A null mask entry (null trace id) counts as "no match".
    let mask = cmp::eq(col, &needle).map_err(|e| StoreError::arrow(ctx(), e))?;
    if mask.true_count() == 0 {
        return Ok(None);
    }
    filter_record_batch(b, &mask)
        .map(Some)
        .map_err(|e| StoreError::arrow(ctx(), e))
}

/// Which values of a string column are in `wanted` (null: no).
pub(crate) fn in_set(
    col: &dyn arrow::array::Array,
    wanted: &std::collections::HashSet<String>,
) -> BooleanArray {
    match col.as_string_opt::<i32>() {
        Some(s) => s
            .iter()
            .map(|v| Some(v.is_some_and(|v| wanted.contains(v))))
            .collect(),
        None => match arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8) {
            Ok(c) => c
                .as_string::<i32>()
                .iter()
                .map(|v| Some(v.is_some_and(|v| wanted.contains(v))))
                .collect(),
            Err(_) => BooleanArray::from(vec![false; col.len()]),
        },
    }
}

/// Rows of `b` whose request id is one of `wanted` (none for `rejected`).
pub fn filter_requests(
    t: Table,
    b: &RecordBatch,
    wanted: &std::collections::HashSet<String>,
) -> Result<Option<RecordBatch>, StoreError> {
    let Some(col) = crate::tables::request_column(t).and_then(|n| b.column_by_name(n)) else {
        return Ok(None);
    };
    let mask = in_set(col.as_ref(), wanted);
    if mask.true_count() == 0 {
        return Ok(None);
    }
    filter_record_batch(b, &mask)
        .map(Some)
        .map_err(|e| StoreError::arrow(format!("filtering `{t}` by request id"), e))
}

#[cfg(test)]
mod module_example {
    use super::Memtable;
    use overtime_model::{RejectedColumns, RejectedRecord, Table};

    #[test]
    fn push_counts_rows_and_bytes() {
        let mut c = RejectedColumns::new();
        c.append(&RejectedRecord::new(
            "edge.log",
            1,
            "format_mismatch",
            "bad",
            b"x",
        ));
        let mut m = Memtable::default();
        m.push(Table::Rejected, c.finish(), 100);
        assert_eq!(m.rows(Table::Rejected), 1);
        assert_eq!(m.bytes(), 100);
    }
}
