//! The server's own families as one [`Collector`], the first of the
//! registry: the SLO engine's (see [`super::families`]), the incidents,
//! the alerts firing, and the pipeline's health, each read from
//! [`Shared`] while the scrape is encoded.
//!
//! Design rules:
//! - The order is docs/metrics.md's: requests, SLO gauges, early warning,
//!   incidents and alerts, then the pipeline's health.
//! - Locks are taken one family group at a time (the SLO engine and the
//!   incidents together, then the pipeline and the hooks), as the
//!   recording side takes them, so a scrape never holds two it need not.

use super::encode::{Result, count, counter, gauge, set};
use super::{LiveGauges, Shared, families, lock};
use overtime_slo::ALERT_NAMES;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::sync::Arc;

/// The server's families, registered by [`super::Metrics::new`].
pub(super) struct ServerFamilies(pub(super) Arc<Shared>);

impl std::fmt::Debug for ServerFamilies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerFamilies")
    }
}

impl Collector for ServerFamilies {
    fn encode(&self, mut e: DescriptorEncoder) -> Result {
        let live = lock(&self.0.live).clone();
        self.slo_and_incidents(&mut e)?;
        let mut m = counter(
            &mut e,
            "overtime_observations_dropped_total",
            "completed requests dropped before the SLOs saw them (queue full)",
        )?;
        count(&mut m, &[], live.observations_dropped)?;
        let mut m = counter(
            &mut e,
            "overtime_traces_forced_total",
            "traces diagnosed before their grace period because the live state held diagnose.max_live_records",
        )?;
        count(&mut m, &[], live.traces_forced)?;
        self.pipeline_health(&mut e, &live)
    }
}

impl ServerFamilies {
    fn slo_and_incidents(&self, e: &mut DescriptorEncoder) -> Result {
        let slo = lock(&self.0.slo);
        families::requests(e, &slo)?;
        let snap = slo.snapshot();
        families::slo_gauges(e, &slo, &snap)?;
        families::early_warning(e, &slo, &snap)?;
        let inc = lock(&self.0.incidents);
        let mut m = counter(e, "overtime_incidents_opened_total", "incidents opened")?;
        for (k, n) in &inc.opened {
            count(&mut m, &[("kind", k)], *n)?;
        }
        let mut m = gauge(e, "overtime_incidents_open", "incidents currently open")?;
        set(&mut m, &[], inc.open)?;
        let mut m = gauge(
            e,
            "overtime_alerts_firing",
            "alerts whose conditions hold at the collector (what it sends when [alert] is configured)",
        )?;
        for name in ALERT_NAMES {
            let n = slo.alerts().iter().filter(|a| a.name() == name).count();
            set(&mut m, &[("alertname", name)], n as u64)?;
        }
        set(&mut m, &[("alertname", "Overtime504Incident")], inc.open)?;
        let mut m = counter(
            e,
            "overtime_observations_late_total",
            "completed requests older than a window's memory (in the totals, not in every window)",
        )?;
        count(&mut m, &[], snap.late)?;
        let mut m = counter(
            e,
            "overtime_label_overflow_total",
            "label values reported as `other` (past slo.max_label_values)",
        )?;
        for (label, n) in slo.labels_overflowed() {
            count(&mut m, &[("label", label)], n)?;
        }
        Ok(())
    }

    fn pipeline_health(&self, e: &mut DescriptorEncoder, live: &LiveGauges) -> Result {
        let p = lock(&self.0.pipeline);
        let hooks = lock(&self.0.hooks);
        let mut m = counter(
            e,
            "overtime_records_ingested_total",
            "records made durable, by source and table",
        )?;
        for ((s, t), n) in &p.ingested {
            count(&mut m, &[("source", s), ("table", t)], *n)?;
        }
        let mut rejected = p.rejected.clone();
        for (source, f) in &hooks.rejections {
            for (reason, n) in f() {
                *rejected.entry((source.clone(), reason)).or_default() += n;
            }
        }
        let mut m = counter(
            e,
            "overtime_records_rejected_total",
            "rejected records, by source and reason (docs/inputs.md#bad-input)",
        )?;
        for ((s, r), n) in &rejected {
            count(&mut m, &[("source", s), ("reason", r)], *n)?;
        }
        let mut m = counter(
            e,
            "overtime_backpressure_total",
            "times a source was pushed back (the store answered full)",
        )?;
        for (s, n) in &p.backpressure {
            count(&mut m, &[("source", s)], *n)?;
        }
        let mut m = counter(
            e,
            "overtime_store_write_failures_total",
            "durable writes that failed (disk full, I/O error), by source; nothing of them was acknowledged",
        )?;
        for (s, n) in &p.write_failures {
            count(&mut m, &[("source", s)], *n)?;
        }
        let mut m = counter(
            e,
            "overtime_live_decode_failures_total",
            "stored batches the live diagnosis could not decode, by table; their rows are stored but get no verdict",
        )?;
        for table in ["gateway_requests", "spans"] {
            let n = p.live_decode_failures.get(table).copied().unwrap_or(0);
            count(&mut m, &[("table", table)], n)?;
        }
        let mut m = gauge(e, "overtime_kafka_lag", "consumer lag in messages")?;
        for f in &hooks.lag {
            for (tp, n) in f() {
                let (topic, partition) = tp.rsplit_once('/').unwrap_or((tp.as_str(), ""));
                set(&mut m, &[("topic", topic), ("partition", partition)], n)?;
            }
        }
        for (name, help, v) in [
            (
                "overtime_memtable_bytes",
                "bytes not yet in Parquet",
                live.memtable_bytes,
            ),
            (
                "overtime_memtable_budget_bytes",
                "the configured memtable budget",
                live.memtable_budget_bytes,
            ),
            ("overtime_wal_bytes", "WAL size on disk", live.wal_bytes),
            (
                "overtime_pending_traces",
                "traces waiting for their grace period",
                live.pending_traces,
            ),
        ] {
            set(&mut gauge(e, name, help)?, &[], v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod module_example {
    use crate::{LiveGauges, Metrics};

    /// A collector that saw nothing yet still declares every family: the
    /// models' P99s with no series, the live gauges with what the scrape read.
    #[test]
    fn every_family_is_declared_before_any_data() {
        let m = Metrics::default();
        let live = LiveGauges {
            wal_bytes: 4096,
            ..Default::default()
        };
        let text = m.encode(&live).unwrap();
        assert!(text.contains("# TYPE overtime_model_p99_seconds gauge\n# HELP "));
        assert!(text.contains("\novertime_wal_bytes 4096\n"));
    }
}
