//! The agent's orchestrator: runs a request's steps under the route's
//! timeout profile — per-call timeouts, a total budget on a monotonic
//! deadline (or none), retries, fallbacks, parallel lookups, heartbeats —
//! with the spans a GenAI-instrumented agent writes: `invoke_agent`,
//! `chat <model>`, `execute_tool <name>`, `search_memory <store>`, each with
//! `agent.timeout_ms`, `agent.remaining_budget_ms` and `agent.attempt`.

use crate::agent::{AgentApi, Emitter};
use crate::service::{record_error, string_array};
use crate::steps::{LlmStep, MemoryStep, Step, ToolStep};
use crate::traced::{CallError, HttpCall, traced_http};
use futures_util::future::BoxFuture;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use serde_json::json;
use std::sync::Arc;
use tokio::time::Instant;

/// A route's timeouts (nominal ms).
#[derive(Debug)]
pub struct Profile {
    pub name: &'static str,
    /// The request's total budget; `None`: no budget at all.
    pub budget_ms: Option<f64>,
    pub llm_ms: f64,
    /// LLM calls get at most this share of the remaining budget.
    pub llm_frac: Option<f64>,
    /// Tool calls get at most this share of the remaining budget.
    pub tool_frac: Option<f64>,
    pub memory_ms: Option<f64>,
}

/// No budget; the OpenAI client's default 600 s timeout on LLM calls.
pub const LEGACY: Profile = Profile {
    name: "legacy",
    budget_ms: None,
    llm_ms: 600_000.0,
    llm_frac: None,
    tool_frac: None,
    memory_ms: None,
};

/// After incident B's fix: a 50 s budget, shorter than the gateway's 60 s;
/// calls get a share of what is left.
pub const ALIGNED: Profile = Profile {
    name: "aligned",
    budget_ms: Some(50_000.0),
    llm_ms: 40_000.0,
    llm_frac: Some(0.8),
    tool_frac: Some(0.5),
    memory_ms: Some(6_000.0),
};

/// Every call has a timeout, but the 120 s budget outlives the gateway.
pub const MISALIGNED: Profile = Profile {
    name: "misaligned",
    budget_ms: Some(120_000.0),
    llm_ms: 80_000.0,
    llm_frac: None,
    tool_frac: None,
    memory_ms: Some(10_000.0),
};

/// The orchestrator's timeout (nominal ms; `None`: none) and retries on
/// 5xx for a tool.
pub fn agent_tool(tool: &str) -> (Option<f64>, u32) {
    match tool {
        "weather_api" => (Some(40_000.0), 1),
        // Incident C's tool service: 8 s at the orchestrator, one retry.
        "weather_lookup" => (Some(8_000.0), 1),
        "maps_api" => (Some(80_000.0), 0),
        "search_api" => (None, 0),
        "crm_api" => (Some(20_000.0), 4),
        "crm_report" => (Some(80_000.0), 0),
        "web_browse" => (Some(900_000.0), 0),
        "calc" => (Some(10_000.0), 0),
        "poi_search" => (Some(20_000.0), 0),
        _ => (Some(20_000.0), 0),
    }
}

/// Planning between two steps (nominal ms).
const THINK_MS: f64 = 40.0;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("timeout: {0}")]
    Timeout(String),
    #[error("request budget exhausted")]
    Budget,
    #[error("{0}")]
    ToolFailed(String),
    #[error("model answered {0}")]
    CallFailed(u16),
    #[error("{0}")]
    Io(String),
}

impl AgentError {
    /// `error.type` as a Python service would record it.
    pub fn error_type(&self) -> &'static str {
        match self {
            AgentError::Timeout(_) | AgentError::Budget => "TimeoutError",
            AgentError::ToolFailed(_) => "ToolError",
            AgentError::CallFailed(_) => "CallFailed",
            AgentError::Io(_) => "ConnectionError",
        }
    }

    /// The status the agent answers with.
    pub fn status(&self) -> u16 {
        match self {
            AgentError::Timeout(_) | AgentError::Budget => 503,
            AgentError::ToolFailed(_) | AgentError::CallFailed(_) => 502,
            AgentError::Io(_) => 500,
        }
    }
}

impl From<CallError> for AgentError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Timeout(m) => AgentError::Timeout(m),
            CallError::Failed(m) => AgentError::Io(m),
        }
    }
}

/// One request's execution state.
#[derive(Debug)]
pub struct Run {
    pub profile: &'static Profile,
    pub deadline: Option<Instant>,
    /// The SSE writer of a streamed answer.
    pub emit: Option<Arc<Emitter>>,
}

enum CallKind<'a> {
    Llm(&'a str),
    Tool(&'a str),
    Memory,
}

impl AgentApi {
    /// (timeout, remaining budget), real ms.
    fn timeouts(
        &self,
        run: &Run,
        kind: CallKind<'_>,
    ) -> Result<(Option<f64>, Option<f64>), AgentError> {
        let s = self.ctx.scale;
        let rem = run
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64() * 1000.0);
        if rem.is_some_and(|r| r <= 0.0) {
            return Err(AgentError::Budget);
        }
        let p = run.profile;
        let t = match kind {
            CallKind::Llm(model) => {
                let t = match self.overrides.llm_ms(model) {
                    Some(o) => o.map(|t| s.real_ms(t)),
                    None => Some(s.real_ms(p.llm_ms)),
                };
                match (p.llm_frac, rem) {
                    (Some(f), Some(r)) => Some(t.unwrap_or(f64::INFINITY).min(r * f)),
                    _ => t,
                }
            }
            CallKind::Tool(tool) => {
                let t = self
                    .overrides
                    .tool_ms(tool)
                    .unwrap_or(agent_tool(tool).0)
                    .map(|t| s.real_ms(t));
                match (p.tool_frac, rem) {
                    (Some(f), Some(r)) => Some(t.unwrap_or(s.real_ms(30_000.0)).min(r * f)),
                    _ => t,
                }
            }
            CallKind::Memory => match (p.memory_ms, rem) {
                (Some(t), Some(r)) => Some(s.real_ms(t).min(r * 0.2)),
                (Some(t), None) => Some(s.real_ms(t)),
                _ => None,
            },
        };
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        Ok((t.map(round), rem.map(round)))
    }

    fn budget_attrs(cx: &Context, timeout: Option<f64>, rem: Option<f64>) {
        if let Some(t) = timeout {
            cx.span()
                .set_attribute(KeyValue::new("agent.timeout_ms", t));
        }
        if let Some(r) = rem {
            cx.span()
                .set_attribute(KeyValue::new("agent.remaining_budget_ms", r));
        }
    }

    /// Runs the steps under an `invoke_agent support-agent` span.
    pub async fn run_agent(
        self: &Arc<Self>,
        run: &Run,
        steps: &[Step],
        parent: &Context,
    ) -> Result<(), AgentError> {
        let t = &self.ctx.tracer;
        let span = t
            .span_builder("invoke_agent support-agent")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", "support-agent"),
            ])
            .start_with_context(t, parent);
        let cx = parent.with_span(span);
        let mut result = Ok(());
        for st in steps {
            self.ctx.scale.sleep(THINK_MS).await;
            if let Err(e) = self.step(run, st, &cx).await {
                record_error(&cx, e.error_type(), &e.to_string());
                result = Err(e);
                break;
            }
        }
        cx.span().end();
        result
    }

    fn step<'a>(
        self: &'a Arc<Self>,
        run: &'a Run,
        st: &'a Step,
        cx: &'a Context,
    ) -> BoxFuture<'a, Result<(), AgentError>> {
        Box::pin(async move {
            match st {
                Step::Think { ms } => {
                    self.ctx.scale.sleep(*ms).await;
                    Ok(())
                }
                Step::Llm(l) => self.llm(run, l, false, cx).await,
                Step::Judge(l) => self.llm(run, l, true, cx).await,
                Step::Tool(t) => self.tool(run, t, cx).await,
                Step::Memory(m) => self.memory(run, m, cx).await,
                Step::Parallel { steps } => {
                    let all =
                        futures_util::future::join_all(steps.iter().map(|s| self.step(run, s, cx)))
                            .await;
                    all.into_iter().collect::<Result<Vec<()>, _>>().map(|_| ())
                }
                Step::HeartbeatDuring { step, every_ms } => {
                    let beat = run.emit.clone().map(|em| {
                        let (scale, every) = (self.ctx.scale, *every_ms);
                        tokio::spawn(async move {
                            loop {
                                scale.sleep(every).await;
                                em.emit(": ping\n\n", "heartbeat");
                            }
                        })
                    });
                    let r = self.step(run, step, cx).await;
                    if let Some(b) = beat {
                        b.abort();
                    }
                    r
                }
            }
        })
    }

    async fn llm(
        self: &Arc<Self>,
        run: &Run,
        l: &LlmStep,
        judge: bool,
        cx: &Context,
    ) -> Result<(), AgentError> {
        let legacy = l.model.starts_with("llama");
        let (host, port) = if legacy {
            ("legacy-llm", self.ports.legacy)
        } else {
            ("model-server", self.ports.model)
        };
        let (timeout, rem) = self.timeouts(run, CallKind::Llm(&l.model))?;
        let prompt = vec!["tok"; l.input_tokens.saturating_sub(5).max(1) as usize].join(" ");
        let mut sim = json!({
            "output_tokens": l.output_tokens, "slow": l.slow, "prefill_slow": l.prefill_slow,
            "queue_ms": l.queue_ms,
        });
        if let Some(ms) = l.latency_ms {
            sim["latency_ms"] = json!(ms);
        }
        let body = json!({
            "model": l.model,
            "messages": [
                {"role": "system", "content": "you are a helpful agent"},
                {"role": "user", "content": prompt},
            ],
            "max_tokens": l.max_tokens,
            "stream": l.stream,
            "sim": sim,
        });
        let real_timeout = timeout.map(|t| std::time::Duration::from_secs_f64(t / 1000.0));
        if l.raw {
            // No GenAI instrumentation: a plain HTTP client capturing the
            // model server's headers; only the model server's span names
            // the model.
            let call = HttpCall {
                timeout: real_timeout,
                capture: &["x-llm-reason", "x-llm-duration"],
                attrs: timeout
                    .map(|t| vec![KeyValue::new("agent.timeout_ms", t)])
                    .unwrap_or_default(),
                ..HttpCall::post(host, port, "/v1/chat/completions", body)
            };
            let r = traced_http(&self.ctx, cx, call, None).await?;
            return if r.status >= 500 {
                Err(AgentError::CallFailed(r.status))
            } else {
                Ok(())
            };
        }
        let t = &self.ctx.tracer;
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", "openai"),
            KeyValue::new("gen_ai.request.model", l.model.clone()),
            KeyValue::new("gen_ai.request.max_tokens", i64::from(l.max_tokens)),
            KeyValue::new("gen_ai.request.temperature", 0.2),
            KeyValue::new("server.address", host),
            KeyValue::new("server.port", i64::from(port)),
            KeyValue::new("agent.attempt", 0),
        ];
        if judge {
            attrs.push(KeyValue::new("gen_ai.agent.name", "answer_judge"));
        }
        let span = t
            .span_builder(format!("chat {}", l.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attrs)
            .start_with_context(t, cx);
        let ccx = cx.with_span(span);
        Self::budget_attrs(&ccx, timeout, rem);
        let t0 = Instant::now();
        let mut first: Option<f64> = None;
        let emit = run.emit.clone();
        let mut on_line = |line: &str| {
            if line.starts_with("data:") && !line.contains("[DONE]") {
                first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
                if let Some(e) = &emit {
                    e.emit(&format!("{line}\n\n"), "chunk");
                }
            }
        };
        let call = HttpCall {
            timeout: real_timeout,
            ..HttpCall::post(host, port, "/v1/chat/completions", body)
        };
        let lines: Option<&mut (dyn FnMut(&str) + Send)> =
            if l.stream { Some(&mut on_line) } else { None };
        let res = traced_http(&self.ctx, &ccx, call, lines).await;
        let span = ccx.span();
        let r = match res {
            Ok(r) => r,
            Err(e) => {
                let err = AgentError::from(e);
                record_error(&ccx, err.error_type(), &err.to_string());
                span.end();
                return Err(err);
            }
        };
        if let Some(f) = first {
            span.set_attribute(KeyValue::new(
                "gen_ai.response.time_to_first_chunk",
                (f * 10_000.0).round() / 10_000.0,
            ));
        }
        if let Some(reason) = r.header("x-llm-reason") {
            span.set_attribute(string_array("http.response.header.x-llm-reason", reason));
        }
        if r.status >= 500 {
            span.set_attribute(KeyValue::new("error.type", r.status.to_string()));
            span.set_status(Status::error(format!("model answered {}", r.status)));
            span.end();
            return Err(AgentError::CallFailed(r.status));
        }
        let answered: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let out = answered["usage"]["completion_tokens"]
            .as_u64()
            .unwrap_or(u64::from(l.output_tokens));
        span.set_attribute(KeyValue::new("gen_ai.response.model", l.model.clone()));
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::from(l.input_tokens),
        ));
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.output_tokens",
            out.min(u64::from(l.max_tokens)) as i64,
        ));
        if judge {
            span.add_event(
                "gen_ai.evaluation.result",
                vec![
                    KeyValue::new("gen_ai.evaluation.name", "answer_relevance"),
                    KeyValue::new("gen_ai.evaluation.score.value", l.score.unwrap_or(0.91)),
                ],
            );
        }
        span.end();
        Ok(())
    }

    async fn tool(
        self: &Arc<Self>,
        run: &Run,
        st: &ToolStep,
        cx: &Context,
    ) -> Result<(), AgentError> {
        let name = st.name.as_str();
        // `--set tool.retries=false` turns retries off; otherwise the
        // timeline's step, else the tool's own setting.
        let retries = match self.overrides.retries {
            Some(false) => 0,
            _ => st.retries.unwrap_or(agent_tool(name).1),
        };
        let t = &self.ctx.tracer;
        let mut sim = json!({
            "latency_ms": st.latency_ms, "status": st.status, "connect_ms": st.connect_ms,
            "fail_attempts": st.fail_attempts, "fail_status": st.fail_status,
        });
        if let Some(d) = st.dns_ms {
            sim["dns_ms"] = json!(d);
        }
        if let Some(d) = st.retry_dns_ms {
            sim["retry_dns_ms"] = json!(d);
        }
        for attempt in 0..=retries {
            let (timeout, rem) = self.timeouts(run, CallKind::Tool(name))?;
            let span = t
                .span_builder(format!("execute_tool {name}"))
                .with_kind(SpanKind::Internal)
                .with_attributes([
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", name.to_string()),
                    KeyValue::new("gen_ai.tool.type", "extension"),
                    KeyValue::new("agent.attempt", i64::from(attempt)),
                ])
                .start_with_context(t, cx);
            let tcx = cx.with_span(span);
            Self::budget_attrs(&tcx, timeout, rem);
            let call = HttpCall {
                timeout: timeout.map(|t| std::time::Duration::from_secs_f64(t / 1000.0)),
                ..HttpCall::post(
                    "tool-gateway",
                    self.ports.tools,
                    format!("/tools/{name}"),
                    json!({"args": {"q": "x"}, "attempt": attempt, "sim": sim}),
                )
            };
            match traced_http(&self.ctx, &tcx, call, None).await {
                Err(CallError::Timeout(_)) => {
                    let msg = format!("{name} timed out after {} ms", timeout.unwrap_or(0.0));
                    record_error(&tcx, "TimeoutError", &msg);
                    tcx.span().end();
                    return Err(AgentError::Timeout(msg));
                }
                Err(CallError::Failed(m)) => {
                    record_error(&tcx, "ConnectionError", &m);
                    tcx.span().end();
                    return Err(AgentError::Io(m));
                }
                Ok(r) if r.status < 500 => {
                    tcx.span().end();
                    return Ok(());
                }
                Ok(r) => {
                    tcx.span()
                        .set_attribute(KeyValue::new("error.type", "ToolError"));
                    tcx.span()
                        .set_status(Status::error(format!("{name} answered {}", r.status)));
                    tcx.span().end();
                }
            }
            if attempt < retries {
                self.ctx.scale.sleep(1000.0 * f64::from(attempt + 1)).await;
            }
        }
        match &st.fallback {
            Some(fb) => {
                let fb = MemoryStep {
                    fallback: Some("cache".into()),
                    ..fb.clone()
                };
                self.memory(run, &fb, cx).await
            }
            None => Err(AgentError::ToolFailed(format!(
                "{name} failed after {} attempts",
                retries + 1
            ))),
        }
    }

    async fn memory(
        self: &Arc<Self>,
        run: &Run,
        m: &MemoryStep,
        cx: &Context,
    ) -> Result<(), AgentError> {
        let (timeout, rem) = self.timeouts(run, CallKind::Memory)?;
        let t = &self.ctx.tracer;
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "search_memory"),
            KeyValue::new("agent.memory.store", m.name.clone()),
        ];
        if let Some(fb) = &m.fallback {
            attrs.push(KeyValue::new("agent.fallback", fb.clone()));
            attrs.push(KeyValue::new("agent.fallback_accepted", true));
        }
        let span = t
            .span_builder(format!("search_memory {}", m.name))
            .with_kind(SpanKind::Client)
            .with_attributes(attrs)
            .start_with_context(t, cx);
        let mcx = cx.with_span(span);
        Self::budget_attrs(&mcx, timeout, rem);
        let call = HttpCall {
            timeout: timeout.map(|t| std::time::Duration::from_secs_f64(t / 1000.0)),
            ..HttpCall::post(
                "memory-store",
                self.ports.memory,
                "/search",
                json!({"store": m.name, "latency_ms": m.latency_ms}),
            )
        };
        let r = traced_http(&self.ctx, &mcx, call, None).await;
        if let Err(e) = &r {
            let kind = match e {
                CallError::Timeout(_) => "TimeoutError",
                CallError::Failed(_) => "ConnectionError",
            };
            record_error(&mcx, kind, &e.to_string());
        }
        mcx.span().end();
        r.map(|_| ()).map_err(AgentError::from)
    }
}
