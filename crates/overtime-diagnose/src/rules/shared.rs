//! What several rules share: the conditions that more than one kind's
//! rule asks about a call, and the statistics the model-call kinds and the
//! tool kinds have in common.

use super::Facts;
use crate::calls::{Call, CallKind};
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::{median, percentile};
use crate::report::med_dur;
use overtime_model::{RootCauseKind as K, Stage};
use serde_json::json;

/// The gateway waiting on an upstream (not a model) with no span of its own.
pub fn upstream_wait(c: &Call) -> bool {
    c.kind == CallKind::Upstream && !c.is_llm()
}

/// DNS and connect took at least [`super::RuleThresholds::connect_share`]
/// of the call's running time.
pub fn connect_heavy(c: &Call, f: &Facts) -> bool {
    let ran_ms = c.raw_attempts_ms().iter().sum::<f64>().max(1.0);
    c.dns_connect_ms
        .is_some_and(|d| d >= f.thresholds.connect_share * ran_ms)
}

/// Two or more attempts, none holding
/// [`super::RuleThresholds::attempt_share`] of the request.
pub fn retried(c: &Call, f: &Facts) -> bool {
    c.attempts() >= 2
        && c.attempt_critical_us
            .iter()
            .all(|&a| (a as f64 / 1000.0) < f.thresholds.attempt_share * f.elapsed_ms)
}

/// A tool, memory or network call.
pub fn tool_like(c: &Call) -> bool {
    matches!(c.stage, Stage::Tool | Stage::Memory | Stage::Network)
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

/// A model call whose largest phase names `kind`.
pub fn llm_phase_is(c: &Call, kind: K) -> bool {
    c.is_llm() && largest_llm_phase(c).is_some_and(|(k, _, _)| k == kind)
}

/// The summary of a model call named by its largest phase.
pub fn llm_phase_summary(kind: K, c: &Call, f: &Facts, component: &str) -> String {
    let (_, phase, ms) = largest_llm_phase(c).unwrap_or((kind, "?", 0.0));
    let tokens = c
        .input_tokens
        .map(|t| format!(" with {t} input tokens"))
        .unwrap_or_default();
    format!(
        "the LLM call to {component}{tokens} spent {} in {phase}, holding {} of {}",
        crate::fmt::dur(ms),
        crate::fmt::dur(c.critical_us as f64 / 1000.0),
        crate::fmt::dur(f.elapsed_ms)
    )
}

/// The numbers of a model-call incident's dominant calls.
pub struct LlmNumbers {
    pub latency: Vec<f64>,
    pub tokens: Vec<f64>,
    pub out_tokens: Vec<f64>,
    pub queue: Vec<f64>,
    pub prefill: Vec<f64>,
    pub decode: Vec<f64>,
}

/// The statistics every model-call kind reports (latency, tokens against
/// the threshold, the phases), added to `s`.
pub fn llm_stats(run: &Run, s: &mut Stats) -> LlmNumbers {
    let n = LlmNumbers {
        latency: run.latency(),
        tokens: run.of_calls(|c| c.input_tokens.map(|t| t as f64)),
        out_tokens: run.of_calls(|c| c.output_tokens.map(|t| t as f64)),
        queue: run.of_calls(|c| c.phases.queue_ms),
        prefill: run.of_calls(|c| c.phases.prefill_ms),
        decode: run.of_calls(|c| c.phases.decode_ms),
    };
    let threshold = run.cfg.threshold_tokens;
    s.insert("latency_ms".into(), dist(&n.latency));
    s.insert(
        "input_tokens".into(),
        json!({"median": median(&n.tokens), "p90": percentile(&n.tokens, 0.9), "threshold": threshold, "n": n.tokens.len()}),
    );
    s.insert("output_tokens".into(), dist(&n.out_tokens));
    s.insert("queue_ms".into(), dist(&n.queue));
    s.insert("prefill_ms".into(), dist(&n.prefill));
    s.insert("decode_ms".into(), dist(&n.decode));
    n
}

/// The statistics of both tool kinds: the calls' durations against their
/// timeout.
pub fn tool_stats(run: &Run, s: &mut Stats) -> Option<String> {
    let latency = run.latency();
    let timeouts = run.of_calls(|c| c.timeout_ms);
    s.insert("duration_ms".into(), dist(&latency));
    s.insert("timeout_ms".into(), json!(median(&timeouts)));
    let against = median(&timeouts)
        .map(|t| format!("its timeout {}", crate::fmt::dur(t)))
        .unwrap_or_else(|| "no timeout".into());
    Some(format!(
        "P50 {}, P99 {} against {against}",
        med_dur(&latency),
        percentile(&latency, 0.99)
            .map(crate::fmt::dur)
            .unwrap_or_default()
    ))
}

/// The calls on the critical path that are spans and held time.
pub fn critical_spans<'a>(f: &'a Facts) -> impl Iterator<Item = &'a Call> {
    f.calls
        .iter()
        .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
}
