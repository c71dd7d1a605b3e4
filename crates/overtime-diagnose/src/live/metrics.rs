//! The model servers' metrics in the live diagnosis (docs/diagnosis.md,
//! "Model servers' metrics"): what `overtime serve` scrapes from their
//! `/metrics` ([`crate::server_metrics`]), given to the live diagnoser as
//! the store accepts it.
//!
//! Design rules:
//! - **As in a batch run.** The phase histograms' increases count as
//!   finished calls in the same phase book the spans fill, and the
//!   incident reports get the same queue-depth and KV-cache statistics,
//!   so `serve` and `diagnose --metrics` agree on the same data.
//! - **Before the calls they explain.** A scrape counts for the cut calls
//!   diagnosed after it arrived; a verdict already given is not revised
//!   for a later scrape (the next verdict of the model's calls uses it).
//! - **Bounded** as the phase book is: a day per series.

use super::LiveDiagnoser;
use overtime_model::MetricSample;

impl LiveDiagnoser {
    /// Adds model-server metric samples (a scrape, or the store's rows
    /// replayed after a restart).
    ///
    /// ```
    /// use overtime_diagnose::{live::LiveDiagnoser, DiagnoseConfig};
    /// use overtime_model::MetricSample;
    /// let mut live = LiveDiagnoser::new(DiagnoseConfig::default(), 30_000, 600_000, 1_000);
    /// live.add_server_metrics(&[MetricSample {
    ///     name: "vllm:num_requests_waiting".into(),
    ///     labels: vec![("model_name".into(), "qwen".into())],
    ///     value: 9.0,
    ///     time_us: 0,
    /// }]);
    /// assert_eq!(live.server_metrics().models(), ["qwen"]);
    /// ```
    pub fn add_server_metrics(&mut self, samples: &[MetricSample]) {
        let book = self.metrics.add(samples);
        self.book.merge(&book);
    }

    /// The model servers' metrics held.
    pub fn server_metrics(&self) -> &crate::server_metrics::ServerMetrics {
        &self.metrics
    }
}
