//! What one simulated request asks the agent service to do: its JSON body
//! is `{"steps": [...]}`, and each step carries the delays the downstream
//! services will play (in nominal milliseconds, see [`crate::TimeScale`]).
//! This is how a scenario injects a fault into one request and not the
//! others; the spans only show what a real platform would show.

use serde::{Deserialize, Serialize};

/// The main model: GPU slots, `X-LLM-Reason`.
pub(crate) const DS: &str = "deepseek-v4-pro";
/// The LLM-as-judge model.
pub(crate) const JUDGE: &str = "qwen2.5-72b-instruct";
/// An older model server that reports no phases.
pub(crate) const LLAMA: &str = "llama-3-8b-instruct";

/// One step of the orchestrator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Step {
    /// Planning between calls, no span.
    Think { ms: f64 },
    /// A chat call to a model.
    Llm(LlmStep),
    /// The LLM-as-judge call scoring the answer.
    Judge(LlmStep),
    /// A tool call through the tool gateway.
    Tool(ToolStep),
    /// A memory-store lookup.
    Memory(MemoryStep),
    /// Steps run concurrently; the first failure (in order) fails the step.
    Parallel { steps: Vec<Step> },
    /// Runs `step` while a heartbeat keeps the response stream alive.
    HeartbeatDuring { step: Box<Step>, every_ms: f64 },
}

fn one() -> f64 {
    1.0
}

fn ok_status() -> u16 {
    200
}

fn unavailable() -> u16 {
    503
}

/// A chat call: tokens in and out; the model server derives its phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LlmStep {
    pub(crate) model: String,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
    pub(crate) max_tokens: u32,
    #[serde(default)]
    pub(crate) stream: bool,
    /// Decode slowed by this factor (a sick GPU, a judge on a busy pool).
    #[serde(default = "one")]
    pub(crate) slow: f64,
    /// Prefill slowed by this factor.
    #[serde(default = "one")]
    pub(crate) prefill_slow: f64,
    /// Total latency of a model server without phases (llama).
    #[serde(default)]
    pub(crate) latency_ms: Option<f64>,
    /// Called with a plain HTTP client: no GenAI span, only `POST` with the
    /// captured `X-LLM-Reason`.
    #[serde(default)]
    pub(crate) raw: bool,
    /// Extra wait in the model server's queue before a GPU slot (nominal
    /// ms): the shared pool busy with other tenants' work.
    #[serde(default)]
    pub(crate) queue_ms: f64,
    /// The judge's score of the answer (judge calls; default 0.91).
    #[serde(default)]
    pub(crate) score: Option<f64>,
}

/// A tool call: the third-party API's latency and status, its DNS and
/// connect delays, and how many first attempts fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolStep {
    pub(crate) name: String,
    pub(crate) latency_ms: f64,
    #[serde(default = "ok_status")]
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) dns_ms: Option<f64>,
    #[serde(default)]
    pub(crate) connect_ms: f64,
    #[serde(default)]
    pub(crate) fail_attempts: u32,
    #[serde(default = "unavailable")]
    pub(crate) fail_status: u16,
    /// Read from memory when every attempt failed.
    #[serde(default)]
    pub(crate) fallback: Option<MemoryStep>,
    /// DNS time of the retries (nominal ms; default: `dns_ms`): a retry
    /// often finds the name the first try resolved in the cache.
    #[serde(default)]
    pub(crate) retry_dns_ms: Option<f64>,
    /// Retries of the orchestrator (default: the tool's own).
    #[serde(default)]
    pub(crate) retries: Option<u32>,
}

/// A memory-store lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MemoryStep {
    pub(crate) name: String,
    pub(crate) latency_ms: f64,
    /// Set when this lookup is a fallback (`cache`).
    #[serde(default)]
    pub(crate) fallback: Option<String>,
}

/// The body of a `/v1/agent/*` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentRequest {
    pub(crate) steps: Vec<Step>,
}

/// A chat call on [`DS`], `max_tokens` 1024.
pub(crate) fn llm(input_tokens: u32, output_tokens: u32) -> Step {
    Step::Llm(LlmStep {
        model: DS.into(),
        input_tokens,
        output_tokens,
        max_tokens: 1024,
        stream: false,
        slow: 1.0,
        prefill_slow: 1.0,
        latency_ms: None,
        raw: false,
        queue_ms: 0.0,
        score: None,
    })
}

/// Edits the [`LlmStep`] inside an `llm`/`judge` step.
pub(crate) fn with_llm(mut s: Step, f: impl FnOnce(&mut LlmStep)) -> Step {
    if let Step::Llm(l) | Step::Judge(l) = &mut s {
        f(l);
    }
    s
}

/// A streamed chat call on [`DS`].
pub(crate) fn llm_stream(input_tokens: u32, output_tokens: u32) -> Step {
    with_llm(llm(input_tokens, output_tokens), |l| l.stream = true)
}

/// The judge on [`JUDGE`], `max_tokens` 512, decode slowed by `slow`.
pub(crate) fn judge(input_tokens: u32, output_tokens: u32, slow: f64) -> Step {
    Step::Judge(LlmStep {
        model: JUDGE.into(),
        input_tokens,
        output_tokens,
        max_tokens: 512,
        stream: false,
        slow,
        prefill_slow: 1.0,
        latency_ms: None,
        raw: false,
        queue_ms: 0.0,
        score: None,
    })
}

/// A tool call answering 200 after `latency_ms`.
pub(crate) fn tool(name: &str, latency_ms: f64) -> Step {
    Step::Tool(ToolStep {
        name: name.into(),
        latency_ms,
        status: 200,
        dns_ms: None,
        connect_ms: 0.0,
        fail_attempts: 0,
        fail_status: 503,
        fallback: None,
        retry_dns_ms: None,
        retries: None,
    })
}

/// Edits the [`ToolStep`] inside a `tool` step.
pub(crate) fn with_tool(mut s: Step, f: impl FnOnce(&mut ToolStep)) -> Step {
    if let Step::Tool(t) = &mut s {
        f(t);
    }
    s
}

/// A memory lookup.
pub(crate) fn mem(latency_ms: f64, name: &str) -> Step {
    Step::Memory(MemoryStep {
        name: name.into(),
        latency_ms,
        fallback: None,
    })
}

/// Steps run concurrently.
pub(crate) fn par(steps: Vec<Step>) -> Step {
    Step::Parallel { steps }
}

/// `step` with a heartbeat every `every_ms` on the response stream.
pub(crate) fn heartbeat(step: Step, every_ms: f64) -> Step {
    Step::HeartbeatDuring {
        step: Box::new(step),
        every_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_json() {
        let body = serde_json::json!({"steps": [llm(120, 80), tool("calc", 1600.0)]});
        let back: Vec<Step> = serde_json::from_value(body["steps"].clone()).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(body["steps"][1]["op"], "tool");
    }

    #[test]
    fn round_trip_with_defaults() {
        let s = with_tool(tool("weather_api", 12_000.0), |t| {
            t.dns_ms = Some(16_000.0);
            t.fallback = Some(MemoryStep {
                name: "weather_cache".into(),
                latency_ms: 200.0,
                fallback: None,
            });
        });
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Step>(&text).unwrap(), s);
        // Defaults fill what a hand-written body leaves out.
        let t: Step =
            serde_json::from_str(r#"{"op":"tool","name":"calc","latency_ms":5}"#).unwrap();
        assert_eq!(t, tool("calc", 5.0));
        let bad = serde_json::from_str::<Step>(r#"{"op":"teleport"}"#);
        assert!(bad.is_err());
    }
}
