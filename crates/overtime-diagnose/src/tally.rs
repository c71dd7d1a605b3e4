//! What a run keeps of each request it judged, and the run's results made
//! from them: verdicts in output order, the failing requests slimmed to
//! what incident reports read, every request's compact summary
//! ([`SummaryLite`]). The in-memory run keeps a [`Tally`]; the batch
//! engine keeps the same things per partition, spilled past its budget,
//! and ends the same way ([`incidents_and_latency`]).
//!
//! Design rules:
//! - **One order**: verdicts by (start, trace id) — [`order`] — whatever
//!   order the requests were judged in.
//! - **Paid per failure**: a day's failing requests are all held until
//!   the reports are made, so what is held of each is slim
//!   ([`slim`], [`slim_summary`]).

use crate::config::DiagnoseConfig;
use crate::report::{BucketRow, IncidentReport, LatencyAcc, SummaryLite};
use crate::verdict::TraceSummary;
use overtime_model::{BudgetView, GatewayView, Outcome, Timestamp, Verdict};

/// The order verdicts are printed in.
pub fn order(v: &Verdict) -> (Timestamp, &str) {
    (v.started_at, v.trace_id.as_str())
}

/// A failing request as the incident reports read it, boxed: a day can
/// hold a million of them until the reports are made, and a vector of
/// boxes grows, appends and sorts by moving pointers, not ~700-byte
/// entries (at 10 GB that copying doubled the peak).
pub type Failing = Box<(Verdict, TraceSummary)>;

/// A failing request as kept ([`Failing`]).
pub fn failing(v: &Verdict, s: TraceSummary) -> Failing {
    Box::new((slim(v), slim_summary(s)))
}

/// Failing requests in the order incident reports take them: by verdict
/// order, then (stably) by start.
pub fn sort_failing(failing: &mut [Failing]) {
    failing.sort_by(|a, b| order(&a.0).cmp(&order(&b.0)));
    failing.sort_by_key(|f| f.1.start_us);
}

/// The verdict as incident reports read it: no timeline, evidence or
/// wording of the root cause, of the gateway only its status and times.
pub fn slim(v: &Verdict) -> Verdict {
    let mut s = Verdict {
        trace_id: v.trace_id.clone(),
        request_id: None,
        started_at: v.started_at,
        outcome: v.outcome,
        gateway: v.gateway.as_ref().map(|g| GatewayView {
            source: String::new(),
            upstream_status: None,
            ..*g
        }),
        budget: BudgetView {
            source: None,
            ..v.budget
        },
        timeline: Vec::new(),
        root_cause: v.root_cause.clone(),
        contributing: Vec::new(),
        findings: v.findings.clone(),
    };
    s.root_cause.evidence = Vec::new();
    s.root_cause.summary = String::new();
    s
}

/// The summary as the per-cause statistics read it: the dominant call's
/// numbers, none of its names.
pub fn slim_summary(mut s: TraceSummary) -> TraceSummary {
    s.llm_calls = Vec::new();
    s.trace_id = String::new();
    if let Some(d) = &mut s.dominant {
        d.spans = Vec::new();
        d.attempt_critical_us = Vec::new();
        for name in [&mut d.component, &mut d.service] {
            *name = String::new();
        }
        d.error_type = None;
        d.model = None;
    }
    s
}

/// The incidents over the failing requests (sorted by [`sort_failing`])
/// and the LLM latency by input size over every request's summary
/// (`summaries` visits each once), from data that ends at `data_end` µs.
pub fn incidents_and_latency<E>(
    failing: &[Failing],
    data_end: i64,
    cfg: &DiagnoseConfig,
    summaries: impl FnOnce(&mut dyn FnMut(&SummaryLite)) -> Result<(), E>,
) -> Result<(Vec<IncidentReport>, Vec<BucketRow>), E> {
    let failing: Vec<(&Verdict, &TraceSummary)> = failing.iter().map(|f| (&f.0, &f.1)).collect();
    let mut latency = LatencyAcc::default();
    let incidents = crate::report::incidents_over(&failing, data_end, cfg, |visit| {
        summaries(&mut |s| {
            latency.add(s);
            visit(s);
        })
    })?;
    Ok((incidents, latency.rows()))
}

/// The results of an in-memory run.
#[derive(Default)]
pub struct Tally {
    /// Every verdict given.
    pub verdicts: Vec<Verdict>,
    /// The failing requests, slimmed.
    pub failing: Vec<Failing>,
    /// Every request's summary.
    pub summaries: Vec<SummaryLite>,
    /// The latest end of any request, µs.
    pub data_end: i64,
}

impl Tally {
    /// Files one request's summary and verdict.
    pub fn add(&mut self, s: TraceSummary, v: Option<Verdict>) {
        self.data_end = self.data_end.max(s.end_us);
        self.summaries.push(SummaryLite::of(&s));
        if let Some(v) = v {
            if v.outcome != Outcome::Ok {
                self.failing.push(failing(&v, s));
            }
            self.verdicts.push(v);
        }
    }
}
