//! The root-cause rules of SPEC §4.1, in order: the first that matches
//! wins. Each rule names its component and the numbers that prove it.

use crate::calls::{Call, CallKind};
use crate::fmt::{dur, dur_or_none, pct};
use crate::outcome::StreamGap;
use overtime_model::{Contributing, Outcome, RootCause, RootCauseKind as K, Stage};

/// What the rules look at for one trace.
pub struct Facts<'a> {
    pub outcome: Outcome,
    pub calls: &'a [Call],
    pub elapsed_ms: f64,
    /// The service that owns the request (top span), or the gateway layer.
    pub service: String,
    pub has_spans: bool,
    pub gateway_status: Option<u16>,
    pub gateway_source: Option<String>,
    /// The deciding layer's read timeout, known or inferred.
    pub gateway_timeout_ms: Option<f64>,
    pub service_budget_ms: Option<f64>,
    pub stream: Option<StreamGap>,
    pub stream_component: Option<String>,
    pub threshold_tokens: u32,
}

impl Facts<'_> {
    fn share(&self, c: &Call) -> f64 {
        if self.elapsed_ms <= 0.0 {
            return 0.0;
        }
        (c.critical_us as f64 / 1000.0 / self.elapsed_ms).min(1.0)
    }
    /// Where the gateway gave up, as evidence.
    fn gateway_line(&self) -> Option<String> {
        let status = self.gateway_status?;
        let src = self
            .gateway_source
            .clone()
            .unwrap_or_else(|| "gateway".into());
        let t = self
            .gateway_timeout_ms
            .map(|t| format!(" (read timeout {})", dur(t)))
            .unwrap_or_default();
        Some(format!(
            "gateway {src} answered {status} after {}{t}",
            dur(self.elapsed_ms)
        ))
    }
}

fn llm_phase_kind(c: &Call) -> Option<(K, &'static str, f64)> {
    let p = &c.phases;
    [
        (K::LlmQueueing, "queue", p.queue_ms),
        (K::LlmPrefillSlow, "prefill", p.prefill_ms),
        (K::LlmDecodeSlow, "decode", p.decode_ms),
    ]
    .into_iter()
    .filter_map(|(k, n, v)| v.map(|v| (k, n, v)))
    .max_by(|a, b| a.2.total_cmp(&b.2))
}

/// Kind of one call on its own (rules 4–11), for the dominant call and
/// for contributing calls.
pub fn call_kind(c: &Call, f: &Facts) -> K {
    if c.kind == CallKind::PoolWait || c.stage == Stage::Queue {
        return K::PoolSaturation;
    }
    let ran_ms = c.raw_attempts_ms().iter().sum::<f64>().max(1.0);
    let connect_heavy = c.dns_connect_ms.is_some_and(|d| d >= 0.5 * ran_ms);
    if c.kind == CallKind::Upstream && !c.is_llm() {
        return if connect_heavy {
            K::UpstreamConnectSlow
        } else if f.has_spans {
            K::PoolSaturation
        } else {
            K::Unknown
        };
    }
    if c.stage == Stage::Judge {
        return K::JudgeSlow;
    }
    let retried = c.attempts() >= 2
        && c.attempt_critical_us
            .iter()
            .all(|&a| (a as f64 / 1000.0) < 0.5 * f.elapsed_ms);
    if c.is_llm() {
        // A model call the client retried, no attempt holding half the
        // request: the retries are what ran the time out.
        if retried {
            return K::RetryAmplification;
        }
        return llm_phase_kind(c).map(|x| x.0).unwrap_or(K::LlmSlow);
    }
    if connect_heavy {
        return K::UpstreamConnectSlow;
    }
    if retried {
        return K::RetryAmplification;
    }
    match c.stage {
        Stage::Tool | Stage::Memory | Stage::Network => {
            if c.timeout_ms.is_none() {
                K::ToolNoTimeout
            } else {
                K::ToolSlow
            }
        }
        _ => K::Unknown,
    }
}

fn component_for(kind: K, c: &Call, f: &Facts) -> String {
    match kind {
        K::PoolSaturation => {
            if c.kind == CallKind::Upstream {
                f.service.clone()
            } else {
                c.service.clone()
            }
        }
        K::Unknown => "—".into(),
        _ => c.component.clone(),
    }
}

/// Evidence lines about one call.
fn call_evidence(c: &Call, f: &Facts, kind: K) -> Vec<String> {
    let mut ev = Vec::new();
    let what = match c.kind {
        CallKind::Span => format!("{} ({})", c.component, c.stage),
        CallKind::PoolWait => format!("{} waiting before its first call", c.service),
        CallKind::Upstream => format!("the gateway waiting on upstream {}", c.component),
    };
    ev.push(format!(
        "{what} held {} of the {} request on the critical path ({})",
        dur(c.critical_us as f64 / 1000.0),
        dur(f.elapsed_ms),
        pct(f.share(c))
    ));
    let attempts = c.raw_attempts_ms();
    if attempts.len() >= 2 {
        let list: Vec<String> = attempts.iter().map(|a| dur(*a)).collect();
        let total: f64 = attempts.iter().sum();
        let over = match f.gateway_timeout_ms {
            Some(t) if total > t => format!(", more than the gateway timeout {}", dur(t)),
            _ => String::new(),
        };
        ev.push(format!(
            "{} attempts ({}), {} in all{over}",
            attempts.len(),
            list.join(", "),
            dur(total)
        ));
    }
    if c.kind == CallKind::Span {
        match (c.timeout_ms, c.timed_out) {
            (None, _) if c.cut => ev.push(format!(
                "{} ran with no timeout: it was still running when the request ended, and no timeout is recorded anywhere",
                c.component
            )),
            (None, _) if crate::findings::timeouts_recorded(f.calls) => {
                ev.push(format!("{} ran with no timeout", c.component))
            }
            (None, _) => ev.push(format!(
                "no timeout is recorded for {} (it did not fire)",
                c.component
            )),
            (Some(t), true) if c.timeout_observed => ev.push(format!(
                "its timeout fired after {} (observed: it ended in {}; the timeout it was given is not recorded)",
                dur(t),
                c.error_type.as_deref().unwrap_or("a timeout error")
            )),
            (Some(t), true) => ev.push(format!("its timeout of {} fired", dur(t))),
            (Some(t), false) => ev.push(format!("its timeout was {}", dur(t))),
        }
        if let Some(r) = c.remaining_budget_ms {
            ev.push(format!("it started with {} of budget left", dur(r)));
        }
    }
    if c.is_llm() {
        let phases: Vec<String> = c
            .phases
            .iter()
            .map(|(n, v)| format!("{n} {}", dur(v)))
            .collect();
        if !phases.is_empty() {
            ev.push(format!(
                "model server phases (X-LLM-Reason): {}",
                phases.join(", ")
            ));
        }
        if let Some(t) = c.input_tokens {
            let cmp = if t as f64 > f.threshold_tokens as f64 {
                ">"
            } else {
                "≤"
            };
            ev.push(format!(
                "input {t} tokens {cmp} threshold {}",
                f.threshold_tokens
            ));
        }
        if let Some(o) = c.output_tokens {
            let max = c
                .max_tokens
                .map(|m| format!(" of max_tokens {m}"))
                .unwrap_or_default();
            ev.push(format!("output {o} tokens{max}"));
        }
        if let Some(t) = c.ttft_ms {
            ev.push(format!("time to first token {}", dur(t)));
        }
        if let (K::LlmQueueing, Some(g)) = (kind, c.gpu_load) {
            ev.push(format!(
                "GPU load {}",
                pct(if g > 1.0 { g / 100.0 } else { g })
            ));
        }
    }
    if let Some(d) = c.dns_connect_ms {
        if d > 0.0 {
            let n = attempts.len().max(1);
            let per = match (c.dns_ms, n) {
                (Some(dns), n) if n >= 2 => {
                    format!(" ({} DNS in each of {n} attempts)", dur(dns / n as f64))
                }
                (Some(dns), _) => format!(" ({} DNS)", dur(dns)),
                _ => String::new(),
            };
            ev.push(format!(
                "{} of its {} went to DNS/connect{per}",
                dur(d),
                dur(attempts
                    .iter()
                    .sum::<f64>()
                    .max(c.duration_us() as f64 / 1000.0))
            ));
        }
    }
    ev
}

/// Applies the rules; returns the root cause and contributing causes.
pub fn root_cause(f: &Facts) -> (RootCause, Vec<Contributing>) {
    let gateway_line = f.gateway_line();
    let with_gw = |mut ev: Vec<String>| {
        if let Some(g) = &gateway_line {
            ev.insert(0, g.clone());
        }
        ev
    };
    // 1. stream_idle_gap
    if f.outcome == Outcome::GatewayTimeout {
        if let Some(s) = &f.stream {
            let limit = f
                .gateway_timeout_ms
                .map(|t| 0.9 * t)
                .unwrap_or(0.5 * f.elapsed_ms);
            if s.at_end && s.gap_ms >= limit && f.gateway_status.is_some() {
                let comp = f
                    .stream_component
                    .clone()
                    .unwrap_or_else(|| f.service.clone());
                let t = dur_or_none(f.gateway_timeout_ms);
                let ev = with_gw(vec![
                    format!("the stream of {comp} went silent for {} (no chunk or heartbeat) after {} events, the last at {}", dur(s.gap_ms), s.events, dur(s.last_event_ms)),
                    format!("the gap from the last chunk to the cut exceeded the gateway read timeout {t}, and the gateway cut the stream"),
                ]);
                return (
                    RootCause {
                        kind: K::StreamIdleGap,
                        component: comp.clone(),
                        share: (s.gap_ms / f.elapsed_ms.max(1.0)).min(1.0),
                        summary: format!("{comp}'s stream was silent for {} > the gateway read timeout {t}; send heartbeats", dur(s.gap_ms)),
                        evidence: ev,
                    },
                    vec![],
                );
            }
        }
    }
    let Some(dominant) = f.calls.first() else {
        let why = if f.has_spans {
            "no calls on the critical path"
        } else {
            "no spans for this trace (sampled out or not instrumented)"
        };
        return (unknown(f, why, with_gw(vec![])), vec![]);
    };
    let share = f.share(dominant);
    // 2. gateway_timeout_mismatch
    if f.outcome == Outcome::GatewayTimeout {
        let critical: Vec<&Call> = f
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
            .collect();
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
        if let (true, Some(b)) = (all_within, f.service_budget_ms) {
            if b > gw_t {
                let ev = with_gw(vec![
                    format!("service budget {} > gateway timeout {}", dur(b), dur(gw_t)),
                    format!(
                        "all {} calls on the critical path had a timeout and none fired",
                        critical.len()
                    ),
                ]);
                return (
                    RootCause {
                        kind: K::GatewayTimeoutMismatch,
                        component: "gateway".into(),
                        share: 1.0,
                        summary: format!("the gateway gave up at {} while the service still had budget ({}) and no call had timed out", dur(gw_t), dur(b)),
                        evidence: ev,
                    },
                    contributing(f, dominant, None),
                );
            }
        }
    }
    // 3. serial_budget_exhaustion: several calls, none dominant.
    let span_calls = f
        .calls
        .iter()
        .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
        .count();
    if share < 0.4 && span_calls >= 2 {
        let n = f
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Span && c.critical_us > 0)
            .count();
        let top: Vec<String> = f
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Span)
            .take(3)
            .map(|c| format!("{} {}", c.component, dur(c.critical_us as f64 / 1000.0)))
            .collect();
        let ev = with_gw(vec![
            format!(
                "no single call dominates: the largest, {}, holds {} of {}",
                dominant.component,
                pct(share),
                dur(f.elapsed_ms)
            ),
            format!("{n} calls on the critical path: {}", top.join(", ")),
        ]);
        return (
            RootCause {
                kind: K::SerialBudgetExhaustion,
                component: f.service.clone(),
                share,
                summary: format!("{n} calls in series used up the {} budget; none alone was slow enough to blame", dur(f.elapsed_ms)),
                evidence: ev,
            },
            contributing(f, dominant, None),
        );
    }
    // 4–11 on the dominant call.
    let kind = call_kind(dominant, f);
    if kind == K::Unknown {
        let why = if f.has_spans {
            "the dominant time is in a span of no known stage"
        } else {
            "no spans for this trace (sampled out or not instrumented)"
        };
        let mut ev = with_gw(vec![]);
        ev.extend(call_evidence(dominant, f, kind));
        return (unknown(f, why, ev), vec![]);
    }
    let component = component_for(kind, dominant, f);
    let mut evidence = with_gw(call_evidence(dominant, f, kind));
    let summary = summary(kind, dominant, f, &component);
    if kind == K::LlmSlow && dominant.phases.is_empty() {
        evidence.push("the model server reported no phases (no X-LLM-Reason)".into());
    }
    (
        RootCause {
            kind,
            component,
            share,
            summary,
            evidence,
        },
        contributing(f, dominant, Some(kind)),
    )
}

fn summary(kind: K, c: &Call, f: &Facts, component: &str) -> String {
    let d = dur(c.critical_us as f64 / 1000.0);
    let of = dur(f.elapsed_ms);
    match kind {
        K::PoolSaturation => {
            format!("{component} waited {d} of {of} for a worker or connection before work began")
        }
        K::JudgeSlow => format!("the LLM-as-judge call on {component} took {d} of {of}"),
        K::LlmQueueing | K::LlmPrefillSlow | K::LlmDecodeSlow => {
            let (_, phase, ms) = llm_phase_kind(c).unwrap_or((kind, "?", 0.0));
            let tokens = c
                .input_tokens
                .map(|t| format!(" with {t} input tokens"))
                .unwrap_or_default();
            format!(
                "the LLM call to {component}{tokens} spent {} in {phase}, holding {d} of {of}",
                dur(ms)
            )
        }
        K::LlmSlow => format!(
            "the LLM call to {component} held {d} of {of}; the model server reported no phases"
        ),
        K::UpstreamConnectSlow => format!(
            "{component} spent {} of its time in DNS/connect and held {d} of {of}",
            dur(c.dns_connect_ms.unwrap_or(0.0))
        ),
        K::RetryAmplification => format!(
            "{} attempts at {component} held {d} of {of}; no single attempt was the problem",
            c.attempts()
        ),
        K::ToolNoTimeout => {
            format!("{component} ran {d} with no timeout while the request's {of} ran out")
        }
        K::ToolSlow if c.timed_out => format!(
            "{component} held {d} of {of}; its timeout fired after {}",
            dur_or_none(c.timeout_ms)
        ),
        K::ToolSlow => format!(
            "{component} held {d} of {of} within its timeout of {}",
            dur_or_none(c.timeout_ms)
        ),
        _ => format!("{component} held {d} of {of}"),
    }
}

fn unknown(f: &Facts, why: &str, mut evidence: Vec<String>) -> RootCause {
    evidence.push(format!("missing: {why}"));
    RootCause {
        kind: K::Unknown,
        component: "—".into(),
        share: 0.0,
        summary: format!("cannot tell where the {} went: {why}", dur(f.elapsed_ms)),
        evidence,
    }
}

/// Other calls that held ≥ 10 % of the request, and the retries of the
/// dominant call.
fn contributing(f: &Facts, dominant: &Call, root: Option<K>) -> Vec<Contributing> {
    let mut out = Vec::new();
    if dominant.attempts() >= 2 && root != Some(K::RetryAmplification) {
        let retries: i64 = dominant.attempt_critical_us.iter().skip(1).sum();
        out.push(Contributing {
            kind: K::RetryAmplification,
            component: dominant.component.clone(),
            share: (retries as f64 / 1000.0 / f.elapsed_ms.max(1.0)).min(1.0),
        });
    }
    for c in f.calls.iter().skip(usize::from(root.is_some())) {
        let s = f.share(c);
        if s < 0.1 {
            break;
        }
        let k = call_kind(c, f);
        if k == K::Unknown || (root == Some(k) && c.component == dominant.component) {
            continue;
        }
        out.push(Contributing {
            kind: k,
            component: component_for(k, c, f),
            share: s,
        });
    }
    out
}
