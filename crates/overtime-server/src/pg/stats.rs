//! What the PostgreSQL front door counts, exported on `/metrics`
//! (docs/metrics.md): connections by outcome and queries by outcome.
//!
//! ```
//! # use overtime_server::pg::PgStats;
//! use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};
//! let stats = std::sync::Arc::new(PgStats::default());
//! stats.refused_bad_password.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//! let mut r = Registry::default();
//! r.register_collector(Box::new(stats.collector()));
//! let mut text = String::new();
//! encode(&mut text, &r).unwrap();
//! assert!(text.contains("overtime_postgres_connections_total{outcome=\"bad_password\"} 1"), "{text}");
//! ```

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// Counters of the front door; shared by its handlers.
#[derive(Debug, Default)]
pub struct PgStats {
    /// Connections that signed in.
    pub accepted: AtomicU64,
    /// Connections refused for a wrong password.
    pub refused_bad_password: AtomicU64,
    /// Connections refused for not asking for TLS when it is required.
    pub refused_no_tls: AtomicU64,
    /// Connections closed at once: `max_connections` were open.
    pub refused_too_many: AtomicU64,
    /// Queries answered with rows or a command tag.
    pub queries_ok: AtomicU64,
    /// Queries refused or failed (syntax, unknown table, not read-only,
    /// the memory limit).
    pub queries_failed: AtomicU64,
    /// Queries stopped by the time limit.
    pub queries_timeout: AtomicU64,
    /// Queries whose result had more than `max_rows` rows.
    pub queries_too_many_rows: AtomicU64,
}

impl PgStats {
    /// The `/metrics` families over these counters.
    pub fn collector(self: &Arc<Self>) -> PgCollector {
        PgCollector(self.clone())
    }
}

/// A counter family: its name, help and (outcome, counter) series.
type Family<'a> = (&'a str, &'a str, Vec<(&'a str, &'a AtomicU64)>);

/// [`PgStats`] as Prometheus families.
#[derive(Debug)]
pub struct PgCollector(Arc<PgStats>);

impl Collector for PgCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let families: [Family; 2] = [
            (
                "overtime_postgres_connections",
                "PostgreSQL wire protocol connections, by outcome",
                vec![
                    ("accepted", &s.accepted),
                    ("bad_password", &s.refused_bad_password),
                    ("no_tls", &s.refused_no_tls),
                    ("too_many", &s.refused_too_many),
                ],
            ),
            (
                "overtime_postgres_queries",
                "queries over the PostgreSQL wire protocol, by outcome",
                vec![
                    ("ok", &s.queries_ok),
                    ("failed", &s.queries_failed),
                    ("timeout", &s.queries_timeout),
                    ("too_many_rows", &s.queries_too_many_rows),
                ],
            ),
        ];
        for (name, help, series) in families {
            // prometheus-client appends the counter's `_total`.
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (outcome, n) in series {
                let labels = [("outcome", outcome)];
                let sample = family.encode_family(&labels)?;
                ConstCounter::new(n.load(Relaxed)).encode(sample)?;
            }
        }
        Ok(())
    }
}
