//! `GET /metrics` and `GET /api/slo`: the names of docs/metrics.md, fed
//! by the live diagnosis (observations and verdicts, drained in
//! [`crate::pipeline::tick`]), by the sinks (records ingested, rejected,
//! pushed back) and by what sources register here.
//!
//! Design rules:
//! - One [`Metrics`] in [`crate::AppState`], and in it the collector's one
//!   prometheus-client [`Registry`]: the server's own families are a
//!   [`Collector`] registered first, and every other part registers its
//!   families into the same registry ([`Metrics::register`]: Kafka,
//!   alert delivery, Jira), so this crate depends on no source.
//! - Rendered on scrape: each `GET /metrics` encodes the registry (the
//!   Prometheus text format 0.0.4, written by prometheus-client); nothing
//!   is cached, nothing refreshed on a timer.
//! - Families a source shares with others are the server's (rejections
//!   before the sink, Kafka lag): sources register closures that read
//!   their own counters ([`Metrics::register_rejections`],
//!   [`Metrics::register_kafka_lag`]), summed into one family.
//! - Every family of docs/metrics.md is declared (`# HELP`, `# TYPE`) on
//!   every scrape, with or without samples; a gauge with no value now (an
//!   empty window) has no sample rather than a made-up one.

use crate::AppState;
use arrow::array::{Array, StringArray};
use arrow::record_batch::RecordBatch;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use overtime_diagnose::IncidentReport;
use overtime_diagnose::live::LiveVerdict;
use overtime_model::{SinkError, Table, Verdict};

/// How far a model server's sample may be from the SLOs' data time and
/// still be taken ([`Metrics::observe_server`]): two minutes.
pub const LIVE_SKEW_US: i64 = 120_000_000;
use overtime_slo::{Alert, RequestObservation, Slo, SloConfig, SloSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

mod collector;
mod encode;
mod families;

/// The `Content-Type` of `/metrics`: the Prometheus text format 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;
/// Fingerprints remembered to count incidents opened.
const MAX_FINGERPRINTS: usize = 10_000;

type CountsFn = Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>;

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

/// What the server's families are read from, shared by [`Metrics`] and
/// the collector registered for them.
struct Shared {
    slo: Mutex<Slo>,
    pipeline: Mutex<Pipeline>,
    hooks: Mutex<Hooks>,
    incidents: Mutex<IncidentTracker>,
    /// Wall time (µs) of the last observation, and the data time it left.
    last_data: Mutex<Option<(i64, i64)>>,
    /// What the scrape being encoded read from the live state and the
    /// store (scrapes are encoded one at a time, under the registry's lock).
    live: Mutex<LiveGauges>,
}

/// What `/metrics` exposes, shared by the pipeline and the handlers.
///
/// ```
/// use overtime_server::Metrics;
/// let m = Metrics::new(Default::default());
/// m.register_kafka_lag(|| [("spans/0".to_string(), 42u64)].into());
/// let text = m.encode(&Default::default()).unwrap();
/// assert!(text.contains("overtime_kafka_lag{topic=\"spans\",partition=\"0\"} 42\n"));
/// assert!(text.contains("# TYPE overtime_requests_total counter\n"));
/// ```
pub struct Metrics {
    shared: Arc<Shared>,
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(SloConfig::default())
    }
}

/// Live numbers `/metrics` reads from elsewhere at scrape time (the live
/// diagnosis and the store), each exposed as the metric named with it
/// (docs/metrics.md); the default is all zeros.
#[derive(Debug, Clone, Default)]
pub struct LiveGauges {
    /// Traces waiting for their grace period (`overtime_pending_traces`).
    pub pending_traces: u64,
    /// Completed requests dropped before the SLOs saw them, since start
    /// (`overtime_observations_dropped_total`).
    pub observations_dropped: u64,
    /// Traces diagnosed before their grace period because the live state
    /// was full, since start (`overtime_traces_forced_total`).
    pub traces_forced: u64,
    /// Bytes not yet in Parquet (`overtime_memtable_bytes`).
    pub memtable_bytes: u64,
    /// The configured memtable budget, in bytes
    /// (`overtime_memtable_budget_bytes`).
    pub memtable_budget_bytes: u64,
    /// The WAL's size on disk, in bytes (`overtime_wal_bytes`).
    pub wal_bytes: u64,
}

impl Metrics {
    /// The metrics of one collector: the SLO engine with `cfg`, and a
    /// registry holding the server's families.
    pub fn new(cfg: SloConfig) -> Self {
        let shared = Arc::new(Shared {
            slo: Mutex::new(Slo::new(cfg)),
            pipeline: Mutex::default(),
            hooks: Mutex::default(),
            incidents: Mutex::default(),
            last_data: Mutex::default(),
            live: Mutex::default(),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector::ServerFamilies(shared.clone())));
        Metrics {
            shared,
            registry: Mutex::new(registry),
        }
    }

    /// Registers a part's families (a Kafka source's, the alert delivery's,
    /// Jira's) in the one registry: `collector` is encoded at every scrape,
    /// after the families registered before it.
    pub fn register(&self, collector: impl Collector) {
        lock(&self.registry).register_collector(Box::new(collector));
    }

    /// The exposition of every registered family (Prometheus text format
    /// 0.0.4), with `live` as what this scrape read from the live state
    /// and the store.
    pub fn encode(&self, live: &LiveGauges) -> Result<String, std::fmt::Error> {
        let registry = lock(&self.registry);
        *lock(&self.shared.live) = live.clone();
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry)?;
        Ok(text)
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
        let mut slo = lock(&self.shared.slo);
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
        *lock(&self.shared.last_data) = Some((crate::pipeline::now_us(), slo.watermark_us()));
    }

    /// Feeds model-server load samples (scraped `[[model_server]]`
    /// metrics) to the fast early warning. Data time is the requests'
    /// (their end times, which may be hours old when logs are replayed)
    /// and a scrape's is the wall clock: a sample is taken only while the
    /// two agree within [`LIVE_SKEW_US`], so a scrape never pushes the SLO
    /// clock past requests still being replayed.
    pub fn observe_server(&self, loads: &[overtime_slo::ServerLoad]) {
        let mut slo = lock(&self.shared.slo);
        let wm = slo.watermark_us();
        let live: Vec<overtime_slo::ServerLoad> = loads
            .iter()
            .filter(|l| wm > 0 && (l.at_us - wm).abs() <= LIVE_SKEW_US)
            .cloned()
            .collect();
        if !live.is_empty() {
            slo.observe_server(&live);
        }
    }

    /// Feeds scraped model-server samples (the `model_server_metrics`
    /// table's rows) to the fast early warning: their queue depth and
    /// KV-cache use (`server_loads`), through [`Metrics::observe_server`].
    pub fn observe_server_metrics(&self, rows: &[overtime_model::MetricSample]) {
        let loads = server_loads(rows);
        if !loads.is_empty() {
            self.observe_server(&loads);
        }
    }

    /// A source refused work before writing because the store pushed back
    /// early ([`RecordSink::backpressure`](overtime_model::RecordSink::backpressure)):
    /// counted in `overtime_backpressure_total` like a refused write.
    pub(crate) fn count_backpressure(&self, source: &str) {
        let mut p = lock(&self.shared.pipeline);
        *p.backpressure.entry(source.to_string()).or_default() += 1;
    }

    /// A stored batch the live diagnosis could not decode back into records
    /// (a schema the model does not know): its rows are durable and
    /// queryable, but no verdict will count them.
    pub(crate) fn count_live_decode_failure(&self, table: &'static str) {
        *lock(&self.shared.pipeline)
            .live_decode_failures
            .entry(table)
            .or_default() += 1;
    }

    /// Counts a sink write of `source` (`file`, `otlp_http`, `otlp_grpc`,
    /// `kafka`…): rows made durable by table, rejected rows by reason, and
    /// `Full` answers as backpressure.
    pub(crate) fn count_write(
        &self,
        source: &str,
        table: Table,
        batch: &RecordBatch,
        result: &Result<(), SinkError>,
    ) {
        let mut p = lock(&self.shared.pipeline);
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
        lock(&self.shared.hooks)
            .rejections
            .push((source.to_string(), Box::new(f)));
    }

    /// Kafka consumer lag by `topic/partition` (as `KafkaStats::lag_by_partition`).
    pub fn register_kafka_lag(
        &self,
        f: impl Fn() -> BTreeMap<String, u64> + Send + Sync + 'static,
    ) {
        lock(&self.shared.hooks).lag.push(Box::new(f));
    }

    /// For an idle collector: once no request completed for `idle_us` of
    /// wall time, data time moves on as the wall clock does from the last
    /// data seen, so windows empty and alerts resolve. While requests keep
    /// completing it does nothing, so replayed logs keep their own time.
    /// Call it periodically with the wall clock (`pipeline::now_us()`).
    pub fn advance_if_idle(&self, wall_now_us: i64, idle_us: i64) {
        let Some((wall, data)) = *lock(&self.shared.last_data) else {
            return;
        };
        let idle = wall_now_us - wall;
        if idle >= idle_us {
            lock(&self.shared.slo).advance_to(data + idle);
        }
    }

    /// The alerts whose conditions hold now (for the alert sender).
    pub fn alerts(&self) -> Vec<Alert> {
        lock(&self.shared.slo).alerts().to_vec()
    }

    /// What the SLO engine remembers over time: chain health of every
    /// complete minute it holds, every alert's firing spans, and the
    /// watermark (data time, µs) they run to.
    pub fn slo_history(
        &self,
    ) -> (
        Vec<overtime_slo::ChainHealth>,
        Vec<overtime_slo::AlertSpan>,
        i64,
    ) {
        let slo = lock(&self.shared.slo);
        (
            slo.chain_health_history(),
            slo.alert_history(),
            slo.watermark_us(),
        )
    }

    /// The SLO view (`GET /api/slo`).
    pub fn slo_snapshot(&self) -> SloSnapshot {
        lock(&self.shared.slo).snapshot()
    }

    /// Updates the incident counters from the current reports.
    pub fn update_incidents(&self, reports: &[IncidentReport]) {
        lock(&self.shared.incidents).update(reports);
    }

    /// Were the incident counters updated within `max_age`? (A scrape
    /// computes the reports itself only when nobody did recently.)
    pub(crate) fn incidents_fresh(&self, max_age: std::time::Duration) -> bool {
        lock(&self.shared.incidents)
            .updated
            .is_some_and(|t| t.elapsed() <= max_age)
    }
}

/// The model servers' queue depth and KV-cache use among scraped samples,
/// as the early warning reads them (the names and the server label as the
/// live diagnosis reads them: [`overtime_diagnose::server_metrics`]).
fn server_loads(rows: &[overtime_model::MetricSample]) -> Vec<overtime_slo::ServerLoad> {
    use overtime_diagnose::server_metrics::{KV_CACHE_USE, QUEUE_DEPTH, server_of};
    rows.iter()
        .filter_map(|s| {
            let queue = QUEUE_DEPTH.contains(&s.name.as_str()).then_some(s.value);
            let kv = KV_CACHE_USE.contains(&s.name.as_str()).then_some(s.value);
            (queue.is_some() || kv.is_some()).then(|| overtime_slo::ServerLoad {
                at_us: s.time_us,
                server: server_of(s),
                queue_depth: queue,
                kv_cache_use: kv,
            })
        })
        .collect()
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

/// `GET /metrics`: the registry encoded now.
pub(crate) async fn get_metrics(State(s): State<Arc<AppState>>) -> Response {
    let encoded = tokio::task::spawn_blocking(move || {
        let live = live_gauges(&s);
        s.metrics.encode(&live).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match encoded {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("overtime: encoding the metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

/// `GET /api/slo`: the live SLO view as JSON (windows, chain health,
/// models, tools, routes, breakers, alerts), with the data time it is at.
pub(crate) async fn get_slo(State(s): State<Arc<AppState>>) -> Response {
    let snap = s.metrics.slo_snapshot();
    let mut doc = serde_json::to_value(&snap).unwrap_or_default();
    doc["watermark"] = overtime_diagnose::verdict::rfc3339(snap.watermark_us).into();
    Json(doc).into_response()
}
