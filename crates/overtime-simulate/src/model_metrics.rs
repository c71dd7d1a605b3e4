//! `--model-metrics FILE`: the model server's Prometheus metrics as a
//! scraper saves them — each answer of its `/metrics` appended to the
//! file with every sample stamped with the scrape's time (ms, the text
//! format's timestamps), every [`EVERY_MS`] simulated. `overtime diagnose
//! --metrics` reads the file as it is; the early-warning benchmark replays
//! it into the collector as `[[model_server]]` scrapes would arrive.
//!
//! Design rule: the file holds exactly what a scrape of the live endpoint
//! would have answered then ([`ModelServer::exposition`]), nothing made up
//! for the file.

use crate::clock::TimeScale;
use crate::error::SimulateError;
use crate::model::ModelServer;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// A scrape every 15 simulated seconds (the collector's default
/// `interval_ms`).
pub const EVERY_MS: f64 = 15_000.0;

/// The file scrapes are appended to.
#[derive(Debug)]
pub struct ModelMetricsFile(std::io::BufWriter<std::fs::File>);

impl ModelMetricsFile {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self, SimulateError> {
        std::fs::File::create(path)
            .map(|f| ModelMetricsFile(std::io::BufWriter::new(f)))
            .map_err(|e| SimulateError::io(format!("creating {}", path.display()), e))
    }

    /// Appends one scrape, its samples stamped `at_ms`.
    pub fn append(&mut self, exposition: &str, at_ms: i64) -> std::io::Result<()> {
        self.0.write_all(stamped(exposition, at_ms).as_bytes())?;
        self.0.flush()
    }
}

/// `exposition` with every sample line stamped `at_ms`.
fn stamped(exposition: &str, at_ms: i64) -> String {
    exposition
        .lines()
        .map(|l| {
            if l.starts_with('#') || l.trim().is_empty() {
                format!("{l}\n")
            } else {
                format!("{l} {at_ms}\n")
            }
        })
        .collect()
}

/// Writes a scrape of `server` to `file` now and every [`EVERY_MS`]
/// simulated, until aborted. A write that fails is logged once; the
/// simulation goes on.
pub async fn write_every(mut file: ModelMetricsFile, server: Arc<ModelServer>, scale: TimeScale) {
    let mut failed = false;
    loop {
        let now_ms = chrono::Utc::now().timestamp_millis();
        if let Err(e) = file.append(&server.exposition(), now_ms)
            && !failed
        {
            failed = true;
            tracing::warn!("overtime simulate: writing the model server's metrics failed: {e}");
        }
        scale.sleep(EVERY_MS).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_is_stamped_with_the_scrape_time_and_reads_back() {
        let text = stamped(
            "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 3\n",
            1_700_000_000_123,
        );
        let twice = format!(
            "{text}{}",
            text.replace("123\n", "456\n").replace("} 3", "} 5")
        );
        let read = overtime_parse::metrics::read_metrics(&twice);
        assert!(read.rejected.is_empty(), "{:?}", read.rejected);
        let got: Vec<(f64, i64)> = read.samples.iter().map(|s| (s.value, s.time_us)).collect();
        assert_eq!(
            got,
            vec![(3.0, 1_700_000_000_123_000), (5.0, 1_700_000_000_456_000)]
        );
    }
}
