//! The read side of docs/interfaces.md: traces (verdicts), incidents, SQL, health.

use crate::AppState;
use crate::cluster::PeerQuery;
use crate::error::ApiError;
use crate::sql;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use overtime_diagnose::markdown;
use overtime_model::{Outcome, Table, Verdict};
use overtime_store::PeerSource;

/// With `format=arrow`, the peers a query asked and those that did not
/// answer (the JSON of `peers` in a JSON answer).
pub const PEERS_HEADER: &str = "x-overtime-peers";
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(crate) async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

/// 200 once the WAL is replayed and while the store takes data; 503
/// while starting, and while the store cannot write (a full disk): the
/// collector refuses data then, so a balancer should send it elsewhere.
pub(crate) async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    if s.ready.load(Ordering::Relaxed) {
        match s.store.failing() {
            None => Json(serde_json::json!({"status": "ready"})).into_response(),
            Some(why) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_failing",
                format!("the store cannot take data: {why}"),
            )
            .into_response(),
        }
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "recovering the WAL; not ready yet",
        )
        .into_response()
    }
}

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

fn is_local(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("1" | "true"))
}

/// The peers to ask for this request, unless it is itself a peer's
/// `local=1` request or no peers are configured.
pub(crate) fn peer_query(s: &AppState, local: &Option<String>) -> Option<Arc<PeerQuery>> {
    (!is_local(local) && !s.peers.is_empty()).then(|| s.peers.query())
}

/// `2026-11-29T10:00:00Z` or epoch milliseconds.
fn time_param(v: &Option<String>, name: &str) -> Result<Option<String>, ApiError> {
    let Some(v) = v.as_deref().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if let Ok(ms) = v.parse::<i64>() {
        return Ok(Some(overtime_diagnose::verdict::rfc3339(ms * 1000)));
    }
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| Some(overtime_diagnose::verdict::rfc3339(t.timestamp_micros())))
        .map_err(|_| {
            ApiError::bad_request(
                "bad_time",
                format!("{name}={v:?}: use RFC 3339 or epoch milliseconds"),
            )
        })
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
    let (from, to) = (time_param(&q.from, "from")?, time_param(&q.to, "to")?);
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
    let (mut items, mut total) = {
        let live = s.live.lock().expect("live state lock");
        let mut rows: Vec<(u32, &Verdict)> = live
            .verdicts()
            .filter(|(_, v)| outcome.is_none_or(|o| v.outcome == o))
            .filter(|(_, v)| {
                q.kind
                    .as_deref()
                    .filter(|k| !k.is_empty())
                    .is_none_or(|k| v.root_cause.kind.as_str() == k)
            })
            .filter(|(_, v)| {
                trace_prefix
                    .as_deref()
                    .is_none_or(|t| v.trace_id.starts_with(t))
            })
            .filter(|(_, v)| {
                request_prefix
                    .is_none_or(|r| v.request_id.as_deref().is_some_and(|id| id.starts_with(r)))
            })
            .filter(|(_, v)| from.as_deref().is_none_or(|f| v.started_at.as_str() >= f))
            .filter(|(_, v)| to.as_deref().is_none_or(|t| v.started_at.as_str() < t))
            .collect();
        rows.sort_by(|a, b| {
            b.1.started_at
                .cmp(&a.1.started_at)
                .then(a.1.trace_id.cmp(&b.1.trace_id))
        });
        let total = rows.len();
        let items: Vec<serde_json::Value> = rows
        .into_iter()
        .take(limit)
        .map(|(rev, v)| {
            serde_json::json!({
                "trace_id": v.trace_id, "request_id": v.request_id, "started_at": v.started_at,
                "outcome": v.outcome, "kind": v.root_cause.kind, "component": v.root_cause.component,
                "share": v.root_cause.share, "summary": v.root_cause.summary,
                "gateway_status": v.gateway.as_ref().and_then(|g| g.status),
                "elapsed_ms": v.budget.consumed_ms, "revision": rev,
            })
        })
        .collect();
        (items, total)
    };
    let Some(pq) = peer_query(&s, &q.local) else {
        return Ok(Json(serde_json::json!({"traces": items, "total": total})).into_response());
    };
    // The same search on every peer's live verdicts, merged and cut to
    // `limit` again; a trace two collectors both judged is listed once.
    let mut path = String::from("/api/traces?local=1");
    if let Some(raw) = raw.filter(|r| !r.is_empty()) {
        path = format!("{path}&{raw}");
    }
    for (_, answer) in pq.get_json(&path).await {
        let Some(answer) = answer else { continue };
        total += answer["total"].as_u64().unwrap_or(0) as usize;
        if let Some(list) = answer["traces"].as_array() {
            items.extend(list.iter().cloned());
        }
    }
    let key = |v: &serde_json::Value| {
        (
            v["started_at"].as_str().unwrap_or_default().to_string(),
            v["trace_id"].as_str().unwrap_or_default().to_string(),
        )
    };
    items.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.cmp(&ka.0).then(ka.1.cmp(&kb.1))
    });
    let before = items.len();
    let mut seen = std::collections::HashSet::new();
    items.retain(|v| seen.insert(v["trace_id"].as_str().unwrap_or_default().to_string()));
    total -= before - items.len();
    items.truncate(limit);
    Ok(
        Json(serde_json::json!({"traces": items, "total": total, "peers": pq.report()}))
            .into_response(),
    )
}

pub(crate) async fn get_trace(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(lq): Query<LocalQuery>,
) -> Result<Response, ApiError> {
    let id = id.to_ascii_lowercase();
    if let Some((rev, v)) = s
        .live
        .lock()
        .expect("live state lock")
        .verdict(&id)
        .map(|(r, v)| (r, v.clone()))
    {
        let mut doc = serde_json::to_value(&v).unwrap_or_default();
        doc["revision"] = rev.into();
        return Ok(Json(doc).into_response());
    }
    if is_local(&lq.local) {
        return Err(ApiError::not_found(format!(
            "no trace {id} in this collector's live verdicts"
        )));
    }
    let pq = peer_query(&s, &lq.local);
    let (mut from_gw, mut from_spans) = (Vec::new(), Vec::new());
    if let Some(pq) = &pq {
        // A peer that judged it live has the verdict with its revision.
        let path = format!(
            "/api/traces/{}?local=1",
            percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC)
        );
        for (_, answer) in pq.get_json(&path).await {
            if let Some(mut doc) = answer {
                doc["peers"] = serde_json::to_value(pq.report()).unwrap_or_default();
                return Ok(Json(doc).into_response());
            }
        }
        (from_gw, from_spans) = futures::join!(
            pq.unflushed(Table::GatewayRequests, None, None, Some(&id)),
            pq.unflushed(Table::Spans, None, None, Some(&id))
        );
    }
    // Not in any live window: diagnose it from the store (every
    // collector's Parquet, and the peers' unflushed rows).
    let store = s.store.clone();
    let cfg = s.diagnose.clone();
    let lookup = id.clone();
    let found = tokio::task::spawn_blocking(move || -> Result<Option<Verdict>, String> {
        let (g, sp) = store
            .trace_with(&lookup, &from_gw, &from_spans)
            .map_err(|e| e.to_string())?;
        if g.iter().all(|b| b.num_rows() == 0) && sp.iter().all(|b| b.num_rows() == 0) {
            return Ok(None);
        }
        let cfg = overtime_diagnose::DiagnoseConfig {
            all_verdicts: true,
            ..cfg
        };
        let d = overtime_diagnose::diagnose_batches(&g, &sp, &cfg).map_err(|e| e.to_string())?;
        Ok(d.verdicts.into_iter().find(|v| v.trace_id == lookup))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e))?;
    match (found, pq) {
        (Some(v), None) => Ok(Json(v).into_response()),
        (Some(v), Some(pq)) => {
            let mut doc = serde_json::to_value(&v).unwrap_or_default();
            doc["peers"] = serde_json::to_value(pq.report()).unwrap_or_default();
            Ok(Json(doc).into_response())
        }
        (None, pq) => {
            let silent = pq.map(|p| p.report().unanswered).unwrap_or_default();
            let mut msg = format!("no trace {id} (no records for it in the store)");
            if !silent.is_empty() {
                let names: Vec<&str> = silent.iter().map(|u| u.peer.as_str()).collect();
                msg.push_str(&format!(
                    "; not answering, so not searched: {}",
                    names.join(", ")
                ));
            }
            Err(ApiError::not_found(msg))
        }
    }
}

pub(crate) async fn list_incidents(State(s): State<Arc<AppState>>) -> Response {
    let incidents = s.incidents();
    let items: Vec<serde_json::Value> = incidents
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id, "fingerprint": r.fingerprint, "kind": r.kind, "component": r.component,
                "status": r.status, "window": r.window, "headline": r.headline, "trace_count": r.trace_count,
            })
        })
        .collect();
    Json(serde_json::json!({"incidents": items})).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct FormatQuery {
    pub format: Option<String>,
}

pub(crate) async fn get_incident(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<FormatQuery>,
) -> Result<Response, ApiError> {
    let incidents = s.incidents();
    let r = incidents
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| ApiError::not_found(format!("no incident {id}")))?;
    match q.format.as_deref() {
        Some("markdown") | Some("md") => Ok((
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            markdown::incident(&r),
        )
            .into_response()),
        None | Some("json") => Ok(Json(r).into_response()),
        Some(f) => Err(ApiError::bad_request(
            "bad_format",
            format!("format={f:?}: json or markdown"),
        )),
    }
}

#[derive(Debug, Deserialize)]
struct SqlBody {
    sql: String,
    #[serde(default)]
    format: Option<String>,
}

/// `POST /api/sql`: `{"sql": "...", "format": "json"|"arrow"}`, or the SQL
/// as a text body.
pub(crate) async fn post_sql(
    State(s): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("bad_body", "the body is not UTF-8"))?;
    let req = match serde_json::from_str::<SqlBody>(text) {
        Ok(b) => b,
        Err(_) if !text.trim_start().starts_with('{') => SqlBody {
            sql: text.to_string(),
            format: None,
        },
        Err(e) => {
            return Err(ApiError::bad_request(
                "bad_body",
                format!("expected {{\"sql\": \"...\"}}: {e}"),
            ));
        }
    };
    let incidents = s.incidents();
    let verdicts = {
        let live = s.live.lock().expect("live state lock");
        live.verdicts()
            .map(|(r, v)| (r, v.clone()))
            .collect::<Vec<_>>()
    };
    let to_api = |e: sql::SqlError| {
        let status = match e {
            sql::SqlError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.reason(), e.to_string())
    };
    let pq = peer_query(&s, &None);
    let peers = pq.clone().map(|p| p as Arc<dyn PeerSource>);
    let ctx =
        sql::session_with_peers(&s.store, &verdicts, &incidents, &s.sql, peers).map_err(to_api)?;
    let result = sql::run(&ctx, &req.sql, &s.sql).await.map_err(to_api)?;
    let report = pq.map(|p| p.report());
    match req.format.as_deref() {
        Some("arrow") => {
            let mut buf = Vec::new();
            let schema = result.batches.first().map(|b| b.schema());
            if let Some(schema) = schema {
                let mut w =
                    arrow::ipc::writer::StreamWriter::try_new(&mut buf, &schema).map_err(|e| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                    })?;
                for b in &result.batches {
                    w.write(b).map_err(|e| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                    })?;
                }
                w.finish().map_err(|e| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                })?;
            }
            let mut resp = (
                [(header::CONTENT_TYPE, "application/vnd.apache.arrow.stream")],
                buf,
            )
                .into_response();
            if let Some(r) = report {
                let v = serde_json::to_string(&r).unwrap_or_default();
                if let Ok(v) = header::HeaderValue::from_str(&v) {
                    resp.headers_mut().insert(PEERS_HEADER, v);
                }
            }
            Ok(resp)
        }
        None | Some("json") => {
            let rows = sql::to_json_rows(&result.batches).map_err(to_api)?;
            let columns: Vec<String> = result
                .batches
                .first()
                .map(|b| {
                    b.schema()
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect()
                })
                .unwrap_or_default();
            let mut doc = serde_json::json!({"columns": columns, "rows": rows, "row_count": result.rows, "truncated": result.truncated});
            if let Some(r) = report {
                doc["peers"] = serde_json::to_value(r).unwrap_or_default();
            }
            Ok(Json(doc).into_response())
        }
        Some(f) => Err(ApiError::bad_request(
            "bad_format",
            format!("format={f:?}: json or arrow"),
        )),
    }
}
