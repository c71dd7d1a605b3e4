//! The read side of docs/interfaces.md: incidents, SQL, health (the
//! traces are `traces_api`'s).

use crate::AppState;
use crate::cluster::PeerQuery;
use crate::error::ApiError;
use crate::sql;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use overtime_diagnose::markdown;
use overtime_store::PeerSource;

/// With `format=arrow`, the peers a query asked and those that did not
/// answer (the JSON of `peers` in a JSON answer).
pub const PEERS_HEADER: &str = "x-overtime-peers";
/// With `format=arrow`, present (value `true`) when the answer was cut at
/// `[sql] max_rows` (the `truncated` of a JSON answer): an Arrow stream
/// has no field of its own to say so.
pub const TRUNCATED_HEADER: &str = "x-overtime-truncated";
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

/// A query parameter naming an instant (`from`, `to`): RFC 3339 or epoch
/// milliseconds, read as [`overtime_model::Timestamp`] reads them (the one
/// time type); empty or absent is `None`.
pub(crate) fn time_param(
    v: Option<&str>,
    name: &str,
) -> Result<Option<overtime_model::Timestamp>, ApiError> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    v.parse()
        .map(Some)
        .map_err(|e| ApiError::bad_request("bad_time", format!("{name}={e}")))
}

pub(crate) fn is_local(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("1" | "true"))
}

/// The peers to ask for this request, unless it is itself a peer's
/// `local=1` request or no peers are configured.
pub(crate) fn peer_query(s: &AppState, local: &Option<String>) -> Option<Arc<PeerQuery>> {
    (!is_local(local) && !s.peers.is_empty()).then(|| s.peers.query())
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

/// `GET /api/kinds`: every root-cause kind as its rule describes it
/// (`name`, `label`, `description`, `color`), in the order the rules are
/// tried, and whether this collector's rule for it is `enabled`
/// (`[diagnose] disabled_rules`). The UI's menus and charts read it.
pub(crate) async fn list_kinds(State(s): State<Arc<AppState>>) -> Response {
    let kinds: Vec<serde_json::Value> = overtime_diagnose::root_cause_kinds()
        .into_iter()
        .map(|k| {
            let enabled = !s.diagnose.disabled_rules.contains(k.name);
            let mut v = serde_json::to_value(&k).expect("a kind is plain strings");
            v["enabled"] = enabled.into();
            v
        })
        .collect();
    Json(serde_json::json!({"kinds": kinds})).into_response()
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
    let to_api = |e: sql::SqlError| {
        let status = match e {
            sql::SqlError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.reason(), e.to_string())
    };
    let pq = peer_query(&s, &None);
    let peers = pq.clone().map(|p| p as Arc<dyn PeerSource>);
    let ctx = sql::session_of(&s, peers).map_err(to_api)?;
    let result = sql::run(&ctx, &req.sql, &s.sql).await.map_err(to_api)?;
    // The verdicts and incidents tables come from the peers' last told
    // state: a peer that did not answer its last refresh is named too.
    let report = pq.map(|p| {
        let mut r = p.report();
        let view = s.cluster.lock().expect("cluster view lock");
        for u in &view.report.unanswered {
            if !r.unanswered.iter().any(|x| x.peer == u.peer) {
                r.unanswered.push(u.clone());
            }
        }
        r
    });
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
            if result.truncated {
                resp.headers_mut()
                    .insert(TRUNCATED_HEADER, header::HeaderValue::from_static("true"));
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
