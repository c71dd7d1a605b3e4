//! Classifying one completed request for the early-warning signals: its
//! chain, its answer, the calls near their timeout, each LLM call's wait
//! (see the parent module for what each means).

use super::{LEARNED_SAMPLES, MAX_LEARNED, TIMED_STAGES};
use crate::SloConfig;
use overtime_model::{CallObservation, RequestObservation, Stage};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

fn stage_index(s: Stage) -> Option<usize> {
    TIMED_STAGES.iter().position(|n| *n == s.as_str())
}

/// What became of a request's chain of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chain {
    /// The request succeeded with no failed call, no retry and no fallback.
    Healthy,
    /// The request succeeded, but a call failed, was retried, or it fell back.
    Degraded,
    /// The request did not succeed (its outcome is not `ok`).
    Failed,
}

impl Chain {
    /// Every value, in the order of [`EarlyTotals::chains`].
    pub const ALL: [Chain; 3] = [Chain::Healthy, Chain::Degraded, Chain::Failed];
    /// The `chain` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Chain::Healthy => "healthy",
            Chain::Degraded => "degraded",
            Chain::Failed => "failed",
        }
    }
}

/// What the user got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// A real answer: ok, no fallback, no call lost, not judged low.
    Success,
    /// An ok answer that hides a failure: a fallback, a call whose last attempt failed, or a judge score below `semantic_success_score`.
    Masked,
    /// No answer: the request's outcome is not `ok`.
    Failed,
}

impl Answer {
    /// Every value, in the order of [`EarlyTotals::answers`].
    pub const ALL: [Answer; 3] = [Answer::Success, Answer::Masked, Answer::Failed];
    /// The `answer` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Success => "success",
            Answer::Masked => "masked",
            Answer::Failed => "failed",
        }
    }
}

/// An LLM call's wait: queue + prefill, or its time to first token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlmWait {
    pub queue_ms: f64,
    pub prefill_ms: f64,
    /// The TTFT, when the phases are unknown.
    pub first_token_ms: f64,
    pub total_ms: f64,
    /// Queue and prefill were measured (not the TTFT stand-in).
    pub from_phases: bool,
    /// Its index in the request's calls.
    pub call: usize,
}

impl LlmWait {
    pub fn wait_ms(&self) -> f64 {
        self.queue_ms + self.prefill_ms + self.first_token_ms
    }
}

/// One request's contribution to the early-warning signals.
#[derive(Debug, Clone, PartialEq)]
pub struct Signals {
    pub chain: Chain,
    pub answer: Answer,
    /// Why the chain was not healthy / the answer not real.
    pub failed_call: bool,
    pub retried: bool,
    pub fell_back: bool,
    pub lost_call: bool,
    pub judged_low: bool,
    /// (index in [`TIMED_STAGES`], used ≥ the near-timeout share).
    pub timed: Vec<(usize, bool)>,
    /// Each call with a known timeout (its index in the request's calls):
    /// the share of it used (1: cut).
    pub call_use: Vec<(usize, f64)>,
    pub llm: Vec<LlmWait>,
}

/// Timeouts observed where none is configured, per (stage, target): the
/// durations at which its calls ended in a timeout (a span that says
/// so), else the timeout that fired as overtime-advise reads it — the
/// unfinished attempts (failed, or followed by a retry) clustering at one
/// duration ([`overtime_model::fired_cluster`]): off-the-shelf
/// instrumentation records the error a client timeout raises, rarely the
/// timeout.
#[derive(Debug, Clone, Default)]
pub struct ObservedTimeouts {
    cut: BTreeMap<(Stage, String), VecDeque<f64>>,
    unfinished: BTreeMap<(Stage, String), VecDeque<f64>>,
}

/// Unfinished attempts remembered per target for the clustering.
const UNFINISHED_SAMPLES: usize = 20;

impl ObservedTimeouts {
    /// Learns from a request's calls with no timeout configured: those that
    /// ended in their timeout, and the attempts that did not finish.
    pub fn learn_request(&mut self, o: &RequestObservation) {
        for c in &o.calls {
            let retried = o
                .calls
                .iter()
                .any(|r| r.stage == c.stage && r.target() == c.target() && r.attempt > c.attempt);
            self.learn(c, retried);
        }
    }

    /// Learns from one call (`retried`: a later attempt of it followed).
    pub fn learn(&mut self, c: &CallObservation, retried: bool) {
        if c.timeout_ms.is_some() || !(c.duration_ms.is_finite() && c.duration_ms > 0.0) {
            return;
        }
        let into = if c.timed_out() {
            &mut self.cut
        } else if c.failed() || retried {
            &mut self.unfinished
        } else {
            return;
        };
        let key = (c.stage, c.target().to_string());
        if !into.contains_key(&key) && into.len() >= MAX_LEARNED {
            return;
        }
        let (v, cap) = (
            into.entry(key).or_default(),
            if c.timed_out() {
                LEARNED_SAMPLES
            } else {
                UNFINISHED_SAMPLES
            },
        );
        if v.len() == cap {
            v.pop_front();
        }
        v.push_back(c.duration_ms);
    }

    /// The observed timeout of a call's target: the median of the cuts,
    /// else the median of the unfinished attempts' densest cluster.
    pub fn of(&self, c: &CallObservation) -> Option<f64> {
        let key = (c.stage, c.target().to_string());
        if let Some(v) = self.cut.get(&key) {
            let mut s: Vec<f64> = v.iter().copied().collect();
            s.sort_by(f64::total_cmp);
            return s.get(s.len() / 2).copied();
        }
        let v: Vec<f64> = self.unfinished.get(&key)?.iter().copied().collect();
        overtime_model::fired_cluster(&v).map(|(t, _)| t)
    }
}

/// Classifies one request; `None` for a client error (4xx), which is not
/// an answer of the platform.
pub fn classify(
    o: &RequestObservation,
    learned: &ObservedTimeouts,
    cfg: &SloConfig,
) -> Option<Signals> {
    if o.client_error() {
        return None;
    }
    let near = cfg.early_warning.near_timeout_share;
    let failed_call = o.calls.iter().any(CallObservation::failed);
    let retried = o.calls.iter().any(|c| c.attempt > 0);
    let fell_back = o.fallback.is_some();
    // A call whose last attempt failed: the answer lacks what it was for.
    let mut last: BTreeMap<(Stage, &str), &CallObservation> = BTreeMap::new();
    for c in &o.calls {
        let e = last.entry((c.stage, c.target())).or_insert(c);
        if (c.attempt, c.end_us) >= (e.attempt, e.end_us) {
            *e = c;
        }
    }
    let lost_call = last.values().any(|c| c.failed());
    let judged_low = o
        .judge_score
        .is_some_and(|s| s.is_finite() && s < cfg.semantic_success_score);
    let chain = if !o.is_ok() {
        Chain::Failed
    } else if failed_call || retried || fell_back {
        Chain::Degraded
    } else {
        Chain::Healthy
    };
    let answer = if !o.is_ok() {
        Answer::Failed
    } else if fell_back || lost_call || judged_low {
        Answer::Masked
    } else {
        Answer::Success
    };
    let mut timed = Vec::new();
    if let Some(u) = o.timeout_used.filter(|u| u.is_finite() && *u >= 0.0) {
        timed.push((0, u >= near));
    }
    let mut llm = Vec::new();
    let mut call_use = Vec::new();
    for (n, c) in o.calls.iter().enumerate() {
        if let Some(i) = stage_index(c.stage) {
            let used = if c.timed_out() {
                Some(1.0)
            } else if let Some(u) = c.timeout_used.filter(|u| u.is_finite() && *u >= 0.0) {
                Some(u)
            } else {
                c.timeout_ms
                    .or_else(|| learned.of(c))
                    .filter(|t| *t > 0.0 && c.duration_ms.is_finite())
                    .map(|t| c.duration_ms.max(0.0) / t)
            };
            if let Some(u) = used {
                timed.push((i, u >= near));
                call_use.push((n, u));
            }
        }
        if c.is_llm() && c.duration_ms > 0.0 {
            let total = c.duration_ms;
            let w = if c.queue_ms.is_some() || c.prefill_ms.is_some() {
                Some(LlmWait {
                    queue_ms: c.queue_ms.unwrap_or(0.0).clamp(0.0, total),
                    prefill_ms: c.prefill_ms.unwrap_or(0.0).clamp(0.0, total),
                    first_token_ms: 0.0,
                    total_ms: total,
                    from_phases: true,
                    call: n,
                })
            } else {
                c.ttft_ms.filter(|t| t.is_finite()).map(|t| LlmWait {
                    queue_ms: 0.0,
                    prefill_ms: 0.0,
                    first_token_ms: t.clamp(0.0, total),
                    total_ms: total,
                    from_phases: false,
                    call: n,
                })
            };
            llm.extend(w);
        }
    }
    Some(Signals {
        chain,
        answer,
        failed_call,
        retried,
        fell_back,
        lost_call,
        judged_low,
        timed,
        call_use,
        llm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::{Outcome, SpanStatus};

    #[test]
    fn a_retry_that_worked_is_degraded_but_a_real_answer() {
        let mut o = RequestObservation::new("/chat", Outcome::Ok, 10_000_000);
        let mut first = CallObservation::new(Stage::Tool, SpanStatus::Timeout, 5_000.0, 0);
        first.timeout_ms = Some(5_000.0);
        let mut retry = CallObservation::new(Stage::Tool, SpanStatus::Ok, 400.0, 0);
        retry.attempt = 1;
        o.calls = vec![first, retry];
        let s = classify(&o, &ObservedTimeouts::default(), &Default::default()).unwrap();
        assert_eq!((s.chain, s.answer), (Chain::Degraded, Answer::Success)); // the retry worked
        assert_eq!(s.timed, vec![(3, true)]); // the cut attempt used all of its timeout
    }

    #[test]
    fn observed_timeouts_are_the_median_cut() {
        let mut l = ObservedTimeouts::default();
        for ms in [30_010.0, 30_002.0, 29_990.0] {
            let mut c = CallObservation::new(Stage::Llm, SpanStatus::Timeout, ms, 0);
            c.model = Some("m".into());
            l.learn(&c, false);
        }
        let mut c = CallObservation::new(Stage::Llm, SpanStatus::Ok, 25_000.0, 0);
        c.model = Some("m".into());
        assert_eq!(l.of(&c), Some(30_002.0));
        c.model = Some("other".into());
        assert_eq!(l.of(&c), None);
    }

    #[test]
    fn a_timeout_nobody_recorded_is_learned_from_attempts_cut_at_one_duration() {
        // Off-the-shelf instrumentation: an error (or a retry), no timeout
        // on the span; the client cut three attempts at ~8 s.
        let mut l = ObservedTimeouts::default();
        let tool = |ms: f64, status: SpanStatus| {
            let mut c = CallObservation::new(Stage::Tool, status, ms, 0);
            c.tool = Some("weather".into());
            c
        };
        for ms in [8_010.0, 7_995.0] {
            let mut o = RequestObservation::new("/r", overtime_model::Outcome::Ok, 0);
            let mut retry = tool(300.0, SpanStatus::Ok);
            retry.attempt = 1;
            o.calls = vec![tool(ms, SpanStatus::Ok), retry];
            l.learn_request(&o);
        }
        let probe = tool(7_000.0, SpanStatus::Ok);
        assert_eq!(l.of(&probe), None, "two alike are no cluster");
        l.learn(&tool(8_004.0, SpanStatus::Error), false);
        l.learn(&tool(120.0, SpanStatus::Error), false);
        assert_eq!(l.of(&probe), Some(8_004.0));
    }
}
