//! The alert delivery's family (docs/metrics.md, "Delivery") for the
//! collector's one `/metrics` registry:
//! `overtime_alert_notifications_total{target, result}`, `result` ∈ sent,
//! failed, dropped (alerts, per target). [`AlertStats`] is a
//! [`Collector`] of the counters it holds, and [`AlertSender::collector`]
//! one that reads the targets' counters at each scrape.
//!
//! Design rules:
//! - No text written here: prometheus-client encodes the family.
//! - `overtime_alerts_firing` is not declared here: `/metrics` declares
//!   it from the SLO engine, whether or not a target is configured.
//!
//! ```
//! use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};
//! let mut stats = overtime_alert::AlertStats::default();
//! stats.targets.push(overtime_alert::TargetStats {
//!     target: "alertmanager:am:9093".into(),
//!     sent: 7,
//!     ..Default::default()
//! });
//! let mut registry = Registry::default();
//! registry.register_collector(Box::new(stats));
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains(
//!     "overtime_alert_notifications_total{target=\"alertmanager:am:9093\",result=\"sent\"} 7\n"
//! ));
//! ```

use crate::deliver::Target;
use crate::sender::{AlertSender, AlertStats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use std::sync::Arc;

impl Collector for AlertStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // The name without `_total`: prometheus-client appends it.
        let mut family = encoder.encode_descriptor(
            "overtime_alert_notifications",
            "Alerts handed to a target, by result.",
            None,
            MetricType::Counter,
        )?;
        for t in &self.targets {
            for (result, n) in [
                ("sent", t.sent),
                ("failed", t.failed),
                ("dropped", t.dropped),
            ] {
                let labels = [("target", t.target.as_str()), ("result", result)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// A sender's delivery counters, read at each scrape
/// ([`AlertSender::collector`]).
pub struct AlertCollector {
    targets: Vec<Arc<Target>>,
}

impl std::fmt::Debug for AlertCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertCollector")
            .field("targets", &self.targets.len())
            .finish()
    }
}

impl Collector for AlertCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = AlertStats {
            targets: self.targets.iter().map(|t| t.stats()).collect(),
            firing: Default::default(),
        };
        stats.encode(encoder)
    }
}

impl AlertSender {
    /// The delivery counters for the collector's `/metrics` registry,
    /// read at each scrape; it outlives the sender's shutdown (the
    /// counters stay as they ended).
    pub fn collector(&self) -> AlertCollector {
        AlertCollector {
            targets: self.targets().cloned().collect(),
        }
    }
}
