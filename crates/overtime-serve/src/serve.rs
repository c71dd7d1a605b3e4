//! The wiring of `overtime serve`: the store opened (the WAL replayed
//! into the live diagnosis); the sources started (file tails, Kafka
//! consumers, OTLP/HTTP, OTLP/gRPC, the model servers' `/metrics`
//! scrapes) into the diagnosing sink; the periodic
//! jobs spawned ([`crate::schedule`]); the API served until SIGINT or
//! SIGTERM, then everything stopped in order.

use crate::notify::Notifications;
use crate::ready::{self, Bound};
use crate::{schedule, sources};
use anyhow::{Context, Result};
use overtime_config::{Config, Secrets};
use overtime_ingest::file_tail::{FileTail, spawn_file_tail};
use overtime_ingest::otlp::{OtlpStats, serve_otlp_grpc_on, serve_otlp_http_on};
use overtime_ingest::scrape::{ScrapeCollector, Scraper};
use overtime_kafka::{KafkaSource, spawn_kafka_source};
use overtime_model::RecordSink;
use overtime_server::Metrics;
use overtime_server::pipeline::{self, SourceSink};
use overtime_server::{AppState, router};
use overtime_store::Store;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Runs the collector with `cfg` until a signal stops it, on a runtime of
/// its own (for a caller without one: the binary). With `ready_file`, the
/// bound addresses are written there once it is ready ([`crate::ready`]).
pub fn run(cfg: Config, ready_file: Option<&Path>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(cfg, ready_file))
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

/// Runs the collector with `cfg` on the current runtime until SIGINT or
/// SIGTERM, then stops everything in order.
pub(crate) async fn serve(cfg: Config, ready_file: Option<&Path>) -> Result<()> {
    // A ready file of an earlier run must not be taken for this one's.
    if let Some(p) = ready_file {
        ready::clear(p)?;
    }
    let secrets = Secrets::from_env(&cfg);
    let plan = sources::plan(&cfg)?;
    let store = Store::open(cfg.store.clone())
        .with_context(|| format!("opening the store in {}", cfg.store.data_dir.display()))?;
    let d = &cfg.diagnose;
    let peers = overtime_server::Peers::new(
        &cfg.cluster,
        secrets.api_token.clone(),
        store.collector_id(),
    );
    let mut live = d.live(plan.diagnose.clone());
    if !peers.is_empty() {
        // Records keyed by request id meet their trace on whichever
        // collector holds its spans (docs/kafka.md).
        live = live.with_peers();
    }
    let state = Arc::new(AppState {
        live: Mutex::new(live),
        store: Arc::new(store),
        diagnose: plan.diagnose.clone(),
        sql: cfg.sql.clone(),
        token: secrets.api_token.clone(),
        ready: AtomicBool::new(false),
        metrics: Metrics::new(cfg.slo.clone()),
        peers: Arc::new(peers),
        cluster: Mutex::new(Default::default()),
    });
    let since = pipeline::now_us() - d.keep_ms as i64 * 1000;
    pipeline::replay_recent(&state, since)
        .map_err(|e| anyhow::anyhow!("replaying the WAL: {e}"))?;

    let api = TcpListener::bind(&cfg.server.listen)
        .await
        .with_context(|| format!("binding the API on {}", cfg.server.listen))?;
    let otlp_http = bind("OTLP/HTTP", &cfg.otlp.http_listen).await?;
    let otlp_grpc = bind("OTLP/gRPC", &cfg.otlp.grpc_listen).await?;
    let postgres = bind("the PostgreSQL wire protocol", &cfg.sql.postgres.listen).await?;
    // What was bound, port 0 resolved: logged and written to the ready file.
    let bound = Bound {
        api: api.local_addr().context("the API's bound address")?,
        otlp_http: otlp_http.as_ref().map(|l| l.local_addr()).transpose()?,
        otlp_grpc: otlp_grpc.as_ref().map(|l| l.local_addr()).transpose()?,
        postgres: postgres.as_ref().map(|l| l.local_addr()).transpose()?,
    };

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
    // The model servers' /metrics, scraped into the store (and so into the
    // live diagnosis) every interval; their counters in /metrics.
    let mut scraped = Vec::new();
    for m in &cfg.model_servers {
        let scraper = Scraper::new(m.clone(), sink("model_server"));
        scraped.push(scraper.stats());
        running
            .tasks
            .push(tokio::spawn(scraper.run(shutdown.clone())));
    }
    if !scraped.is_empty() {
        state.metrics.register(ScrapeCollector { servers: scraped });
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
    if let Some(l) = postgres {
        // TLS files and the catalog are checked here, before ready.
        let pg = overtime_server::pg::PgServer::new(state.clone())
            .context("starting the PostgreSQL wire protocol")?;
        let stop = shutdown.clone();
        running.tasks.push(tokio::spawn(
            pg.serve(l, async move { stop.cancelled().await }),
        ));
    }
    let notes = Notifications::start(&cfg)?;
    // Delivery counters, read at each scrape.
    notes.register_metrics(&state.metrics);
    running.tasks.push(tokio::spawn(schedule::periodic(
        state.clone(),
        notes,
        d.grace_ms,
        cfg.cluster.sends_slo_alerts(),
        shutdown.clone(),
    )));
    state.ready.store(true, Ordering::Relaxed);
    eprintln!(
        "overtime: serving on {bound}, data in {}",
        cfg.store.data_dir.display()
    );
    if let Some(p) = ready_file {
        ready::write(p, &bound)?;
    }
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
    if let Some(p) = ready_file {
        ready::clear(p)?;
    }
    Ok(())
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
