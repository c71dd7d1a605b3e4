//! `agent-api`: the agent service behind the gateway. Routes pick a
//! timeout profile and an execution mode:
//!
//! | route | profile | mode |
//! |---|---|---|
//! | `/v1/agent/run` | legacy (no budget) | answer when done |
//! | `/v2/agent/run` | aligned (50 s budget < 60 s gateway) | 503 when a timeout fires |
//! | `/v1/agent/plan` | misaligned (120 s budget > gateway) | |
//! | `/v1/agent/stream` | legacy | SSE: the model's chunks relayed as they come |
//! | `/v1/agent/report` | legacy | on a 2-worker pool; the wait is a `worker_pool.wait` span |
//! | `/v1/agent/export` | legacy | same pool; the wait only shows as the gap before the first child |

use crate::http::{self, ChunkSender};
use crate::orchestrator::{ALIGNED, LEGACY, MISALIGNED, Profile, Run};
use crate::overrides::Overrides;
use crate::service::{Ctx, Reply, Req, header, plain, record_error, respond};
use crate::steps::AgentRequest;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use hyper::Response;
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Workers of the report pool.
pub const POOL_WORKERS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Answer,
    Stream,
    PoolWithSpan,
    PoolGap,
}

fn route(path: &str) -> Option<(&'static Profile, Mode)> {
    Some(match path {
        "/v1/agent/run" => (&LEGACY, Mode::Answer),
        "/v2/agent/run" => (&ALIGNED, Mode::Answer),
        "/v1/agent/plan" => (&MISALIGNED, Mode::Answer),
        "/v1/agent/stream" => (&LEGACY, Mode::Stream),
        "/v1/agent/report" => (&LEGACY, Mode::PoolWithSpan),
        "/v1/agent/export" => (&LEGACY, Mode::PoolGap),
        _ => return None,
    })
}

/// Where the agent's downstream services listen.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub model: u16,
    pub legacy: u16,
    pub tools: u16,
    pub memory: u16,
}

/// `X-Request-ID` → trace id, as the agent saw them: how the load
/// generator learns the trace of a request sent without `traceparent`.
#[derive(Debug, Default)]
pub struct Registry(Mutex<HashMap<String, String>>);

impl Registry {
    fn record(&self, request_id: String, trace_id: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request_id, trace_id);
    }

    /// The trace id of a request id, forgotten once taken.
    pub fn take(&self, request_id: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(request_id)
    }
}

/// `agent-api`.
#[derive(Debug)]
pub struct AgentApi {
    pub ctx: Arc<Ctx>,
    pub ports: Ports,
    pub registry: Arc<Registry>,
    workers: Arc<Semaphore>,
    /// `--set`: timeouts replacing the profiles'.
    pub overrides: Arc<Overrides>,
}

/// Writes SSE text to the client and records a span event per write
/// (`chunk`, `heartbeat`); remembers when the client went away.
#[derive(Debug)]
pub struct Emitter {
    tx: Mutex<Option<ChunkSender>>,
    gone: AtomicBool,
    cx: Context,
}

impl Emitter {
    /// Sends `text`; a no-op once the client is gone.
    pub fn emit(&self, text: &str, event: &'static str) {
        if self.gone.load(SeqCst) {
            return;
        }
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|tx| tx.send(Ok(Bytes::from(text.to_string()))).is_ok());
        if sent {
            self.cx.span().add_event(event, vec![]);
        } else {
            self.gone.store(true, SeqCst);
        }
    }

    fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl AgentApi {
    pub fn new(ctx: Arc<Ctx>, ports: Ports) -> Self {
        AgentApi {
            ctx,
            ports,
            registry: Arc::new(Registry::default()),
            workers: Arc::new(Semaphore::new(POOL_WORKERS)),
            overrides: Arc::new(Overrides::default()),
        }
    }

    /// The same service under `--set` timeouts.
    pub fn with_overrides(mut self, o: Overrides) -> Self {
        self.overrides = Arc::new(o);
        self
    }

    pub fn route_of(path: &str) -> String {
        path.to_string()
    }

    pub fn handle(self: Arc<Self>, req: Req, cx: Context) -> BoxFuture<'static, Reply> {
        Box::pin(async move { self.serve(req, cx).await })
    }

    async fn serve(self: Arc<Self>, req: Req, cx: Context) -> Reply {
        if req.path == "/healthz" {
            return respond(&cx, 200, &json!({"ok": true}), &[]);
        }
        let Some((profile, mode)) = route(&req.path) else {
            return respond(&cx, 404, &json!({"error": "no such route"}), &[]);
        };
        if let Some(rid) = header(&req.headers, "x-request-id") {
            let tid = cx.span().span_context().trace_id().to_string();
            self.registry.record(rid, tid);
        }
        let steps = match serde_json::from_slice::<AgentRequest>(&req.body) {
            Ok(r) if !r.steps.is_empty() => r.steps,
            Ok(_) => return self.bad(&cx, "steps must not be empty"),
            Err(e) => return self.bad(&cx, &e.to_string()),
        };
        let span = cx.span();
        span.set_attribute(KeyValue::new("agent.profile", profile.name));
        let budget_ms = self.overrides.budget.unwrap_or(profile.budget_ms);
        if let Some(b) = budget_ms {
            span.set_attribute(KeyValue::new("agent.budget_ms", self.ctx.scale.real_ms(b)));
        }
        let run = Run {
            profile,
            deadline: budget_ms.map(|b| Instant::now() + self.ctx.scale.real(b)),
            emit: None,
        };
        if mode == Mode::Stream {
            return self.stream(req, run, steps, cx);
        }
        let result = match mode {
            Mode::PoolWithSpan | Mode::PoolGap => {
                let enqueued = SystemTime::now();
                let Ok(permit) = self.workers.clone().acquire_owned().await else {
                    return respond(&cx, 503, &json!({"error": "pool closed"}), &[]);
                };
                if mode == Mode::PoolWithSpan {
                    let t = &self.ctx.tracer;
                    t.span_builder("worker_pool.wait")
                        .with_start_time(enqueued)
                        .with_attributes([
                            KeyValue::new("agent.pool.name", "report-workers"),
                            KeyValue::new("agent.pool.size", POOL_WORKERS as i64),
                        ])
                        .start_with_context(t, &cx)
                        .end();
                }
                let r = self.run_agent(&run, &steps, &cx).await;
                drop(permit);
                r
            }
            _ => self.run_agent(&run, &steps, &cx).await,
        };
        match result {
            Ok(()) => respond(
                &cx,
                200,
                &json!({"answer": "done", "steps": steps.len()}),
                &[],
            ),
            Err(e) => {
                record_error(&cx, e.error_type(), &e.to_string());
                respond(&cx, e.status(), &json!({"error": e.to_string()}), &[])
            }
        }
    }

    fn bad(&self, cx: &Context, why: &str) -> Reply {
        cx.span()
            .set_attribute(KeyValue::new("error.type", "ValidationError"));
        respond(
            cx,
            400,
            &json!({"error": format!("bad request: {why}")}),
            &[],
        )
    }

    /// SSE: headers at once, then the model's chunks as they come; the
    /// server span ends when the stream does.
    fn stream(
        self: Arc<Self>,
        req: Req,
        mut run: Run,
        steps: Vec<crate::steps::Step>,
        cx: Context,
    ) -> Reply {
        let (tx, body) = http::channel();
        let em = Arc::new(Emitter {
            tx: Mutex::new(Some(tx)),
            gone: AtomicBool::new(false),
            cx: cx.clone(),
        });
        cx.span()
            .set_attribute(KeyValue::new("http.response.status_code", 200));
        run.emit = Some(em.clone());
        let busy = req.busy;
        tokio::spawn(async move {
            match self.run_agent(&run, &steps, &cx).await {
                Ok(()) => {
                    em.emit("data: {\"answer\": \"done\"}\n\n", "chunk");
                    em.emit("data: [DONE]\n\n", "chunk");
                    if em.gone.load(SeqCst) {
                        record_error(&cx, "ConnectionResetError", "client went away mid-stream");
                    }
                }
                Err(e) => {
                    record_error(&cx, e.error_type(), &e.to_string());
                    let data = json!({"error": e.to_string()});
                    em.emit(&format!("event: error\ndata: {data}\n\n"), "chunk");
                }
            }
            em.close();
            cx.span().end();
            drop(busy);
        });
        let resp = Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .header("x-accel-buffering", "no")
            .body(body)
            .unwrap_or_else(|_| plain(500, "bad header"));
        Reply::Streaming(resp)
    }
}
