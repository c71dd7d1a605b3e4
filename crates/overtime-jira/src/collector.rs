//! The Jira notifier's families (docs/metrics.md, "Delivery") for the
//! collector's one `/metrics` registry: [`JiraStats`] is a
//! [`Collector`] of the counters it holds, and [`Notifier::collector`]
//! one that takes a fresh [`JiraStats`] at each scrape.
//!
//! Design rules:
//! - No text written here: prometheus-client encodes the families.
//! - Every family is declared at every scrape, Jira enabled or not (a
//!   disabled notifier counts zeros), so rules and dashboards never see
//!   a family come and go.
//!
//! ```
//! use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};
//! let stats = overtime_jira::JiraStats {
//!     created: 2,
//!     queued: 1,
//!     ..Default::default()
//! };
//! let mut registry = Registry::default();
//! registry.register_collector(Box::new(stats));
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("overtime_jira_events_total{result=\"created\"} 2\n"));
//! assert!(text.contains("overtime_jira_outbox_queued 1\n"));
//! ```

use crate::notifier::{JiraStats, Notifier, StatsHandle};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

impl Collector for JiraStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Counter names without `_total`: prometheus-client appends it.
        let mut events = encoder.encode_descriptor(
            "overtime_jira_events",
            "Incident events handled by the Jira notifier, by result.",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [
            ("created", self.created),
            ("commented", self.commented),
            ("reopened", self.reopened),
            ("found_existing", self.found_existing),
            ("failed", self.failed),
            ("skipped_unknown", self.skipped_unknown),
            ("skipped_duplicate", self.skipped_duplicate),
        ] {
            ConstCounter::new(n).encode(events.encode_family(&[("result", result)])?)?;
        }
        let mut retries = encoder.encode_descriptor(
            "overtime_jira_retries",
            "Jira calls that failed transiently and were retried, by cause.",
            None,
            MetricType::Counter,
        )?;
        for (cause, n) in [
            ("rate_limited", self.rate_limited),
            ("other", self.retries.saturating_sub(self.rate_limited)),
        ] {
            ConstCounter::new(n).encode(retries.encode_family(&[("cause", cause)])?)?;
        }
        ConstGauge::new(self.queued).encode(encoder.encode_descriptor(
            "overtime_jira_outbox_queued",
            "Incident events waiting in the durable outbox.",
            None,
            MetricType::Gauge,
        )?)?;
        ConstCounter::new(self.bad_outbox_files).encode(encoder.encode_descriptor(
            "overtime_jira_bad_outbox_files",
            "Unreadable outbox files set aside at start.",
            None,
            MetricType::Counter,
        )?)
    }
}

/// A notifier's families, from its counters at each scrape
/// ([`Notifier::collector`]).
pub struct JiraCollector {
    stats: StatsHandle,
}

impl std::fmt::Debug for JiraCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JiraCollector")
            .field("enabled", &self.stats.enabled())
            .finish()
    }
}

impl Collector for JiraCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.stats.stats().encode(encoder)
    }
}

impl Notifier {
    /// The notifier's families for the collector's `/metrics` registry,
    /// read at each scrape; it outlives the notifier's shutdown (the
    /// counters stay as they ended).
    pub fn collector(&self) -> JiraCollector {
        JiraCollector {
            stats: self.stats.clone(),
        }
    }
}
