//! The wiring of `overtime serve`: the store opened (the WAL replayed
//! into the live diagnosis); the sources started (file tails, Kafka
//! consumers, OTLP/HTTP, OTLP/gRPC, the model servers' `/metrics`
//! scrapes) into the diagnosing sink; the periodic
//! jobs spawned ([`crate::schedule`]); the API served until SIGINT or
//! SIGTERM, then everything stopped in order.

use crate::notify::Notifications;
use crate::ready::{self, Bound};
use crate::schedule;
use crate::sources::{self, SourceError};
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
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Why the collector did not start, or stopped with an error. Each
/// variant says what was being done; its source says why.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The async runtime could not be started.
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    /// A source of the config could not be built.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The store could not be opened (a data dir held by another
    /// process, a corrupt WAL…).
    #[error("opening the store in {}", data_dir.display())]
    Store {
        /// `[store] data_dir`.
        data_dir: PathBuf,
        /// The store's reason.
        #[source]
        source: overtime_store::StoreError,
    },
    /// The WAL's recent records could not be replayed into the live
    /// diagnosis.
    #[error("replaying the WAL: {0}")]
    Replay(String),
    /// A listener could not be bound (an address in use, a bad address).
    #[error("binding {what} on {addr}")]
    Bind {
        /// The listener (`the API`, `OTLP/HTTP`…).
        what: &'static str,
        /// The address from the config.
        addr: String,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A Kafka consumer could not be started.
    #[error("starting a Kafka consumer")]
    Kafka(#[source] overtime_kafka::KafkaSourceError),
    /// The PostgreSQL wire protocol could not be started (its TLS files…).
    #[error("starting the PostgreSQL wire protocol")]
    Postgres(#[source] overtime_server::pg::PgError),
    /// The alert and ticket channels could not be started.
    #[error("starting the notifications")]
    Notifications(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The ready file could not be written or removed.
    #[error(transparent)]
    ReadyFile(#[from] ReadyFileError),
    /// The API stopped with an error.
    #[error("serving the API")]
    Api(#[source] std::io::Error),
}

/// Runs the collector with `cfg` until a signal stops it, on a runtime of
/// its own (for a caller without one: the binary). With `ready_file`, the
/// bound addresses are written there once it is ready ([`crate::ready`]).
pub fn run(cfg: Config, ready_file: Option<&Path>) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(serve(cfg, ready_file))
}

/// What runs, kept to stop it in order.
struct Running {
    tails: Vec<FileTail>,
    consumers: Vec<KafkaSource>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn bind(what: &'static str, addr: &str) -> Result<Option<TcpListener>, ServeError> {
    if addr.is_empty() {
        return Ok(None);
    }
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind {
            what,
            addr: addr.to_string(),
            source,
        })?;
    Ok(Some(l))
}

/// The address `l` was bound to (port 0 resolved).
fn bound_addr(
    what: &'static str,
    addr: &str,
    l: &TcpListener,
) -> Result<std::net::SocketAddr, ServeError> {
    l.local_addr().map_err(|source| ServeError::Bind {
        what,
        addr: addr.to_string(),
        source,
    })
}

/// Runs the collector with `cfg` on the current runtime until SIGINT or
/// SIGTERM, then stops everything in order.
pub(crate) async fn serve(cfg: Config, ready_file: Option<&Path>) -> Result<(), ServeError> {
    // A ready file of an earlier run must not be taken for this one's.
    if let Some(p) = ready_file {
        ready::clear(p)?;
    }
    let secrets = Secrets::from_env(&cfg);
    let plan = sources::plan(&cfg)?;
    let store = Store::open(cfg.store.clone()).map_err(|source| ServeError::Store {
        data_dir: cfg.store.data_dir.clone(),
        source,
    })?;
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
    pipeline::replay_recent(&state, since).map_err(ServeError::Replay)?;

    const API: &str = "the API";
    const OTLP_HTTP: &str = "OTLP/HTTP";
    const OTLP_GRPC: &str = "OTLP/gRPC";
    const POSTGRES: &str = "the PostgreSQL wire protocol";
    let api = TcpListener::bind(&cfg.server.listen)
        .await
        .map_err(|source| ServeError::Bind {
            what: API,
            addr: cfg.server.listen.clone(),
            source,
        })?;
    let otlp_http = bind(OTLP_HTTP, &cfg.otlp.http_listen).await?;
    let otlp_grpc = bind(OTLP_GRPC, &cfg.otlp.grpc_listen).await?;
    let postgres = bind(POSTGRES, &cfg.sql.postgres.listen).await?;
    // What was bound, port 0 resolved: logged and written to the ready file.
    let bound_of = |what, addr: &str, l: &Option<TcpListener>| {
        l.as_ref().map(|l| bound_addr(what, addr, l)).transpose()
    };
    let bound = Bound {
        api: bound_addr(API, &cfg.server.listen, &api)?,
        otlp_http: bound_of(OTLP_HTTP, &cfg.otlp.http_listen, &otlp_http)?,
        otlp_grpc: bound_of(OTLP_GRPC, &cfg.otlp.grpc_listen, &otlp_grpc)?,
        postgres: bound_of(POSTGRES, &cfg.sql.postgres.listen, &postgres)?,
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
        let c =
            spawn_kafka_source(k, sink("kafka"), shutdown.clone()).map_err(ServeError::Kafka)?;
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
        let pg = overtime_server::pg::PgServer::new(state.clone()).map_err(ServeError::Postgres)?;
        let stop = shutdown.clone();
        running.tasks.push(tokio::spawn(
            pg.serve(l, async move { stop.cancelled().await }),
        ));
    }
    let notes = Notifications::start(&cfg).map_err(|e| ServeError::Notifications(e.into()))?;
    // Delivery counters, read at each scrape.
    notes.register_metrics(&state.metrics);
    running.tasks.push(tokio::spawn(schedule::periodic(
        state.clone(),
        notes,
        d.grace_ms,
        shutdown.clone(),
    )));
    state.ready.store(true, Ordering::Relaxed);
    tracing::info!(
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
        .map_err(ServeError::Api)?;
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
        tracing::error!("overtime: {what} receiver stopped: {e}");
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
            tracing::error!("overtime: a file tail stopped with an error: {e}");
        }
    }
    for c in running.consumers {
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || c.join()).await {
            tracing::error!("overtime: a Kafka consumer stopped with an error: {e}");
        }
    }
}
