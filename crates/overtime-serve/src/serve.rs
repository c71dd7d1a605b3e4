//! The wiring of `overtime serve`: the store opened (the WAL replayed
//! into the live diagnosis); the sources of the config's one list
//! (file tails, Kafka consumers, the model servers' `/metrics` scrapes,
//! OTLP/HTTP, OTLP/gRPC) bound, then started in one loop
//! ([`crate::start`]) into the diagnosing sink; the periodic
//! jobs spawned ([`crate::schedule`]); the API served until SIGINT or
//! SIGTERM, then everything stopped in order.

use crate::notify::Notifications;
use crate::ready::{self, Bound, ReadyFileError};
use crate::schedule;
use crate::sources::{self, SourceError};
use crate::start::{self, Starting, bind_addr, bound_addr};
use overtime_config::{Config, Secrets};
use overtime_server::Metrics;
use overtime_server::pipeline;
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
    Source(Box<SourceError>),
    /// The store could not be opened (a data dir held by another
    /// process, a corrupt WAL…).
    #[error("opening the store in {}", data_dir.display())]
    Store {
        /// `[store] data_dir`.
        data_dir: PathBuf,
        /// The store's reason.
        #[source]
        source: Box<overtime_store::StoreError>,
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
    Kafka(#[source] Box<overtime_kafka::KafkaSourceError>),
    /// The PostgreSQL wire protocol could not be started (its TLS files…).
    #[error("starting the PostgreSQL wire protocol")]
    Postgres(#[source] Box<overtime_server::pg::PgError>),
    /// The alert and ticket channels could not be started.
    #[error("starting the notifications")]
    Notifications(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The address a listener was bound to could not be read.
    #[error("the address {what} was bound to")]
    BoundAddr {
        /// The listener.
        what: &'static str,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The ready file could not be written or removed.
    #[error(transparent)]
    ReadyFile(#[from] ReadyFileError),
    /// The API stopped with an error.
    #[error("serving the API")]
    Api(#[source] std::io::Error),
}

impl From<SourceError> for ServeError {
    fn from(e: SourceError) -> Self {
        ServeError::Source(Box::new(e))
    }
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
        source: Box::new(source),
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
        // collector holds its spans (docs/kafka.md), also when a dead
        // collector's spans are read by a new owner after the takeover.
        live = live
            .with_peers()
            .with_takeover(peers.takeover().as_millis() as u64);
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
        replayed: Default::default(),
    });
    let since = pipeline::now_us() - d.keep_ms as i64 * 1000;
    pipeline::replay_recent(&state, since).map_err(ServeError::Replay)?;

    const API: &str = "the API";
    const POSTGRES: &str = "the PostgreSQL wire protocol";
    let api = TcpListener::bind(&cfg.server.listen)
        .await
        .map_err(|source| ServeError::Bind {
            what: API,
            addr: cfg.server.listen.clone(),
            source,
        })?;
    let postgres = bind_addr(POSTGRES, &cfg.sql.postgres.listen).await?;
    // Every listener a source needs, bound before any source starts.
    let mut listening = Vec::with_capacity(plan.sources.len());
    for s in plan.sources {
        listening.push(start::bind(s).await?);
    }

    // The sources: one loop over the plan (sources.rs, start.rs).
    let shutdown = CancellationToken::new();
    let mut starting = Starting::new(state.clone(), shutdown.clone(), secrets.otlp_token.clone());
    for l in listening {
        starting.start(l)?;
    }
    // What was bound, port 0 resolved: logged and written to the ready file.
    let bound = Bound {
        api: bound_addr(&api, API)?,
        otlp_http: starting.otlp_http,
        otlp_grpc: starting.otlp_grpc,
        postgres: postgres
            .as_ref()
            .map(|l| bound_addr(l, POSTGRES))
            .transpose()?,
    };
    let mut running = starting.finish();
    if let Some(l) = postgres {
        // TLS files and the catalog are checked here, before ready.
        let pg = overtime_server::pg::PgServer::new(state.clone())
            .map_err(|e| ServeError::Postgres(Box::new(e)))?;
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
        cfg.cluster.sends_slo_alerts(),
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
    start::stop_all(running).await;
    if let Some(p) = ready_file {
        ready::clear(p)?;
    }
    Ok(())
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
