//! Incidents and their reports (docs/diagnosis.md#incidents-and-their-reports): failing traces grouped by
//! fingerprint (kind, component) while they keep failing; each report says
//! what share of the failures the cause explains, with the statistics that
//! explain it and the LLM latency by input-token bucket.

use crate::config::DiagnoseConfig;
use crate::fmt::{dur, median, pct, percentile};
use crate::verdict::{TraceSummary, rfc3339};
use overtime_model::{FindingKind, Outcome, RootCauseKind as K, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// A span of data time, both ends RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// When the first trace in it started (RFC 3339).
    pub start: String,
    /// When the last trace in it ended (RFC 3339).
    pub end: String,
}

/// What happened in an incident's window, over every trace that started in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Traces that started in the window.
    pub requests: usize,
    /// Of those, the ones that did not end `ok`.
    pub failures: usize,
    /// Of those, the ones the outermost gateway answered 504.
    pub gateway_504: usize,
    /// Of those, the ones the outermost gateway answered 503.
    pub gateway_503: usize,
    /// Of those, a gateway or service timeout.
    pub timeouts: usize,
}

/// One root cause's part of the failures in a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseShare {
    /// The root-cause kind.
    pub kind: K,
    /// The model, tool, service or `gateway` it names.
    pub component: String,
    /// Failures with this cause.
    pub count: usize,
    /// Of all failures in the window.
    pub share: f64,
}

/// The denominator of an incident's headline, stated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadlineShare {
    /// `504s` when every failure in `window` was a gateway 504, `gateway
    /// timeouts` when each was a 504 or a stream the gateway cut, else
    /// `failures`.
    pub of: String,
    /// This incident's failures among them.
    pub count: usize,
    /// All of them in `window`.
    pub total: usize,
    /// This incident's window joined with every incident overlapping it.
    pub window: Window,
}

/// One row of the LLM latency by input-token bucket table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketRow {
    /// The input-token bucket: `<50`, `50-200`, `200-500`, `>500`.
    pub bucket: String,
    /// LLM calls in the bucket.
    pub calls: usize,
    /// Median duration, ms; `None` without calls.
    pub p50_ms: Option<f64>,
    /// P90 duration, ms; `None` without calls.
    pub p90_ms: Option<f64>,
    /// P99 duration, ms; `None` without calls.
    pub p99_ms: Option<f64>,
    /// Longest duration, ms; `None` without calls.
    pub max_ms: Option<f64>,
    /// Share of these calls whose request ended in a gateway timeout.
    pub share_504: f64,
}

/// A configuration finding seen across an incident's traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportFinding {
    /// Which finding.
    pub kind: FindingKind,
    /// The most common wording among the incident's traces.
    pub summary: String,
    /// The incident's traces that showed it.
    pub traces: usize,
}

/// An incident and its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentReport {
    /// `kind:component@start` (start in RFC 3339): what `/api/incidents/{id}` takes.
    pub id: String,
    /// `kind:component`: failures sharing it form one incident.
    pub fingerprint: String,
    /// The root-cause kind every failure of the incident shares.
    pub kind: K,
    /// The component every failure of the incident names.
    pub component: String,
    /// `open` while its fingerprint still failed within the quiet period
    /// before the end of the data; `closed` after.
    pub status: String,
    /// From the first failure's start to the last one's end.
    pub window: Window,
    /// One line to paste into a ticket: the share of failures this cause explains, and why.
    pub headline: String,
    /// What the headline's share is a share of: the failures (or 504s) in
    /// the window of every incident overlapping this one, so the shares of
    /// incidents that overlap in time add up.
    pub headline_share: HeadlineShare,
    /// What happened in `window`, failing or not.
    pub totals: Totals,
    /// Every cause's count and share of the window's failures, largest first.
    pub causes: Vec<CauseShare>,
    /// The statistics that explain the cause (LLM latency, input tokens against the threshold, phases, tool time against its timeout, connect times, attempts, stream gaps), by name.
    pub cause_stats: BTreeMap<String, serde_json::Value>,
    /// LLM latency per input-token bucket over the window.
    pub llm_latency_by_input_tokens: Vec<BucketRow>,
    /// Configuration findings among the incident's traces.
    pub findings: Vec<ReportFinding>,
    /// Its first traces (up to `max_examples`), to open first.
    pub example_trace_ids: Vec<String>,
    /// Failures in the incident.
    pub trace_count: usize,
}

/// The input-token bucket names, smallest first (docs/diagnosis.md#incidents-and-their-reports).
pub const BUCKETS: [&str; 4] = ["<50", "50-200", "200-500", ">500"];

/// The input-token bucket of docs/diagnosis.md#incidents-and-their-reports
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

/// What incident reports read of every trace, failed or not: compact,
/// so a day of requests can be kept (or streamed back from disk).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SummaryLite {
    /// When the request started, µs since the epoch.
    pub start_us: i64,
    /// When it ended, µs since the epoch.
    pub end_us: i64,
    /// [`SummaryLite::FAILED`], [`SummaryLite::TIMEOUT`],
    /// [`SummaryLite::GATEWAY_TIMEOUT`].
    pub flags: u8,
    /// The outermost gateway's status, when one logged the request.
    pub gateway_status: Option<u16>,
    /// LLM calls with a known input size: (token bucket, duration ms).
    pub calls: Vec<(usize, f64)>,
}

impl SummaryLite {
    /// The request failed.
    pub const FAILED: u8 = 1;
    /// It failed by a timeout.
    pub const TIMEOUT: u8 = 2;
    /// A gateway answered 504.
    pub const GATEWAY_TIMEOUT: u8 = 4;

    /// The flags of an outcome.
    pub fn flags_of(o: Outcome) -> u8 {
        let mut f = 0;
        if o != Outcome::Ok {
            f |= Self::FAILED;
        }
        if is_timeout(o) {
            f |= Self::TIMEOUT;
        }
        if o == Outcome::GatewayTimeout {
            f |= Self::GATEWAY_TIMEOUT;
        }
        f
    }

    /// What the reports read of a request's summary.
    pub fn of(t: &TraceSummary) -> Self {
        SummaryLite {
            start_us: t.start_us,
            end_us: t.end_us,
            flags: Self::flags_of(t.outcome),
            gateway_status: t.gateway_status,
            calls: t
                .llm_calls
                .iter()
                .filter_map(|c| c.input_tokens.map(|tok| (bucket_of(tok), c.duration_ms)))
                .collect(),
        }
    }
}

/// LLM latency by input-token bucket, accumulated trace by trace.
#[derive(Debug, Clone, Default)]
pub struct LatencyAcc {
    lat: [Vec<f64>; 4],
    cut: [usize; 4],
}

impl LatencyAcc {
    pub fn add(&mut self, t: &SummaryLite) {
        let gw504 = t.flags & SummaryLite::GATEWAY_TIMEOUT != 0 || t.gateway_status == Some(504);
        for &(b, d) in &t.calls {
            self.lat[b].push(d);
            self.cut[b] += usize::from(gw504);
        }
    }

    pub fn rows(&self) -> Vec<BucketRow> {
        let (lat, cut) = (&self.lat, &self.cut);
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
}

/// The totals and latency of the requests that started in one window.
#[derive(Debug, Clone, Default)]
struct WindowAcc {
    totals: Totals,
    latency: LatencyAcc,
}

impl WindowAcc {
    fn add(&mut self, s: &SummaryLite) {
        let t = &mut self.totals;
        t.requests += 1;
        t.failures += usize::from(s.flags & SummaryLite::FAILED != 0);
        t.gateway_504 += usize::from(s.gateway_status == Some(504));
        t.gateway_503 += usize::from(s.gateway_status == Some(503));
        t.timeouts += usize::from(s.flags & SummaryLite::TIMEOUT != 0);
        self.latency.add(s);
    }
}

/// Which windows (inclusive `(start, end)`) hold a point: the windows'
/// bounds cut time into segments, each with the windows covering it.
struct WindowIndex {
    bounds: Vec<i64>,
    covering: Vec<Vec<usize>>,
}

impl WindowIndex {
    fn new(windows: &[(i64, i64)]) -> Self {
        let mut bounds: Vec<i64> = windows
            .iter()
            .flat_map(|&(s, e)| [s, e.saturating_add(1)])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut covering = vec![Vec::new(); bounds.len()];
        for (w, &(s, e)) in windows.iter().enumerate() {
            let lo = bounds.partition_point(|&b| b < s);
            let hi = bounds.partition_point(|&b| b < e.saturating_add(1));
            for c in &mut covering[lo..hi] {
                c.push(w);
            }
        }
        WindowIndex { bounds, covering }
    }

    fn at(&self, t: i64) -> &[usize] {
        match self.bounds.partition_point(|&b| b <= t) {
            0 => &[],
            i => &self.covering[i - 1],
        }
    }
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
    let each = |visit: &mut dyn FnMut(&SummaryLite)| {
        for s in summaries {
            visit(&SummaryLite::of(s));
        }
        Ok::<(), std::convert::Infallible>(())
    };
    match incidents_over(&failing, data_end, cfg, each) {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// [`incidents`] over failing traces sorted by start (stably, after the
/// verdicts' order) and every trace's summary visited once by `each`
/// (streamed: a day of requests need not be in memory); `data_end` is the
/// latest end of any trace.
pub fn incidents_over<E>(
    failing: &[(&Verdict, &TraceSummary)],
    data_end: i64,
    cfg: &DiagnoseConfig,
    each: impl FnOnce(&mut dyn FnMut(&SummaryLite)) -> Result<(), E>,
) -> Result<Vec<IncidentReport>, E> {
    let quiet_us = cfg.incident_quiet_ms * 1000;

    // Fingerprint → runs of failures no more than the quiet period apart.
    let mut groups: BTreeMap<(K, String), Vec<Run>> = BTreeMap::new();
    for (v, s) in failing {
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
    let runs: Vec<((K, String), Run)> = groups
        .into_iter()
        .flat_map(|(fp, runs)| runs.into_iter().map(move |r| (fp.clone(), r)))
        .collect();
    let spans: Vec<(i64, i64)> = runs.iter().map(|(_, r)| run_span(r)).collect();
    let scopes = overlap_scopes(&spans);
    let index = WindowIndex::new(&spans);
    let mut acc = vec![WindowAcc::default(); runs.len()];
    each(&mut |s: &SummaryLite| {
        for &w in index.at(s.start_us) {
            acc[w].add(s);
        }
    })?;
    let mut out = Vec::new();
    for ((((kind, component), run), scope), acc) in runs.into_iter().zip(scopes).zip(acc) {
        out.push(report(
            kind, &component, &run, failing, acc, data_end, quiet_us, scope, cfg,
        ));
    }
    out.sort_by(|a, b| {
        a.window
            .start
            .cmp(&b.window.start)
            .then(b.trace_count.cmp(&a.trace_count))
    });
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn report(
    kind: K,
    component: &str,
    run: &[(&Verdict, &TraceSummary)],
    failing: &[(&Verdict, &TraceSummary)],
    window: WindowAcc,
    data_end: i64,
    quiet_us: i64,
    scope: (i64, i64),
    cfg: &DiagnoseConfig,
) -> IncidentReport {
    let (start, end) = run_span(run);
    let in_window = |s: &TraceSummary| s.start_us >= start && s.start_us <= end;
    let totals = window.totals;
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

    // Headline: this cause's share of the failures in the window of every
    // incident overlapping it (one denominator for all of them, stated).
    let (stats, stat_line) = crate::cause_stats::cause_stats(kind, run, cfg);
    let share = headline_share(kind, component, failing, scope);
    let headline = format!(
        "{} of {} came from {kind} on {component} ({} of {}){}",
        pct(share.count as f64 / share.total.max(1) as f64),
        share.of,
        share.count,
        share.total,
        stat_line.map(|s| format!("; {s}")).unwrap_or_default()
    );

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
        headline_share: share,
        totals,
        causes,
        cause_stats: stats,
        llm_latency_by_input_tokens: window.latency.rows(),
        findings,
        example_trace_ids: run
            .iter()
            .take(cfg.max_examples)
            .map(|x| x.0.trace_id.clone())
            .collect(),
        trace_count: run.len(),
    }
}

/// First start and last end of a run's traces.
fn run_span(run: &[(&Verdict, &TraceSummary)]) -> (i64, i64) {
    let start = run.iter().map(|x| x.1.start_us).min().unwrap_or(0);
    let end = run.iter().map(|x| x.1.end_us).max().unwrap_or(start);
    (start, end)
}

/// For each interval, the union of the group of intervals that overlap it
/// (transitively): incidents that overlap in time share one headline
/// denominator, so their shares add up for whoever reads them together.
///
pub fn overlap_scopes(spans: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i]);
    let mut out = vec![(0, 0); spans.len()];
    let mut group: Vec<usize> = Vec::new();
    let mut cur = (i64::MIN, i64::MIN);
    let mut close = |group: &mut Vec<usize>, cur: (i64, i64)| {
        for &i in group.iter() {
            out[i] = cur;
        }
        group.clear();
    };
    for i in order {
        let (s, e) = spans[i];
        if group.is_empty() || s > cur.1 {
            close(&mut group, cur);
            cur = (s, e);
        } else {
            cur.1 = cur.1.max(e);
        }
        group.push(i);
    }
    close(&mut group, cur);
    out
}

/// The headline's share: this fingerprint's failures among all failures
/// that started within `scope`, named `504s` when all of those were gateway
/// 504s, `gateway timeouts` when all were 504s or cut streams.
fn headline_share(
    kind: K,
    component: &str,
    failing: &[(&Verdict, &TraceSummary)],
    scope: (i64, i64),
) -> HeadlineShare {
    let in_scope: Vec<&(&Verdict, &TraceSummary)> = failing
        .iter()
        .filter(|x| x.1.start_us >= scope.0 && x.1.start_us <= scope.1)
        .collect();
    let count = in_scope
        .iter()
        .filter(|x| x.0.root_cause.kind == kind && x.0.root_cause.component == component)
        .count();
    let of = if in_scope.iter().all(|x| x.1.gateway_status == Some(504)) {
        "504s"
    } else if in_scope
        .iter()
        .all(|x| x.0.outcome == Outcome::GatewayTimeout)
    {
        "gateway timeouts"
    } else {
        "failures"
    };
    HeadlineShare {
        of: of.into(),
        count,
        total: in_scope.len(),
        window: Window {
            start: rfc3339(scope.0),
            end: rfc3339(scope.1),
        },
    }
}

/// Median of `f` over the run's values, formatted.
pub(crate) fn med_dur(values: &[f64]) -> String {
    median(values).map(dur).unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn overlapping_spans_share_one_scope() {
        use super::overlap_scopes;
        let s = overlap_scopes(&[(0, 10), (5, 20), (30, 40), (18, 25)]);
        assert_eq!(s, vec![(0, 25), (0, 25), (30, 40), (0, 25)]);
    }
}
