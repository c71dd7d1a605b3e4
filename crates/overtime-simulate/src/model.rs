//! The model servers. `model-server` serves deepseek-v4-pro and the judge
//! model on FIFO "GPU slots": the queue wait, a prefill quadratic in the
//! input tokens and a decode of output tokens / rate are really slept, and
//! reported as `X-LLM-Reason: queue_wait=…s,kv_cache_build=…s,
//! decode_loop=…s,io_wait=…s` and `X-LLM-Duration` (docs/inputs.md#x-llm-reason); streams
//! answer SSE chunks. `legacy-llm` (llama) reports no phases at all.
//!
//! Like vLLM, `model-server` counts the calls it holds that are not
//! running yet (behind other tenants' work, or waiting for a GPU slot) and
//! the calls on its slots, per model: [`ModelServer::exposition`] writes
//! them as vLLM's `/metrics` does (`vllm:num_requests_waiting`,
//! `vllm:num_requests_running`, label `model_name`).

use crate::http;
use crate::service::{Ctx, Reply, Req, plain, record_error, respond, string_array};
use crate::steps::{DS, JUDGE, LLAMA};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use hyper::Response;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// One model's capacity and speed (nominal).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelSpec {
    pub(crate) name: &'static str,
    /// Concurrent requests on the GPUs; the rest wait in FIFO order.
    pub(crate) slots: usize,
    /// Prefill = base + coef × input_tokens² (ms): 0.3 s → 2.1 s for 100 →
    /// 300 tokens, as in incident A.
    pub(crate) prefill_base_ms: f64,
    pub(crate) prefill_coef_ms: f64,
    /// Decode speed, tokens per second.
    pub(crate) tokens_per_s: f64,
}

/// The models `model-server` serves.
pub(crate) const MODELS: [ModelSpec; 2] = [
    ModelSpec {
        name: DS,
        // Incident A queued "above 12 concurrent" on its shared GPU pool.
        slots: 12,
        prefill_base_ms: 80.0,
        prefill_coef_ms: 0.0234,
        tokens_per_s: 28.0,
    },
    ModelSpec {
        name: JUDGE,
        slots: 4,
        prefill_base_ms: 80.0,
        prefill_coef_ms: 0.02,
        tokens_per_s: 25.0,
    },
];

/// Nominal time the model server spends writing the answer.
const IO_MS: f64 = 80.0;

/// Words in the messages' contents: the simulator's tokens.
pub(crate) fn count_tokens(req: &Value) -> u32 {
    req["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    m["content"]
                        .as_str()
                        .unwrap_or("")
                        .split_whitespace()
                        .count() as u32
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `X-LLM-Reason` for the phases measured.
pub(crate) fn reason(phases: &[(&str, Duration)]) -> String {
    phases
        .iter()
        .map(|(k, d)| format!("{k}={:.4}s", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(",")
}

/// One model's GPU slots and the calls waiting for them.
#[derive(Debug)]
struct Pool {
    spec: ModelSpec,
    slots: Arc<Semaphore>,
    /// Calls received and not running yet.
    waiting: Arc<AtomicUsize>,
}

/// Counts a call as waiting while held.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(c: &Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, SeqCst);
        Waiting(c.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// `model-server`.
#[derive(Debug)]
pub(crate) struct ModelServer {
    pub(crate) ctx: Arc<Ctx>,
    pools: HashMap<&'static str, Pool>,
}

impl ModelServer {
    pub(crate) fn new(ctx: Arc<Ctx>) -> Self {
        let pools = MODELS
            .iter()
            .map(|m| {
                let pool = Pool {
                    spec: *m,
                    slots: Arc::new(Semaphore::new(m.slots)),
                    waiting: Arc::default(),
                };
                (m.name, pool)
            })
            .collect();
        ModelServer { ctx, pools }
    }

    /// Its load now, in the text format vLLM's `/metrics` answers with:
    /// per model, the calls waiting (not running yet) and running.
    pub(crate) fn exposition(&self) -> String {
        let mut waiting = String::from("# TYPE vllm:num_requests_waiting gauge\n");
        let mut running = String::from("# TYPE vllm:num_requests_running gauge\n");
        for m in MODELS {
            let Some(p) = self.pools.get(m.name) else {
                continue;
            };
            let busy = m.slots.saturating_sub(p.slots.available_permits());
            let w = p.waiting.load(SeqCst);
            waiting += &format!(
                "vllm:num_requests_waiting{{model_name=\"{}\"}} {w}\n",
                m.name
            );
            running += &format!(
                "vllm:num_requests_running{{model_name=\"{}\"}} {busy}\n",
                m.name
            );
        }
        waiting + &running
    }

    pub(crate) fn route(_: &str) -> String {
        "/v1/chat/completions".into()
    }

    pub(crate) fn handle(self: Arc<Self>, req: Req, cx: Context) -> BoxFuture<'static, Reply> {
        Box::pin(async move { self.chat(req, cx).await })
    }

    async fn chat(&self, req: Req, cx: Context) -> Reply {
        let scale = self.ctx.scale;
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let model = body["model"].as_str().unwrap_or(DS).to_string();
        let Some(pool) = self.pools.get(model.as_str()) else {
            return respond(
                &cx,
                404,
                &json!({"error": format!("model {model} not served")}),
                &[],
            );
        };
        let sim = &body["sim"];
        let tin = count_tokens(&body);
        let max_tokens = body["max_tokens"].as_u64().unwrap_or(1024);
        let tout = sim["output_tokens"].as_u64().unwrap_or(120).min(max_tokens);
        let slow = sim["slow"].as_f64().unwrap_or(1.0);
        let span = cx.span();
        span.set_attribute(KeyValue::new("gen_ai.request.model", model.clone()));
        span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", i64::from(tin)));
        let (spec, slots) = (pool.spec, pool.slots.clone());
        let t0 = Instant::now();
        let waiting = Waiting::new(&pool.waiting);
        // Other tenants' work ahead of this call on the shared pool.
        scale.sleep(sim["queue_ms"].as_f64().unwrap_or(0.0)).await;
        let Ok(permit) = slots.acquire_owned().await else {
            return respond(&cx, 503, &json!({"error": "model server stopping"}), &[]);
        };
        drop(waiting);
        let queue = t0.elapsed();
        let p0 = Instant::now();
        let prefill_ms = (spec.prefill_base_ms
            + spec.prefill_coef_ms * f64::from(tin) * f64::from(tin))
            * sim["prefill_slow"].as_f64().unwrap_or(1.0);
        scale.sleep(prefill_ms).await;
        let prefill = p0.elapsed();
        let decode_ms = tout as f64 / spec.tokens_per_s * 1000.0 * slow;
        if body["stream"].as_bool().unwrap_or(false) {
            let r = reason(&[("queue_wait", queue), ("kv_cache_build", prefill)]);
            span.set_attribute(KeyValue::new("http.response.status_code", 200));
            span.set_attribute(string_array("http.response.header.x-llm-reason", r.clone()));
            let (tx, out) = http::channel();
            let busy = req.busy;
            tokio::spawn(async move {
                let n = 10;
                let mut gone = false;
                for i in 0..n {
                    scale.sleep(decode_ms / n as f64).await;
                    let chunk = json!({"i": i, "delta": "tok ".repeat((tout / n) as usize)});
                    if tx
                        .send(Ok(Bytes::from(format!("data: {chunk}\n\n"))))
                        .is_err()
                    {
                        gone = true;
                        break;
                    }
                }
                if gone
                    || tx
                        .send(Ok(Bytes::from_static(b"data: [DONE]\n\n")))
                        .is_err()
                {
                    record_error(&cx, "BrokenPipeError", "client went away mid-stream");
                } else {
                    cx.span()
                        .set_attribute(KeyValue::new("gen_ai.usage.output_tokens", tout as i64));
                }
                drop(permit);
                drop(tx);
                cx.span().end();
                drop(busy);
            });
            let resp = Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .header("x-llm-reason", r)
                .body(out)
                .unwrap_or_else(|_| plain(500, "bad header"));
            return Reply::Streaming(resp);
        }
        let d0 = Instant::now();
        scale.sleep(decode_ms).await;
        let decode = d0.elapsed();
        let i0 = Instant::now();
        scale.sleep(IO_MS).await;
        let io = i0.elapsed();
        drop(permit);
        let total = t0.elapsed();
        let r = reason(&[
            ("queue_wait", queue),
            ("kv_cache_build", prefill),
            ("decode_loop", decode),
            ("io_wait", io),
        ]);
        span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", tout as i64));
        respond(
            &cx,
            200,
            &json!({
                "model": model,
                "choices": [{"message": {"role": "assistant", "content": "ok ".repeat(tout.min(20) as usize)}}],
                "usage": {"prompt_tokens": tin, "completion_tokens": tout},
            }),
            &[
                ("X-LLM-Reason", r),
                ("X-LLM-Duration", format!("{:.4}s", total.as_secs_f64())),
            ],
        )
    }
}

/// `legacy-llm`: an older model server (llama) with no phases and no
/// `X-LLM-Reason`.
#[derive(Debug)]
pub(crate) struct LegacyLlm {
    pub(crate) ctx: Arc<Ctx>,
}

impl LegacyLlm {
    pub(crate) fn handle(self: Arc<Self>, req: Req, cx: Context) -> BoxFuture<'static, Reply> {
        Box::pin(async move {
            let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let sim = &body["sim"];
            let tin = count_tokens(&body);
            let tout = sim["output_tokens"].as_u64().unwrap_or(80);
            self.ctx
                .scale
                .sleep(sim["latency_ms"].as_f64().unwrap_or(6000.0))
                .await;
            respond(
                &cx,
                200,
                &json!({
                    "model": body["model"].as_str().unwrap_or(LLAMA),
                    "usage": {"prompt_tokens": tin, "completion_tokens": tout},
                }),
                &[],
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_example() {
        use std::time::Duration;
        let r = reason(&[
            ("queue_wait", Duration::from_millis(12)),
            ("kv_cache_build", Duration::from_millis(3200)),
        ]);
        assert_eq!(r, "queue_wait=0.0120s,kv_cache_build=3.2000s");
    }

    #[test]
    fn prefill_grows_as_in_incident_a() {
        let ds = MODELS[0];
        let p = |t: f64| (ds.prefill_base_ms + ds.prefill_coef_ms * t * t) / 1000.0;
        assert!((p(100.0) - 0.31).abs() < 0.02, "{}", p(100.0));
        assert!((p(300.0) - 2.2).abs() < 0.1, "{}", p(300.0));
        // The attribution call of the prefill scenario: most of a minute.
        assert!(p(1500.0) > 50.0 && p(1500.0) < 60.0, "{}", p(1500.0));
    }

    #[test]
    fn tokens_are_words() {
        let body = json!({"messages": [{"content": "a b c"}, {"content": " d  e "}]});
        assert_eq!(count_tokens(&body), 5);
        assert_eq!(count_tokens(&json!({})), 0);
    }
}
