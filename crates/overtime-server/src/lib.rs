//! # overtime-server
//!
//! The HTTP API of `overtime serve` (docs/interfaces.md) over the live diagnosis and
//! the store: `/api/traces`, `/api/traces/{id}`, `/api/incidents`,
//! `/api/incidents/{id}`, `POST /api/sql`, `/healthz`, `/readyz`,
//! `GET /api/advice` and `POST /api/whatif`, the Jaeger query API under
//! `/jaeger` (for Grafana's trace view); optional bearer token on
//! everything but health; JSON errors with a reason. `/metrics`
//! (Prometheus) and `/api/slo` come from [`Metrics`]. The UI
//! (`overtime-ui`) at `/`, its sign-in and its events endpoint are mounted
//! by the same [`router`].
//!
//! What other crates use:
//! - [`AppState`] and [`router`]: what `overtime serve` shares with the
//!   handlers, and the routes over it;
//! - [`pipeline`]: the sinks the sources write to and the periodic tick of
//!   the live diagnosis;
//! - [`sql`]: the bounded, read-only SQL of `POST /api/sql` and
//!   `overtime query`, with its limits in [`SqlConfig`] (`[sql]`);
//! - [`pg`]: the same SQL over the PostgreSQL wire protocol
//!   ([`PostgresConfig`], `[sql.postgres]`);
//! - [`Metrics`] (with [`LiveGauges`]): `/metrics` and `/api/slo`, where
//!   the other parts register their families;
//! - [`ClusterConfig`] (`[cluster]`), [`Peers`] and what one query learns
//!   of them ([`PeerQuery`], [`PeerReport`], [`Unanswered`]), and the
//!   [`PEERS_HEADER`] an Arrow answer carries that report in (and
//!   [`TRUNCATED_HEADER`], its flag for a result cut at `max_rows`).

#![warn(missing_docs)]

mod advice_api;
mod api;
mod auth;
mod charts_api;
mod cluster;
mod cluster_join;
mod cluster_view;
mod error;
mod jaeger;
mod metrics;
pub mod pg;
pub mod pipeline;
mod replay;
pub mod sql;
mod sql_config;
mod sql_guard;
mod store_health;
mod store_query;
mod tables;
mod traces_api;
mod ui_routes;

pub use api::{PEERS_HEADER, TRUNCATED_HEADER};
pub use cluster::{ClusterConfig, PeerQuery, PeerReport, Peers, SloAlertsFrom, Unanswered};
pub use cluster_view::{ClusterView, Holder, fingerprint_owner, refresh_peers};
pub use jaeger::model::{jaeger_trace, jaeger_trace_id};
pub use jaeger::params::go_duration_us as jaeger_go_duration_us;
pub use metrics::{LiveGauges, Metrics};
pub use replay::Replayed;
pub use sql_config::{PostgresConfig, SqlConfig};

use axum::Router;
use axum::routing::{get, post};
use overtime_diagnose::DiagnoseConfig;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_store::Store;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Everything the handlers share.
pub struct AppState {
    /// The live diagnosis: what the sinks show it ([`pipeline`]), the
    /// verdicts and incidents the trace and incident endpoints list.
    pub live: Mutex<LiveDiagnoser>,
    /// The durable store the sinks write to and SQL, trace lookup and
    /// advice read.
    pub store: Arc<Store>,
    /// How a trace found only in the store is diagnosed
    /// (`GET /api/traces/{id}`) and how advice assembles its window.
    pub diagnose: DiagnoseConfig,
    /// The bounds of `POST /api/sql` (`[sql]`).
    pub sql: SqlConfig,
    /// The bearer token every route but `/healthz` and `/readyz` needs;
    /// `None`: no token, every route is open.
    pub token: Option<String>,
    /// Whether `/readyz` may answer 200: false while the WAL is being
    /// replayed at start.
    pub ready: AtomicBool,
    /// `/metrics` and `/api/slo`: SLOs, totals, pipeline health.
    pub metrics: Metrics,
    /// The other collectors sharing the bucket (`[cluster]`); empty when
    /// this one answers alone.
    pub peers: Arc<Peers>,
    /// The peers' traces as of the last [`refresh_peers`], for
    /// incidents over every collector. Locked before `live` when both are.
    pub cluster: Mutex<ClusterView>,
    /// Records a Kafka partition's new owner read again, held until the
    /// peers have told what of them they judged (`replay.rs`).
    pub replayed: replay::Replayed,
}

impl AppState {
    /// Handlers' state over `store` with the defaults: verdicts with no
    /// grace period (kept 10 min for revision, 100 000 traces), default
    /// diagnosis, SQL limits and SLOs, no token, ready. Embedders and tests
    /// change what they need with struct update syntax.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use overtime_server::AppState;
    /// let store = overtime_store::Store::open(overtime_store::StoreConfig {
    ///     data_dir: dir.path().to_path_buf(),
    ///     ..Default::default()
    /// }).unwrap();
    /// let state = AppState {
    ///     token: Some("s3cret".into()),
    ///     ..AppState::with_defaults(store)
    /// };
    /// assert!(state.ready.load(std::sync::atomic::Ordering::Relaxed));
    /// ```
    pub fn with_defaults(store: Store) -> AppState {
        AppState {
            live: Mutex::new(LiveDiagnoser::new(
                DiagnoseConfig::default(),
                0,
                600_000,
                100_000,
            )),
            store: Arc::new(store),
            diagnose: DiagnoseConfig::default(),
            sql: SqlConfig::default(),
            token: None,
            ready: AtomicBool::new(true),
            metrics: Metrics::default(),
            peers: Arc::new(Peers::new(&Default::default(), None, "")),
            cluster: Mutex::new(ClusterView::default()),
            replayed: Default::default(),
        }
    }

    /// The incidents over this collector's traces and, with
    /// `[cluster] peers`, every peer's that answered the last refresh:
    /// from any collector, the report one collector given all the traffic
    /// would make.
    pub fn incidents(&self) -> Vec<overtime_diagnose::IncidentReport> {
        let view = self.cluster.lock().expect("cluster view lock");
        self.live
            .lock()
            .expect("live state lock")
            .incidents_with(&view.others)
    }

    /// The current verdicts (with revisions) of this collector and, with
    /// `[cluster] peers`, of every peer as last told (one that stopped
    /// answering included): SQL's `verdicts` from any collector, a trace
    /// several hold listed once, by the holder the incidents count.
    pub fn verdicts(&self) -> Vec<(u32, overtime_model::Verdict)> {
        let view = self.cluster.lock().expect("cluster view lock");
        let live = self.live.lock().expect("live state lock");
        if self.peers.is_empty() {
            return live.verdicts().map(|(r, v)| (r, v.clone())).collect();
        }
        live.verdicts_with(&view.others)
    }

    /// Does this collector page and ticket for `fingerprint`? Always when
    /// it answers alone; with peers, when it is the fingerprint's owner
    /// among itself and the peers that answered the last refresh
    /// ([`fingerprint_owner`]), so when the owner stops answering, another
    /// takes over.
    pub fn owns(&self, fingerprint: &str) -> bool {
        if self.peers.is_empty() {
            return true;
        }
        let me = self.store.collector_id();
        let view = self.cluster.lock().expect("cluster view lock");
        let candidates = view.alive.iter().map(String::as_str).chain([me]);
        cluster_view::fingerprint_owner(fingerprint, candidates) == Some(me)
    }
}

/// The API router: every route of docs/interfaces.md, the UI's and
/// `/metrics`, behind the token of [`AppState::token`] (but for health
/// and the sign-in forms); every answer names the collector that gave it.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/api/traces", get(traces_api::list_traces))
        .route("/api/traces/{id}", get(traces_api::get_trace))
        .route("/api/incidents", get(api::list_incidents))
        .route("/api/kinds", get(api::list_kinds))
        .route("/api/incidents/{id}", get(api::get_incident))
        .route(
            "/api/incidents/{id}/timeline",
            get(charts_api::incident_timeline),
        )
        .route("/api/overview", get(charts_api::overview))
        .route("/api/sql", post(api::post_sql))
        .route("/api/slo", get(metrics::get_slo))
        .route("/api/advice", get(advice_api::get_advice))
        .route("/api/whatif", post(advice_api::post_whatif))
        .route("/metrics", get(metrics::get_metrics))
        .route("/api/cluster/unflushed", get(cluster::get_unflushed))
        .route("/api/cluster/traces", get(cluster_view::get_traces))
        .merge(jaeger::routes())
        .merge(ui_routes::protected())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .merge(ui_routes::open())
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            name_the_collector,
        ))
        .with_state(state)
}

/// Every answer says which collector gave it ([`cluster::COLLECTOR_HEADER`]).
async fn name_the_collector(
    axum::extract::State(s): axum::extract::State<Arc<AppState>>,
    mut resp: axum::response::Response,
) -> axum::response::Response {
    if let Some(v) = cluster::collector_header(&s.store) {
        resp.headers_mut().insert(cluster::COLLECTOR_HEADER, v);
    }
    resp
}
