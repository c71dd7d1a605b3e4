//! The cumulative counters and histograms of docs/metrics.md, from which
//! Prometheus recomputes every SLI across collectors. Monotonic since
//! start; label values bounded by [`BoundedLabel`].

use crate::labels::BoundedLabel;
use overtime_model::{Outcome, Stage};
use overtime_model::{RequestObservation, input_bucket};
use std::collections::BTreeMap;

/// `overtime_ttft_seconds` buckets.
pub const TTFT_BUCKETS: &[f64] = &[0.1, 0.2, 0.4, 0.8, 1.2, 1.6, 2.5, 5.0, 10.0, 30.0];
/// `overtime_llm_call_duration_seconds` and `overtime_tool_call_duration_seconds` buckets.
pub const CALL_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0,
];
/// `overtime_budget_left_seconds` buckets.
pub const BUDGET_BUCKETS: &[f64] = &[0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0];

/// A counter family: label values (in `labels` order) → count.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterVec {
    /// The label names, in the order of each series' key.
    pub labels: &'static [&'static str],
    /// Count per series, keyed by its label values.
    pub series: BTreeMap<Vec<String>, u64>,
}

impl CounterVec {
    /// A family with these labels and no series.
    pub fn new(labels: &'static [&'static str]) -> Self {
        CounterVec {
            labels,
            series: BTreeMap::new(),
        }
    }

    /// Adds `n` (0 creates the series, so ratios have a numerator).
    pub fn add(&mut self, values: &[&str], n: u64) {
        debug_assert_eq!(values.len(), self.labels.len());
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        *self.series.entry(key).or_default() += n;
    }

    /// The count of one series (0 when absent).
    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.get(&key).copied().unwrap_or(0)
    }

    /// Sum over the series whose label `label` is `value`.
    pub fn sum_where(&self, label: &str, value: &str) -> u64 {
        let Some(i) = self.labels.iter().position(|l| *l == label) else {
            return 0;
        };
        self.series
            .iter()
            .filter(|(k, _)| k[i] == value)
            .map(|(_, v)| *v)
            .sum()
    }

    /// Sum over every series.
    pub fn total(&self) -> u64 {
        self.series.values().sum()
    }
}

/// One histogram series: per-bucket counts (not cumulative; the last
/// entry is above every bound), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket, in bound order, then above the last bound.
    pub counts: Vec<u64>,
    /// Sum of the observed values, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// Cumulative counts per bound, then `+Inf` (= count).
    pub fn cumulative(&self) -> Vec<u64> {
        let mut acc = 0;
        self.counts
            .iter()
            .map(|c| {
                acc += c;
                acc
            })
            .collect()
    }
}

/// A histogram family.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramVec {
    /// The label names, in the order of each series' key.
    pub labels: &'static [&'static str],
    /// Upper bounds (`le`), ascending, `+Inf` implied.
    pub bounds: &'static [f64],
    /// One histogram per series, keyed by its label values.
    pub series: BTreeMap<Vec<String>, Histogram>,
}

impl HistogramVec {
    /// A family with these labels and bucket bounds and no series.
    pub fn new(labels: &'static [&'static str], bounds: &'static [f64]) -> Self {
        HistogramVec {
            labels,
            bounds,
            series: BTreeMap::new(),
        }
    }

    /// Observes `v` (seconds); NaN is ignored.
    pub fn observe(&mut self, values: &[&str], v: f64) {
        if v.is_nan() {
            return;
        }
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let n = self.bounds.len();
        let h = self.series.entry(key).or_insert_with(|| Histogram {
            counts: vec![0; n + 1],
            sum: 0.0,
            count: 0,
        });
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(n);
        h.counts[i] += 1;
        if v.is_finite() {
            h.sum += v;
        }
        h.count += 1;
    }
}

/// The bounded label sets shared by the counters and the windows.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    pub route: BoundedLabel,
    pub model: BoundedLabel,
    pub tool: BoundedLabel,
    pub layer: BoundedLabel,
    pub component: BoundedLabel,
    pub fallback: BoundedLabel,
}

impl Labels {
    pub fn new(max: usize) -> Self {
        Labels {
            route: BoundedLabel::new(max),
            model: BoundedLabel::new(max),
            tool: BoundedLabel::new(max),
            layer: BoundedLabel::new(max),
            component: BoundedLabel::new(max),
            fallback: BoundedLabel::new(max),
        }
    }
}

/// Every cumulative family fed by observations and verdicts.
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    /// `overtime_requests_total` {route, outcome}: completed requests.
    pub requests: CounterVec,
    /// `overtime_requests_timed_out_total` {route}: requests that ended in a gateway or service timeout.
    pub requests_timed_out: CounterVec,
    /// `overtime_gateway_responses_total` {layer, status}: gateway records by HTTP status.
    pub gateway_responses: CounterVec,
    /// `overtime_judged_requests_total` {route}: requests with a judge score.
    pub judged: CounterVec,
    /// `overtime_semantic_success_total` {route}: judged requests scoring at least `semantic_success_score`.
    pub semantic_success: CounterVec,
    /// `overtime_ttft_seconds` {model}: LLM time to first token, seconds.
    pub ttft: HistogramVec,
    /// `overtime_stage_calls_total` {stage}: calls by stage, one per attempt.
    pub stage_calls: CounterVec,
    /// `overtime_stage_timeouts_total` {stage}: calls that ended in their own timeout.
    pub stage_timeouts: CounterVec,
    /// `overtime_fallbacks_total` {model}: requests that fell back.
    pub fallbacks: CounterVec,
    /// `overtime_fallbacks_accepted_total` {model}: fallbacks the caller accepted.
    pub fallbacks_accepted: CounterVec,
    /// `overtime_llm_calls_total` {model, status}: LLM and judge calls by span status.
    pub llm_calls: CounterVec,
    /// `overtime_llm_call_duration_seconds` {model, input_bucket}: LLM call duration, seconds.
    pub llm_duration: HistogramVec,
    /// `overtime_tool_calls_total` {tool, status}: tool, memory and network calls by status.
    pub tool_calls: CounterVec,
    /// `overtime_tool_call_duration_seconds` {tool}: tool call duration, seconds.
    pub tool_duration: HistogramVec,
    /// `overtime_budget_left_seconds` {stage}: budget left when a call started, seconds.
    pub budget_left: HistogramVec,
    /// `overtime_root_causes_total` {kind, component, outcome}: failing verdicts, once per trace.
    pub root_causes: CounterVec,
    /// `overtime_verdict_revisions_total`: verdicts revised by late spans.
    pub verdict_revisions: u64,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            requests: CounterVec::new(&["route", "outcome"]),
            requests_timed_out: CounterVec::new(&["route"]),
            gateway_responses: CounterVec::new(&["layer", "status"]),
            judged: CounterVec::new(&["route"]),
            semantic_success: CounterVec::new(&["route"]),
            ttft: HistogramVec::new(&["model"], TTFT_BUCKETS),
            stage_calls: CounterVec::new(&["stage"]),
            stage_timeouts: CounterVec::new(&["stage"]),
            fallbacks: CounterVec::new(&["model"]),
            fallbacks_accepted: CounterVec::new(&["model"]),
            llm_calls: CounterVec::new(&["model", "status"]),
            llm_duration: HistogramVec::new(&["model", "input_bucket"], CALL_BUCKETS),
            tool_calls: CounterVec::new(&["tool", "status"]),
            tool_duration: HistogramVec::new(&["tool"], CALL_BUCKETS),
            budget_left: HistogramVec::new(&["stage"], BUDGET_BUCKETS),
            root_causes: CounterVec::new(&["kind", "component", "outcome"]),
            verdict_revisions: 0,
        }
    }
}

impl Totals {
    /// Counts one request under `route` (already bounded). `score` is the
    /// semantic-success threshold.
    pub(crate) fn add(
        &mut self,
        o: &RequestObservation,
        route: &str,
        labels: &mut Labels,
        score: f64,
    ) {
        let r = route;
        self.requests.add(&[r, o.outcome.as_str()], 1);
        self.requests_timed_out.add(&[r], o.timed_out() as u64);
        for g in &o.gateway {
            let layer = labels.layer.get(&g.layer);
            let status = g.status.map_or("unknown".to_string(), |s| s.to_string());
            self.gateway_responses.add(&[&layer, &status], 1);
        }
        if let Some(s) = o.judge_score.filter(|s| s.is_finite()) {
            self.judged.add(&[r], 1);
            self.semantic_success.add(&[r], (s >= score) as u64);
        }
        if let Some(f) = &o.fallback {
            let f = labels.fallback.get(f);
            self.fallbacks.add(&[&f], 1);
            self.fallbacks_accepted
                .add(&[&f], (o.fallback_accepted == Some(true)) as u64);
        }
        for c in &o.calls {
            let stage = c.stage.as_str();
            self.stage_calls.add(&[stage], 1);
            self.stage_timeouts.add(&[stage], c.timed_out() as u64);
            if let Some(b) = c.budget_left_ms.filter(|b| b.is_finite()) {
                self.budget_left.observe(&[stage], b.max(0.0) / 1000.0);
            }
            let secs = c.duration_ms / 1000.0;
            if c.is_llm() {
                let model = labels.model.get(c.model.as_deref().unwrap_or(""));
                self.llm_calls.add(&[&model, c.status.as_str()], 1);
                self.llm_duration
                    .observe(&[&model, input_bucket(c.input_tokens)], secs);
                if let Some(t) = c.ttft_ms.filter(|t| t.is_finite() && *t >= 0.0) {
                    self.ttft.observe(&[&model], t / 1000.0);
                }
            } else if matches!(c.stage, Stage::Tool | Stage::Memory | Stage::Network) {
                let tool = labels.tool.get(c.tool.as_deref().unwrap_or(""));
                self.tool_calls.add(&[&tool, c.status.as_str()], 1);
                self.tool_duration.observe(&[&tool], secs);
            }
        }
    }

    /// Counts a verdict: a failing first verdict by root cause, a later
    /// one as a revision.
    pub(crate) fn add_verdict(
        &mut self,
        kind: &str,
        component: &str,
        outcome: Outcome,
        revision: u32,
        labels: &mut Labels,
    ) {
        if revision > 0 {
            self.verdict_revisions += 1;
        } else if outcome != Outcome::Ok {
            let component = labels.component.get(component);
            self.root_causes
                .add(&[kind, &component, outcome.as_str()], 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_model::CallObservation;
    use overtime_model::SpanStatus;

    fn llm(ms: f64, status: SpanStatus, ttft: Option<f64>) -> CallObservation {
        CallObservation {
            stage: Stage::Llm,
            model: Some("deepseek-v4-pro".into()),
            tool: None,
            status,
            duration_ms: ms,
            ttft_ms: ttft,
            input_tokens: Some(412),
            budget_left_ms: Some(29_997.0),
            end_us: 0,
            ..CallObservation::new(Stage::Llm, status, ms, 0)
        }
    }

    #[test]
    fn counts_requests_calls_and_histograms() {
        let mut t = Totals::default();
        let mut l = Labels::new(50);
        let mut o = RequestObservation::new("/api/agent/execute", Outcome::GatewayTimeout, 1);
        o.judge_score = Some(0.5);
        o.calls = vec![
            llm(30_000.0, SpanStatus::Timeout, None),
            llm(1_200.0, SpanStatus::Ok, Some(320.0)),
        ];
        t.add(&o, "/api/agent/execute", &mut l, 0.8);
        assert_eq!(
            t.requests.get(&["/api/agent/execute", "gateway_timeout"]),
            1
        );
        assert_eq!(t.requests_timed_out.total(), 1);
        assert_eq!(t.judged.total(), 1);
        // The numerator exists at 0 so that ratios are defined.
        assert_eq!(t.semantic_success.series.len(), 1);
        assert_eq!(t.semantic_success.total(), 0);
        assert_eq!(t.stage_timeouts.get(&["llm"]), 1);
        assert_eq!(t.llm_calls.get(&["deepseek-v4-pro", "timeout"]), 1);
        let h = &t.llm_duration.series[&vec!["deepseek-v4-pro".to_string(), "200-500".into()]];
        // 1.2 s falls in le=2, 30 s in le=30 (le is inclusive).
        assert_eq!(h.cumulative(), vec![0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(h.count, 2);
        assert!((h.sum - 31.2).abs() < 1e-9);
        let ttft = &t.ttft.series[&vec!["deepseek-v4-pro".to_string()]];
        assert_eq!(ttft.cumulative()[2], 1, "0.32 s ≤ 0.4");
        t.add_verdict(
            "llm_prefill_slow",
            "deepseek-v4-pro",
            Outcome::GatewayTimeout,
            0,
            &mut l,
        );
        t.add_verdict(
            "llm_prefill_slow",
            "deepseek-v4-pro",
            Outcome::GatewayTimeout,
            1,
            &mut l,
        );
        assert_eq!(t.root_causes.total(), 1);
        assert_eq!(t.verdict_revisions, 1);
    }
}
