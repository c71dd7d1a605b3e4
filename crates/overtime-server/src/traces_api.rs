//! `GET /api/traces` and `GET /api/traces/{id}`: the verdicts of every
//! collector, whichever one is asked.
//!
//! Design rules:
//! - With peers, a trace exactly one collector holds with a verdict is
//!   answered by that collector alone (this one's live verdict, or one
//!   `local=1` request to the holder the mirror of the peers names —
//!   [`crate::ClusterView::holders`]); its records are keyed to its
//!   partition, and a split trace is completed before it is judged, so
//!   that holder's verdict is the whole trace's.
//! - Otherwise (several holders, or none) a trace looked up is judged from every row of it — each
//!   collector's Parquet in the bucket, this collector's memtable and the
//!   peers' unflushed rows, gateway lines found by trace id or by the
//!   request ids its spans carry — so every collector gives the same
//!   verdict, the one a single collector given all the records would give,
//!   even when a crash or a rebalance split the records between
//!   collectors that each judged a part. Its revision is the highest any
//!   collector's live verdict has.
//! - In a listing, a trace several collectors judged is judged again the
//!   same way, so the listing agrees with the lookup. A search by `kind`
//!   or `outcome` is matched by each collector against its own verdicts,
//!   so a split trace whose parts were judged differently is found by the
//!   part that matches; opened, it is judged whole.
//! - A trace filed under a request id that another trace names as its own
//!   request id is that trace's gateway line judged apart
//!   (`overtime_diagnose::live::judged_apart`): the listing leaves it out,
//!   as the incidents and SQL do.
//! - Alone (no peers), a collector answers with its live verdict, and
//!   diagnoses from the store a trace it has none for.
//! - `?local=1` (what a peer asks) answers from this collector's live
//!   verdicts alone; an answer built with the peers names those that did
//!   not answer (`peers`).

use crate::AppState;
use crate::api::{is_local, peer_query};
use crate::cluster::PeerQuery;
use crate::error::ApiError;
use arrow::record_batch::RecordBatch;
use axum::Json;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use overtime_model::{Outcome, Table, Verdict};
use overtime_store::PeerSource;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// At most this many split traces of one listing are judged again; the
/// rest of them (a listing of thousands of split traces: a bucket that
/// is not shared) keep the holder [`more_complete`] picks.
const MAX_REJUDGED: usize = 200;

#[derive(Debug, Deserialize)]
pub(crate) struct TraceQuery {
    pub outcome: Option<String>,
    pub kind: Option<String>,
    /// A trace id or its prefix (case-insensitive).
    pub trace_id: Option<String>,
    /// A gateway `$request_id` or its prefix.
    pub request_id: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub limit: Option<usize>,
    /// `local=1`: this collector's live verdicts only (what a peer asks).
    pub local: Option<String>,
}

/// `?local=1` on the trace endpoints: answer from this collector alone.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LocalQuery {
    /// `1` or `true`: do not ask the peers.
    pub local: Option<String>,
}

/// One row of the trace listing.
fn list_item(rev: u32, v: &Verdict) -> Value {
    serde_json::json!({
        "trace_id": v.trace_id, "request_id": v.request_id, "started_at": v.started_at,
        "outcome": v.outcome, "kind": v.root_cause.kind, "component": v.root_cause.component,
        "share": v.root_cause.share, "summary": v.root_cause.summary,
        "gateway_status": v.gateway.as_ref().and_then(|g| g.status),
        "elapsed_ms": v.budget.consumed_ms, "revision": rev,
    })
}

/// Whether holder `a`'s answer for a trace is to be kept over `b`'s when
/// the trace cannot be judged again: the longer elapsed time (more of the
/// trace seen), then the higher revision, then the content — the same
/// pick on every collector, whoever asks.
fn more_complete(a: &Value, b: &Value) -> bool {
    let key = |v: &Value| {
        (
            v["elapsed_ms"]
                .as_f64()
                .or_else(|| v["budget"]["consumed_ms"].as_f64())
                .unwrap_or(0.0),
            v["revision"].as_u64().unwrap_or(0),
        )
    };
    let (ka, kb) = (key(a), key(b));
    match ka.partial_cmp(&kb) {
        Some(std::cmp::Ordering::Greater) => true,
        Some(std::cmp::Ordering::Less) => false,
        _ => {
            let (a, b) = (a.to_string(), b.to_string());
            a > b
        }
    }
}

pub(crate) async fn list_traces(
    State(s): State<Arc<AppState>>,
    RawQuery(raw): RawQuery,
    Query(q): Query<TraceQuery>,
) -> Result<Response, ApiError> {
    let outcome = match q.outcome.as_deref().filter(|o| !o.is_empty()) {
        Some(o) => Some(Outcome::parse(o).ok_or_else(|| {
            ApiError::bad_request(
                "bad_outcome",
                format!("outcome={o:?}: one of gateway_timeout, service_timeout, error, ok"),
            )
        })?),
        None => None,
    };
    // A verdict's start is kept to the millisecond: so are the bounds.
    let (from, to) = (
        crate::api::time_param(q.from.as_deref(), "from")?.map(|t| t.floor_ms()),
        crate::api::time_param(q.to.as_deref(), "to")?.map(|t| t.floor_ms()),
    );
    let limit = q.limit.unwrap_or(100).min(10_000);
    let trace_prefix = q
        .trace_id
        .as_deref()
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty());
    let request_prefix = q
        .request_id
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let matches = |v: &Verdict| {
        outcome.is_none_or(|o| v.outcome == o)
            && q.kind
                .as_deref()
                .filter(|k| !k.is_empty())
                .is_none_or(|k| v.root_cause.kind.as_str() == k)
            && trace_prefix
                .as_deref()
                .is_none_or(|t| v.trace_id.starts_with(t))
            && request_prefix
                .is_none_or(|r| v.request_id.as_deref().is_some_and(|id| id.starts_with(r)))
            && from.is_none_or(|f| v.started_at >= f)
            && to.is_none_or(|t| v.started_at < t)
    };
    let mut items: Vec<Value> = {
        let live = s.live.lock().expect("live state lock");
        live.verdicts()
            .filter(|(_, v)| matches(v))
            .map(|(rev, v)| list_item(rev, v))
            .collect()
    };
    let mut total = items.len();
    let Some(pq) = peer_query(&s, &q.local) else {
        items.sort_by(listing_order);
        items.truncate(limit);
        return Ok(Json(serde_json::json!({"traces": items, "total": total})).into_response());
    };
    // The same search on every peer's live verdicts, merged and cut to
    // `limit` again; a trace two collectors both judged is listed once.
    let mut path = String::from("/api/traces?local=1");
    if let Some(raw) = raw.filter(|r| !r.is_empty()) {
        path = format!("{path}&{raw}");
    }
    let answers = pq.get_json(&path).await;
    // A peer that did not answer (down, restarting): its verdicts as it
    // last told them, so that its traces do not vanish while it is down.
    let silent = pq.report().unanswered;
    let told = s
        .cluster
        .lock()
        .expect("cluster view lock")
        .told_by(silent.iter().map(|u| u.peer.as_str()));
    for (rev, v) in told.iter().filter(|(_, v)| matches(v)) {
        items.push(list_item(*rev, v));
        total += 1;
    }
    for (_, answer) in answers {
        let Some(answer) = answer else { continue };
        total += answer["total"].as_u64().unwrap_or(0) as usize;
        if let Some(list) = answer["traces"].as_array() {
            items.extend(list.iter().cloned());
        }
    }
    let mut by_id: BTreeMap<String, (Value, u32)> = BTreeMap::new();
    for v in items {
        let id = v["trace_id"].as_str().unwrap_or_default().to_string();
        match by_id.get_mut(&id) {
            None => {
                by_id.insert(id, (v, 1));
            }
            Some((kept, holders)) => {
                *holders += 1;
                total -= 1;
                if more_complete(&v, kept) {
                    *kept = v;
                }
            }
        }
    }
    // A line judged apart from its trace (its collector died before the
    // trace's holder claimed it) is not a request of its own: the trace
    // naming its request id — listed, live here or told by a peer — counts
    // it, as in the incidents and SQL.
    let apart = {
        let view = s.cluster.lock().expect("cluster view lock");
        let live = s.live.lock().expect("live state lock");
        let listed = by_id.values().map(|(v, _)| {
            (
                v["trace_id"].as_str().unwrap_or_default(),
                v["request_id"].as_str(),
            )
        });
        let known = live
            .verdicts()
            .map(|(_, v)| v)
            .chain(
                view.others
                    .iter()
                    .flat_map(|o| o.verdicts.iter().map(|(_, v)| v)),
            )
            .map(|v| (v.trace_id.as_str(), v.request_id.as_deref()));
        overtime_diagnose::live::judged_apart(listed.chain(known))
    };
    let before = by_id.len();
    by_id.retain(|id, _| !apart.contains(id));
    total = total.saturating_sub(before - by_id.len());
    let mut items: Vec<(Value, u32)> = by_id.into_values().collect();
    items.sort_by(|a, b| listing_order(&a.0, &b.0));
    items.truncate(limit);
    // The split traces of this page, judged again from every row of them;
    // one that no longer matches the search leaves it.
    let mut page = Vec::with_capacity(items.len());
    let mut rejudged = 0;
    for (v, holders) in items {
        if holders < 2 || rejudged == MAX_REJUDGED {
            page.push(v);
            continue;
        }
        rejudged += 1;
        let id = v["trace_id"].as_str().unwrap_or_default().to_string();
        let rev = v["revision"].as_u64().unwrap_or(0) as u32;
        match judge_from_rows(&s, Some(&pq), &id).await? {
            Some(j) if matches(&j) => page.push(list_item(rev.max(1), &j)),
            Some(_) => total -= 1,
            None => page.push(v),
        }
    }
    page.sort_by(listing_order);
    Ok(
        Json(serde_json::json!({"traces": page, "total": total, "peers": pq.report()}))
            .into_response(),
    )
}

/// Newest first, then by trace id.
fn listing_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    let key = |v: &Value| {
        (
            v["started_at"].as_str().unwrap_or_default().to_string(),
            v["trace_id"].as_str().unwrap_or_default().to_string(),
        )
    };
    let (ka, kb) = (key(a), key(b));
    kb.0.cmp(&ka.0).then(ka.1.cmp(&kb.1))
}

/// How far from a trace's spans its gateway lines are looked for by
/// request id: a line is logged when the request ends.
const REQUEST_JOIN_MARGIN_US: i64 = 15 * 60 * 1_000_000;

/// `trace_id` judged from every row of it: the store (this collector's
/// memtable, every collector's Parquet) and, with `pq`, the peers'
/// unflushed rows — the gateway lines that logged no trace id found by the
/// request ids its spans carry, as the live join finds them. `None` when
/// no row of it is found.
pub(crate) async fn judge_from_rows(
    s: &Arc<AppState>,
    pq: Option<&Arc<PeerQuery>>,
    trace_id: &str,
) -> Result<Option<Verdict>, ApiError> {
    let (from_gw, from_spans) = match pq {
        Some(pq) => futures::join!(
            pq.unflushed(Table::GatewayRequests, None, None, Some(trace_id)),
            pq.unflushed(Table::Spans, None, None, Some(trace_id))
        ),
        None => (Vec::new(), Vec::new()),
    };
    let (store, id) = (s.store.clone(), trace_id.to_string());
    let (mut gw, spans) = blocking(move || {
        store
            .trace_with(&id, &from_gw, &from_spans)
            .map_err(|e| e.to_string())
    })
    .await?;
    if spans.iter().all(|b| b.num_rows() == 0) && gw.iter().all(|b| b.num_rows() == 0) {
        return Ok(None);
    }
    if let Some((ids, from, to)) = unjoined_requests(&gw, &spans) {
        let peer_rows = match pq {
            Some(pq) => {
                pq.unflushed(Table::GatewayRequests, Some(from), Some(to), None)
                    .await
            }
            None => Vec::new(),
        };
        let store = s.store.clone();
        gw.extend(
            blocking(move || {
                store
                    .requests_with(&ids, from, to, &peer_rows)
                    .map_err(|e| e.to_string())
            })
            .await?,
        );
    }
    let cfg = overtime_diagnose::DiagnoseConfig {
        all_verdicts: true,
        ..s.diagnose.clone()
    };
    let id = trace_id.to_string();
    blocking(move || {
        let d =
            overtime_diagnose::diagnose_batches(&gw, &spans, &cfg).map_err(|e| e.to_string())?;
        Ok(d.verdicts.into_iter().find(|v| v.trace_id == id))
    })
    .await
}

/// The request ids the spans carry that no gateway row in `gw` has, and
/// the time range their lines would be logged in.
fn unjoined_requests(gw: &[RecordBatch], spans: &[RecordBatch]) -> Option<(Vec<String>, i64, i64)> {
    let strings = |b: &RecordBatch, name: &str| -> Vec<String> {
        let Some(c) = b.column_by_name(name) else {
            return Vec::new();
        };
        let Ok(c) = arrow::compute::cast(c, &arrow::datatypes::DataType::Utf8) else {
            return Vec::new();
        };
        let c = arrow::array::cast::as_string_array(c.as_ref());
        c.iter().flatten().map(str::to_string).collect()
    };
    let logged: BTreeSet<String> = gw.iter().flat_map(|b| strings(b, "request_id")).collect();
    let mut ids: Vec<String> = spans
        .iter()
        .flat_map(|b| strings(b, "request_id"))
        .filter(|id| !logged.contains(id))
        .collect();
    ids.sort();
    ids.dedup();
    let starts = spans.iter().filter_map(|b| {
        let c = b.column_by_name("start_time")?;
        let c = c
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()?;
        Some((arrow::compute::min(c)?, arrow::compute::max(c)?))
    });
    let (from, to) = starts.fold((i64::MAX, i64::MIN), |(lo, hi), (a, b)| {
        (lo.min(a), hi.max(b))
    });
    (!ids.is_empty() && from <= to).then(|| {
        (
            ids,
            from.saturating_sub(REQUEST_JOIN_MARGIN_US),
            to.saturating_add(REQUEST_JOIN_MARGIN_US),
        )
    })
}

/// `f` on the blocking pool, its error as the API's.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e))
}

/// A verdict as `GET /api/traces/{id}` answers it: with its revision
/// (when it has one) and the peers' report (when they were asked).
fn trace_doc(v: &Verdict, rev: Option<u32>, pq: Option<&Arc<PeerQuery>>) -> Response {
    let mut doc = serde_json::to_value(v).unwrap_or_default();
    if let Some(rev) = rev {
        doc["revision"] = rev.into();
    }
    if let Some(pq) = pq {
        doc["peers"] = serde_json::to_value(pq.report()).unwrap_or_default();
    }
    Json(doc).into_response()
}

pub(crate) async fn get_trace(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(lq): Query<LocalQuery>,
) -> Result<Response, ApiError> {
    let id = id.to_ascii_lowercase();
    let own = s
        .live
        .lock()
        .expect("live state lock")
        .verdict(&id)
        .map(|(r, v)| (r, v.clone()));
    let pq = peer_query(&s, &lq.local);
    let Some(pq) = pq else {
        if let Some((rev, v)) = own {
            return Ok(trace_doc(&v, Some(rev), None));
        }
        if is_local(&lq.local) {
            return Err(ApiError::not_found(format!(
                "no trace {id} in this collector's live verdicts"
            )));
        }
        return match judge_from_rows(&s, None, &id).await? {
            Some(v) => Ok(trace_doc(&v, None, None)),
            None => Err(not_found(&id, None)),
        };
    };
    if let Some(answer) = from_its_holder(&s, &id, own.as_ref()).await {
        return Ok(answer);
    }
    // Every collector that judged it live, this one included.
    let path = format!(
        "/api/traces/{}?local=1",
        percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC)
    );
    let mut held: Vec<Value> = own
        .iter()
        .map(|(rev, v)| {
            let mut doc = serde_json::to_value(v).unwrap_or_default();
            doc["revision"] = (*rev).into();
            doc
        })
        .collect();
    held.extend(pq.get_json(&path).await.into_iter().filter_map(|(_, a)| a));
    // Judged from every row of it, wherever they are: a collector that
    // judged it may have held only part of it (a crash, a rebalance), and
    // then another may not know the trace id at all (its part was a
    // gateway line joined by request id).
    let rev = held.iter().filter_map(|d| d["revision"].as_u64()).max();
    match judge_from_rows(&s, Some(&pq), &id).await? {
        Some(v) => Ok(trace_doc(&v, rev.map(|r| r as u32), Some(&pq))),
        None => match held
            .into_iter()
            .reduce(|a, b| if more_complete(&b, &a) { b } else { a })
        {
            Some(mut doc) => {
                doc["peers"] = serde_json::to_value(pq.report()).unwrap_or_default();
                Ok(Json(doc).into_response())
            }
            None => Err(not_found(&id, Some(&pq))),
        },
    }
}

/// The answer for a trace exactly one collector holds with a verdict —
/// the usual case: its records are keyed to one partition, and a split
/// trace is completed before it is judged — from that collector alone:
/// this one's live verdict, or the one holder asked (`local=1`), or, while
/// it does not answer, the verdict it last told. `None` when no collector
/// or several hold it, or its holder has no verdict: those are judged
/// from every row (what the mirror cannot know, it does not guess).
async fn from_its_holder(
    s: &Arc<AppState>,
    id: &str,
    own: Option<&(u32, Verdict)>,
) -> Option<Response> {
    let holders = s.cluster.lock().expect("cluster view lock").holders(id)?;
    match (own, holders.as_slice()) {
        (Some((rev, v)), []) => Some(trace_doc(v, Some(*rev), Some(&s.peers.lookup(vec![])))),
        (
            None,
            [
                crate::cluster_view::Holder {
                    url,
                    told: Some((rev, told)),
                },
            ],
        ) => {
            let pq = s.peers.lookup(vec![url.clone()]);
            let path = format!(
                "/api/traces/{}?local=1",
                percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC)
            );
            let answer = pq.get_json(&path).await.into_iter().next();
            let mut doc = match answer {
                Some((_, Some(doc))) => doc,
                // It holds no verdict now (healthy after all, or evicted):
                // judged from the rows.
                Some((_, None)) => return None,
                // Down: its last word.
                None => {
                    let mut doc = serde_json::to_value(told).unwrap_or_default();
                    doc["revision"] = (*rev).into();
                    doc
                }
            };
            doc["peers"] = serde_json::to_value(pq.report()).unwrap_or_default();
            Some(Json(doc).into_response())
        }
        _ => None,
    }
}

/// 404 for a trace with no records anywhere, naming the peers that did
/// not answer (so were not searched).
fn not_found(id: &str, pq: Option<&Arc<PeerQuery>>) -> ApiError {
    let silent = pq.map(|p| p.report().unanswered).unwrap_or_default();
    let mut msg = format!("no trace {id} (no records for it in the store)");
    if !silent.is_empty() {
        let names: Vec<&str> = silent.iter().map(|u| u.peer.as_str()).collect();
        msg.push_str(&format!(
            "; not answering, so not searched: {}",
            names.join(", ")
        ));
    }
    ApiError::not_found(msg)
}
