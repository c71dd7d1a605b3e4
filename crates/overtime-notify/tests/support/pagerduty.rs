//! A stand-in for PagerDuty's Events API v2 (`POST /v2/enqueue`) that
//! keeps alerts by `dedup_key` as PagerDuty does — a trigger on an open
//! alert adds to it, a trigger after it resolved opens a new one, a
//! resolve closes it — and answers 400 `{"status": "invalid event",
//! "message": …, "errors": […]}` to anything off the documented API: a
//! body that is not JSON or not `application/json`, over 512 KB, a wrong
//! `routing_key`, an `event_action` other than trigger / acknowledge /
//! resolve, a `dedup_key` over 255 characters (or missing on a resolve),
//! a trigger without `payload.summary` (at most 1024 characters),
//! `payload.source` or a `payload.severity` among critical, error,
//! warning, info, and links or images without their `href` / `src`.
//! Success is 202 `{"status": "success", "message": "Event processed",
//! "dedup_key": …}`.

use super::{Common, HasCommon, StandIn, answer};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use overtime_test_support::stand_in::lock;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

pub const ROUTING_KEY: &str = "R0123456789abcdef0123456789abcde";
pub const PATH: &str = "/v2/enqueue";

/// One PagerDuty alert.
#[derive(Debug, Clone)]
pub struct Alert {
    pub dedup_key: String,
    pub open: bool,
    pub triggers: usize,
    pub summary: String,
    pub severity: String,
    pub event: Value,
}

#[derive(Debug, Default)]
pub struct State {
    pub common: Common,
    /// Every alert ever opened, oldest first.
    pub alerts: Vec<Alert>,
}

pub type PagerDuty = StandIn<State>;

impl HasCommon for State {
    fn common(&mut self) -> &mut Common {
        &mut self.common
    }
}

impl StandIn<State> {
    pub async fn start() -> PagerDuty {
        Self::serve(super::listener().await, handle)
    }

    /// Starts on a socket bound beforehand (the vendor coming back at the
    /// address its clients already use).
    pub fn start_on(socket: tokio::net::TcpSocket) -> PagerDuty {
        Self::serve(socket.listen(1024).unwrap(), handle)
    }

    pub fn events_url(&self) -> String {
        format!("{}{PATH}", self.url)
    }

    pub fn alerts(&self) -> Vec<Alert> {
        self.state().alerts.clone()
    }

    /// Events accepted (202).
    pub fn accepted(&self) -> usize {
        self.state()
            .common
            .log
            .iter()
            .filter(|l| l.status == 202)
            .count()
    }
}

fn invalid(errors: Vec<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"status": "invalid event", "message": "Event object is invalid", "errors": errors})),
    )
        .into_response()
}

/// The documented rules of an event; the errors, as PagerDuty lists them.
pub fn check_event(v: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    if v["routing_key"].as_str() != Some(ROUTING_KEY) {
        errors.push("'routing_key' is invalid".to_string());
    }
    let action = v["event_action"].as_str().unwrap_or("");
    if !matches!(action, "trigger" | "acknowledge" | "resolve") {
        errors.push(format!("'event_action' is invalid: {action:?}"));
    }
    match v.get("dedup_key") {
        Some(k) => match k.as_str() {
            Some(k) if !k.is_empty() && k.chars().count() <= 255 => {}
            _ => errors.push("'dedup_key' must be a string of 1 to 255 characters".into()),
        },
        None if action != "trigger" => errors.push("'dedup_key' is required".into()),
        None => {}
    }
    if action == "trigger" {
        let p = &v["payload"];
        match p["summary"].as_str() {
            Some(s) if !s.is_empty() && s.chars().count() <= 1024 => {}
            _ => errors.push("'payload.summary' must be 1 to 1024 characters".into()),
        }
        if p["source"].as_str().is_none_or(str::is_empty) {
            errors.push("'payload.source' is missing".into());
        }
        if !matches!(
            p["severity"].as_str(),
            Some("critical" | "error" | "warning" | "info")
        ) {
            errors.push(format!("'payload.severity' is invalid: {}", p["severity"]));
        }
        if let Some(t) = p.get("timestamp")
            && t.as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_none()
        {
            errors.push(format!("'payload.timestamp' is not ISO 8601: {t}"));
        }
        if let Some(d) = p.get("custom_details")
            && !d.is_object()
        {
            errors.push("'payload.custom_details' must be an object".into());
        }
        for l in v["links"].as_array().into_iter().flatten() {
            if !l["href"].is_string() {
                errors.push("a link without 'href'".into());
            }
        }
        for i in v["images"].as_array().into_iter().flatten() {
            if !i["src"].is_string() {
                errors.push("an image without 'src'".into());
            }
        }
    }
    errors
}

async fn handle(
    st: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let throttled = json!({"status": "throttle event", "message": "Requests for this service are arriving too quickly."});
    let routed = async { route(&st, &method, &path, &headers, &body) };
    answer(&st, &method, path.clone(), throttled, routed).await
}

fn route(
    st: &Mutex<State>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let reject = |why: String| lock(st).common.rejections.push(why);
    if path != PATH || method != Method::POST {
        reject(format!("{method} {path}: no such endpoint"));
        return StatusCode::NOT_FOUND.into_response();
    }
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.to_ascii_lowercase().starts_with("application/json") {
        reject(format!("content-type {ct:?}"));
        return invalid(vec!["Content-Type must be application/json".into()]);
    }
    if body.len() > 512 * 1024 {
        reject(format!("{} bytes", body.len()));
        return invalid(vec!["Event is larger than 512 KB".into()]);
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        reject("body not JSON".into());
        return invalid(vec!["Event object is not valid JSON".into()]);
    };
    let errors = check_event(&v);
    if !errors.is_empty() {
        reject(errors.join("; "));
        return invalid(errors);
    }
    let action = v["event_action"].as_str().unwrap_or("");
    let key = v["dedup_key"].as_str().unwrap_or("generated").to_string();
    let mut s = lock(st);
    let open = s.alerts.iter_mut().find(|a| a.open && a.dedup_key == key);
    match (action, open) {
        ("trigger", Some(a)) => {
            a.triggers += 1;
            a.event = v.clone();
        }
        ("trigger", None) => s.alerts.push(Alert {
            dedup_key: key.clone(),
            open: true,
            triggers: 1,
            summary: v["payload"]["summary"].as_str().unwrap_or("").into(),
            severity: v["payload"]["severity"].as_str().unwrap_or("").into(),
            event: v.clone(),
        }),
        ("resolve", Some(a)) => a.open = false,
        // An acknowledge, or a resolve of no open alert: dropped.
        _ => {}
    }
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({"status": "success", "message": "Event processed", "dedup_key": key})),
    )
        .into_response()
}
