//! `GET /metrics` (Prometheus text format 0.0.4) and `GET /api/slo`: the
//! names of docs/metrics.md, fed by the live diagnosis (observations and
//! verdicts, drained in [`crate::pipeline::tick`]), by the sinks (records
//! ingested, rejected, pushed back) and by what sources register here.
//!
//! Design rules:
//! - One [`Metrics`] in [`crate::AppState`]; sources register closures that
//!   read their own counters ([`Metrics::register_rejections`],
//!   [`Metrics::register_kafka_lag`]), so this crate depends on no source.
//! - Every family of docs/metrics.md is declared (`# HELP`, `# TYPE`) on
//!   every scrape, with or without samples; a gauge with no value now (an
//!   empty window) has no sample rather than a made-up one.
//!
//! ```
//! use overtime_server::metrics::Metrics;
//! let m = Metrics::new(Default::default());
//! m.register_kafka_lag(|| [("spans/0".to_string(), 42u64)].into());
//! let text = m.render_text(&Default::default());
//! assert!(text.contains("overtime_kafka_lag{topic=\"spans\",partition=\"0\"} 42\n"));
//! assert!(text.contains("# TYPE overtime_requests_total counter\n"));
//! ```

use crate::AppState;
use arrow::array::{Array, StringArray};
use arrow::record_batch::RecordBatch;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use overtime_diagnose::IncidentReport;
use overtime_diagnose::live::LiveVerdict;
use overtime_model::{SinkError, Table, Verdict};
mod families;
mod text;

use text::Out;
pub use text::{escape_label, fmt_value};

use overtime_slo::{ALERT_NAMES, Alert, RequestObservation, Slo, SloConfig, SloSnapshot};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Fingerprints remembered to count incidents opened.
const MAX_FINGERPRINTS: usize = 10_000;

type CountsFn = Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>;
type TextFn = Box<dyn Fn() -> String + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Pipeline {
    ingested: BTreeMap<(String, String), u64>,
    rejected: BTreeMap<(String, String), u64>,
    backpressure: BTreeMap<String, u64>,
    write_failures: BTreeMap<String, u64>,
    live_decode_failures: BTreeMap<&'static str, u64>,
}

#[derive(Default)]
struct Hooks {
    rejections: Vec<(String, CountsFn)>,
    lag: Vec<CountsFn>,
    text: Vec<TextFn>,
}

/// Counts incidents opened: a run of a fingerprint that starts after the
/// last run seen for it ended.
#[derive(Default)]
struct IncidentTracker {
    last_end: BTreeMap<String, String>,
    opened: BTreeMap<String, u64>,
    open: u64,
    updated: Option<std::time::Instant>,
}

impl IncidentTracker {
    fn update(&mut self, reports: &[IncidentReport]) {
        let mut sorted: Vec<&IncidentReport> = reports.iter().collect();
        sorted.sort_by(|a, b| a.window.start.cmp(&b.window.start));
        for r in sorted {
            let new = self
                .last_end
                .get(&r.fingerprint)
                .is_none_or(|end| r.window.start > *end);
            if new {
                *self.opened.entry(r.kind.as_str().to_string()).or_default() += 1;
            }
            let end = self.last_end.entry(r.fingerprint.clone()).or_default();
            if r.window.end > *end {
                *end = r.window.end.clone();
            }
        }
        while self.last_end.len() > MAX_FINGERPRINTS {
            let oldest = self
                .last_end
                .iter()
                .min_by(|a, b| a.1.cmp(b.1))
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.last_end.remove(&k);
            }
        }
        self.open = reports.iter().filter(|r| r.status == "open").count() as u64;
        self.updated = Some(std::time::Instant::now());
    }
}

/// What `/metrics` exposes, shared by the pipeline and the handlers.
pub struct Metrics {
    slo: Mutex<Slo>,
    pipeline: Mutex<Pipeline>,
    hooks: Mutex<Hooks>,
    incidents: Mutex<IncidentTracker>,
    /// Wall time (µs) of the last observation, and the data time it left.
    last_data: Mutex<Option<(i64, i64)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(SloConfig::default())
    }
}

/// Live numbers `/metrics` reads from elsewhere at scrape time.
#[derive(Debug, Clone, Default)]
pub struct LiveGauges {
    pub pending_traces: u64,
    pub observations_dropped: u64,
    /// Traces diagnosed before their grace period: the live state was full.
    pub traces_forced: u64,
    pub memtable_bytes: u64,
    pub memtable_budget_bytes: u64,
    pub wal_bytes: u64,
}

impl Metrics {
    pub fn new(cfg: SloConfig) -> Self {
        Metrics {
            slo: Mutex::new(Slo::new(cfg)),
            pipeline: Mutex::default(),
            hooks: Mutex::default(),
            incidents: Mutex::default(),
            last_data: Mutex::default(),
        }
    }

    /// Feeds what one tick of the live diagnosis produced: new or changed
    /// verdicts (revisions counted), the verdicts settled at the end of
    /// their grace period (root causes counted, once per trace) and
    /// observations (in end-time order); then evaluates the alerts.
    pub fn record(
        &self,
        verdicts: &[LiveVerdict],
        settled: &[Verdict],
        observations: Vec<RequestObservation>,
    ) {
        let mut slo = lock(&self.slo);
        for v in verdicts.iter().filter(|v| v.revision > 0) {
            let rc = &v.verdict.root_cause;
            slo.record_verdict(
                rc.kind.as_str(),
                &rc.component,
                v.verdict.outcome,
                v.revision,
            );
        }
        for v in settled {
            let rc = &v.root_cause;
            slo.record_verdict(rc.kind.as_str(), &rc.component, v.outcome, 0);
        }
        if observations.is_empty() {
            return;
        }
        slo.observe_all(observations);
        *lock(&self.last_data) = Some((crate::pipeline::now_us(), slo.watermark_us()));
    }

    /// A source refused work before writing because the store pushed back
    /// early ([`RecordSink::backpressure`](overtime_model::RecordSink::backpressure)):
    /// counted in `overtime_backpressure_total` like a refused write.
    pub fn count_backpressure(&self, source: &str) {
        let mut p = lock(&self.pipeline);
        *p.backpressure.entry(source.to_string()).or_default() += 1;
    }

    /// A stored batch the live diagnosis could not decode back into records
    /// (a schema the model does not know): its rows are durable and
    /// queryable, but no verdict will count them.
    pub fn count_live_decode_failure(&self, table: &'static str) {
        *lock(&self.pipeline)
            .live_decode_failures
            .entry(table)
            .or_default() += 1;
    }

    /// Counts a sink write of `source` (`file`, `otlp_http`, `otlp_grpc`,
    /// `kafka`…): rows made durable by table, rejected rows by reason, and
    /// `Full` answers as backpressure.
    pub fn count_write(
        &self,
        source: &str,
        table: Table,
        batch: &RecordBatch,
        result: &Result<(), SinkError>,
    ) {
        let mut p = lock(&self.pipeline);
        p.backpressure.entry(source.to_string()).or_default();
        p.write_failures.entry(source.to_string()).or_default();
        match result {
            Err(SinkError::Full { .. }) => {
                *p.backpressure.entry(source.to_string()).or_default() += 1;
            }
            Err(SinkError::Failed(_)) => {
                *p.write_failures.entry(source.to_string()).or_default() += 1;
            }
            Ok(()) if table == Table::Rejected => {
                let reasons = batch
                    .column_by_name("reason")
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>());
                for i in 0..batch.num_rows() {
                    let reason = match reasons {
                        Some(r) if r.is_valid(i) => r.value(i),
                        _ => "unknown",
                    };
                    *p.rejected
                        .entry((source.to_string(), reason.to_string()))
                        .or_default() += 1;
                }
            }
            Ok(()) => {
                *p.ingested
                    .entry((source.to_string(), table.as_str().to_string()))
                    .or_default() += batch.num_rows() as u64;
            }
        }
    }

    /// Rejections a source counts before anything reaches the sink (an
    /// OTLP body that does not decode, too large, of an unknown type), by
    /// reason. `f` is called at every scrape and returns totals.
    pub fn register_rejections(
        &self,
        source: &str,
        f: impl Fn() -> BTreeMap<String, u64> + Send + Sync + 'static,
    ) {
        lock(&self.hooks)
            .rejections
            .push((source.to_string(), Box::new(f)));
    }

    /// Kafka consumer lag by `topic/partition` (as `KafkaStats::lag_by_partition`).
    pub fn register_kafka_lag(
        &self,
        f: impl Fn() -> BTreeMap<String, u64> + Send + Sync + 'static,
    ) {
        lock(&self.hooks).lag.push(Box::new(f));
    }

    /// Exposition text of another part (alert delivery, Jira), appended
    /// at every scrape: `f` returns whole families in the text format.
    pub fn register_text(&self, f: impl Fn() -> String + Send + Sync + 'static) {
        lock(&self.hooks).text.push(Box::new(f));
    }

    /// Moves the SLOs' data time forward without data (an idle collector).
    pub fn advance_to(&self, now_us: i64) {
        lock(&self.slo).advance_to(now_us);
    }

    /// For an idle collector: once no request completed for `idle_us` of
    /// wall time, data time moves on as the wall clock does from the last
    /// data seen, so windows empty and alerts resolve. While requests keep
    /// completing it does nothing, so replayed logs keep their own time.
    /// Call it periodically with the wall clock (`pipeline::now_us()`).
    pub fn advance_if_idle(&self, wall_now_us: i64, idle_us: i64) {
        let Some((wall, data)) = *lock(&self.last_data) else {
            return;
        };
        let idle = wall_now_us - wall;
        if idle >= idle_us {
            lock(&self.slo).advance_to(data + idle);
        }
    }

    /// The alerts whose conditions hold now (for the alert sender).
    pub fn alerts(&self) -> Vec<Alert> {
        lock(&self.slo).alerts().to_vec()
    }

    /// The SLO view (`GET /api/slo`).
    pub fn slo_snapshot(&self) -> SloSnapshot {
        lock(&self.slo).snapshot()
    }

    /// Updates the incident counters from the current reports.
    pub fn update_incidents(&self, reports: &[IncidentReport]) {
        lock(&self.incidents).update(reports);
    }

    /// Were the incident counters updated within `max_age`? (A scrape
    /// computes the reports itself only when nobody did recently.)
    pub fn incidents_fresh(&self, max_age: std::time::Duration) -> bool {
        lock(&self.incidents)
            .updated
            .is_some_and(|t| t.elapsed() <= max_age)
    }

    /// The exposition text.
    pub fn render_text(&self, live: &LiveGauges) -> String {
        let mut o = Out::default();
        {
            let slo = lock(&self.slo);
            families::requests(&mut o, &slo);
            let snap = slo.snapshot();
            families::slo_gauges(&mut o, &slo, &snap);
            families::early_warning(&mut o, &slo, &snap);
            let inc = lock(&self.incidents);
            o.family(
                "overtime_incidents_opened_total",
                "counter",
                "incidents opened",
            );
            for (k, n) in &inc.opened {
                o.sample("overtime_incidents_opened_total", &[("kind", k)], *n as f64);
            }
            o.family(
                "overtime_incidents_open",
                "gauge",
                "incidents currently open",
            );
            o.sample("overtime_incidents_open", &[], inc.open as f64);
            o.family("overtime_alerts_firing", "gauge", "alerts whose conditions hold at the collector (what it sends when [alert] is configured)");
            for name in ALERT_NAMES {
                let n = slo.alerts().iter().filter(|a| a.name() == name).count();
                o.sample("overtime_alerts_firing", &[("alertname", name)], n as f64);
            }
            o.sample(
                "overtime_alerts_firing",
                &[("alertname", "Overtime504Incident")],
                inc.open as f64,
            );
            o.family("overtime_observations_late_total", "counter", "completed requests older than a window's memory (in the totals, not in every window)");
            o.sample("overtime_observations_late_total", &[], snap.late as f64);
            o.family(
                "overtime_label_overflow_total",
                "counter",
                "label values reported as `other` (past slo.max_label_values)",
            );
            for (label, n) in slo.labels_overflowed() {
                o.sample(
                    "overtime_label_overflow_total",
                    &[("label", label)],
                    n as f64,
                );
            }
        }
        o.family(
            "overtime_observations_dropped_total",
            "counter",
            "completed requests dropped before the SLOs saw them (queue full)",
        );
        o.sample(
            "overtime_observations_dropped_total",
            &[],
            live.observations_dropped as f64,
        );
        o.family(
            "overtime_traces_forced_total",
            "counter",
            "traces diagnosed before their grace period because the live state held diagnose.max_live_records",
        );
        o.sample(
            "overtime_traces_forced_total",
            &[],
            live.traces_forced as f64,
        );
        self.pipeline_health(&mut o, live);
        for f in &lock(&self.hooks).text {
            o.s.push_str(&f());
        }
        o.s
    }

    fn pipeline_health(&self, o: &mut Out, live: &LiveGauges) {
        let p = lock(&self.pipeline);
        let hooks = lock(&self.hooks);
        o.family(
            "overtime_records_ingested_total",
            "counter",
            "records made durable, by source and table",
        );
        for ((s, t), n) in &p.ingested {
            o.sample(
                "overtime_records_ingested_total",
                &[("source", s), ("table", t)],
                *n as f64,
            );
        }
        let mut rejected = p.rejected.clone();
        for (source, f) in &hooks.rejections {
            for (reason, n) in f() {
                *rejected.entry((source.clone(), reason)).or_default() += n;
            }
        }
        o.family(
            "overtime_records_rejected_total",
            "counter",
            "rejected records, by source and reason (docs/inputs.md#bad-input)",
        );
        for ((s, r), n) in &rejected {
            o.sample(
                "overtime_records_rejected_total",
                &[("source", s), ("reason", r)],
                *n as f64,
            );
        }
        o.family(
            "overtime_backpressure_total",
            "counter",
            "times a source was pushed back (the store answered full)",
        );
        for (s, n) in &p.backpressure {
            o.sample("overtime_backpressure_total", &[("source", s)], *n as f64);
        }
        o.family(
            "overtime_store_write_failures_total",
            "counter",
            "durable writes that failed (disk full, I/O error), by source; nothing of them was acknowledged",
        );
        for (s, n) in &p.write_failures {
            o.sample(
                "overtime_store_write_failures_total",
                &[("source", s)],
                *n as f64,
            );
        }
        o.family(
            "overtime_live_decode_failures_total",
            "counter",
            "stored batches the live diagnosis could not decode, by table; their rows are stored but get no verdict",
        );
        for table in ["gateway_requests", "spans"] {
            let n = p.live_decode_failures.get(table).copied().unwrap_or(0);
            o.sample(
                "overtime_live_decode_failures_total",
                &[("table", table)],
                n as f64,
            );
        }
        o.family("overtime_kafka_lag", "gauge", "consumer lag in messages");
        for f in &hooks.lag {
            for (tp, n) in f() {
                let (topic, partition) = tp.rsplit_once('/').unwrap_or((tp.as_str(), ""));
                o.sample(
                    "overtime_kafka_lag",
                    &[("topic", topic), ("partition", partition)],
                    n as f64,
                );
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
            o.family(name, "gauge", help);
            o.sample(name, &[], v as f64);
        }
    }
}

/// What `/metrics` reads from the live diagnosis and the store; updates
/// the incident counters on the way.
fn live_gauges(s: &AppState) -> LiveGauges {
    let fresh = s.metrics.incidents_fresh(std::time::Duration::from_secs(5));
    let (pending, dropped, forced, incidents) = {
        let live = s.live.lock().expect("live state lock");
        (
            live.pending_len() as u64,
            live.observations_dropped(),
            live.forced(),
            (!fresh).then(|| live.incidents()),
        )
    };
    if let Some(incidents) = incidents {
        s.metrics.update_incidents(&incidents);
    }
    let st = s.store.stats();
    LiveGauges {
        pending_traces: pending,
        observations_dropped: dropped,
        traces_forced: forced,
        memtable_bytes: st.memtable_bytes,
        memtable_budget_bytes: st.memtable_budget_bytes,
        wal_bytes: st.wal_bytes,
    }
}

/// `GET /metrics`.
pub async fn get_metrics(State(s): State<Arc<AppState>>) -> Response {
    let state = s.clone();
    let text = tokio::task::spawn_blocking(move || {
        let live = live_gauges(&state);
        state.metrics.render_text(&live)
    })
    .await
    .unwrap_or_else(|e| format!("# overtime: rendering the metrics failed: {e}\n"));
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

/// `GET /api/slo`: the live SLO view as JSON (windows, chain health,
/// models, tools, routes, breakers, alerts), with the data time it is at.
pub async fn get_slo(State(s): State<Arc<AppState>>) -> Response {
    let snap = s.metrics.slo_snapshot();
    let mut doc = serde_json::to_value(&snap).unwrap_or_default();
    doc["watermark"] = overtime_diagnose::verdict::rfc3339(snap.watermark_us).into();
    Json(doc).into_response()
}
