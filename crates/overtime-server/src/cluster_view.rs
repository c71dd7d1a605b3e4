//! The mirror of the other collectors' traces: each peer's verdicts and
//! trace summaries, kept up to date every 2 s by [`refresh_peers`]
//! (incremental by sequence number, a restarted peer from scratch), and
//! which collector speaks for a fingerprint ([`fingerprint_owner`]).
//!
//! Design rules:
//! - A peer that stops answering keeps its last state in the view: its
//!   verdicts and incident memberships are served by the others while it
//!   is down; it only drops out of the fingerprint owners.
//! - Ownership is rendezvous hashing over the collectors that answered:
//!   every collector computes the same owner, and when one leaves only its
//!   fingerprints move.

use crate::cluster::PeerReport;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use overtime_diagnose::live::{PeerMirror, SharedTraces, TracesDelta, held_as};
use overtime_model::Verdict;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

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
    /// Has a refresh been made (so the mirrors say who holds what)?
    refreshed: bool,
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

    /// The peers (by URL) whose mirror keeps `trace_id`, each with the
    /// verdict it last told (if the trace failed there): where a lookup of
    /// it is asked, instead of every peer. A peer that stopped answering
    /// is listed too — its last word is served while it is down. `None`
    /// before the first refresh: nobody is known to hold anything yet.
    ///
    /// ```
    /// use overtime_server::ClusterView;
    /// assert!(ClusterView::default().holders("ab").is_none());
    /// ```
    pub fn holders(&self, trace_id: &str) -> Option<Vec<Holder>> {
        self.refreshed.then(|| {
            self.mirrors
                .iter()
                .filter_map(|(url, (_, _, m))| {
                    m.holds(trace_id).map(|told| Holder {
                        url: url.clone(),
                        told: told.cloned(),
                    })
                })
                .collect()
        })
    }
}

impl ClusterView {
    /// Whether any peer (answering or not) told of `trace_id`.
    pub(crate) fn told_trace(&self, trace_id: &str) -> bool {
        self.mirrors
            .values()
            .any(|(_, _, m)| m.holds(trace_id).is_some())
    }

    /// The request ids a failing trace a peer told of names under a trace
    /// id of its own: gateway lines keyed by request id alone that joined
    /// their trace there ([`ClusterView::told_line`]).
    pub(crate) fn told_joined(&self) -> HashSet<String> {
        self.mirrors
            .values()
            .flat_map(|(_, _, m)| m.verdicts())
            .filter_map(|(_, v)| {
                let r = v.request_id.as_deref()?;
                (held_as(r) != v.trace_id).then(|| r.to_string())
            })
            .collect()
    }

    /// Whether the peers' word on the gateway line keyed by `request_id`
    /// alone is final, so that a replayed copy of it is not judged again:
    /// a failing trace a peer told of names it (`joined`, from
    /// [`ClusterView::told_joined`]: the line joined its trace), or a peer
    /// judged it alone and it did not fail. A line a peer judged alone as
    /// failing is not final — its spans may have been read since (its
    /// collector died before they came) — so judged again here it looks
    /// them up and joins its trace.
    pub(crate) fn told_line(&self, request_id: &str, joined: &HashSet<String>) -> bool {
        if joined.contains(request_id) {
            return true;
        }
        let alone = held_as(request_id);
        let told: Vec<bool> = self
            .mirrors
            .values()
            .filter_map(|(_, _, m)| m.holds(&alone).map(|v| v.is_some()))
            .collect();
        !told.is_empty() && !told.contains(&true)
    }
}

/// A peer that holds a trace ([`ClusterView::holders`]).
#[derive(Debug, Clone)]
pub struct Holder {
    /// The peer's URL as configured.
    pub url: String,
    /// The verdict it last told, with its revision (`None`: the trace
    /// did not fail there).
    pub told: Option<(u32, Verdict)>,
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
    held.refreshed = true;
    let mut live = state.live.lock().expect("live state lock");
    live.set_peer_samples(&held.others);
    live.set_peer_claims(&held.others);
    live.note_peer_traces(&held.others);
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

#[cfg(test)]
#[path = "cluster_view_tests.rs"]
mod tests;
