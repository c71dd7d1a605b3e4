//! `overtime serve`: the config read once and passed down; the store
//! opened (the WAL replayed into the live diagnosis); the sources started
//! (file tails, Kafka consumers, OTLP/HTTP, OTLP/gRPC) into the diagnosing
//! sink; the periodic jobs run (verdicts, retention); the API served until
//! SIGINT or SIGTERM, then everything stopped in order.
//!
//! Every listener is bound before the service says it is ready, so a port
//! in use is a startup error, not a log line an SRE never sees.
//!
//! Wiring only: each config section is its component's own type, and its
//! `build()` makes what the component runs with (the store's config is
//! used as it is); nothing here copies a field from one struct to another.

mod notify;
mod sources;

use anyhow::{Context, Result};
use overtime_config::{Config, Secrets};
use overtime_diagnose::DiagnoseConfig;
use overtime_ingest::file_tail::{FileTail, spawn_file_tail};
use overtime_ingest::otlp::{OtlpStats, serve_otlp_grpc_on, serve_otlp_http_on};
use overtime_kafka::{KafkaSource, spawn_kafka_source};
use overtime_model::RecordSink;
use overtime_server::metrics::Metrics;
use overtime_server::pipeline::{self, SourceSink};
use overtime_server::{AppState, router};
use overtime_store::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Runs the collector with the config at `config` (the embedded default
/// without one) until a signal stops it.
pub fn run(config: Option<PathBuf>) -> Result<()> {
    // A config that cannot be read, parsed or accepted is a usage error:
    // one line, exit 2.
    let cfg = match &config {
        Some(p) => Config::load(p).map_err(|e| crate::UsageError(e.to_string()))?,
        None => Config::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(cfg))
}

/// The diagnosis configuration the collector runs with (gateway layers
/// from the file and Kafka sources, in config order).
pub fn diagnose_config(cfg: &Config) -> Result<DiagnoseConfig> {
    Ok(sources::plan(cfg)?.diagnose)
}

/// What runs, kept to stop it in order.
struct Running {
    tails: Vec<FileTail>,
    consumers: Vec<KafkaSource>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn bind(what: &str, addr: &str) -> Result<Option<TcpListener>> {
    if addr.is_empty() {
        return Ok(None);
    }
    let l = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {what} on {addr}"))?;
    Ok(Some(l))
}

async fn serve(cfg: Config) -> Result<()> {
    let secrets = Secrets::from_env(&cfg);
    let plan = sources::plan(&cfg)?;
    let store = Store::open(cfg.store.clone())
        .with_context(|| format!("opening the store in {}", cfg.store.data_dir.display()))?;
    let d = &cfg.diagnose;
    let state = Arc::new(AppState {
        live: Mutex::new(d.live(plan.diagnose.clone())),
        store: Arc::new(store),
        diagnose: plan.diagnose.clone(),
        sql: cfg.sql.clone(),
        token: secrets.api_token.clone(),
        ready: AtomicBool::new(false),
        metrics: Metrics::new(cfg.slo.clone()),
    });
    let since = pipeline::now_us() - d.keep_ms as i64 * 1000;
    pipeline::replay_recent(&state, since)
        .map_err(|e| anyhow::anyhow!("replaying the WAL: {e}"))?;

    let api = TcpListener::bind(&cfg.server.listen)
        .await
        .with_context(|| format!("binding the API on {}", cfg.server.listen))?;
    let otlp_http = bind("OTLP/HTTP", &cfg.otlp.http_listen).await?;
    let otlp_grpc = bind("OTLP/gRPC", &cfg.otlp.grpc_listen).await?;

    // One sink per kind of source, so /metrics tells them apart.
    let sink = |source: &'static str| -> Arc<dyn RecordSink> {
        Arc::new(SourceSink {
            state: state.clone(),
            source,
        })
    };
    let shutdown = CancellationToken::new();
    let mut running = Running {
        tails: Vec::new(),
        consumers: Vec::new(),
        tasks: Vec::new(),
    };
    for f in plan.files {
        running
            .tails
            .push(spawn_file_tail(f, sink("file"), shutdown.clone()));
    }
    // Every source's counters in one collector: each family declared once.
    let mut kafka_stats = Vec::new();
    for k in plan.kafka {
        let (group, brokers) = (k.group_id.clone(), k.brokers.clone());
        let c = spawn_kafka_source(k, sink("kafka"), shutdown.clone())
            .context("starting a Kafka consumer")?;
        let stats = c.stats().clone();
        kafka_stats.push(overtime_kafka::LabeledStats {
            group,
            brokers,
            stats: stats.clone(),
        });
        state
            .metrics
            .register_kafka_lag(move || stats.lag_by_partition());
        running.consumers.push(c);
    }
    if !kafka_stats.is_empty() {
        state
            .metrics
            .register(overtime_kafka::KafkaCollector::new(kafka_stats));
    }
    let otlp_stats = Arc::new(OtlpStats::default());
    {
        // Whole bodies refused before any span reaches a sink (span-level
        // rejections are counted by the sinks).
        let s = otlp_stats.clone();
        state.metrics.register_rejections("otlp_http", move || {
            use std::sync::atomic::Ordering::Relaxed;
            [
                ("bad_request".to_string(), s.bad_requests.load(Relaxed)),
                ("too_large".to_string(), s.too_large.load(Relaxed)),
                ("unsupported".to_string(), s.unsupported.load(Relaxed)),
                ("unauthorized".to_string(), s.unauthorized.load(Relaxed)),
            ]
            .into()
        });
    }
    let otlp_cfg = cfg.otlp.build(secrets.otlp_token.clone());
    if let Some(l) = otlp_http {
        let work = serve_otlp_http_on(
            l,
            sink("otlp_http"),
            otlp_stats.clone(),
            otlp_cfg.clone(),
            shutdown.clone(),
        );
        running
            .tasks
            .push(tokio::spawn(report_failure("OTLP/HTTP", work)));
    }
    if let Some(l) = otlp_grpc {
        let work = serve_otlp_grpc_on(
            l,
            sink("otlp_grpc"),
            otlp_stats.clone(),
            otlp_cfg,
            shutdown.clone(),
        );
        running
            .tasks
            .push(tokio::spawn(report_failure("OTLP/gRPC", work)));
    }
    let notes = notify::Notifications::start(&cfg)?;
    // Delivery counters, read at each scrape.
    notes.register_metrics(&state.metrics);
    running.tasks.push(tokio::spawn(periodic(
        state.clone(),
        notes,
        d.grace_ms,
        shutdown.clone(),
    )));
    state.ready.store(true, Ordering::Relaxed);
    eprintln!(
        "overtime: serving on http://{} (OTLP/HTTP {}, OTLP/gRPC {}), data in {}",
        api.local_addr()?,
        or_off(&cfg.otlp.http_listen),
        or_off(&cfg.otlp.grpc_listen),
        cfg.store.data_dir.display()
    );
    let stop = shutdown.clone();
    axum::serve(api, router(state.clone()))
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = stop_signal() => {}
                _ = stop.cancelled() => {}
            }
            stop.cancel();
        })
        .await
        .context("serving the API")?;
    shutdown.cancel();
    stop_all(running).await;
    Ok(())
}

fn or_off(addr: &str) -> &str {
    if addr.is_empty() { "off" } else { addr }
}

async fn report_failure<E: std::fmt::Display>(
    what: &'static str,
    work: impl std::future::Future<Output = Result<(), E>>,
) {
    if let Err(e) = work.await {
        eprintln!("overtime: {what} receiver stopped: {e}");
    }
}

/// SIGINT (Ctrl-C) or SIGTERM (systemd, Kubernetes, docker stop).
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Verdicts every half second; incidents announced every 2 s (sooner
/// after new verdicts);
/// retention every hour.
async fn periodic(
    state: Arc<AppState>,
    mut notes: notify::Notifications,
    grace_ms: u64,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(Duration::from_millis(500));
    let mut last_retention = Instant::now();
    let mut last_notes = Instant::now();
    // The SLOs run on data time; with no traffic for this long it moves to
    // the wall clock (so an idle collector's windows drain).
    let idle_us = grace_ms as i64 * 1000 + 5_000_000;
    while !shutdown.is_cancelled() {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => break,
        }
        let s = state.clone();
        let fresh = tokio::task::spawn_blocking(move || pipeline::tick(&s))
            .await
            .unwrap_or(0);
        // Every 2 s, and sooner when verdicts just came: a new incident is
        // paged within about a second of its first verdict.
        let since = last_notes.elapsed();
        if since >= Duration::from_secs(2) || (fresh > 0 && since >= Duration::from_millis(900)) {
            let s = state.clone();
            let incidents = tokio::task::spawn_blocking(move || {
                s.live.lock().expect("live state lock").incidents()
            })
            .await
            .unwrap_or_default();
            state.metrics.update_incidents(&incidents);
            notes.incidents(&incidents);
            state.metrics.advance_if_idle(pipeline::now_us(), idle_us);
            notes.slo_alerts(
                state
                    .metrics
                    .alerts()
                    .iter()
                    .map(notify::to_alert)
                    .collect(),
            );
            last_notes = Instant::now();
        }
        if last_retention.elapsed() >= Duration::from_secs(3600) {
            let s = state.clone();
            let _ =
                tokio::task::spawn_blocking(move || s.store.enforce_retention(pipeline::now_us()))
                    .await;
            last_retention = Instant::now();
        }
    }
    notes.shutdown().await;
}

async fn stop_all(running: Running) {
    for t in running.tasks {
        let _ = t.await;
    }
    for t in running.tails {
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || t.join()).await {
            eprintln!("overtime: a file tail stopped with an error: {e}");
        }
    }
    for c in running.consumers {
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || c.join()).await {
            eprintln!("overtime: a Kafka consumer stopped with an error: {e}");
        }
    }
}
