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
use overtime_diagnose::live::{PeerMirror, SharedTraces, TracesDelta};
use overtime_model::{Table, Verdict};
use overtime_store::{PeerSource, Store, Unflushed};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            peers: Vec::new(),
            peer_timeout_ms: 2_000,
        }
    }
}

/// How a peer is reached: its URLs, the wait, the token to send.
#[derive(Debug)]
pub struct Peers {
    urls: Vec<String>,
    timeout: Duration,
    token: Option<String>,
    self_id: String,
    http: reqwest::Client,
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
            token,
            self_id: self_id.to_string(),
            // No idle pool: SQL scans ask from the query's own runtime,
            // which ends with the query, and a pooled connection would
            // die with it.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_default(),
        }
    }

    /// No peers configured.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// One query's use of the peers: it remembers who did not answer.
    pub fn query(self: &Arc<Self>) -> Arc<PeerQuery> {
        Arc::new(PeerQuery {
            peers: self.clone(),
            unanswered: Mutex::new(BTreeMap::new()),
            itself: Mutex::new(Vec::new()),
        })
    }
}

/// The peers as one query sees them (a [`PeerSource`] for the store).
#[derive(Debug)]
pub struct PeerQuery {
    peers: Arc<Peers>,
    unanswered: Mutex<BTreeMap<String, String>>,
    /// URLs that turned out to be this collector.
    itself: Mutex<Vec<String>>,
}

impl PeerQuery {
    /// Who was asked and who did not answer, so far.
    pub fn report(&self) -> PeerReport {
        let itself = self.itself.lock().expect("peer lock").clone();
        PeerReport {
            asked: self
                .peers
                .urls
                .iter()
                .filter(|u| !itself.contains(u))
                .count(),
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
            .peers
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
        let asks = self.peers.urls.iter().map(|url| {
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

/// What this collector knows of the others' traces for incidents: a
/// mirror of each peer's, kept up to date by [`refresh_peers`], and which peers
/// answered the last refresh (the ones alive, for who owns a fingerprint).
#[derive(Debug, Default)]
pub struct ClusterView {
    /// Each peer's traces, as of its last answer (a peer that stopped
    /// answering with the state it last told).
    pub others: Vec<SharedTraces>,
    /// Collector ids of the peers that answered the last refresh.
    pub alive: BTreeSet<String>,
    /// Who was asked at the last refresh and who did not answer.
    pub report: PeerReport,
    /// By peer URL: the collector and process that answered, and the
    /// mirror of its traces.
    mirrors: BTreeMap<String, (String, u64, PeerMirror)>,
    /// URLs of the peers that did not answer the last refresh.
    silent: BTreeSet<String>,
}

impl ClusterView {
    /// The verdicts (with revisions) last told by the peers at `urls`
    /// (those that did not answer a query): what the others serve for a
    /// collector while it is down.
    pub fn told_by<'a>(&self, urls: impl IntoIterator<Item = &'a str>) -> Vec<(u32, Verdict)> {
        urls.into_iter()
            .filter_map(|u| self.mirrors.get(u))
            .flat_map(|(_, _, m)| m.traces().verdicts)
            .collect()
    }
}

/// The answer of `GET /api/cluster/traces`.
#[derive(Debug, Serialize, Deserialize)]
pub struct TracesAnswer {
    /// The answering collector's id.
    pub collector_id: String,
    /// When its process started, µs since the epoch: a new value means a
    /// restart, and the asker's mirror starts over.
    pub started_us: u64,
    /// What changed since the asker's cursor.
    pub delta: TracesDelta,
}

/// The query of `GET /api/cluster/traces`.
#[derive(Debug, Deserialize)]
pub struct TracesQuery {
    /// The cursor of the asker's mirror (0 or absent: everything).
    pub since: Option<u64>,
}

/// When this process started (µs since the epoch), told to peers.
fn started_us() -> u64 {
    static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64)
    })
}

/// `GET /api/cluster/traces?since=`: what changed in this collector's own
/// verdicts and trace summaries since the asker's cursor.
pub async fn get_traces(
    State(s): State<Arc<crate::AppState>>,
    Query(q): Query<TracesQuery>,
) -> Response {
    let delta = s
        .live
        .lock()
        .expect("live state lock")
        .shared_since(q.since.unwrap_or(0));
    axum::Json(TracesAnswer {
        collector_id: s.store.collector_id().to_string(),
        started_us: started_us(),
        delta,
    })
    .into_response()
}

/// Asks every peer for what changed in its traces (each within
/// `peer_timeout_ms`) and updates the view: a peer that did not answer
/// drops out of the fingerprint owners but its last state stays in the
/// view (its verdicts are not lost while it is down) until it answers
/// again — a restarted peer with its whole state.
pub async fn refresh_peers(state: &crate::AppState) {
    if state.peers.is_empty() {
        return;
    }
    let q = state.peers.query();
    let cursors: BTreeMap<String, u64> = {
        let view = state.cluster.lock().expect("cluster view lock");
        view.mirrors
            .iter()
            .map(|(url, (_, _, m))| (url.clone(), m.cursor()))
            .collect()
    };
    let answers = q
        .get_json_with(|url| {
            format!(
                "/api/cluster/traces?since={}",
                cursors.get(url).copied().unwrap_or(0)
            )
        })
        .await;
    let mut held = state.cluster.lock().expect("cluster view lock");
    let mut mirrors = std::mem::take(&mut held.mirrors);
    let mut kept = BTreeMap::new();
    let mut alive = BTreeSet::new();
    for (url, answer) in answers {
        let Some(answer) = answer else { continue };
        match serde_json::from_value::<TracesAnswer>(answer) {
            Ok(a) if a.collector_id != state.store.collector_id() => {
                let mut entry = mirrors
                    .remove(&url)
                    .filter(|(id, started, _)| *id == a.collector_id && *started == a.started_us)
                    .unwrap_or_else(|| {
                        (a.collector_id.clone(), a.started_us, PeerMirror::default())
                    });
                if entry.2.cursor() != 0 || a.delta.full {
                    entry.2.apply(a.delta);
                    alive.insert(a.collector_id);
                    kept.insert(url, entry);
                }
                // A partial answer to a mirror that starts over: asked
                // again from 0 at the next refresh.
            }
            Ok(_) => {}
            Err(e) => q.failed(&url, format!("unreadable traces: {e}")),
        }
    }
    // A peer that stopped answering (down, or restarting) keeps its last
    // state in the view: its verdicts and incident memberships are served
    // by the others while it is down. It is not `alive`, so its
    // fingerprints get another owner.
    let report = q.report();
    let mut silent = BTreeSet::new();
    for u in &report.unanswered {
        let kept_state = mirrors.remove(&u.peer).map(|entry| {
            let n = entry.2.len();
            kept.insert(u.peer.clone(), entry);
            n
        });
        if !held.silent.contains(&u.peer) {
            tracing::warn!(
                "overtime: peer {} stopped answering ({}); serving its last state ({} traces)",
                u.peer,
                u.error,
                kept_state.unwrap_or(0)
            );
        }
        silent.insert(u.peer.clone());
    }
    held.silent = silent;
    held.others = kept.values().map(|(_, _, m)| m.traces()).collect();
    held.mirrors = kept;
    held.alive = alive;
    held.report = report;
    let mut live = state.live.lock().expect("live state lock");
    live.set_peer_samples(&held.others);
    live.set_peer_claims(&held.others);
}

/// The collector that speaks for `fingerprint` among `candidates`
/// (rendezvous hashing: each collector scores each fingerprint, the
/// highest score owns it). Every collector computes the same owner from
/// the same candidates; when the owner leaves, only its fingerprints move.
///
/// ```
/// use overtime_server::fingerprint_owner as owner;
/// let all = ["collector-a", "collector-b", "collector-c"];
/// let o = owner("llm_prefill_slow:deepseek", all).unwrap();
/// let rest: Vec<&str> = all.into_iter().filter(|c| *c != o).collect();
/// let other = rest.iter().copied().find(|c| owner("tool_no_timeout:crm", all) == Some(*c));
/// // Removing a collector that does not own a fingerprint keeps its owner.
/// if let Some(gone) = rest.first() {
///     let left: Vec<&str> = all.into_iter().filter(|c| c != gone).collect();
///     assert_eq!(owner("llm_prefill_slow:deepseek", left), Some(o));
/// }
/// # let _ = other;
/// ```
pub fn fingerprint_owner<'a>(
    fingerprint: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .max_by_key(|c| (score(fingerprint, c), *c))
}

/// FNV-1a over `fingerprint`, a separator and `collector`: stable across
/// processes, builds and versions (std's hasher promises none of that).
fn score(fingerprint: &str, collector: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in fingerprint.bytes().chain([0xff]).chain(collector.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short inputs: finish with a
    // multiply-xorshift so nearby ids spread.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}
