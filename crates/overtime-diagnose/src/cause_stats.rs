//! The statistics that explain one cause (docs/diagnosis.md#incidents-and-their-reports):
//! the requests' elapsed time for every incident, and what its kind's rule
//! counts ([`Rule::stats`](crate::rules::Rule::stats)): prefill against
//! the input-token threshold, tools against their timeout, connect times,
//! the idle gaps of streams… and the short phrase the headline ends with.
//!
//! Design rules:
//! - **The rule owns its numbers.** This module gathers an incident's
//!   traces into a [`Run`] and asks the rule of the incident's kind; it
//!   matches on no kind.

use crate::calls::Call;
use crate::config::DiagnoseConfig;
use crate::fmt::percentile;
use crate::verdict::TraceSummary;
use overtime_model::{RootCauseKind as K, Verdict};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// An incident's statistics, by name.
pub type Stats = BTreeMap<String, Value>;

/// P50, P90, P99, the maximum and the count of `v`.
pub fn dist(v: &[f64]) -> Value {
    json!({
        "p50": percentile(v, 0.5), "p90": percentile(v, 0.9), "p99": percentile(v, 0.99),
        "max": percentile(v, 1.0), "n": v.len()
    })
}

/// An incident's traces, as a rule's statistics read them.
pub struct Run<'a> {
    /// Each trace's verdict and summary.
    pub traces: &'a [(&'a Verdict, &'a TraceSummary)],
    /// The diagnosis' configuration (the input-token threshold…).
    pub cfg: &'a DiagnoseConfig,
    /// The dominant call of each trace that has one.
    calls: Vec<&'a Call>,
}

impl<'a> Run<'a> {
    fn new(traces: &'a [(&'a Verdict, &'a TraceSummary)], cfg: &'a DiagnoseConfig) -> Self {
        let calls = traces
            .iter()
            .filter_map(|(_, t)| t.dominant.as_ref())
            .collect();
        Run { traces, cfg, calls }
    }

    /// A number of each dominant call, where it has one.
    pub fn of_calls(&self, get: impl Fn(&Call) -> Option<f64>) -> Vec<f64> {
        self.calls.iter().filter_map(|c| get(c)).collect()
    }

    /// Each dominant call's running time: its attempts together (ms).
    pub fn latency(&self) -> Vec<f64> {
        self.of_calls(|c| Some(c.raw_attempts_ms().iter().sum()))
    }

    /// Each request's elapsed time (ms).
    pub fn elapsed(&self) -> Vec<f64> {
        self.traces
            .iter()
            .map(|(v, _)| v.budget.consumed_ms)
            .collect()
    }
}

/// Statistics for `kind` over the incident's traces, and the headline phrase.
pub fn cause_stats(
    kind: K,
    run: &[(&Verdict, &TraceSummary)],
    cfg: &DiagnoseConfig,
) -> (Stats, Option<String>) {
    let run = Run::new(run, cfg);
    let mut s = Stats::new();
    s.insert("elapsed_ms".into(), dist(&run.elapsed()));
    let line = crate::rules::rule_of(kind).and_then(|r| r.stats(&run, &mut s));
    (s, line)
}
