//! `rejected`: every record that could not be read, with where it was and
//! why (docs/inputs.md#bad-input). Nothing is dropped silently: a bad line becomes a row here.
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `source` | Utf8 | the input's name (file path, layer, topic) |
//! | `line` | UInt64 | 1-based line (or message) number |
//! | `position` | Utf8 | human-readable position, e.g. `line 12, span 3` |
//! | `reason` | Utf8 | a short, stable reason code (`format_mismatch`, `bad_json`…) |
//! | `detail` | Utf8 | the error message |
//! | `raw` | Utf8 | the record as read, cut to 1 KiB (lossy UTF-8) |

use crate::ModelError;
use crate::arrow_util::{batch, col, opt_str, opt_u64};
use arrow::array::{ArrayBuilder, ArrayRef, StringBuilder, UInt64Builder};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// Longest `raw` kept, in bytes.
pub const RAW_KEEP: usize = 1024;

/// A record that could not be read, as a row of `rejected`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectedRecord {
    /// The input's name (file path, layer, topic).
    pub source: String,
    /// 1-based line (or message) number in `source`.
    pub line: u64,
    /// Where, for a person: `line 12`, `line 12, span 3`.
    pub position: String,
    /// A short, stable reason code (`format_mismatch`, `bad_json`…): what to group and alert on.
    pub reason: String,
    /// The error message.
    pub detail: String,
    /// The record as read, cut to [`RAW_KEEP`] bytes (lossy UTF-8).
    pub raw: String,
}

impl RejectedRecord {
    /// A rejection of line `line` of `source`; `raw` is cut to [`RAW_KEEP`].
    pub fn new(
        source: &str,
        line: u64,
        reason: &str,
        detail: impl Into<String>,
        raw: &[u8],
    ) -> Self {
        let cut = &raw[..raw.len().min(RAW_KEEP)];
        RejectedRecord {
            source: source.to_string(),
            line,
            position: format!("line {line}"),
            reason: reason.to_string(),
            detail: detail.into(),
            raw: String::from_utf8_lossy(cut).into_owned(),
        }
    }

    /// The same rejection at a finer `position` (`line 12, span 3`).
    pub fn with_position(mut self, position: impl Into<String>) -> Self {
        self.position = position.into();
        self
    }
}

/// Arrow builders of `rejected`: append rows, then [`finish`](Self::finish) a batch.
#[derive(Default)]
pub struct RejectedColumns {
    source: StringBuilder,
    line: UInt64Builder,
    position: StringBuilder,
    reason: StringBuilder,
    detail: StringBuilder,
    raw: StringBuilder,
}

impl RejectedColumns {
    /// Empty builders.
    pub fn new() -> Self {
        Self::default()
    }
    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.line.len()
    }
    /// No row appended yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends one row.
    pub fn append(&mut self, r: &RejectedRecord) {
        self.source.append_value(&r.source);
        self.line.append_value(r.line);
        self.position.append_value(&r.position);
        self.reason.append_value(&r.reason);
        self.detail.append_value(&r.detail);
        self.raw.append_value(&r.raw);
    }
    /// The rows appended so far as a batch; the builders start empty again.
    pub fn finish(&mut self) -> RecordBatch {
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("source", Arc::new(self.source.finish())),
            ("line", Arc::new(self.line.finish())),
            ("position", Arc::new(self.position.finish())),
            ("reason", Arc::new(self.reason.finish())),
            ("detail", Arc::new(self.detail.finish())),
            ("raw", Arc::new(self.raw.finish())),
        ];
        batch(cols)
    }
}

/// The Arrow schema of `rejected` (the columns above).
pub fn rejected_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| RejectedColumns::new().finish().schema())
        .clone()
}

/// Reads a `rejected` batch back into records; fails when a column is missing.
pub fn rejected_records(b: &RecordBatch) -> Result<Vec<RejectedRecord>, ModelError> {
    let (s, l, p, r, d, raw) = (
        col(b, "source")?,
        col(b, "line")?,
        col(b, "position")?,
        col(b, "reason")?,
        col(b, "detail")?,
        col(b, "raw")?,
    );
    Ok((0..b.num_rows())
        .map(|i| RejectedRecord {
            source: opt_str(s, i).unwrap_or_default(),
            line: opt_u64(l, i).unwrap_or(0),
            position: opt_str(p, i).unwrap_or_default(),
            reason: opt_str(r, i).unwrap_or_default(),
            detail: opt_str(d, i).unwrap_or_default(),
            raw: opt_str(raw, i).unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_is_cut_and_round_trips() {
        let big = vec![b'x'; 5000];
        let r = RejectedRecord::new("edge.log", 3, "format_mismatch", "expected ' ['", &big);
        assert_eq!(r.raw.len(), RAW_KEEP);
        let mut c = RejectedColumns::new();
        c.append(&r);
        let b = c.finish();
        assert_eq!(b.schema(), rejected_schema());
        assert_eq!(rejected_records(&b).unwrap(), vec![r]);
    }
}
