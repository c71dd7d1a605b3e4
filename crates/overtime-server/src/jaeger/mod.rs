//! The Jaeger query API over the store, under `/jaeger`: what Grafana's
//! built-in Jaeger data source (and a Jaeger UI) asks a Jaeger query
//! service, answered from overtime's spans with each trace's verdict on its
//! root span ([`model`]).
//!
//! Routes (the data source's URL is `http://<overtime>/jaeger`, since
//! `/api/traces` is overtime's own listing of verdicts):
//! - `GET /jaeger/api/services`: every service that wrote a span;
//! - `GET /jaeger/api/services/{service}/operations` and
//!   `GET /jaeger/api/operations?service=&spanKind=`: its span names;
//! - `GET /jaeger/api/traces?service=&operation=&start=&end=&minDuration=&maxDuration=&tags=&tag=&limit=&traceID=`:
//!   a search, `start`/`end` in µs (default: the last 2 days), durations
//!   as Go durations (`1.5s`, `300ms`), `tags` a JSON object and `tag`
//!   `key:value`, each matched against one span's tags, its process's or
//!   its logs' fields; a trace matches when one span of it matches every
//!   condition;
//! - `GET /jaeger/api/traces/{traceID}`: one trace (404 `trace not found`).
//!
//! Design rules (Jaeger's query service, before its v1 search endpoints
//! were removed, is the reference; its answers are held equal in
//! `tests/jaeger.rs`):
//! - Every answer is Jaeger's envelope `{"data", "total", "limit",
//!   "offset", "errors"}`; an error is that envelope with `errors:
//!   [{"code", "msg"}]` and the status, as text (Jaeger writes it with Go's
//!   `http.Error`); a trace asked by `traceID=` and not found is an error
//!   entry of a 200, as Jaeger does.
//! - The same bearer token as the rest of the API (a Grafana data source
//!   sends it as a custom `Authorization` header).
//! - Bounded: a search reads at most [`MAX_LIMIT`] traces, and a search
//!   with tags looks at most [`MAX_CANDIDATES`] candidate traces (those
//!   with a span matching the service, operation, time and durations,
//!   newest first); one by the verdict's tags (`overtime.root_cause`,
//!   `overtime.component`, `overtime.outcome`) starts from the verdicts
//!   instead. Every store query has `[sql]`'s time and memory limits.

pub mod model;
pub mod params;

use crate::AppState;
use crate::api::peer_query;
use crate::cluster::PeerQuery;
use crate::store_query::{query, strings};
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::prelude::{col, lit};
use model::{jaeger_trace, tag_text};
use overtime_model::{SpanRecord, Table, Verdict, span_records};
use overtime_store::PeerSource;
use params::SearchQuery;
use serde_json::{Value, json};
use std::sync::Arc;

/// Most traces one search answers with.
pub const MAX_LIMIT: usize = 1_000;
/// Most candidate traces a search with tags looks at.
pub const MAX_CANDIDATES: usize = 1_000;
/// Most services or operations listed.
const MAX_NAMES: usize = 10_000;

/// The routes, to be mounted behind the token.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/jaeger/api/services", get(services))
        .route(
            "/jaeger/api/services/{service}/operations",
            get(operations_legacy),
        )
        .route("/jaeger/api/operations", get(operations))
        .route("/jaeger/api/traces", get(search))
        .route("/jaeger/api/traces/{id}", get(trace))
}

/// An answer in Jaeger's envelope.
fn envelope(data: Value, total: usize, errors: Value) -> Response {
    let body = json!({"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// An error as Jaeger's `handleError` writes it.
#[derive(Debug)]
pub(crate) struct JaegerError {
    status: StatusCode,
    msg: String,
}

impl JaegerError {
    pub(crate) fn new(status: StatusCode, msg: impl Into<String>) -> Self {
        JaegerError {
            status,
            msg: msg.into(),
        }
    }
    fn bad(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, msg)
    }
    fn internal(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, msg)
    }
}

impl From<crate::store_query::QueryError> for JaegerError {
    fn from(e: crate::store_query::QueryError) -> Self {
        JaegerError::new(e.status, e.msg)
    }
}

impl IntoResponse for JaegerError {
    fn into_response(self) -> Response {
        let body = json!({"data": null, "total": 0, "limit": 0, "offset": 0,
            "errors": [{"code": self.status.as_u16(), "msg": self.msg}]});
        (
            self.status,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            format!("{body}\n"),
        )
            .into_response()
    }
}

/// The distinct values of `column` among the spans matching `filter`,
/// sorted.
async fn names(
    s: &AppState,
    column: &str,
    filter: Option<datafusion::prelude::Expr>,
) -> Result<Vec<String>, JaegerError> {
    let c = column.to_string();
    let batches = query(s, "spans", move |df| {
        let df = match filter {
            Some(f) => df.filter(f)?,
            None => df,
        };
        df.filter(col(&c).is_not_null())?
            .select(vec![col(&c)])?
            .distinct()?
            .sort(vec![col(&c).sort(true, false)])?
            .limit(0, Some(MAX_NAMES))
    })
    .await?;
    Ok(strings(&batches, 0))
}

async fn services(State(s): State<Arc<AppState>>) -> Result<Response, JaegerError> {
    let list = names(&s, "service", None).await?;
    let n = list.len();
    Ok(envelope(json!(list), n, Value::Null))
}

async fn operations_legacy(
    State(s): State<Arc<AppState>>,
    Path(service): Path<String>,
) -> Result<Response, JaegerError> {
    let list = names(&s, "name", Some(col("service").eq(lit(service)))).await?;
    let n = list.len();
    Ok(envelope(json!(list), n, Value::Null))
}

/// `GET /api/operations?service=&spanKind=`: `[{"name", "spanKind"}]`.
async fn operations(
    State(s): State<Arc<AppState>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, JaegerError> {
    let q = params::pairs(raw.as_deref());
    let service = params::first(&q, "service")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| JaegerError::bad("parameter 'service' is required"))?;
    let mut f = col("service").eq(lit(service.to_string()));
    if let Some(k) = params::first(&q, "spanKind").filter(|k| !k.is_empty()) {
        f = f.and(col("kind").eq(lit(k.to_string())));
    }
    let batches = query(&s, "spans", move |df| {
        df.filter(f)?
            .select(vec![col("name"), col("kind")])?
            .distinct()?
            .sort(vec![
                col("name").sort(true, false),
                col("kind").sort(true, true),
            ])?
            .limit(0, Some(MAX_NAMES))
    })
    .await?;
    let (names, kinds) = (strings(&batches, 0), kinds(&batches));
    let data: Vec<Value> = names
        .iter()
        .zip(kinds)
        .map(|(n, k)| json!({"name": n, "spanKind": k}))
        .collect();
    let n = data.len();
    Ok(envelope(json!(data), n, Value::Null))
}

/// Column 1 as text, nulls as "" (a span of no kind).
fn kinds(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let Ok(c) = arrow::compute::cast(b.column(1), &DataType::Utf8) else {
            continue;
        };
        let c = arrow::array::cast::as_string_array(c.as_ref());
        out.extend((0..c.len()).map(|r| {
            if c.is_valid(r) {
                c.value(r).to_string()
            } else {
                String::new()
            }
        }));
    }
    out
}

/// Every span of `trace_id` (32 hex) from the store and the peers'
/// unflushed rows; rows that cannot be read are counted.
async fn spans_of(
    s: &Arc<AppState>,
    pq: Option<&Arc<PeerQuery>>,
    trace_id: &str,
) -> Result<(Vec<SpanRecord>, usize), JaegerError> {
    let from_peers = match pq {
        Some(pq) => pq.unflushed(Table::Spans, None, None, Some(trace_id)).await,
        None => Vec::new(),
    };
    let (store, id) = (s.store.clone(), trace_id.to_string());
    tokio::task::spawn_blocking(move || {
        let (_, batches) = store
            .trace_with(&id, &[], &from_peers)
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        let mut bad = 0;
        for b in &batches {
            match span_records(b) {
                Ok(r) => rows.extend(r),
                Err(_) => bad += b.num_rows(),
            }
        }
        Ok::<_, String>((rows, bad))
    })
    .await
    .map_err(|e| JaegerError::internal(e.to_string()))?
    .map_err(JaegerError::internal)
}

/// The trace's verdict: alone, the live one (else judged from the store);
/// with peers, judged from every row of it, as `GET /api/traces/{id}`.
async fn verdict_of(
    s: &Arc<AppState>,
    pq: Option<&Arc<PeerQuery>>,
    trace_id: &str,
) -> Option<Verdict> {
    if pq.is_none() {
        let live = s.live.lock().expect("live state lock");
        if let Some((_, v)) = live.verdict(trace_id) {
            return Some(v.clone());
        }
    }
    crate::traces_api::judge_from_rows(s, pq, trace_id)
        .await
        .ok()
        .flatten()
}

/// `GET /api/traces/{traceID}`.
async fn trace(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, JaegerError> {
    let id = params::trace_id(&id)?;
    let q = params::pairs(raw.as_deref());
    params::micros(&q, "start")?;
    params::micros(&q, "end")?;
    params::boolean(&q, "raw")?;
    let pq = peer_query(&s, &None);
    let (spans, _) = spans_of(&s, pq.as_ref(), &id).await?;
    if spans.is_empty() {
        return Err(JaegerError::new(StatusCode::NOT_FOUND, "trace not found"));
    }
    let v = verdict_of(&s, pq.as_ref(), &id).await;
    Ok(envelope(
        json!([jaeger_trace(&spans, v.as_ref())]),
        0,
        Value::Null,
    ))
}

/// `GET /api/traces?…`: by `traceID=`, else a search.
async fn search(
    State(s): State<Arc<AppState>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, JaegerError> {
    let q = SearchQuery::parse(raw.as_deref(), crate::pipeline::now_us())?;
    let pq = peer_query(&s, &None);
    if !q.trace_ids.is_empty() {
        let mut data = Vec::new();
        let mut errors = Vec::new();
        for id in &q.trace_ids {
            let (spans, _) = spans_of(&s, pq.as_ref(), id).await?;
            if spans.is_empty() {
                errors
                    .push(json!({"msg": "trace not found", "traceID": model::jaeger_trace_id(id)}));
                continue;
            }
            let v = live_verdict(&s, id);
            data.push(jaeger_trace(&spans, v.as_ref()));
        }
        let errors = if errors.is_empty() {
            Value::Null
        } else {
            json!(errors)
        };
        return Ok(envelope(json!(data), 0, errors));
    }
    let candidates = candidates(&s, &q).await?;
    let mut data = Vec::new();
    for id in candidates {
        if data.len() == q.limit {
            break;
        }
        let (spans, _) = spans_of(&s, pq.as_ref(), &id).await?;
        if spans.is_empty() {
            continue;
        }
        let v = live_verdict(&s, &id);
        let t = jaeger_trace(&spans, v.as_ref());
        if q.matches(&t) {
            data.push(t);
        }
    }
    Ok(envelope(json!(data), 0, Value::Null))
}

/// This collector's live verdict of a trace, if it has one.
fn live_verdict(s: &AppState, id: &str) -> Option<Verdict> {
    let live = s.live.lock().expect("live state lock");
    live.verdict(id).map(|(_, v)| v.clone())
}

/// The trace ids a search looks at, newest first.
async fn candidates(s: &Arc<AppState>, q: &SearchQuery) -> Result<Vec<String>, JaegerError> {
    let by_verdict = q.verdict_tags();
    let want = if q.tags.is_empty() {
        q.limit
    } else {
        MAX_CANDIDATES
    };
    if !by_verdict.is_empty() {
        // Traces whose verdict says so, newest first, in the time range.
        let live = s.live.lock().expect("live state lock");
        let mut found: Vec<(i64, String)> = live
            .verdicts()
            .filter(|(_, v)| {
                by_verdict.iter().all(|(k, want)| {
                    let got = match *k {
                        "overtime.root_cause" => v.root_cause.kind.as_str().to_string(),
                        "overtime.component" => v.root_cause.component.clone(),
                        _ => v.outcome.as_str().to_string(),
                    };
                    got == *want
                })
            })
            .filter_map(|(_, v)| {
                let us = v.started_at.us();
                (us >= q.start_us - params::VERDICT_SLACK_US && us <= q.end_us)
                    .then(|| (us, v.trace_id.clone()))
            })
            .collect();
        found.sort_by(|a, b| b.cmp(a));
        found.truncate(want);
        return Ok(found.into_iter().map(|(_, id)| id).collect());
    }
    let cond = q.span_filter();
    let batches = query(s, "spans", move |df| {
        df.filter(cond)?
            .aggregate(
                vec![col("trace_id")],
                vec![max(col("start_time")).alias("t")],
            )?
            .sort(vec![
                col("t").sort(false, false),
                col("trace_id").sort(true, false),
            ])?
            .limit(0, Some(want))
    })
    .await?;
    Ok(strings(&batches, 0))
}

/// Whether one tag list holds `key` with `value` (as Jaeger compares).
fn has_tag(tags: &Value, key: &str, value: &str) -> bool {
    tags.as_array().is_some_and(|a| {
        a.iter()
            .any(|t| t["key"] == key && tag_text(&t["value"]) == value)
    })
}

impl SearchQuery {
    /// Whether a span of `trace` (as [`jaeger_trace`] made it) matches
    /// every condition: service, operation, duration and each tag (in its
    /// tags, its process's tags or a log's fields).
    fn matches(&self, trace: &Value) -> bool {
        let spans = trace["spans"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        spans.iter().any(|sp| {
            let process = &trace["processes"][sp["processID"].as_str().unwrap_or("")];
            let dur = sp["duration"].as_i64().unwrap_or(0);
            let start = sp["startTime"].as_i64().unwrap_or(0);
            (self.start_us..=self.end_us).contains(&start)
                && self
                    .service
                    .as_deref()
                    .is_none_or(|s| process["serviceName"] == s)
                && self
                    .operation
                    .as_deref()
                    .is_none_or(|o| sp["operationName"] == o)
                && self.min_duration_us.is_none_or(|m| dur >= m)
                && self.max_duration_us.is_none_or(|m| dur <= m)
                && self.tags.iter().all(|(k, v)| {
                    has_tag(&sp["tags"], k, v)
                        || has_tag(&process["tags"], k, v)
                        || sp["logs"]
                            .as_array()
                            .is_some_and(|ls| ls.iter().any(|l| has_tag(&l["fields"], k, v)))
                })
        })
    }
}
