//! The shared delivery families (docs/metrics.md, "Delivery") of every
//! channel built on [`crate::Durable`], labelled with the channel's name:
//! one [`ChannelsCollector`] for all of them, so a family is declared once
//! per scrape however many channels there are.
//!
//! Design rules:
//! - No text written here: prometheus-client encodes the families.
//! - Every family is declared at every scrape, with or without channels,
//!   so rules and dashboards never see a family come and go.
//!
//! ```
//! use overtime_notify::{ChannelStats, ChannelsCollector};
//! use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};
//! use std::sync::Arc;
//! let mut c = ChannelsCollector::default();
//! c.add("slack", Arc::new(|| ChannelStats {
//!     delivered: [("posted", 1)].into_iter().collect(),
//!     queued: 2,
//!     ..Default::default()
//! }));
//! let mut registry = Registry::default();
//! registry.register_collector(Box::new(c));
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains("overtime_channel_deliveries_total{channel=\"slack\",action=\"posted\"} 1\n"));
//! assert!(text.contains("overtime_channel_outbox_queued{channel=\"slack\"} 2\n"));
//! ```

use crate::channel::StatsSource;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;
use std::collections::BTreeMap;

/// One channel's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChannelStats {
    /// Delivered notices by what the delivery did (`posted`, `updated`,
    /// `resolved`, `followed_up`, `triggered`, `renamed`, `found`…).
    pub delivered: BTreeMap<&'static str, u64>,
    /// Notices refused for good or out of attempts (kept in `failed/`).
    pub failed: u64,
    /// Notices already waiting or delivered, not queued again.
    pub duplicates: u64,
    /// Attempts that failed transiently and were retried.
    pub retries: u64,
    /// Of those, answered 429.
    pub rate_limited: u64,
    /// Notices waiting in the outbox now.
    pub queued: u64,
    /// Unreadable outbox files set aside at start.
    pub bad_outbox_files: u64,
    /// The last error, if the last attempt failed.
    pub last_error: Option<String>,
}

impl ChannelStats {
    /// Delivered notices, whatever they did.
    pub fn delivered_total(&self) -> u64 {
        self.delivered.values().sum()
    }

    /// Delivered notices that did `action`.
    pub fn delivered(&self, action: &str) -> u64 {
        self.delivered.get(action).copied().unwrap_or(0)
    }
}

/// The `overtime_channel_*` families of every shared-metrics channel.
#[derive(Default)]
pub struct ChannelsCollector {
    channels: Vec<(String, StatsSource)>,
}

impl std::fmt::Debug for ChannelsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.channels.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ChannelsCollector")
            .field("channels", &names)
            .finish()
    }
}

impl ChannelsCollector {
    /// Adds a channel's counters under `name`.
    pub fn add(&mut self, name: &str, stats: StatsSource) {
        self.channels.push((name.to_string(), stats));
    }
}

impl Collector for ChannelsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats: Vec<(&str, ChannelStats)> = self
            .channels
            .iter()
            .map(|(n, s)| (n.as_str(), s()))
            .collect();
        // Counter names without `_total`: prometheus-client appends it.
        let mut fam = encoder.encode_descriptor(
            "overtime_channel_deliveries",
            "Notices an alert channel delivered, by what the delivery did.",
            None,
            MetricType::Counter,
        )?;
        for (name, s) in &stats {
            for (action, n) in &s.delivered {
                ConstCounter::new(*n)
                    .encode(fam.encode_family(&[("channel", *name), ("action", *action)])?)?;
            }
        }
        let mut fam = encoder.encode_descriptor(
            "overtime_channel_notices",
            "Notices an alert channel did not deliver, by why: failed, duplicate.",
            None,
            MetricType::Counter,
        )?;
        for (name, s) in &stats {
            for (result, n) in [("failed", s.failed), ("duplicate", s.duplicates)] {
                ConstCounter::new(n)
                    .encode(fam.encode_family(&[("channel", *name), ("result", result)])?)?;
            }
        }
        let mut fam = encoder.encode_descriptor(
            "overtime_channel_retries",
            "Delivery attempts that failed transiently and were retried, by cause.",
            None,
            MetricType::Counter,
        )?;
        for (name, s) in &stats {
            for (cause, n) in [
                ("rate_limited", s.rate_limited),
                ("other", s.retries.saturating_sub(s.rate_limited)),
            ] {
                ConstCounter::new(n)
                    .encode(fam.encode_family(&[("channel", *name), ("cause", cause)])?)?;
            }
        }
        let mut fam = encoder.encode_descriptor(
            "overtime_channel_outbox_queued",
            "Notices waiting in an alert channel's durable outbox.",
            None,
            MetricType::Gauge,
        )?;
        for (name, s) in &stats {
            ConstGauge::new(s.queued as i64).encode(fam.encode_family(&[("channel", *name)])?)?;
        }
        let mut fam = encoder.encode_descriptor(
            "overtime_channel_bad_outbox_files",
            "Unreadable outbox files an alert channel set aside at start.",
            None,
            MetricType::Counter,
        )?;
        for (name, s) in &stats {
            ConstCounter::new(s.bad_outbox_files)
                .encode(fam.encode_family(&[("channel", *name)])?)?;
        }
        Ok(())
    }
}
