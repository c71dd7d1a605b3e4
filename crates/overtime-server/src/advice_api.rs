//! `GET /api/advice` and `POST /api/whatif` (docs/advice.md) over the store: the
//! window's `gateway_requests` and `spans` read back, assembled as the
//! diagnosis does, and handed to `overtime-advise`.

use crate::AppState;
use crate::error::ApiError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use overtime_advise::render::{self, Style};
use overtime_advise::{AdviseOptions, Dataset, Proposal, WhatIfOptions};
use overtime_model::{Table, span_records};
use serde::Deserialize;
use std::sync::Arc;

/// The window read when none is given: the last 24 hours.
const DEFAULT_WINDOW_US: i64 = 24 * 3600 * 1_000_000;
/// Span rows read at most for one request (a narrower window beyond).
pub(crate) const MAX_SPAN_ROWS: usize = 2_000_000;

fn parse_time(v: Option<&str>, name: &str) -> Result<Option<i64>, ApiError> {
    Ok(crate::api::time_param(v, name)?.map(|t| t.us()))
}

fn window(from: Option<&str>, to: Option<&str>) -> Result<(i64, Option<i64>), ApiError> {
    let to = parse_time(to, "to")?;
    let from = parse_time(from, "from")?.unwrap_or_else(|| {
        to.unwrap_or_else(|| chrono::Utc::now().timestamp_micros()) - DEFAULT_WINDOW_US
    });
    Ok((from, to))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
}

/// The window's requests and calls, read from the store.
fn load(s: &AppState, from: i64, to: Option<i64>) -> Result<Dataset, ApiError> {
    let store_err = |e: overtime_store::StoreError| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string())
    };
    let gateway = s
        .store
        .scan(Table::GatewayRequests, Some(from), to)
        .map_err(store_err)?;
    let batches = s
        .store
        .scan(Table::Spans, Some(from), to)
        .map_err(store_err)?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows > MAX_SPAN_ROWS {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "window_too_large",
            format!(
                "{rows} spans in the window, more than {MAX_SPAN_ROWS}: narrow it with from= and to="
            ),
        ));
    }
    let mut spans = Vec::with_capacity(rows);
    for b in &batches {
        spans.extend(span_records(b).map_err(internal)?);
    }
    overtime_advise::dataset(&gateway, spans, &s.diagnose).map_err(internal)
}

fn markdown(text: String) -> Response {
    (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        text,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct AdviceQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    /// The share a recommended timeout covers (default 0.99).
    pub target: Option<f64>,
    /// `json` (default) or `markdown`.
    pub format: Option<String>,
}

/// `format=`: `json` (the default) or `markdown`; whether it is markdown.
fn wants_markdown(format: Option<&str>) -> Result<bool, ApiError> {
    match format {
        None | Some("json") => Ok(false),
        Some("markdown") => Ok(true),
        Some(f) => Err(ApiError::bad_request(
            "bad_format",
            format!("format={f:?}: json or markdown"),
        )),
    }
}

/// `GET /api/advice?from=&to=&target=&format=`: the advice over the
/// window (default: the last 24 hours).
pub(crate) async fn get_advice(
    State(s): State<Arc<AppState>>,
    Query(q): Query<AdviceQuery>,
) -> Result<Response, ApiError> {
    let target = q.target.unwrap_or(0.99);
    if !(0.5..=0.9999).contains(&target) {
        return Err(ApiError::bad_request(
            "bad_target",
            format!("target={target}: a share between 0.5 and 0.9999"),
        ));
    }
    let md = wants_markdown(q.format.as_deref())?;
    let (from, to) = window(q.from.as_deref(), q.to.as_deref())?;
    let advice = tokio::task::spawn_blocking(move || {
        let ds = load(&s, from, to)?;
        Ok::<_, ApiError>(overtime_advise::advise(&ds, &AdviseOptions { target }))
    })
    .await
    .map_err(internal)??;
    Ok(if md {
        markdown(render::advice(&advice, Style::Markdown))
    } else {
        Json(advice).into_response()
    })
}

/// The body of `POST /api/whatif`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WhatIfRequest {
    /// `["llm.deepseek-v4-pro.timeout=45s", …]` or `{"key": "value", …}`.
    #[serde(default)]
    pub set: Option<serde_json::Value>,
    /// A TOML proposal (the keys as tables), applied before `set`.
    #[serde(default)]
    pub proposal: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub seed: Option<u64>,
    pub draws: Option<usize>,
    /// `json` (default) or `markdown`.
    pub format: Option<String>,
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("bad_proposal", e.to_string())
}

/// The proposal a request carries.
pub(crate) fn proposal_of(r: &WhatIfRequest) -> Result<Proposal, ApiError> {
    let mut p = match &r.proposal {
        Some(t) if !t.trim().is_empty() => Proposal::from_toml(t).map_err(bad)?,
        _ => Proposal::default(),
    };
    match &r.set {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Array(items)) => {
            for i in items {
                let kv = i.as_str().ok_or_else(|| bad("set: strings KEY=VALUE"))?;
                p.set(kv).map_err(bad)?;
            }
        }
        Some(serde_json::Value::Object(m)) => {
            for (k, v) in m {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                p.set(&format!("{k}={v}")).map_err(bad)?;
            }
        }
        Some(_) => return Err(bad("set: a list of KEY=VALUE or an object")),
    }
    if p.is_empty() {
        return Err(bad(
            "nothing proposed: give set (e.g. [\"llm.<model>.timeout=45s\"]) or proposal (TOML)",
        ));
    }
    Ok(p)
}

/// `POST /api/whatif`: every stored trace of the window replayed under
/// the proposal.
pub(crate) async fn post_whatif(
    State(s): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: WhatIfRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "bad_request",
            format!("expected {{\"set\": [\"KEY=VALUE\", …]}} or {{\"proposal\": \"TOML\"}}: {e}"),
        )
    })?;
    let p = proposal_of(&req)?;
    let draws = req.draws.unwrap_or(25);
    if draws == 0 || draws > 200 {
        return Err(ApiError::bad_request(
            "bad_draws",
            format!("draws={draws}: between 1 and 200"),
        ));
    }
    let md = wants_markdown(req.format.as_deref())?;
    let (from, to) = window(req.from.as_deref(), req.to.as_deref())?;
    let opts = WhatIfOptions {
        seed: req.seed.unwrap_or(1),
        draws,
        ..Default::default()
    };
    let w = tokio::task::spawn_blocking(move || {
        let ds = load(&s, from, to)?;
        overtime_advise::check_proposal(&p, &ds).map_err(bad)?;
        Ok::<_, ApiError>(overtime_advise::whatif(&ds, &p, &opts))
    })
    .await
    .map_err(internal)??;
    Ok(if md {
        markdown(render::whatif(&w, Style::Markdown))
    } else {
        Json(w).into_response()
    })
}
