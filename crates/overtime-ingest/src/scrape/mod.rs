//! `[[model_server]]`: `overtime serve` scrapes the model servers'
//! Prometheus endpoints (vLLM, SGLang, TGI `/metrics`) and keeps the
//! series the diagnosis reads in the store's `model_server_metrics` table
//! (docs/inputs.md, "Model-server metrics"); the store's sink shows them
//! to the live diagnosis as it does spans.
//!
//! Design rules:
//! - **Parsed by the one reader** `diagnose --metrics` uses
//!   ([`overtime_parse::metrics::read_scrape`]), each sample dated at its
//!   scrape; only the series [`overtime_diagnose::server_metrics::reads`]
//!   names are kept (gauges, and the phase histograms' `_sum` and `_count`).
//! - **Never fatal.** A scrape that fails (unreachable, timeout, a status
//!   other than 200, nothing readable) is counted
//!   (`overtime_model_server_scrapes_total{result="failed"}`) and logged
//!   once when the server goes down and once when it comes back; the next
//!   interval is the retry (a scrape is cheap and the next one carries the
//!   counters' totals, so nothing is lost but one gauge point).
//! - **Backpressure as every source.** A full store (`SinkError::Full`)
//!   is waited out and the same samples written again; scrapes due
//!   meanwhile are skipped.
//! - **The model is the series' `model_name` label**, or the block's
//!   `model`, which replaces it.

mod collector;
mod settings;

pub use collector::ScrapeCollector;
pub use settings::{ModelServerSettings, ModelServerSettingsError};

use overtime_model::{MetricColumns, MetricSample, RecordSink, SinkError, Table};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One server's scrape counters, read by [`ScrapeCollector`].
#[derive(Debug, Default)]
pub struct ScrapeStats {
    /// The server's name (`[[model_server]]`'s `name`, else its URL).
    pub server: String,
    /// Scrapes that succeeded.
    pub ok: AtomicU64,
    /// Scrapes that failed.
    pub failed: AtomicU64,
    /// Samples kept.
    pub samples: AtomicU64,
    /// The last scrape succeeded.
    pub up: AtomicBool,
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Why a scrape failed, in a sentence for the log.
#[derive(Debug, thiserror::Error)]
enum ScrapeError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("nothing readable in its answer ({rejected} parts refused{first})")]
    Unreadable { rejected: usize, first: String },
    #[error("the store refused the samples: {0}")]
    Store(String),
}

/// The scrape loop of one server, until `shutdown`.
pub struct Scraper {
    settings: ModelServerSettings,
    client: reqwest::Client,
    token: Option<String>,
    sink: Arc<dyn RecordSink>,
    stats: Arc<ScrapeStats>,
}

impl Scraper {
    /// A scraper of `settings`' server into `sink`; its counters are
    /// [`Scraper::stats`].
    pub fn new(settings: ModelServerSettings, sink: Arc<dyn RecordSink>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms))
            .build()
            .unwrap_or_default();
        let stats = Arc::new(ScrapeStats {
            server: settings.server_name().to_string(),
            ..Default::default()
        });
        Scraper {
            token: settings.token(),
            settings,
            client,
            sink,
            stats,
        }
    }

    /// The counters `/metrics` shows.
    pub fn stats(&self) -> Arc<ScrapeStats> {
        self.stats.clone()
    }

    /// Scrapes every `interval_ms` (the first at once) until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(self.settings.interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // None: no scrape yet; the state whose change is logged.
        let mut was_up: Option<bool> = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let result = self.scrape_once(&shutdown).await;
            let up = result.is_ok();
            let server = &self.stats.server;
            match &result {
                Ok(n) => {
                    self.stats.ok.fetch_add(1, Relaxed);
                    self.stats.samples.fetch_add(*n as u64, Relaxed);
                    if was_up != Some(true) {
                        tracing::info!(
                            "overtime: scraping model server {server}: {n} samples of the series the diagnosis reads"
                        );
                    }
                }
                Err(e) => {
                    self.stats.failed.fetch_add(1, Relaxed);
                    if was_up != Some(false) {
                        tracing::warn!(
                            "overtime: scraping model server {server} failed: {e} (tried again every {} ms; logged again when it answers)",
                            self.settings.interval_ms
                        );
                    }
                }
            }
            self.stats.up.store(up, Relaxed);
            was_up = Some(up);
        }
    }

    /// One scrape: fetched, read, kept; the samples written.
    async fn scrape_once(&self, shutdown: &CancellationToken) -> Result<usize, ScrapeError> {
        let mut req = self
            .client
            .get(&self.settings.url)
            // The Prometheus text format: what every model server writes.
            .header("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(ScrapeError::Status(status.as_u16()));
        }
        let text = resp.text().await?;
        let read = overtime_parse::metrics::read_scrape(&text, now_us());
        if read.samples.is_empty() && !read.rejected.is_empty() {
            return Err(ScrapeError::Unreadable {
                rejected: read.rejected.len(),
                first: read
                    .rejected
                    .first()
                    .map(|r| format!("; line {}: {}", r.line, r.reason))
                    .unwrap_or_default(),
            });
        }
        let kept: Vec<MetricSample> = read
            .samples
            .into_iter()
            .filter(|s| overtime_diagnose::server_metrics::reads(&s.name))
            .map(|s| self.relabel(s))
            .collect();
        if kept.is_empty() {
            return Ok(0);
        }
        let mut cols = MetricColumns::new();
        for s in &kept {
            cols.append(&self.stats.server, s);
        }
        let batch = cols.finish();
        loop {
            let sink = self.sink.clone();
            let b = batch.clone();
            let written =
                tokio::task::spawn_blocking(move || sink.write(Table::ModelServerMetrics, b, None))
                    .await
                    .map_err(|e| ScrapeError::Store(e.to_string()))?;
            match written {
                Ok(()) => return Ok(kept.len()),
                Err(SinkError::Full { retry_after_ms }) => {
                    tokio::select! {
                        _ = shutdown.cancelled() => return Err(ScrapeError::Store("stopped while the store was full".into())),
                        _ = tokio::time::sleep(Duration::from_millis(retry_after_ms.max(10))) => {}
                    }
                }
                Err(e) => return Err(ScrapeError::Store(e.to_string())),
            }
        }
    }

    /// The block's `model`, when set, as the series' `model_name`.
    fn relabel(&self, mut s: MetricSample) -> MetricSample {
        if let Some(m) = &self.settings.model {
            s.labels.retain(|(k, _)| k != "model_name");
            s.labels.push(("model_name".into(), m.clone()));
            s.labels.sort();
        }
        s
    }
}
