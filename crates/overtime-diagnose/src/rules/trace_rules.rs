//! The rules over the whole trace, in the order they are tried.

use super::evidence::{call_evidence, summary, unknown};
use super::{Decision, Facts, TraceRule, call_kind, component_for, contributing};
use crate::calls::{Call, CallKind};
use crate::fmt::{dur, dur_or_none, pct};
use overtime_model::{Outcome, RootCause, RootCauseKind as K};

/// Every trace rule, in order: the first that decides wins.
pub static TRACE_RULES: &[&dyn TraceRule] = &[
    &StreamIdleGap,
    &NoCriticalPath,
    &GatewayTimeoutMismatch,
    &SerialBudgetExhaustion,
    &DominantCall,
];

/// `stream_idle_gap`: a stream went silent at its end for (about) the
/// gateway's read timeout, and the gateway cut it.
pub struct StreamIdleGap;

impl TraceRule for StreamIdleGap {
    fn name(&self) -> &'static str {
        "stream_idle_gap"
    }
    fn decide(&self, f: &Facts) -> Option<Decision> {
        if f.outcome != Outcome::GatewayTimeout || f.gateway_status.is_none() {
            return None;
        }
        let s = f.stream.as_ref()?;
        let th = f.thresholds;
        let limit = f
            .gateway_timeout_ms
            .map(|t| th.stream_gap_of_read_timeout * t)
            .unwrap_or(th.stream_gap_of_elapsed * f.elapsed_ms);
        if !s.at_end || s.gap_ms < limit {
            return None;
        }
        let comp = f
            .stream_component
            .clone()
            .unwrap_or_else(|| f.service.clone());
        let t = dur_or_none(f.gateway_timeout_ms);
        let silence = if s.events == 0 {
            format!(
                "the gateway held the stream of {comp} open {} after its headers (at {}) with no chunk traced, while {comp} was still answering",
                dur(s.gap_ms),
                dur(s.last_event_ms)
            )
        } else {
            format!(
                "the stream of {comp} went silent for {} (no chunk or heartbeat) after {} events, the last at {}",
                dur(s.gap_ms),
                s.events,
                dur(s.last_event_ms)
            )
        };
        let ev = f.with_gateway(vec![
            silence,
            format!("the gap from the last chunk to the cut exceeded the gateway read timeout {t}, and the gateway cut the stream"),
        ]);
        Some((
            RootCause {
                kind: K::StreamIdleGap,
                component: comp.clone(),
                share: (s.gap_ms / f.elapsed_ms.max(1.0)).min(1.0),
                summary: format!(
                    "{comp}'s stream was silent for {} > the gateway read timeout {t}; send heartbeats",
                    dur(s.gap_ms)
                ),
                evidence: ev,
            },
            vec![],
        ))
    }
}

/// `unknown`: nothing on the critical path to blame (no spans at all, or
/// none that held time).
pub struct NoCriticalPath;

impl TraceRule for NoCriticalPath {
    fn name(&self) -> &'static str {
        "no_critical_path"
    }
    fn decide(&self, f: &Facts) -> Option<Decision> {
        if !f.calls.is_empty() {
            return None;
        }
        let why = if f.has_spans {
            "no calls on the critical path"
        } else {
            "no spans for this trace (sampled out or not instrumented)"
        };
        Some((unknown(f, why, f.with_gateway(vec![])), vec![]))
    }
}

/// The calls on the critical path that are spans and held time.
fn critical_spans<'a>(f: &'a Facts) -> impl Iterator<Item = &'a Call> {
    f.calls
        .iter()
        .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
}

/// `gateway_timeout_mismatch`: the gateway gave up while every call on the
/// critical path was within its timeout and the service still had budget.
pub struct GatewayTimeoutMismatch;

impl TraceRule for GatewayTimeoutMismatch {
    fn name(&self) -> &'static str {
        "gateway_timeout_mismatch"
    }
    fn decide(&self, f: &Facts) -> Option<Decision> {
        if f.outcome != Outcome::GatewayTimeout {
            return None;
        }
        let dominant = f.calls.first()?;
        let critical: Vec<&Call> = critical_spans(f).collect();
        let gw_t = f.gateway_timeout_ms.unwrap_or(f.elapsed_ms);
        let all_within = !critical.is_empty()
            && critical.iter().all(|c| {
                c.timeout_ms.is_some_and(|t| {
                    !c.timed_out
                        && c.attempt_duration_us
                            .iter()
                            .all(|d| (*d as f64 / 1000.0) < t)
                })
            });
        let b = f.service_budget_ms?;
        if !all_within || b <= gw_t {
            return None;
        }
        let ev = f.with_gateway(vec![
            format!("service budget {} > gateway timeout {}", dur(b), dur(gw_t)),
            format!(
                "all {} calls on the critical path had a timeout and none fired",
                critical.len()
            ),
        ]);
        Some((
            RootCause {
                kind: K::GatewayTimeoutMismatch,
                component: "gateway".into(),
                share: 1.0,
                summary: format!(
                    "the gateway gave up at {} while the service still had budget ({}) and no call had timed out",
                    dur(gw_t),
                    dur(b)
                ),
                evidence: ev,
            },
            contributing(f, dominant, None),
        ))
    }
}

/// `serial_budget_exhaustion`: several calls in series, none dominant.
pub struct SerialBudgetExhaustion;

impl TraceRule for SerialBudgetExhaustion {
    fn name(&self) -> &'static str {
        "serial_budget_exhaustion"
    }
    fn decide(&self, f: &Facts) -> Option<Decision> {
        let dominant = f.calls.first()?;
        let share = f.share(dominant);
        let n = critical_spans(f).count();
        if share >= f.thresholds.dominant_share || n < 2 {
            return None;
        }
        let top: Vec<String> = f
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Span)
            .take(3)
            .map(|c| format!("{} {}", c.component, dur(c.critical_us as f64 / 1000.0)))
            .collect();
        let ev = f.with_gateway(vec![
            format!(
                "no single call dominates: the largest, {}, holds {} of {}",
                dominant.component,
                pct(share),
                dur(f.elapsed_ms)
            ),
            format!("{n} calls on the critical path: {}", top.join(", ")),
        ]);
        Some((
            RootCause {
                kind: K::SerialBudgetExhaustion,
                component: f.service.clone(),
                share,
                summary: format!(
                    "{n} calls in series used up the {} budget; none alone was slow enough to blame",
                    dur(f.elapsed_ms)
                ),
                evidence: ev,
            },
            contributing(f, dominant, None),
        ))
    }
}

/// The dominant call's own kind, by [`super::CALL_RULES`].
pub struct DominantCall;

impl TraceRule for DominantCall {
    fn name(&self) -> &'static str {
        "dominant_call"
    }
    fn decide(&self, f: &Facts) -> Option<Decision> {
        let dominant = f.calls.first()?;
        let share = f.share(dominant);
        let kind = call_kind(dominant, f);
        if kind == K::Unknown {
            let why = if f.has_spans {
                "the dominant time is in a span of no known stage"
            } else {
                "no spans for this trace (sampled out or not instrumented)"
            };
            let mut ev = f.with_gateway(vec![]);
            ev.extend(call_evidence(dominant, f, kind));
            return Some((unknown(f, why, ev), vec![]));
        }
        let component = component_for(kind, dominant, f);
        let mut evidence = f.with_gateway(call_evidence(dominant, f, kind));
        let summary = summary(kind, dominant, f, &component);
        if kind == K::LlmSlow && dominant.phases.is_empty() {
            evidence.push(
                "the model server reported no phases (no X-LLM-Reason, no vLLM/SGLang span, no TGI headers)"
                    .into(),
            );
        }
        Some((
            RootCause {
                kind,
                component,
                share,
                summary,
                evidence,
            },
            contributing(f, dominant, Some(kind)),
        ))
    }
}
