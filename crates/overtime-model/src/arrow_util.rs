//! Small, typed accessors for reading rows back out of our own batches.
//! They tolerate a column of a compatible type (e.g. Int64 or a timestamp)
//! so that batches that went through Parquet or SQL read back the same.

use crate::ModelError;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::*;
use std::sync::Arc;

/// Builds a batch whose schema is derived from the arrays themselves, so
/// the schema can never disagree with the builders.
pub fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let arrays = cols.into_iter().map(|(_, a)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .expect("columns built together have equal lengths")
}

pub fn col<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ModelError> {
    b.column_by_name(name)
        .ok_or_else(|| ModelError::MissingColumn(name.to_string()))
}

pub fn opt_str(a: &ArrayRef, i: usize) -> Option<String> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Some(a.as_string_view().value(i).to_string()),
        DataType::Dictionary(_, _) => {
            let d = a.as_any_dictionary();
            let k = d.normalized_keys()[i];
            opt_str(d.values(), k)
        }
        _ => None,
    }
}

pub fn opt_i64(a: &ArrayRef, i: usize) -> Option<i64> {
    if a.is_null(i) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i) as i64,
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i) as i64,
        DataType::UInt32 => a.as_primitive::<UInt32Type>().value(i) as i64,
        DataType::UInt16 => a.as_primitive::<UInt16Type>().value(i) as i64,
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            a.as_primitive::<TimestampMicrosecondType>().value(i)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            a.as_primitive::<TimestampNanosecondType>().value(i) / 1000
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            a.as_primitive::<TimestampMillisecondType>().value(i) * 1000
        }
        DataType::Float64 => a.as_primitive::<Float64Type>().value(i) as i64,
        _ => return None,
    })
}

pub fn opt_u64(a: &ArrayRef, i: usize) -> Option<u64> {
    opt_i64(a, i).map(|v| v as u64)
}

pub fn opt_u32(a: &ArrayRef, i: usize) -> Option<u32> {
    opt_i64(a, i).map(|v| v as u32)
}

pub fn opt_u16(a: &ArrayRef, i: usize) -> Option<u16> {
    opt_i64(a, i).map(|v| v as u16)
}

pub fn opt_f64(a: &ArrayRef, i: usize) -> Option<f64> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Float64 => Some(a.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => Some(a.as_primitive::<Float32Type>().value(i) as f64),
        _ => opt_i64(a, i).map(|v| v as f64),
    }
}

pub fn opt_bool(a: &ArrayRef, i: usize) -> Option<bool> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Boolean => Some(a.as_boolean().value(i)),
        _ => None,
    }
}

fn list_values(a: &ArrayRef, i: usize) -> Option<ArrayRef> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::List(_) => Some(a.as_list::<i32>().value(i)),
        DataType::LargeList(_) => Some(a.as_list::<i64>().value(i)),
        _ => None,
    }
}

pub fn list_f64(a: &ArrayRef, i: usize) -> Vec<Option<f64>> {
    list_values(a, i)
        .map(|v| (0..v.len()).map(|j| opt_f64(&v, j)).collect())
        .unwrap_or_default()
}

pub fn list_u16(a: &ArrayRef, i: usize) -> Vec<Option<u16>> {
    list_values(a, i)
        .map(|v| (0..v.len()).map(|j| opt_u16(&v, j)).collect())
        .unwrap_or_default()
}

pub fn list_str(a: &ArrayRef, i: usize) -> Vec<Option<String>> {
    list_values(a, i)
        .map(|v| (0..v.len()).map(|j| opt_str(&v, j)).collect())
        .unwrap_or_default()
}

/// Key/value pairs of row `i` of a `Map<Utf8, Utf8>` column.
pub fn map_pairs(a: &ArrayRef, i: usize) -> Vec<(String, String)> {
    if a.is_null(i) {
        return Vec::new();
    }
    let DataType::Map(_, _) = a.data_type() else {
        return Vec::new();
    };
    let m = a.as_map();
    let entries = m.value(i);
    let keys = entries.column(0).clone();
    let vals = entries.column(1).clone();
    (0..entries.len())
        .filter_map(|j| Some((opt_str(&keys, j)?, opt_str(&vals, j).unwrap_or_default())))
        .collect()
}

/// Rows of a `List<Struct<…>>` column as the struct array of row `i`.
pub fn list_struct(a: &ArrayRef, i: usize) -> Option<arrow::array::StructArray> {
    list_values(a, i).map(|v| v.as_struct().clone())
}
