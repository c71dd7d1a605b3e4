//! A model server's metric sample (docs/inputs.md, "Model-server metrics").

use crate::ModelError;
use crate::arrow_util::{batch, col, map_pairs, opt_f64, opt_i64, opt_str};
use arrow::array::{
    ArrayRef, Float64Builder, MapBuilder, StringBuilder, TimestampMicrosecondArray,
};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// One sample of one series: `vllm:num_requests_waiting{model_name="qwen"} 7`
/// at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSample {
    /// The metric's name as exposed (`vllm:num_requests_waiting`,
    /// `vllm:request_queue_time_seconds_sum`).
    pub name: String,
    /// The series' labels, sorted by name.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
    /// When it was sampled, µs since the epoch.
    pub time_us: i64,
}

impl MetricSample {
    /// The value of label `name`, if the series has it.
    ///
    /// ```
    /// use overtime_model::MetricSample;
    /// let s = MetricSample { name: "m".into(), labels: vec![("model_name".into(), "qwen".into())], value: 1.0, time_us: 0 };
    /// assert_eq!(s.label("model_name"), Some("qwen"));
    /// assert_eq!(s.label("job"), None);
    /// ```
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Arrow builders of `model_server_metrics`: the samples a collector
/// scraped from the model servers, one row per sample.
///
/// | column | type | meaning |
/// |---|---|---|
/// | `time` | Timestamp µs UTC | when it was scraped |
/// | `server` | Utf8 | the scraped endpoint's name (`[[model_servers]]`'s `name`, else its URL) |
/// | `name` | Utf8 | the series' name (`vllm:num_requests_waiting`, `…_sum`, `…_count`) |
/// | `model` | Utf8 | its `model_name` label (or the configured override), null when none |
/// | `labels` | Map<Utf8, Utf8> | every label of the series |
/// | `value` | Float64 | the value |
pub struct MetricColumns {
    server: StringBuilder,
    name: StringBuilder,
    model: StringBuilder,
    labels: MapBuilder<StringBuilder, StringBuilder>,
    value: Float64Builder,
    time: Vec<i64>,
}

impl Default for MetricColumns {
    fn default() -> Self {
        MetricColumns {
            server: StringBuilder::new(),
            name: StringBuilder::new(),
            model: StringBuilder::new(),
            labels: MapBuilder::new(None, StringBuilder::new(), StringBuilder::new()),
            value: Float64Builder::new(),
            time: Vec::new(),
        }
    }
}

impl MetricColumns {
    /// Empty builders.
    pub fn new() -> Self {
        Self::default()
    }
    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.time.len()
    }
    /// No row appended yet?
    pub fn is_empty(&self) -> bool {
        self.time.is_empty()
    }
    /// Appends one sample scraped from `server`.
    pub fn append(&mut self, server: &str, s: &MetricSample) {
        self.time.push(s.time_us);
        self.server.append_value(server);
        self.name.append_value(&s.name);
        self.model.append_option(s.label("model_name"));
        for (k, v) in &s.labels {
            self.labels.keys().append_value(k);
            self.labels.values().append_value(v);
        }
        self.labels.append(true).expect("pairs");
        self.value.append_value(s.value);
    }
    /// The rows appended so far as a batch; the builders start empty again.
    pub fn finish(&mut self) -> RecordBatch {
        let time =
            TimestampMicrosecondArray::from(std::mem::take(&mut self.time)).with_timezone("UTC");
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("time", Arc::new(time)),
            ("server", Arc::new(self.server.finish())),
            ("name", Arc::new(self.name.finish())),
            ("model", Arc::new(self.model.finish())),
            ("labels", Arc::new(self.labels.finish())),
            ("value", Arc::new(self.value.finish())),
        ];
        batch(cols)
    }
}

/// The Arrow schema of `model_server_metrics` ([`MetricColumns`]).
pub fn metric_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| MetricColumns::new().finish().schema())
        .clone()
}

/// Reads a `model_server_metrics` batch back into samples; fails when a
/// column is missing. A row without a time or a value is not a sample and
/// is left out (the builders never write one).
pub fn metric_samples(b: &RecordBatch) -> Result<Vec<MetricSample>, ModelError> {
    let (t, n, l, v) = (
        col(b, "time")?,
        col(b, "name")?,
        col(b, "labels")?,
        col(b, "value")?,
    );
    Ok((0..b.num_rows())
        .filter_map(|i| {
            let mut labels = map_pairs(l, i);
            labels.sort();
            Some(MetricSample {
                name: opt_str(n, i)?,
                labels,
                value: opt_f64(v, i)?,
                time_us: opt_i64(t, i)?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scraped_sample_round_trips_through_its_table() {
        let s = MetricSample {
            name: "vllm:num_requests_waiting".into(),
            labels: vec![
                ("engine".into(), "0".into()),
                ("model_name".into(), "qwen".into()),
            ],
            value: 7.0,
            time_us: 1_796_628_600_000_000,
        };
        let mut c = MetricColumns::new();
        c.append("vllm-0", &s);
        let b = c.finish();
        assert_eq!(b.schema(), metric_schema());
        assert_eq!(metric_samples(&b).unwrap(), vec![s]);
        assert_eq!(
            opt_str(b.column_by_name("model").unwrap(), 0).as_deref(),
            Some("qwen")
        );
    }
}
