//! What the store knows about each table: its stored schema, its time
//! column and its trace id column.
//!
//! `rejected` has no time column in the model, so the store appends one
//! side column, `ingested_at` (Timestamp µs UTC, when the store accepted
//! the batch): rejected rows belong to the bucket they were written in.
//! The schema registered for SQL is `rejected_schema()` + `ingested_at`.
//!
//! Schema upgrades: the model only ever adds nullable columns at the end of
//! a table. A Parquet file or WAL record written before a column existed is
//! read through [`upgrade`], which adds the missing columns as nulls, so old
//! data reads with the current schema (and SQL sees the same, through
//! DataFusion's schema adapter).

use crate::StoreError;
use arrow::array::{ArrayRef, TimestampMicrosecondArray, new_null_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use overtime_model::{Table, gateway_schema, metric_schema, rejected_schema, span_schema};
use std::sync::{Arc, OnceLock};

/// The side column the store adds to `rejected`.
pub const INGESTED_AT: &str = "ingested_at";

/// Index of a table in per-table arrays (`Table::ALL` order).
pub fn idx(t: Table) -> usize {
    match t {
        Table::GatewayRequests => 0,
        Table::Spans => 1,
        Table::Rejected => 2,
        Table::ModelServerMetrics => 3,
    }
}

/// The column rows are bucketed, sorted and pruned by.
pub fn time_column(t: Table) -> &'static str {
    match t {
        Table::GatewayRequests => "time",
        Table::Spans => "start_time",
        Table::Rejected => INGESTED_AT,
        Table::ModelServerMetrics => "time",
    }
}

/// The column point lookups by trace id use (and that gets a bloom filter).
pub fn trace_column(t: Table) -> Option<&'static str> {
    match t {
        Table::GatewayRequests | Table::Spans => Some("trace_id"),
        Table::Rejected | Table::ModelServerMetrics => None,
    }
}

/// The column lookups by request id use (`$request_id` on gateway lines,
/// the captured `X-Request-ID` on spans), which gets a bloom filter too.
pub fn request_column(t: Table) -> Option<&'static str> {
    match t {
        Table::GatewayRequests | Table::Spans => Some("request_id"),
        Table::Rejected | Table::ModelServerMetrics => None,
    }
}

/// The schema the store keeps (and registers for SQL) for `t`.
pub fn stored_schema(t: Table) -> SchemaRef {
    static S: OnceLock<[SchemaRef; 4]> = OnceLock::new();
    S.get_or_init(|| {
        let mut rej: Vec<Field> = rejected_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        rej.push(Field::new(
            INGESTED_AT,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ));
        [
            gateway_schema(),
            span_schema(),
            Arc::new(Schema::new(rej)),
            metric_schema(),
        ]
    })[idx(t)]
    .clone()
}

/// Checks `batch` against the model's schema of `t` (names and types) and
/// returns it with the stored schema; for `rejected`, adds `ingested_at`
/// = `now_us` to every row.
pub fn conform(t: Table, batch: RecordBatch, now_us: i64) -> Result<RecordBatch, StoreError> {
    let model = match t {
        Table::GatewayRequests => gateway_schema(),
        Table::Spans => span_schema(),
        Table::Rejected => rejected_schema(),
        Table::ModelServerMetrics => metric_schema(),
    };
    let got = batch.schema();
    let mismatch = |detail: String| StoreError::Schema {
        table: t.to_string(),
        detail,
    };
    if got.fields().len() != model.fields().len() {
        return Err(mismatch(format!(
            "{} columns, expected {}",
            got.fields().len(),
            model.fields().len()
        )));
    }
    for (g, m) in got.fields().iter().zip(model.fields()) {
        if g.name() != m.name() || !g.data_type().equals_datatype(m.data_type()) {
            return Err(mismatch(format!(
                "column `{}` {} where `{}` {} was expected",
                g.name(),
                g.data_type(),
                m.name(),
                m.data_type()
            )));
        }
    }
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    if t == Table::Rejected {
        let at =
            TimestampMicrosecondArray::from(vec![now_us; batch.num_rows()]).with_timezone("UTC");
        cols.push(Arc::new(at));
    }
    RecordBatch::try_new(stored_schema(t), cols)
        .map_err(|e| StoreError::arrow(format!("conforming a `{t}` batch"), e))
}

/// `batch` (of table `t`, possibly written by an older version) with the
/// current stored schema: columns matched by name, missing nullable ones
/// added as nulls. A batch that already has the stored schema, or that
/// cannot be upgraded (a column of another type, a missing non-nullable
/// one), is returned unchanged.
pub fn upgrade(t: Table, batch: RecordBatch) -> RecordBatch {
    let want = stored_schema(t);
    if batch.schema().fields() == want.fields() {
        return batch;
    }
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(want.fields().len());
    for f in want.fields() {
        match batch.column_by_name(f.name()) {
            Some(c) if c.data_type().equals_datatype(f.data_type()) => cols.push(c.clone()),
            None if f.is_nullable() => cols.push(new_null_array(f.data_type(), batch.num_rows())),
            _ => return batch,
        }
    }
    RecordBatch::try_new(want, cols).unwrap_or(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{SpanColumns, SpanRecord, span_records};

    #[test]
    fn a_spans_batch_from_before_scope_and_links_is_upgraded() {
        let mut c = SpanColumns::new();
        c.append(&SpanRecord::new(
            "0af7651916cd43dd8448eb211c80319c",
            "b7ad6b7169203331",
            "agent",
            "chat",
            1,
            2,
        ));
        let now = c.finish();
        let n = now.num_columns();
        let old = now.project(&(0..n - 3).collect::<Vec<_>>()).unwrap();
        let up = upgrade(Table::Spans, old);
        assert_eq!(up.schema(), stored_schema(Table::Spans));
        assert!(up.column(n - 1).is_null(0));
        assert_eq!(span_records(&up).unwrap(), span_records(&now).unwrap());
        // Already current: unchanged.
        assert_eq!(upgrade(Table::Spans, now.clone()), now);
    }
}

#[cfg(test)]
mod module_example {
    use super::{stored_schema, time_column};
    use overtime_model::Table;

    #[test]
    fn stored_schemas_name_the_time_column() {
        assert_eq!(time_column(Table::Spans), "start_time");
        assert_eq!(
            stored_schema(Table::Rejected)
                .fields()
                .last()
                .unwrap()
                .name(),
            "ingested_at"
        );
    }
}
