//! The tool side: `tool-gateway` calls third-party APIs with its own
//! per-tool client timeouts (search_api: none), after a simulated DNS
//! lookup and handshake recorded as `dns`/`connect` events; the third-party
//! APIs themselves are not instrumented (no spans), as in production; and
//! `memory-store` answers session-memory and cache lookups.

use crate::service::{Ctx, Reply, Req, respond};
use crate::traced::{CallError, HttpCall, traced_http};
use futures_util::future::BoxFuture;
use hyper::Response;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue};
use serde_json::{Value, json};
use std::sync::Arc;

/// The tool gateway's view of a tool: the API's host and the gateway's
/// own client timeout (nominal ms; `None`: no timeout at all).
pub fn tool_gateway_target(tool: &str) -> (&'static str, Option<f64>) {
    match tool {
        "weather_api" => ("api.weather.example", Some(25_000.0)),
        // Incident C: the tool service's own 5 s timeout.
        "weather_lookup" => ("api.weather.example", Some(5_000.0)),
        "maps_api" => ("maps.example", Some(60_000.0)),
        "search_api" => ("search.example", None),
        "crm_api" => ("crm.internal.example", Some(20_000.0)),
        "crm_report" => ("reports.crm.internal.example", Some(80_000.0)),
        "web_browse" => ("browse.example", Some(900_000.0)),
        "calc" => ("calc.internal.example", Some(10_000.0)),
        "poi_search" => ("poi.example", Some(20_000.0)),
        _ => ("unknown.example", Some(20_000.0)),
    }
}

/// Nominal DNS time of a healthy lookup.
const DNS_MS: f64 = 40.0;

/// `tool-gateway`.
#[derive(Debug)]
pub struct ToolGateway {
    pub ctx: Arc<Ctx>,
    pub external_port: u16,
}

impl ToolGateway {
    pub fn route(_: &str) -> String {
        "/tools/{name}".into()
    }

    pub fn handle(self: Arc<Self>, req: Req, cx: Context) -> BoxFuture<'static, Reply> {
        Box::pin(async move { self.call(req, cx).await })
    }

    async fn call(&self, req: Req, cx: Context) -> Reply {
        let scale = self.ctx.scale;
        let tool = req.path.rsplit('/').next().unwrap_or("").to_string();
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let sim = &body["sim"];
        let (host, timeout_ms) = tool_gateway_target(&tool);
        cx.span()
            .set_attribute(KeyValue::new("gen_ai.tool.name", tool.clone()));
        let attempt = body["attempt"].as_u64().unwrap_or(0);
        let mut status = sim["status"].as_u64().unwrap_or(200);
        if attempt < sim["fail_attempts"].as_u64().unwrap_or(0) {
            status = sim["fail_status"].as_u64().unwrap_or(503);
        }
        let latency = sim["latency_ms"].as_f64().unwrap_or(1000.0);
        let mut attrs = vec![KeyValue::new("peer.service", tool.clone())];
        if let Some(t) = timeout_ms {
            attrs.push(KeyValue::new("agent.timeout_ms", scale.real_ms(t)));
        }
        let call = HttpCall {
            method: "GET",
            path: format!("/{tool}?latency_ms={latency}&status={status}"),
            body: None,
            timeout: timeout_ms.map(|t| scale.real(t)),
            dns: scale.real(if attempt > 0 {
                sim["retry_dns_ms"]
                    .as_f64()
                    .or(sim["dns_ms"].as_f64())
                    .unwrap_or(DNS_MS)
            } else {
                sim["dns_ms"].as_f64().unwrap_or(DNS_MS)
            }),
            connect: scale.real(sim["connect_ms"].as_f64().unwrap_or(0.0)),
            phase_events: true,
            attrs,
            ..HttpCall::post(host, self.external_port, "", Value::Null)
        };
        match traced_http(&self.ctx, &cx, call, None).await {
            Err(CallError::Timeout(_)) => respond(
                &cx,
                500,
                &json!({"error": format!("{tool}: upstream timeout after {} ms", timeout_ms.unwrap_or(0.0))}),
                &[],
            ),
            Err(CallError::Failed(e)) => {
                respond(&cx, 502, &json!({"error": format!("{tool}: {e}")}), &[])
            }
            Ok(r) if r.status >= 500 => respond(
                &cx,
                502,
                &json!({"error": format!("{tool}: upstream answered {}", r.status)}),
                &[],
            ),
            Ok(r) => {
                let result: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                respond(&cx, r.status, &json!({"tool": tool, "result": result}), &[])
            }
        }
    }
}

/// A third-party API: waits `latency_ms` (nominal), answers `status`. No
/// spans: the platform does not own it.
pub async fn external_api(
    scale: crate::TimeScale,
    path: &str,
    query: &str,
) -> Response<crate::http::Body> {
    let get = |k: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse::<f64>().ok())
    };
    scale.sleep(get("latency_ms").unwrap_or(50.0)).await;
    let status = get("status").unwrap_or(200.0) as u16;
    let mut r = Response::new(crate::http::full(
        json!({"tool": path.trim_start_matches('/'), "ok": status < 400}).to_string(),
    ));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    r
}

/// `memory-store`: session memory and caches on "redis".
#[derive(Debug)]
pub struct MemoryStore {
    pub ctx: Arc<Ctx>,
}

impl MemoryStore {
    pub fn handle(self: Arc<Self>, req: Req, cx: Context) -> BoxFuture<'static, Reply> {
        Box::pin(async move {
            let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            cx.span()
                .set_attribute(KeyValue::new("db.system.name", "redis"));
            self.ctx
                .scale
                .sleep(body["latency_ms"].as_f64().unwrap_or(400.0))
                .await;
            respond(&cx, 200, &json!({"hits": 3}), &[])
        })
    }
}
