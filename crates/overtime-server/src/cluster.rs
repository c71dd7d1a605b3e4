//! `[cluster]`: the other collectors this one asks for what they have not
//! flushed yet, so that its SQL, trace lookup and trace search answer for
//! every collector (docs/deploy.md, "Several collectors").
//!
//! Design rules:
//! - Collectors share one bucket (`[store] url`): flushed rows are read
//!   from there; a peer is asked only for its unflushed rows
//!   (`GET /api/cluster/unflushed`, Arrow IPC) and its live verdicts
//!   (`local=1` on the trace endpoints, which never fans out again).
//! - A query never fails because a peer is slow or down: each peer gets
//!   `peer_timeout_ms`, all are asked at once, and the answer says which
//!   peers did not respond and why ([`PeerReport`]).
//! - One `peers` list can serve every collector: a collector recognises
//!   itself by its collector id in the answer and ignores it.

use crate::error::ApiError;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use overtime_model::Table;
use overtime_store::{PeerSource, Store, Unflushed};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The header naming the answering collector.
pub(crate) const COLLECTOR_HEADER: &str = "x-overtime-collector";
/// The header with the answering collector's newest published flush.
pub(crate) const FLUSHED_THROUGH_HEADER: &str = "x-overtime-flushed-through";

/// `[cluster]`: which collectors to ask and how long to wait.
///
/// ```
/// use overtime_server::ClusterConfig;
/// let c: ClusterConfig = toml::from_str(r#"peers = ["http://collector-b:8080"]"#).unwrap();
/// assert_eq!(c.peer_timeout_ms, 2_000);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Base URLs of the other collectors' APIs (`http://host:8080`). May
    /// list this collector too. Empty: this collector answers alone.
    pub peers: Vec<String>,
    /// How long a query waits for one peer, in ms; a peer that takes
    /// longer is reported as not responding.
    pub peer_timeout_ms: u64,
    /// Who sends the SLO, burn-rate and breaker alerts when there are
    /// peers (alone, the collector always does).
    pub slo_alerts: SloAlertsFrom,
    /// The longest a dead collector's Kafka partitions wait for a new
    /// owner, in ms: Kafka's `session.timeout.ms` plus the rebalance. The
    /// new owner reads this much more again than the traces' grace period
    /// for its diagnosis only, so what the dead one had stored but not
    /// judged is judged by the new owner (docs/deploy.md).
    pub takeover_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            peers: Vec::new(),
            peer_timeout_ms: 2_000,
            slo_alerts: SloAlertsFrom::Prometheus,
            takeover_ms: 60_000,
        }
    }
}

/// Who evaluates the SLO, burn-rate and breaker alerts of a deployment of
/// several collectors (docs/deploy.md, *Alerts with several collectors*).
///
/// Each collector's SLOs see the requests of its own Kafka partitions
/// only: evaluated there, a condition of the whole platform fires on one
/// collector, flaps as partitions move, or is missed when the traffic is
/// split. Its counters, though, are additive: Prometheus scraping every
/// collector sums them, and the shipped rules (deploy/prometheus) compute
/// each alert over the sum — one series, so one page per firing.
///
/// ```
/// use overtime_server::{ClusterConfig, SloAlertsFrom};
/// let c: ClusterConfig = toml::from_str(r#"peers = ["http://b:8080"]"#).unwrap();
/// assert_eq!(c.slo_alerts, SloAlertsFrom::Prometheus);
/// assert!(!c.sends_slo_alerts());
/// let alone = ClusterConfig::default();
/// assert!(alone.sends_slo_alerts());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SloAlertsFrom {
    /// The shipped Prometheus rules over every collector's `/metrics`;
    /// the collectors send none of their own.
    Prometheus,
    /// Each collector over its own partitions (one set of topics per
    /// collector, or no Prometheus).
    Collector,
}

impl ClusterConfig {
    /// Whether this collector sends its own SLO, burn-rate and breaker
    /// alerts: always alone; with peers, only when told to.
    pub fn sends_slo_alerts(&self) -> bool {
        self.peers.is_empty() || self.slo_alerts == SloAlertsFrom::Collector
    }
}

/// How a peer is reached: its URLs, the wait, the token to send.
#[derive(Debug)]
pub struct Peers {
    urls: Vec<String>,
    timeout: Duration,
    takeover: Duration,
    token: Option<String>,
    self_id: String,
    http: reqwest::Client,
    /// Keeps connections open between requests: for lookups, which ask
    /// from the server's own runtime (it outlives the connections).
    pooled: reqwest::Client,
}

/// A peer that did not answer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unanswered {
    /// The peer's URL as configured.
    pub peer: String,
    /// What went wrong: a timeout, a refused connection, an error status.
    pub error: String,
}

/// Which peers a query asked and which did not answer; in every answer
/// that used them (`"peers"` in JSON, headers with Arrow).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeerReport {
    /// Peers configured (this collector excluded once recognised).
    pub asked: usize,
    /// The ones that did not answer in time or answered with an error.
    pub unanswered: Vec<Unanswered>,
}

impl Peers {
    /// The peers of `cfg`, sending `token` as a bearer token (collectors
    /// of one deployment share it; `None`: no `Authorization` header);
    /// `self_id` is this store's collector id, by which a `peers` entry
    /// that is this collector is recognised and skipped (empty: none is).
    pub fn new(cfg: &ClusterConfig, token: Option<String>, self_id: &str) -> Peers {
        Peers {
            urls: cfg
                .peers
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .filter(|u| !u.is_empty())
                .collect(),
            timeout: Duration::from_millis(cfg.peer_timeout_ms.max(1)),
            takeover: Duration::from_millis(cfg.takeover_ms),
            token,
            self_id: self_id.to_string(),
            // No idle pool: SQL scans ask from the query's own runtime,
            // which ends with the query, and a pooled connection would
            // die with it.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_default(),
            pooled: reqwest::Client::new(),
        }
    }

    /// How long one peer is waited for (`peer_timeout_ms`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long a dead collector's partitions may wait for a new owner
    /// (`takeover_ms`).
    pub fn takeover(&self) -> Duration {
        self.takeover
    }

    /// No peers configured.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// One query's use of the peers: it remembers who did not answer.
    pub fn query(self: &Arc<Self>) -> Arc<PeerQuery> {
        self.query_with(self.urls.clone(), self.http.clone())
    }

    /// A lookup that asks only the peers at `urls` (those known to hold
    /// what it looks for; its report counts only them), over kept-open
    /// connections: only for requests made from the server's runtime.
    pub fn lookup(self: &Arc<Self>, urls: Vec<String>) -> Arc<PeerQuery> {
        self.query_with(urls, self.pooled.clone())
    }

    fn query_with(self: &Arc<Self>, urls: Vec<String>, http: reqwest::Client) -> Arc<PeerQuery> {
        Arc::new(PeerQuery {
            peers: self.clone(),
            urls,
            http,
            unanswered: Mutex::new(BTreeMap::new()),
            itself: Mutex::new(Vec::new()),
        })
    }
}

/// The peers as one query sees them (a [`PeerSource`] for the store).
#[derive(Debug)]
pub struct PeerQuery {
    peers: Arc<Peers>,
    /// The peers this query asks: all, or the ones known to hold it.
    urls: Vec<String>,
    /// The client it asks with ([`Peers::query`], [`Peers::lookup`]).
    http: reqwest::Client,
    unanswered: Mutex<BTreeMap<String, String>>,
    /// URLs that turned out to be this collector.
    itself: Mutex<Vec<String>>,
}

impl PeerQuery {
    /// Who was asked and who did not answer, so far.
    pub fn report(&self) -> PeerReport {
        let itself = self.itself.lock().expect("peer lock").clone();
        PeerReport {
            asked: self.urls.iter().filter(|u| !itself.contains(u)).count(),
            unanswered: self
                .unanswered
                .lock()
                .expect("peer lock")
                .iter()
                .map(|(peer, error)| Unanswered {
                    peer: peer.clone(),
                    error: error.clone(),
                })
                .collect(),
        }
    }

    pub(crate) fn failed(&self, url: &str, why: String) {
        self.unanswered
            .lock()
            .expect("peer lock")
            .entry(url.to_string())
            .or_insert(why);
    }

    async fn get(&self, url: &str, path_and_query: &str) -> Result<reqwest::Response, String> {
        let mut req = self
            .http
            .get(format!("{url}{path_and_query}"))
            .timeout(self.peers.timeout);
        if let Some(t) = &self.peers.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_timeout() {
                format!("no answer within {} ms", self.peers.timeout.as_millis())
            } else {
                format!("unreachable: {e}")
            }
        })?;
        let from = resp
            .headers()
            .get(COLLECTOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !from.is_empty() && from == self.peers.self_id {
            self.itself.lock().expect("peer lock").push(url.to_string());
            return Err(String::new());
        }
        Ok(resp)
    }

    /// `GET path_and_query` on every peer at once; the JSON of each that
    /// answered 200, with its URL. A 404 counts as an answer of `None`.
    pub(crate) async fn get_json(
        &self,
        path_and_query: &str,
    ) -> Vec<(String, Option<serde_json::Value>)> {
        self.get_json_with(|_| path_and_query.to_string()).await
    }

    /// [`PeerQuery::get_json`] with a path of its own for each peer URL.
    pub(crate) async fn get_json_with(
        &self,
        path_for: impl Fn(&str) -> String,
    ) -> Vec<(String, Option<serde_json::Value>)> {
        let path_for = &path_for;
        self.each_peer(|url| async move {
            let resp = self.get(url, &path_for(url)).await?;
            let status = resp.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(Some((url.to_string(), None)));
            }
            if !status.is_success() {
                return Err(format!("answered {status}"));
            }
            let body = resp.bytes().await.map_err(|e| format!("reading: {e}"))?;
            serde_json::from_slice::<serde_json::Value>(&body)
                .map(|v| Some((url.to_string(), Some(v))))
                .map_err(|e| format!("unreadable answer: {e}"))
        })
        .await
    }

    /// Runs `ask` on every peer at once and keeps the answers. An error
    /// names the peer as not answering, with its reason; the empty error
    /// is [`PeerQuery::get`]'s "that peer is this collector": skipped.
    async fn each_peer<'a, T, F, Fut>(&'a self, ask: F) -> Vec<T>
    where
        F: Fn(&'a str) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, String>>,
    {
        let asks = self.urls.iter().map(|url| {
            let answer = ask(url);
            async move {
                match answer.await {
                    Ok(t) => t,
                    Err(why) => {
                        if !why.is_empty() {
                            self.failed(url, why);
                        }
                        None
                    }
                }
            }
        });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    async fn unflushed_from(&self, url: &str, query: &str) -> Result<Option<Unflushed>, String> {
        let resp = self
            .get(url, &format!("/api/cluster/unflushed?{query}"))
            .await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("answered {status}"));
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let collector_id = header(COLLECTOR_HEADER).unwrap_or_default();
        let flushed_through = header(FLUSHED_THROUGH_HEADER)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                format!("no {FLUSHED_THROUGH_HEADER} header (not an overtime collector?)")
            })?;
        let body = resp.bytes().await.map_err(|e| format!("reading: {e}"))?;
        let batches = if body.is_empty() {
            Vec::new()
        } else {
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
                .and_then(|r| r.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("unreadable Arrow answer: {e}"))?
        };
        Ok(Some(Unflushed {
            collector_id,
            flushed_through,
            batches,
        }))
    }
}

#[async_trait]
impl PeerSource for PeerQuery {
    async fn unflushed(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        trace_id: Option<&str>,
    ) -> Vec<Unflushed> {
        let q = {
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("table", table.as_str());
            if let Some(f) = from_us {
                q.append_pair("from_us", &f.to_string());
            }
            if let Some(t) = to_us {
                q.append_pair("to_us", &t.to_string());
            }
            if let Some(id) = trace_id {
                q.append_pair("trace_id", id);
            }
            q.finish()
        };
        let q = &q;
        self.each_peer(|url| self.unflushed_from(url, q)).await
    }

    /// Asked 64 request ids at a time (a URL stays short); each peer's
    /// answers are merged into one.
    async fn unflushed_requests(
        &self,
        table: Table,
        from_us: Option<i64>,
        to_us: Option<i64>,
        request_ids: &[String],
    ) -> Vec<Unflushed> {
        let mut merged: BTreeMap<String, Unflushed> = BTreeMap::new();
        for chunk in request_ids.chunks(64) {
            let q = {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("table", table.as_str());
                if let Some(f) = from_us {
                    q.append_pair("from_us", &f.to_string());
                }
                if let Some(t) = to_us {
                    q.append_pair("to_us", &t.to_string());
                }
                q.append_pair("request_ids", &chunk.join(","));
                q.finish()
            };
            let q = &q;
            for u in self.each_peer(|url| self.unflushed_from(url, q)).await {
                match merged.get_mut(&u.collector_id) {
                    // Up to the newest flush any answer was made after:
                    // a row an earlier answer had unflushed that a later
                    // flush wrote is then read twice (a join by request
                    // id takes each line and span once), never missed.
                    Some(m) => {
                        m.flushed_through = m.flushed_through.max(u.flushed_through);
                        m.batches.extend(u.batches);
                    }
                    None => {
                        merged.insert(u.collector_id.clone(), u);
                    }
                }
            }
        }
        merged.into_values().collect()
    }
}

/// The query of `GET /api/cluster/unflushed`.
#[derive(Debug, Deserialize)]
pub(crate) struct UnflushedQuery {
    /// `gateway_requests`, `spans` or `rejected`.
    pub table: Option<String>,
    /// Lower time bound, µs since the epoch (inclusive).
    pub from_us: Option<i64>,
    /// Upper time bound, µs since the epoch (exclusive).
    pub to_us: Option<i64>,
    /// Only this trace's rows.
    pub trace_id: Option<String>,
    /// Only the rows of these request ids (comma-separated).
    pub request_ids: Option<String>,
}

/// `GET /api/cluster/unflushed`: this collector's unflushed rows of one
/// table as an Arrow IPC stream, its collector id and newest published
/// flush in headers ([`COLLECTOR_HEADER`], [`FLUSHED_THROUGH_HEADER`]).
pub(crate) async fn get_unflushed(
    State(s): State<Arc<crate::AppState>>,
    Query(q): Query<UnflushedQuery>,
) -> Result<Response, ApiError> {
    let name = q.table.as_deref().unwrap_or_default();
    let table = Table::ALL
        .into_iter()
        .find(|t| t.as_str() == name)
        .ok_or_else(|| {
            ApiError::bad_request(
                "bad_table",
                format!("table={name:?}: gateway_requests, spans or rejected"),
            )
        })?;
    let store = s.store.clone();
    let u = tokio::task::spawn_blocking(move || match &q.request_ids {
        Some(ids) => {
            let ids: Vec<String> = ids
                .split(',')
                .filter(|i| !i.is_empty())
                .map(str::to_string)
                .collect();
            store.unflushed_requests(table, q.from_us, q.to_us, &ids)
        }
        None => store.unflushed(table, q.from_us, q.to_us, q.trace_id.as_deref()),
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string()))?;
    let body = ipc_stream(&u.batches)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.apache.arrow.stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&u.collector_id) {
        headers.insert(COLLECTOR_HEADER, v);
    }
    headers.insert(FLUSHED_THROUGH_HEADER, HeaderValue::from(u.flushed_through));
    Ok((headers, body).into_response())
}

/// Batches as one Arrow IPC stream (empty body for no batches).
pub(crate) fn ipc_stream(batches: &[RecordBatch]) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    if let Some(first) = batches.first() {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut buf, &first.schema())
            .map_err(|e| e.to_string())?;
        for b in batches {
            w.write(b).map_err(|e| e.to_string())?;
        }
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// Adds this collector's id to every answer, so a peer that has itself in
/// its `peers` list recognises it.
pub(crate) fn collector_header(store: &Store) -> Option<HeaderValue> {
    let id = store.collector_id();
    (!id.is_empty())
        .then(|| HeaderValue::from_str(id).ok())
        .flatten()
}
