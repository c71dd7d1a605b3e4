//! A model server's metric sample (docs/inputs.md, "Model-server metrics").

use serde::{Deserialize, Serialize};

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
