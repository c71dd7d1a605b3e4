//! The PostgreSQL front door (`[sql.postgres]`, docs/postgres.md): the
//! SQL of `POST /api/sql` over the PostgreSQL wire protocol, for psql,
//! Grafana's PostgreSQL data source, DBeaver and other JDBC tools,
//! psycopg and pandas.
//!
//! Built on `datafusion-postgres` (its `pgwire` protocol server,
//! `datafusion-pg-catalog`'s `pg_catalog` and SQL rewriting, `arrow-pg`'s
//! encoding, its `SET`/`SHOW`/transaction hooks); what is ours is the
//! session each query runs in and its bounds ([`crate::sql`]), the
//! password (the API token, [`auth`]) and the listener.
//!
//! Design rules:
//! - **Two front doors, one engine**: every query goes through
//!   [`crate::sql::run_with_params`] in the session `POST /api/sql` uses
//!   ([`handler`]); both answer with the same rows.
//! - **Hostile clients cost little.** At most `max_connections` at once;
//!   one more is closed at once and counted. A connection must sign in
//!   within a minute (pgwire's startup timeout) and may send nothing
//!   before it does but a startup message of at most 10 000 bytes; a
//!   message that does not decode closes its connection; a wrong password
//!   closes it and is counted; a query is bounded like any other, and a
//!   `CancelRequest` (or the client going away) stops it.
//! - **Bound before ready.** `overtime serve` binds the listener before it
//!   says it is ready, and names the bound address in the ready file.

mod auth;
mod catalog;
mod handler;
mod stats;

pub use stats::{PgCollector, PgStats};

use crate::AppState;
use crate::sql;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::pgwire;
use handler::{Door, Engine};
use pgwire::api::auth::DefaultServerParameterProvider;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::{ConnectionManager, PgWireServerHandlers, RandomPidSecretKeyGenerator};
use pgwire::tokio::tokio_rustls::rustls;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use tokio::net::TcpListener;

/// Why the front door could not start: its TLS files, or the catalog.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// A TLS file could not be read or holds no usable certificate or key.
    #[error("[sql.postgres] TLS: {0}")]
    Tls(String),
    /// The template session or its `pg_catalog` could not be built.
    #[error("[sql.postgres] catalog: {0}")]
    Catalog(String),
}

/// The front door, ready to serve a listener ([`PgServer::serve`]).
pub struct PgServer {
    handlers: Arc<Handlers>,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    max_connections: usize,
    stats: Arc<PgStats>,
}

struct Handlers {
    door: Arc<Door>,
    startup: Arc<auth::TokenStartup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.door.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.door.clone()
    }
    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }
    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

impl PgServer {
    /// The front door over `state` with `state.sql.postgres`' TLS and
    /// connection bound; its counters registered on `/metrics`.
    pub fn new(state: Arc<AppState>) -> Result<PgServer, PgError> {
        let cfg = state.sql.postgres.clone();
        let tls = (!cfg.tls_cert.is_empty())
            .then(|| tls_acceptor(&cfg.tls_cert, &cfg.tls_key))
            .transpose()?;
        let stats = Arc::new(PgStats::default());
        state.metrics.register(stats.collector());
        let catalog_err = |e: &dyn std::fmt::Display| PgError::Catalog(e.to_string());
        let template = sql::session_with_peers(&state.store, &[], &[], &state.sql, None)
            .map_err(|e| catalog_err(&e))?;
        let catalog = catalog::PgCatalog::new(&template).map_err(|e| catalog_err(&e))?;
        let engine = Engine {
            state: state.clone(),
            catalog,
            template,
            scratch: datafusion::prelude::SessionContext::new(),
            parser: Default::default(),
            hooks: vec![Arc::new(SetShowHook), Arc::new(TransactionStatementHook)],
            stats: stats.clone(),
        };
        engine
            .prepare(&engine.template)
            .map_err(|e| catalog_err(&e))?;
        let manager = Arc::new(ConnectionManager::new());
        // Non-exhaustive: pgwire's defaults, then ours.
        let mut params = DefaultServerParameterProvider::default();
        params.server_version = format!("{} (overtime)", catalog::SERVER_VERSION);
        params.default_transaction_read_only = true;
        params.is_superuser = false;
        let startup = auth::TokenStartup {
            token: state.token.clone(),
            tls_required: tls.is_some(),
            manager: manager.clone(),
            keys: RandomPidSecretKeyGenerator::default(),
            params,
            stats: stats.clone(),
        };
        Ok(PgServer {
            handlers: Arc::new(Handlers {
                door: Arc::new(Door(Arc::new(engine))),
                startup: Arc::new(startup),
                cancel: Arc::new(DefaultCancelHandler::new(manager)),
            }),
            tls,
            max_connections: cfg.max_connections.max(1),
            stats,
        })
    }

    /// The counters it keeps (also on `/metrics`).
    pub fn stats(&self) -> Arc<PgStats> {
        self.stats.clone()
    }

    /// Serves `listener` until `stop` resolves; each connection on a task
    /// of its own, at most `max_connections` at once.
    pub async fn serve(self, listener: TcpListener, stop: impl std::future::Future<Output = ()>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.max_connections));
        tokio::pin!(stop);
        loop {
            let accepted = tokio::select! {
                _ = &mut stop => break,
                a = listener.accept() => a,
            };
            let socket = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: wait, go on.
                    tracing::error!("overtime: PostgreSQL listener: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                self.stats.refused_too_many.fetch_add(1, Relaxed);
                drop(socket);
                continue;
            };
            let (handlers, tls) = (self.handlers.clone(), self.tls.clone());
            tokio::spawn(async move {
                let _slot = slot;
                // A connection that breaks the protocol just ends.
                let _ = pgwire::tokio::process_socket(socket, tls, handlers).await;
            });
        }
    }
}

/// A TLS acceptor over a PEM certificate chain and key (ring's provider,
/// TLS 1.2 and 1.3).
fn tls_acceptor(cert: &str, key: &str) -> Result<pgwire::tokio::TlsAcceptor, PgError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| PgError::Tls(format!("{cert}: {e}")))?;
    if certs.is_empty() {
        return Err(PgError::Tls(format!("{cert}: no certificate")));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| PgError::Tls(format!("{key}: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| PgError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| PgError::Tls(e.to_string()))?;
    // libpq 17's direct TLS (sslnegotiation=direct) asks for this ALPN.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}
