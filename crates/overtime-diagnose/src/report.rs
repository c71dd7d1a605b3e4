//! Incidents and their reports (SPEC §5): failing traces grouped by
//! fingerprint (kind, component) while they keep failing; each report says
//! what share of the failures the cause explains, with the statistics that
//! explain it and the LLM latency by input-token bucket.

use crate::config::DiagnoseConfig;
use crate::fmt::{dur, median, pct, percentile};
use crate::verdict::{rfc3339, TraceSummary};
use overtime_model::{FindingKind, Outcome, RootCauseKind as K, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub requests: usize,
    pub failures: usize,
    pub gateway_504: usize,
    pub gateway_503: usize,
    pub timeouts: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseShare {
    pub kind: K,
    pub component: String,
    pub count: usize,
    /// Of all failures in the window.
    pub share: f64,
}

/// One row of the LLM latency by input-token bucket table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketRow {
    pub bucket: String,
    pub calls: usize,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// Share of these calls whose request ended in a gateway timeout.
    pub share_504: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportFinding {
    pub kind: FindingKind,
    /// The most common wording among the incident's traces.
    pub summary: String,
    pub traces: usize,
}

/// An incident and its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentReport {
    pub id: String,
    pub fingerprint: String,
    pub kind: K,
    pub component: String,
    /// `open` while its fingerprint still failed within the quiet period
    /// before the end of the data; `closed` after.
    pub status: String,
    pub window: Window,
    pub headline: String,
    pub totals: Totals,
    pub causes: Vec<CauseShare>,
    pub cause_stats: BTreeMap<String, serde_json::Value>,
    pub llm_latency_by_input_tokens: Vec<BucketRow>,
    pub findings: Vec<ReportFinding>,
    pub example_trace_ids: Vec<String>,
    pub trace_count: usize,
}

pub const BUCKETS: [&str; 4] = ["<50", "50-200", "200-500", ">500"];

/// The input-token bucket of SPEC §5.
pub fn bucket_of(tokens: i64) -> usize {
    match tokens {
        t if t < 50 => 0,
        t if t < 200 => 1,
        t if t <= 500 => 2,
        _ => 3,
    }
}

fn is_timeout(o: Outcome) -> bool {
    matches!(o, Outcome::GatewayTimeout | Outcome::ServiceTimeout)
}

/// LLM latency by input-token bucket over `traces`.
pub fn latency_table<'a>(traces: impl Iterator<Item = &'a TraceSummary>) -> Vec<BucketRow> {
    let mut lat: [Vec<f64>; 4] = Default::default();
    let mut cut: [usize; 4] = [0; 4];
    for t in traces {
        let gw504 = t.outcome == Outcome::GatewayTimeout || t.gateway_status == Some(504);
        for c in &t.llm_calls {
            if let Some(tok) = c.input_tokens {
                let b = bucket_of(tok);
                lat[b].push(c.duration_ms);
                cut[b] += usize::from(gw504);
            }
        }
    }
    BUCKETS
        .iter()
        .enumerate()
        .map(|(i, name)| BucketRow {
            bucket: name.to_string(),
            calls: lat[i].len(),
            p50_ms: percentile(&lat[i], 0.5),
            p90_ms: percentile(&lat[i], 0.9),
            p99_ms: percentile(&lat[i], 0.99),
            max_ms: percentile(&lat[i], 1.0),
            share_504: if lat[i].is_empty() {
                0.0
            } else {
                cut[i] as f64 / lat[i].len() as f64
            },
        })
        .collect()
}

/// Failures of one fingerprint, none more than the quiet period apart.
type Run<'a> = Vec<(&'a Verdict, &'a TraceSummary)>;

/// Groups failing verdicts into incidents and writes their reports.
/// `summaries` covers every trace (for totals and the latency table).
pub fn incidents(
    verdicts: &[Verdict],
    summaries: &[TraceSummary],
    cfg: &DiagnoseConfig,
) -> Vec<IncidentReport> {
    let by_id: HashMap<&str, &TraceSummary> = summaries
        .iter()
        .filter(|s| s.outcome != Outcome::Ok)
        .map(|s| (s.trace_id.as_str(), s))
        .collect();
    let mut failing: Vec<(&Verdict, &TraceSummary)> = verdicts
        .iter()
        .filter(|v| v.outcome != Outcome::Ok)
        .filter_map(|v| by_id.get(v.trace_id.as_str()).map(|s| (v, *s)))
        .collect();
    failing.sort_by_key(|(_, s)| s.start_us);
    let data_end = summaries.iter().map(|s| s.end_us).max().unwrap_or(0);
    let quiet_us = cfg.incident_quiet_ms * 1000;

    // Fingerprint → runs of failures no more than the quiet period apart.
    let mut groups: BTreeMap<(K, String), Vec<Run>> = BTreeMap::new();
    for (v, s) in &failing {
        if v.root_cause.kind == K::Unknown {
            continue;
        }
        let runs = groups
            .entry((v.root_cause.kind, v.root_cause.component.clone()))
            .or_default();
        match runs.last_mut() {
            Some(run) if s.start_us - run.last().map(|x| x.1.end_us).unwrap_or(0) <= quiet_us => {
                run.push((v, s))
            }
            _ => runs.push(vec![(v, s)]),
        }
    }
    let mut out = Vec::new();
    for ((kind, component), runs) in groups {
        for run in runs {
            out.push(report(
                kind, &component, &run, &failing, summaries, data_end, quiet_us, cfg,
            ));
        }
    }
    out.sort_by(|a, b| {
        a.window
            .start
            .cmp(&b.window.start)
            .then(b.trace_count.cmp(&a.trace_count))
    });
    out
}

#[allow(clippy::too_many_arguments)]
fn report(
    kind: K,
    component: &str,
    run: &[(&Verdict, &TraceSummary)],
    failing: &[(&Verdict, &TraceSummary)],
    summaries: &[TraceSummary],
    data_end: i64,
    quiet_us: i64,
    cfg: &DiagnoseConfig,
) -> IncidentReport {
    let start = run.iter().map(|x| x.1.start_us).min().unwrap_or(0);
    let end = run.iter().map(|x| x.1.end_us).max().unwrap_or(start);
    let in_window = |s: &TraceSummary| s.start_us >= start && s.start_us <= end;
    let window_traces: Vec<&TraceSummary> = summaries.iter().filter(|s| in_window(s)).collect();
    let totals = Totals {
        requests: window_traces.len(),
        failures: window_traces
            .iter()
            .filter(|s| s.outcome != Outcome::Ok)
            .count(),
        gateway_504: window_traces
            .iter()
            .filter(|s| s.gateway_status == Some(504))
            .count(),
        gateway_503: window_traces
            .iter()
            .filter(|s| s.gateway_status == Some(503))
            .count(),
        timeouts: window_traces
            .iter()
            .filter(|s| is_timeout(s.outcome))
            .count(),
    };
    let window_failing: Vec<&(&Verdict, &TraceSummary)> =
        failing.iter().filter(|x| in_window(x.1)).collect();
    let mut counts: BTreeMap<(K, String), usize> = BTreeMap::new();
    for (v, _) in &window_failing {
        *counts
            .entry((v.root_cause.kind, v.root_cause.component.clone()))
            .or_default() += 1;
    }
    let n_fail = window_failing.len().max(1);
    let mut causes: Vec<CauseShare> = counts
        .into_iter()
        .map(|((k, c), n)| CauseShare {
            kind: k,
            component: c,
            count: n,
            share: n as f64 / n_fail as f64,
        })
        .collect();
    causes.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));

    // Headline: share of 504s (or of failures) this cause explains.
    let is_504 = |x: &&&(&Verdict, &TraceSummary)| x.0.outcome == Outcome::GatewayTimeout;
    let all_504 = window_failing.iter().filter(is_504).count();
    let mine_504 = window_failing
        .iter()
        .filter(is_504)
        .filter(|x| x.0.root_cause.kind == kind && x.0.root_cause.component == component)
        .count();
    let mine = window_failing
        .iter()
        .filter(|x| x.0.root_cause.kind == kind && x.0.root_cause.component == component)
        .count();
    // "504s" when the gateway really answered 504; a stream it cut and
    // logged as 200 is a gateway timeout all the same.
    let all_real_504 = window_failing
        .iter()
        .filter(is_504)
        .all(|x| x.1.gateway_status == Some(504));
    let (share, of) = if mine_504 > 0 {
        (
            mine_504 as f64 / all_504 as f64,
            if all_real_504 {
                "504s"
            } else {
                "gateway timeouts"
            },
        )
    } else {
        (mine as f64 / n_fail as f64, "failures")
    };
    let (stats, stat_line) = crate::cause_stats::cause_stats(kind, run, cfg);
    let headline = match stat_line {
        Some(s) => format!(
            "{} of {of} came from {kind} on {component}; {s}",
            pct(share)
        ),
        None => format!("{} of {of} came from {kind} on {component}", pct(share)),
    };

    let mut findings: BTreeMap<FindingKind, (usize, BTreeMap<&str, usize>)> = BTreeMap::new();
    for (v, _) in run {
        let mut seen = std::collections::BTreeSet::new();
        for f in &v.findings {
            let e = findings.entry(f.kind).or_default();
            if seen.insert(f.kind) {
                e.0 += 1;
            }
            *e.1.entry(f.summary.as_str()).or_default() += 1;
        }
    }
    let findings = findings
        .into_iter()
        .map(|(k, (n, wordings))| ReportFinding {
            kind: k,
            summary: wordings
                .into_iter()
                .max_by_key(|(_, c)| *c)
                .map(|(s, _)| s.to_string())
                .unwrap_or_default(),
            traces: n,
        })
        .collect();
    IncidentReport {
        id: format!("{kind}:{component}@{}", rfc3339(start)),
        fingerprint: format!("{kind}:{component}"),
        kind,
        component: component.to_string(),
        status: if data_end - end < quiet_us {
            "open".into()
        } else {
            "closed".into()
        },
        window: Window {
            start: rfc3339(start),
            end: rfc3339(end),
        },
        headline,
        totals,
        causes,
        cause_stats: stats,
        llm_latency_by_input_tokens: latency_table(window_traces.into_iter()),
        findings,
        example_trace_ids: run
            .iter()
            .take(cfg.max_examples)
            .map(|x| x.0.trace_id.clone())
            .collect(),
        trace_count: run.len(),
    }
}

/// Median of `f` over the run's values, formatted.
pub(crate) fn med_dur(values: &[f64]) -> String {
    median(values).map(dur).unwrap_or_else(|| "?".into())
}
