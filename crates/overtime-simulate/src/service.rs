//! What every instrumented service shares: its tracer and propagator, a
//! SERVER span per request (as an HTTP server instrumentation writes it,
//! W3C `traceparent` extracted), a busy counter, and the JSON answer.

use crate::clock::TimeScale;
use crate::http::{self, Body};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use hyper::{HeaderMap, Request, Response};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// One service's instrumentation and clock.
#[derive(Debug)]
pub struct Ctx {
    pub name: &'static str,
    pub tracer: SdkTracer,
    pub scale: TimeScale,
    /// Requests in progress on the whole platform.
    pub busy: Arc<AtomicUsize>,
    propagator: TraceContextPropagator,
}

impl Ctx {
    pub fn new(
        name: &'static str,
        tracer: SdkTracer,
        scale: TimeScale,
        busy: Arc<AtomicUsize>,
    ) -> Self {
        Ctx {
            name,
            tracer,
            scale,
            busy,
            propagator: TraceContextPropagator::new(),
        }
    }

    /// Writes `traceparent` for `cx` into `headers`.
    pub fn inject(&self, cx: &Context, headers: &mut HeaderMap) {
        self.propagator
            .inject_context(cx, &mut HeaderInjector(headers));
    }

    /// The remote parent a request carries, if any.
    pub fn extract(&self, headers: &HeaderMap) -> Context {
        self.propagator.extract(&HeaderExtractor(headers))
    }
}

/// Decrements the busy counter when dropped.
#[derive(Debug)]
pub struct Busy(Arc<AtomicUsize>);

impl Busy {
    pub fn new(c: &Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, SeqCst);
        Busy(c.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// A request as a handler sees it.
#[derive(Debug)]
pub struct Req {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Held while the request is in progress; a streaming handler moves it
    /// into its stream task.
    pub busy: Busy,
}

/// A handler's answer. `Done`: the server span ends now. `Streaming`: the
/// handler ends it when its stream is over.
pub enum Reply {
    Done(Response<Body>),
    Streaming(Response<Body>),
}

/// The handler of a service.
pub type Handle<S> = fn(Arc<S>, Req, Context) -> BoxFuture<'static, Reply>;

/// Serves `svc` on 127.0.0.1 (any port) with a SERVER span per request.
/// The handler runs in its own task: a caller that gives up (a client
/// timeout, the gateway's cut) does not stop the work, as with a real
/// threaded server.
pub async fn serve_service<S: Send + Sync + 'static>(
    ctx: Arc<Ctx>,
    svc: Arc<S>,
    route_of: fn(&str) -> String,
    handle: Handle<S>,
) -> std::io::Result<http::Server> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let port_cell = Arc::new(std::sync::OnceLock::<u16>::new());
    let port_for_handler = port_cell.clone();
    let server = http::serve(addr, move |req: Request<hyper::body::Incoming>, peer| {
        let (ctx, svc, port) = (ctx.clone(), svc.clone(), port_for_handler.clone());
        async move {
            let busy = Busy::new(&ctx.busy);
            let (parts, body) = req.into_parts();
            let body = match http::collect(body).await {
                Ok(b) => b,
                Err(e) => return plain(400, &format!("bad request body: {e}")),
            };
            let path = parts.uri.path().to_string();
            let parent = ctx.extract(&parts.headers);
            let route = route_of(&path);
            let mut attrs = vec![
                KeyValue::new("http.request.method", parts.method.as_str().to_string()),
                KeyValue::new("url.path", path.clone()),
                KeyValue::new("url.scheme", "http"),
                KeyValue::new("http.route", route.clone()),
                KeyValue::new("server.address", ctx.name),
                KeyValue::new("server.port", i64::from(*port.get().unwrap_or(&0))),
                KeyValue::new("client.address", peer.ip().to_string()),
                KeyValue::new("network.protocol.version", "1.1"),
            ];
            if let Some(ua) = header(&parts.headers, "user-agent") {
                attrs.push(KeyValue::new("user_agent.original", ua));
            }
            if let Some(rid) = header(&parts.headers, "x-request-id") {
                attrs.push(string_array("http.request.header.x-request-id", rid));
            }
            let span = ctx
                .tracer
                .span_builder(format!("{} {route}", parts.method))
                .with_kind(SpanKind::Server)
                .with_attributes(attrs)
                .start_with_context(&ctx.tracer, &parent);
            let cx = parent.with_span(span);
            let req = Req {
                path,
                headers: parts.headers,
                body,
                busy,
            };
            let work = tokio::spawn(async move {
                let reply = handle(svc, req, cx.clone()).await;
                if let Reply::Done(_) = &reply {
                    cx.span().end();
                }
                reply
            });
            match work.await {
                Ok(Reply::Done(r)) | Ok(Reply::Streaming(r)) => r,
                Err(e) => plain(500, &format!("handler failed: {e}")),
            }
        }
    })
    .await?;
    let _ = port_cell.set(server.port());
    Ok(server)
}

/// A header's value as text.
pub fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `key=[value]`: how HTTP instrumentations record captured headers.
pub fn string_array(key: impl Into<opentelemetry::Key>, value: String) -> KeyValue {
    KeyValue::new(
        key,
        Value::Array(vec![opentelemetry::StringValue::from(value)].into()),
    )
}

/// A JSON answer; the status (and `X-LLM-*` headers, as the model server's
/// instrumentation captures them) recorded on the server span.
pub fn respond(
    cx: &Context,
    status: u16,
    body: &serde_json::Value,
    headers: &[(&str, String)],
) -> Reply {
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(status),
    ));
    if status >= 500 {
        span.set_status(Status::error(format!("HTTP {status}")));
    }
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        let lower = k.to_ascii_lowercase();
        if lower.starts_with("x-llm") {
            span.set_attribute(string_array(
                format!("http.response.header.{lower}"),
                v.clone(),
            ));
        }
        b = b.header(*k, v.as_str());
    }
    Reply::Done(
        b.body(http::full(body.to_string()))
            .unwrap_or_else(|_| plain(500, "bad response header")),
    )
}

/// A text answer with no span.
pub fn plain(status: u16, text: &str) -> Response<Body> {
    let mut r = Response::new(http::full(text.to_string()));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// Records an error on a span as an instrumentation does: an `exception`
/// event, `error.type`, status ERROR.
pub fn record_error(cx: &Context, error_type: &str, message: &str) {
    let span = cx.span();
    span.add_event(
        "exception",
        vec![
            KeyValue::new("exception.type", error_type.to_string()),
            KeyValue::new("exception.message", message.to_string()),
        ],
    );
    span.set_attribute(KeyValue::new("error.type", error_type.to_string()));
    span.set_status(Status::error(message.to_string()));
}
