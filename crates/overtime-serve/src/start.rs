//! Starting the planned sources ([`crate::sources::Source`]): each kind
//! started the way its crate says, writing to a sink labelled with its
//! kind (so `/metrics` tells them apart); what runs is kept to be stopped
//! in order, and each kind's counters are registered once for all of its
//! instances.
//!
//! Design rules:
//! - Bound before started: [`bind`] opens every listener a source needs
//!   (the OTLP receivers') before any source starts, so a port in use
//!   stops `serve` with nothing running yet.
//! - One arm per kind of source in [`Starting::start`]; `serve` is a loop
//!   over the plan.
//! - A source that stops with an error is said once, as a `tracing`
//!   event, and the others go on.

use crate::serve::ServeError;
use crate::sources::Source;
use overtime_ingest::file_tail::{FileTail, spawn_file_tail};
use overtime_ingest::otlp::{OtlpStats, serve_otlp_grpc_on, serve_otlp_http_on};
use overtime_ingest::scrape::{ScrapeCollector, ScrapeStats, Scraper};
use overtime_kafka::{KafkaSource, LabeledStats, spawn_kafka_source};
use overtime_server::AppState;
use overtime_server::pipeline::SourceSink;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A planned source with the listeners it needs, bound.
pub(crate) struct Listening {
    source: Source,
    http: Option<TcpListener>,
    grpc: Option<TcpListener>,
}

/// Binds `what` on `addr`; an empty address is a listener turned off.
pub(crate) async fn bind_addr(
    what: &'static str,
    addr: &str,
) -> Result<Option<TcpListener>, ServeError> {
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
pub(crate) fn bound_addr(l: &TcpListener, what: &'static str) -> Result<SocketAddr, ServeError> {
    l.local_addr()
        .map_err(|source| ServeError::BoundAddr { what, source })
}

/// Binds what `source` listens on.
pub(crate) async fn bind(source: Source) -> Result<Listening, ServeError> {
    let (http, grpc) = match &source {
        Source::Otlp(o) => (
            bind_addr(OTLP_HTTP, &o.http_listen).await?,
            bind_addr(OTLP_GRPC, &o.grpc_listen).await?,
        ),
        Source::File(_) | Source::Kafka(_) | Source::ModelServer(_) => (None, None),
    };
    Ok(Listening { source, http, grpc })
}

const OTLP_HTTP: &str = "OTLP/HTTP";
const OTLP_GRPC: &str = "OTLP/gRPC";

/// What runs, kept to stop it in order.
#[derive(Default)]
pub(crate) struct Running {
    tails: Vec<FileTail>,
    consumers: Vec<KafkaSource>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The sources being started: where they write, when they stop, and what
/// each kind leaves to register.
pub(crate) struct Starting {
    state: Arc<AppState>,
    shutdown: CancellationToken,
    otlp_token: Option<String>,
    running: Running,
    kafka: Vec<LabeledStats>,
    scraped: Vec<Arc<ScrapeStats>>,
    /// The OTLP/HTTP receiver's bound address, once started.
    pub(crate) otlp_http: Option<SocketAddr>,
    /// The OTLP/gRPC receiver's bound address, once started.
    pub(crate) otlp_grpc: Option<SocketAddr>,
}

impl Starting {
    /// Sources writing to `state`'s store and live diagnosis until
    /// `shutdown`; the OTLP receivers ask for `otlp_token`.
    pub(crate) fn new(
        state: Arc<AppState>,
        shutdown: CancellationToken,
        otlp_token: Option<String>,
    ) -> Self {
        Starting {
            state,
            shutdown,
            otlp_token,
            running: Running::default(),
            kafka: Vec::new(),
            scraped: Vec::new(),
            otlp_http: None,
            otlp_grpc: None,
        }
    }

    /// A sink counted under `label` in `/metrics`.
    fn sink(&self, label: &'static str) -> Arc<SourceSink> {
        Arc::new(SourceSink {
            state: self.state.clone(),
            source: label,
        })
    }

    /// Starts one source.
    pub(crate) fn start(&mut self, l: Listening) -> Result<(), ServeError> {
        let stop = self.shutdown.clone();
        match l.source {
            Source::File(f) => {
                let tail = spawn_file_tail(f, self.sink("file"), stop);
                self.running.tails.push(tail);
            }
            Source::Kafka(k) => {
                let (group, brokers) = (k.group_id.clone(), k.brokers.clone());
                let c = spawn_kafka_source(k, self.sink("kafka"), stop)
                    .map_err(|e| ServeError::Kafka(Box::new(e)))?;
                let stats = c.stats().clone();
                self.kafka.push(LabeledStats {
                    group,
                    brokers,
                    stats: stats.clone(),
                });
                self.state
                    .metrics
                    .register_kafka_lag(move || stats.lag_by_partition());
                self.running.consumers.push(c);
            }
            Source::ModelServer(m) => {
                // Scraped into the store (and so into the live diagnosis)
                // every interval.
                let scraper = Scraper::new(m, self.sink("model_server"));
                self.scraped.push(scraper.stats());
                self.running.tasks.push(tokio::spawn(scraper.run(stop)));
            }
            Source::Otlp(o) => self.start_otlp(&o, l.http, l.grpc)?,
        }
        Ok(())
    }

    fn start_otlp(
        &mut self,
        settings: &overtime_ingest::otlp::OtlpSettings,
        http: Option<TcpListener>,
        grpc: Option<TcpListener>,
    ) -> Result<(), ServeError> {
        let stats = Arc::new(OtlpStats::default());
        {
            // Whole bodies refused before any span reaches a sink
            // (span-level rejections are counted by the sinks).
            let s = stats.clone();
            self.state
                .metrics
                .register_rejections("otlp_http", move || {
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
        let cfg = settings.build(self.otlp_token.clone());
        if let Some(l) = http {
            self.otlp_http = Some(bound_addr(&l, OTLP_HTTP)?);
            let sink = self.sink("otlp_http");
            let work =
                serve_otlp_http_on(l, sink, stats.clone(), cfg.clone(), self.shutdown.clone());
            self.running
                .tasks
                .push(tokio::spawn(report_failure(OTLP_HTTP, work)));
        }
        if let Some(l) = grpc {
            self.otlp_grpc = Some(bound_addr(&l, OTLP_GRPC)?);
            let sink = self.sink("otlp_grpc");
            let work = serve_otlp_grpc_on(l, sink, stats, cfg, self.shutdown.clone());
            self.running
                .tasks
                .push(tokio::spawn(report_failure(OTLP_GRPC, work)));
        }
        Ok(())
    }

    /// Every kind's counters registered once; what runs, to be stopped.
    pub(crate) fn finish(self) -> Running {
        if !self.kafka.is_empty() {
            self.state
                .metrics
                .register(overtime_kafka::KafkaCollector::new(self.kafka));
        }
        if !self.scraped.is_empty() {
            self.state.metrics.register(ScrapeCollector {
                servers: self.scraped,
            });
        }
        self.running
    }
}

async fn report_failure<E: std::fmt::Display>(
    what: &'static str,
    work: impl std::future::Future<Output = Result<(), E>>,
) {
    if let Err(e) = work.await {
        tracing::error!("overtime: {what} receiver stopped: {e}");
    }
}

/// Waits for every task, then joins the tails and the consumers.
pub(crate) async fn stop_all(running: Running) {
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
