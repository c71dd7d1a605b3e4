//! The scrapes' counters in `/metrics` (docs/metrics.md):
//! `overtime_model_server_scrapes_total{server,result}`,
//! `overtime_model_server_samples_total{server}` and
//! `overtime_model_server_up{server}`.

use super::ScrapeStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// Every scraped server's counters, for the collector's one registry.
#[derive(Debug)]
pub struct ScrapeCollector {
    /// One per `[[model_server]]`.
    pub servers: Vec<Arc<ScrapeStats>>,
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.servers.is_empty() {
            return Ok(());
        }
        // prometheus-client appends a counter's `_total` itself.
        let mut f = encoder.encode_descriptor(
            "overtime_model_server_scrapes",
            "Scrapes of each model server's /metrics, by result (ok, failed).",
            None,
            MetricType::Counter,
        )?;
        for s in &self.servers {
            for (result, n) in [("ok", &s.ok), ("failed", &s.failed)] {
                let labels = [("server", s.server.as_str()), ("result", result)];
                ConstCounter::new(n.load(Relaxed)).encode(f.encode_family(&labels)?)?;
            }
        }
        let mut f = encoder.encode_descriptor(
            "overtime_model_server_samples",
            "Samples kept from each model server's scrapes (the series the diagnosis reads).",
            None,
            MetricType::Counter,
        )?;
        for s in &self.servers {
            let labels = [("server", s.server.as_str())];
            ConstCounter::new(s.samples.load(Relaxed)).encode(f.encode_family(&labels)?)?;
        }
        let mut f = encoder.encode_descriptor(
            "overtime_model_server_up",
            "1 when the last scrape of the model server succeeded, else 0.",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.servers {
            let labels = [("server", s.server.as_str())];
            let up = i64::from(s.up.load(Relaxed));
            ConstGauge::new(up).encode(f.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
