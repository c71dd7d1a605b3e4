//! What one completed request contributes to the SLIs: the live diagnosis
//! builds one [`RequestObservation`] per trace, at its first verdict, and
//! never again for that trace.

use crate::{Outcome, SpanStatus, Stage};
use serde::{Deserialize, Serialize};

/// The status one gateway layer answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayStatus {
    /// The layer's name (`edge`, `internal`…).
    pub layer: String,
    /// The HTTP status it answered; `None` when not logged.
    pub status: Option<u16>,
}

/// One call (one attempt: a retry is a call of its own) of a calling stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallObservation {
    /// What kind of call.
    pub stage: Stage,
    /// The model (LLM and judge calls).
    pub model: Option<String>,
    /// The tool (tool and memory calls) or the peer (network calls).
    pub tool: Option<String>,
    /// How the call ended.
    pub status: SpanStatus,
    /// How long the call ran, ms.
    pub duration_ms: f64,
    /// Time to first token (LLM calls), ms.
    pub ttft_ms: Option<f64>,
    /// Prompt tokens (LLM calls), when known.
    pub input_tokens: Option<i64>,
    /// Budget left when the call started, ms.
    pub budget_left_ms: Option<f64>,
    /// When the call ended (data time, µs since the epoch).
    pub end_us: i64,
    /// The call's own timeout as configured (`agent.timeout_ms`), ms.
    #[serde(default)]
    pub timeout_ms: Option<f64>,
    /// The largest share of a known timeout the call or a hop inside it
    /// used (a tool service's own client timeout under the orchestrator's
    /// call; a hop that timed out used all of it: 1). `None`: none known.
    #[serde(default)]
    pub timeout_used: Option<f64>,
    /// 0 for the first try, 1 for the first retry…
    #[serde(default)]
    pub attempt: u32,
    /// Queue wait of an LLM call, ms (`X-LLM-Reason` or phase spans).
    #[serde(default)]
    pub queue_ms: Option<f64>,
    /// Prefill (KV-cache build) of an LLM call, ms.
    #[serde(default)]
    pub prefill_ms: Option<f64>,
}

impl CallObservation {
    /// The call ended in its own timeout.
    pub fn timed_out(&self) -> bool {
        self.status == SpanStatus::Timeout
    }

    /// An LLM call: stage `llm` or `judge` (a judge is an LLM call too).
    pub fn is_llm(&self) -> bool {
        matches!(self.stage, Stage::Llm | Stage::Judge)
    }
}

/// One completed request.
///
/// ```
/// use overtime_model::{input_bucket, RequestObservation};
/// use overtime_model::Outcome;
/// let o = RequestObservation::new("/v1/agent/chat", Outcome::GatewayTimeout, 60_000_000);
/// assert!(o.timed_out() && !o.is_ok());
/// assert_eq!(input_bucket(Some(412)), "200-500");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestObservation {
    /// The request's trace id.
    pub trace_id: String,
    /// The gateway's request path without its query string, else the root
    /// span's name.
    pub route: String,
    /// What the user saw.
    pub outcome: Outcome,
    /// When the request started (data time, µs since the epoch).
    pub start_us: i64,
    /// When the request ended (data time): every window is keyed by it.
    pub end_us: i64,
    /// Every gateway layer that logged the request, outermost first.
    pub gateway: Vec<GatewayStatus>,
    /// The LLM-as-judge score of the answer, if judged.
    pub judge_score: Option<f64>,
    /// The fallback used (the `fallback` of any span), if the request fell back.
    pub fallback: Option<String>,
    /// Whether the fallback answer was accepted (any span's `fallback_accepted`).
    pub fallback_accepted: Option<bool>,
    /// The calls, by end time.
    pub calls: Vec<CallObservation>,
    /// The share of the tightest timeout known for the request as a whole
    /// that it used: its time at the outermost gateway over that layer's
    /// read timeout (a stream: its longest silence), or its service time
    /// over its budget, whichever is larger. `None`: no such timeout known.
    #[serde(default)]
    pub timeout_used: Option<f64>,
    /// A provisional observation: made as soon as the request ended (its
    /// gateway line in, its trace quiet for a moment), before the grace
    /// period that makes the final one. Only the fast early-warning series
    /// take it; the SLIs wait for the final observation.
    #[serde(default)]
    pub provisional: bool,
    /// On a final observation whose provisional one was taken: the latest
    /// end (µs) of the calls that one held. The fast series take from the
    /// final one only the calls that ended later (the work a gateway's cut
    /// left running), not the request's time again.
    #[serde(default)]
    pub provisional_calls_until_us: Option<i64>,
}

impl RequestObservation {
    /// A request with no gateway record, judge score, fallback or call.
    pub fn new(route: &str, outcome: Outcome, end_us: i64) -> Self {
        RequestObservation {
            trace_id: String::new(),
            route: route.to_string(),
            outcome,
            start_us: end_us,
            end_us,
            gateway: Vec::new(),
            judge_score: None,
            fallback: None,
            fallback_accepted: None,
            calls: Vec::new(),
            timeout_used: None,
            provisional: false,
            provisional_calls_until_us: None,
        }
    }

    /// Outcome `gateway_timeout` or `service_timeout`.
    pub fn timed_out(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::GatewayTimeout | Outcome::ServiceTimeout
        )
    }

    /// Outcome `ok`.
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The outermost gateway answered 4xx: the client's mistake, not an
    /// answer of the platform (left out of the early-warning signals).
    pub fn client_error(&self) -> bool {
        self.gateway
            .first()
            .and_then(|g| g.status)
            .is_some_and(|s| (400..500).contains(&s))
    }
}

impl CallObservation {
    /// A call with the given stage, status, duration and end, nothing else.
    ///
    /// ```
    /// use overtime_model::CallObservation;
    /// use overtime_model::{SpanStatus, Stage};
    /// let c = CallObservation::new(Stage::Tool, SpanStatus::Timeout, 5_000.0, 0);
    /// assert!(c.timed_out() && !c.is_llm());
    /// ```
    pub fn new(stage: Stage, status: SpanStatus, duration_ms: f64, end_us: i64) -> Self {
        CallObservation {
            stage,
            model: None,
            tool: None,
            status,
            duration_ms,
            ttft_ms: None,
            input_tokens: None,
            budget_left_ms: None,
            end_us,
            timeout_ms: None,
            timeout_used: None,
            attempt: 0,
            queue_ms: None,
            prefill_ms: None,
        }
    }

    /// The call failed: its own timeout fired or it ended in an error.
    pub fn failed(&self) -> bool {
        matches!(self.status, SpanStatus::Timeout | SpanStatus::Error)
    }

    /// What it called: the model, else the tool or peer, else "".
    pub fn target(&self) -> &str {
        self.model.as_deref().or(self.tool.as_deref()).unwrap_or("")
    }
}

/// The input-token bucket of docs/diagnosis.md#incidents-and-their-reports (`<50`, `50-200`, `200-500`, `>500`),
/// or `unknown`.
pub fn input_bucket(tokens: Option<i64>) -> &'static str {
    match tokens {
        None => "unknown",
        Some(t) if t < 50 => "<50",
        Some(t) if t < 200 => "50-200",
        Some(t) if t <= 500 => "200-500",
        Some(_) => ">500",
    }
}
