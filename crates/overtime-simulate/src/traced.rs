//! An HTTP client call with a CLIENT span, as an httpx/reqwest
//! instrumentation writes it: `POST`, `http.request.method`,
//! `server.address`, `url.full`, `http.response.status_code`, captured
//! response headers as string arrays, `error.type`; W3C `traceparent`
//! injected. A slow resolver and a slow handshake are simulated before
//! the connect, and recorded as `dns` / `connect` span events.

use crate::http::{self, BoxError};
use crate::service::{Ctx, record_error, string_array};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// One outgoing call.
#[derive(Debug)]
pub struct HttpCall<'a> {
    pub method: &'static str,
    /// The logical host (`model-server`, `api.weather.example`); the call
    /// goes to 127.0.0.1:`port`.
    pub host: &'a str,
    pub port: u16,
    pub path: String,
    pub body: Option<serde_json::Value>,
    /// Total deadline, DNS and connect included (real time).
    pub timeout: Option<Duration>,
    pub dns: Duration,
    pub connect: Duration,
    /// Record `dns` and `connect` events.
    pub phase_events: bool,
    /// Response headers recorded as `http.response.header.<name>`.
    pub capture: &'a [&'static str],
    pub attrs: Vec<KeyValue>,
}

impl<'a> HttpCall<'a> {
    /// A POST of `body` to `host:port path`, no timeout.
    pub fn post(
        host: &'a str,
        port: u16,
        path: impl Into<String>,
        body: serde_json::Value,
    ) -> Self {
        HttpCall {
            method: "POST",
            host,
            port,
            path: path.into(),
            body: Some(body),
            timeout: None,
            dns: Duration::ZERO,
            connect: Duration::ZERO,
            phase_events: false,
            capture: &[],
            attrs: Vec::new(),
        }
    }
}

/// The answer of a call.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: HeaderMap,
    /// Empty when the body was streamed to `on_line`.
    pub body: Bytes,
}

impl HttpReply {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        crate::service::header(&self.headers, name)
    }
}

/// Why a call did not answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The caller's timeout fired.
    #[error("{0}")]
    Timeout(String),
    /// Connection refused or reset, a bad answer.
    #[error("{0}")]
    Failed(String),
}

/// Makes the call under its own CLIENT span (child of `parent`). With
/// `on_line`, the body is read line by line as it streams (SSE).
pub async fn traced_http(
    ctx: &Ctx,
    parent: &Context,
    call: HttpCall<'_>,
    on_line: Option<&mut (dyn FnMut(&str) + Send)>,
) -> Result<HttpReply, CallError> {
    let url = format!("http://{}:{}{}", call.host, call.port, call.path);
    let mut attrs = vec![
        KeyValue::new("http.request.method", call.method),
        KeyValue::new("server.address", call.host.to_string()),
        KeyValue::new("server.port", i64::from(call.port)),
        KeyValue::new("url.full", url),
    ];
    attrs.extend(call.attrs.iter().cloned());
    let span = ctx
        .tracer
        .span_builder(call.method)
        .with_kind(SpanKind::Client)
        .with_attributes(attrs)
        .start_with_context(&ctx.tracer, parent);
    let cx = parent.with_span(span);
    let result = exchange(ctx, &cx, &call, on_line).await;
    match &result {
        Ok(r) => {
            if r.status >= 500 {
                cx.span()
                    .set_attribute(KeyValue::new("error.type", r.status.to_string()));
                cx.span()
                    .set_status(Status::error(format!("HTTP {}", r.status)));
            }
        }
        Err(CallError::Timeout(m)) => record_error(&cx, "TimeoutError", m),
        Err(CallError::Failed(m)) => record_error(&cx, "ConnectionError", m),
    }
    cx.span().end();
    result
}

async fn exchange(
    ctx: &Ctx,
    cx: &Context,
    call: &HttpCall<'_>,
    on_line: Option<&mut (dyn FnMut(&str) + Send)>,
) -> Result<HttpReply, CallError> {
    let t0 = Instant::now();
    let deadline = call.timeout.map(|t| t0 + t);
    if !call.dns.is_zero() || call.phase_events {
        let d = match deadline {
            Some(dl) => call.dns.min(dl.saturating_duration_since(Instant::now())),
            None => call.dns,
        };
        tokio::time::sleep(d).await;
        if call.phase_events {
            cx.span().add_event(
                "dns",
                vec![
                    KeyValue::new("duration_ms", ms(d)),
                    KeyValue::new("dns.question.name", call.host.to_string()),
                ],
            );
        }
        if d < call.dns {
            return Err(CallError::Timeout(format!(
                "timed out resolving {}",
                call.host
            )));
        }
    }
    let work = async {
        let c0 = Instant::now();
        let stream = TcpStream::connect(("127.0.0.1", call.port))
            .await
            .map_err(|e| CallError::Failed(format!("connect {}: {e}", call.host)))?;
        if !call.connect.is_zero() {
            tokio::time::sleep(call.connect).await;
        }
        if call.phase_events {
            cx.span().add_event(
                "connect",
                vec![KeyValue::new("duration_ms", ms(c0.elapsed()))],
            );
        }
        let mut sender = http::handshake(stream).await.map_err(failed)?;
        let body = match &call.body {
            Some(v) => Bytes::from(v.to_string()),
            None => Bytes::new(),
        };
        let mut req = Request::builder()
            .method(call.method)
            .uri(call.path.as_str())
            .header("host", format!("{}:{}", call.host, call.port))
            .header("user-agent", "agent-platform/0.1 (hyper)");
        if call.body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let mut req = req.body(Full::new(body)).map_err(|e| failed(e.into()))?;
        ctx.inject(cx, req.headers_mut());
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| failed(e.into()))?;
        let status = resp.status().as_u16();
        let span = cx.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        for name in call.capture {
            if let Some(v) = crate::service::header(resp.headers(), name) {
                span.set_attribute(string_array(format!("http.response.header.{name}"), v));
            }
        }
        let (parts, mut body) = resp.into_parts();
        let bytes = match on_line {
            Some(f) => {
                let mut buf: Vec<u8> = Vec::new();
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| failed(e.into()))?;
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                            let line: Vec<u8> = buf.drain(..=nl).collect();
                            let text = String::from_utf8_lossy(&line);
                            f(text.trim_end_matches(['\r', '\n']));
                        }
                    }
                }
                Bytes::new()
            }
            None => http::collect(body).await.map_err(failed)?,
        };
        Ok(HttpReply {
            status,
            headers: parts.headers,
            body: bytes,
        })
    };
    match deadline {
        Some(dl) => match tokio::time::timeout_at(dl, work).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(format!(
                "{} timed out after {:.1} ms",
                call.host,
                ms(call.timeout.unwrap_or_default())
            ))),
        },
        None => work.await,
    }
}

fn failed(e: BoxError) -> CallError {
    CallError::Failed(e.to_string())
}

/// Milliseconds, rounded to the microsecond.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
