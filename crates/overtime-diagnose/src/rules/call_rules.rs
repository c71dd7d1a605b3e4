//! The rules that name the kind of one call, in the order they are tried.

use super::{CallRule, Facts};
use crate::calls::{Call, CallKind};
use overtime_model::{RootCauseKind as K, Stage};

/// Every call rule, in order: the first that recognises the call names its
/// kind; a call none recognises is `unknown`.
pub static CALL_RULES: &[&dyn CallRule] = &[
    &ConnectionPoolWait,
    &UpstreamWait,
    &JudgeCall,
    &LlmRetries,
    &LlmCall,
    &ConnectSlow,
    &Retries,
    &ToolCall,
];

/// The kind of one call: the first of [`CALL_RULES`] that recognises it.
pub fn call_kind(c: &Call, f: &Facts) -> K {
    CALL_RULES
        .iter()
        .find_map(|r| r.kind(c, f))
        .unwrap_or(K::Unknown)
}

/// The component a person would name for a call of this kind.
pub fn component_for(kind: K, c: &Call, f: &Facts) -> String {
    match kind {
        K::PoolSaturation if c.kind == CallKind::Upstream => f.service.clone(),
        K::PoolSaturation => c.service.clone(),
        K::Unknown => "—".into(),
        _ => c.component.clone(),
    }
}

/// DNS and connect took at least [`super::RuleThresholds::connect_share`]
/// of the call's running time.
fn connect_heavy(c: &Call, f: &Facts) -> bool {
    let ran_ms = c.raw_attempts_ms().iter().sum::<f64>().max(1.0);
    c.dns_connect_ms
        .is_some_and(|d| d >= f.thresholds.connect_share * ran_ms)
}

/// Two or more attempts, none holding
/// [`super::RuleThresholds::attempt_share`] of the request.
fn retried(c: &Call, f: &Facts) -> bool {
    c.attempts() >= 2
        && c.attempt_critical_us
            .iter()
            .all(|&a| (a as f64 / 1000.0) < f.thresholds.attempt_share * f.elapsed_ms)
}

/// `pool_saturation`: waiting for a worker or connection before work began
/// (a `queue` span, or the gap before a service's first call).
pub struct ConnectionPoolWait;

impl CallRule for ConnectionPoolWait {
    fn name(&self) -> &'static str {
        "pool_wait"
    }
    fn kind(&self, c: &Call, _: &Facts) -> Option<K> {
        (c.kind == CallKind::PoolWait || c.stage == Stage::Queue).then_some(K::PoolSaturation)
    }
}

/// The gateway waiting on an upstream with no span of its own:
/// `upstream_connect_slow` when connecting took the time, else the service
/// behind it was saturated (when it wrote spans), else `unknown`.
pub struct UpstreamWait;

impl CallRule for UpstreamWait {
    fn name(&self) -> &'static str {
        "upstream_wait"
    }
    fn kind(&self, c: &Call, f: &Facts) -> Option<K> {
        if c.kind != CallKind::Upstream || c.is_llm() {
            return None;
        }
        Some(if connect_heavy(c, f) {
            K::UpstreamConnectSlow
        } else if f.has_spans {
            K::PoolSaturation
        } else {
            K::Unknown
        })
    }
}

/// `judge_slow`: an LLM-as-judge call.
pub struct JudgeCall;

impl CallRule for JudgeCall {
    fn name(&self) -> &'static str {
        "judge"
    }
    fn kind(&self, c: &Call, _: &Facts) -> Option<K> {
        (c.stage == Stage::Judge).then_some(K::JudgeSlow)
    }
}

/// `retry_amplification` on a model call: the client retried it and no
/// attempt held the request.
pub struct LlmRetries;

impl CallRule for LlmRetries {
    fn name(&self) -> &'static str {
        "llm_retries"
    }
    fn kind(&self, c: &Call, f: &Facts) -> Option<K> {
        (c.is_llm() && retried(c, f)).then_some(K::RetryAmplification)
    }
}

/// A model call: its largest `X-LLM-Reason` phase names the kind
/// (`llm_queueing`, `llm_prefill_slow`, `llm_decode_slow`), `llm_slow` when
/// the model server reported none.
pub struct LlmCall;

impl CallRule for LlmCall {
    fn name(&self) -> &'static str {
        "llm"
    }
    fn kind(&self, c: &Call, _: &Facts) -> Option<K> {
        c.is_llm()
            .then(|| largest_llm_phase(c).map(|x| x.0).unwrap_or(K::LlmSlow))
    }
}

/// `upstream_connect_slow`: DNS and connect took most of the call.
pub struct ConnectSlow;

impl CallRule for ConnectSlow {
    fn name(&self) -> &'static str {
        "connect_slow"
    }
    fn kind(&self, c: &Call, f: &Facts) -> Option<K> {
        connect_heavy(c, f).then_some(K::UpstreamConnectSlow)
    }
}

/// `retry_amplification` on any other call.
pub struct Retries;

impl CallRule for Retries {
    fn name(&self) -> &'static str {
        "retries"
    }
    fn kind(&self, c: &Call, f: &Facts) -> Option<K> {
        retried(c, f).then_some(K::RetryAmplification)
    }
}

/// A tool, memory or network call: `tool_no_timeout` when it ran with none,
/// else `tool_slow`.
pub struct ToolCall;

impl CallRule for ToolCall {
    fn name(&self) -> &'static str {
        "tool"
    }
    fn kind(&self, c: &Call, _: &Facts) -> Option<K> {
        matches!(c.stage, Stage::Tool | Stage::Memory | Stage::Network).then(|| {
            if c.timeout_ms.is_none() {
                K::ToolNoTimeout
            } else {
                K::ToolSlow
            }
        })
    }
}

/// The largest of a model call's queue, prefill and decode phases: the kind
/// it names, the phase and its time. A server that gave prefill and decode
/// only together (`inference`) names the queue when it outweighs them,
/// and nothing otherwise: which of the two it was is not known.
pub fn largest_llm_phase(c: &Call) -> Option<(K, &'static str, f64)> {
    let p = &c.phases;
    if p.prefill_ms.is_none() && p.decode_ms.is_none() {
        let unsplit = p.other.iter().find(|(n, _)| n == "inference").map(|x| x.1);
        if let Some(inference) = unsplit {
            return p
                .queue_ms
                .filter(|q| *q > inference)
                .map(|q| (K::LlmQueueing, "queue", q));
        }
    }
    [
        (K::LlmQueueing, "queue", p.queue_ms),
        (K::LlmPrefillSlow, "prefill", p.prefill_ms),
        (K::LlmDecodeSlow, "decode", p.decode_ms),
    ]
    .into_iter()
    .filter_map(|(k, n, v)| v.map(|v| (k, n, v)))
    .max_by(|a, b| a.2.total_cmp(&b.2))
}
