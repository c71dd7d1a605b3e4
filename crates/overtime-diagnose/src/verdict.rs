//! One trace in, one verdict out: the tree, the calls, the outcome, the
//! rules and the findings put together (docs/diagnosis.md).

use crate::assemble::Trace;
use crate::calls::{self, Call, CallKind};
use crate::config::DiagnoseConfig;
use crate::findings::{FindingFacts, findings};
use crate::naming::{span_components, stream_component};
use crate::outcome;
use crate::phasebook::PhaseBook;
use crate::rules::{Facts, root_cause};
use crate::timeouts::LayerTimeout;
use crate::tree::{self, TraceTree};
use overtime_model::{
    BudgetView, GatewayView, Outcome, RootCauseKind, Stage, TimelineEntry, Timestamp, Verdict,
};
use std::collections::BTreeMap;

/// An LLM call as the report's latency table sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LlmCallSample {
    /// The model called: the call's component (the span's name when it
    /// names no model).
    pub model: String,
    /// Prompt tokens; `None` when the span does not say.
    pub input_tokens: Option<i64>,
    /// The call's duration, ms.
    pub duration_ms: f64,
    /// When it started, µs since the epoch (0: not known).
    #[serde(default)]
    pub start_us: i64,
    /// The phases its server reported (queue, prefill, decode, ms), when
    /// it reported all three: what a cut call of the same model is judged
    /// by ([`crate::phasebook`]).
    #[serde(default)]
    pub phases: Option<[f64; 3]>,
    /// The id of the completion, when its server said no phases in this
    /// trace: its answer may be in a trace of its own ([`crate::answers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// `[inference ms, prompt tokens, generated tokens]` when its server
    /// timed prefill and decode only together ([`crate::costs`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsplit: Option<[f64; 3]>,
}

impl LlmCallSample {
    /// The call as a finished neighbour, when its server reported phases.
    pub fn finished(&self) -> Option<crate::phasebook::Finished> {
        let [queue_ms, prefill_ms, decode_ms] = self.phases?;
        Some(crate::phasebook::Finished {
            start_us: self.start_us,
            queue_ms,
            prefill_ms,
            decode_ms,
        })
    }
}

/// What the incident report needs of every trace, failed or not; what
/// collectors exchange so that each reports incidents over all traffic.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TraceSummary {
    /// The trace's id (empty for a light request, which has no verdict).
    pub trace_id: String,
    /// When the request started, µs since the epoch.
    pub start_us: i64,
    /// When it ended, µs since the epoch.
    pub end_us: i64,
    /// How the request ended.
    pub outcome: Outcome,
    /// The outermost gateway's status; `None` when no gateway logged it.
    pub gateway_status: Option<u16>,
    /// Its LLM calls (empty for none).
    pub llm_calls: Vec<LlmCallSample>,
    /// The dominant call of a failed trace (for per-cause statistics).
    pub dominant: Option<Call>,
    /// The longest silence of a streamed response, if it streamed.
    pub stream_gap_ms: Option<f64>,
    /// How many records (gateway lines + spans) the diagnosis saw: when
    /// several collectors hold the same trace, the most complete wins.
    #[serde(default)]
    pub records: u32,
}

impl TraceSummary {
    /// A healthy request seen only by the gateway.
    pub fn light(l: &crate::assemble::LightRequest) -> Self {
        TraceSummary {
            trace_id: String::new(),
            start_us: l.start_us,
            end_us: l.end_us,
            outcome: Outcome::Ok,
            gateway_status: l.status,
            llm_calls: Vec::new(),
            dominant: None,
            stream_gap_ms: None,
            records: 1,
        }
    }
}

/// A trace's records (gateway lines + spans), saturating.
pub(crate) fn record_count(trace: &Trace) -> u32 {
    u32::try_from(trace.gateway.len() + trace.spans.len()).unwrap_or(u32::MAX)
}

/// RFC 3339 with milliseconds, UTC ([`Timestamp`]'s text).
pub fn rfc3339(us: i64) -> String {
    Timestamp::from_us(us).to_string()
}

/// Diagnoses one trace. Returns its summary, and its verdict when it
/// failed (or when every trace is asked for).
pub(crate) fn diagnose_trace(
    trace: &Trace,
    timeouts: &BTreeMap<String, LayerTimeout>,
    cfg: &DiagnoseConfig,
    book: &PhaseBook,
) -> (TraceSummary, Option<Verdict>) {
    let deciding = outcome::deciding_gateway(trace, timeouts);
    let tree = tree::build(trace, deciding, cfg.clock_skew_ms);
    let gw = deciding.map(|i| &trace.gateway[i]);
    let layer_timeout = gw.and_then(|g| timeouts.get(&g.source));
    let gw_timeout_ms = layer_timeout.map(|t| t.ms);
    let outcome = outcome::outcome(trace, &tree, gw, gw_timeout_ms);
    let mut calls = calls::collect(trace, &tree);
    let llm_calls = calls
        .iter()
        .filter(|c| c.kind == CallKind::Span && c.stage == Stage::Llm)
        .map(|c| LlmCallSample {
            model: c.component.clone(),
            input_tokens: c.input_tokens,
            duration_ms: c.raw_attempts_ms().iter().sum(),
            start_us: c.spans.first().map_or(0, |&i| trace.spans[i].start_us),
            phases: match (c.phases.queue_ms, c.phases.prefill_ms, c.phases.decode_ms) {
                (Some(q), Some(p), Some(d)) => Some([q, p, d]),
                _ => None,
            },
            response_id: c.phases.is_empty().then(|| c.response_id.clone()).flatten(),
            unsplit: c.unsplit,
        })
        .collect();
    if !book.is_empty() {
        calls::infer_phases(trace, &mut calls, book);
    }
    let root = &tree.nodes[tree.root];
    let mut summary = TraceSummary {
        trace_id: trace.id.clone(),
        start_us: root.start_us,
        end_us: root.end_us,
        outcome,
        gateway_status: gw.and_then(|g| g.status),
        llm_calls,
        dominant: None,
        stream_gap_ms: None,
        records: record_count(trace),
    };
    if outcome == Outcome::Ok && !cfg.all_verdicts {
        return (summary, None);
    }
    let verdict = build_verdict(trace, &tree, &calls, deciding, timeouts, outcome, cfg);
    summary.dominant = calls.first().cloned();
    summary.stream_gap_ms = outcome::stream_gap(trace, &tree).map(|g| g.gap_ms);
    (summary, Some(verdict))
}

fn build_verdict(
    trace: &Trace,
    tree: &TraceTree,
    calls: &[Call],
    deciding: Option<usize>,
    timeouts: &BTreeMap<String, LayerTimeout>,
    outcome: Outcome,
    cfg: &DiagnoseConfig,
) -> Verdict {
    let gw = deciding.map(|i| &trace.gateway[i]);
    let gw_timeout_ms = gw.and_then(|g| timeouts.get(&g.source)).map(|t| t.ms);
    let elapsed_ms = tree.elapsed_us() as f64 / 1000.0;
    let service = outcome::owning_service(trace, tree)
        .or_else(|| gw.map(|g| g.source.clone()))
        .unwrap_or_else(|| "service".into());
    let service_budget_ms = outcome::service_budget_ms(trace, tree);
    let stream = outcome::stream_gap(trace, tree).or_else(|| {
        // No chunk traced: a cut as nginx's own timings show it.
        let g = gw.filter(|_| outcome == Outcome::GatewayTimeout)?;
        outcome::held_open(trace, tree, g, gw_timeout_ms)
    });
    // The gateway cut a streamed response: what went silent is the call
    // that was streaming into it (a stalled model), else the service.
    let stream_component = stream
        .as_ref()
        .map(|s| stream_component(trace, tree, calls, s));
    let facts = Facts {
        outcome,
        calls,
        elapsed_ms,
        service: service.clone(),
        has_spans: !trace.spans.is_empty(),
        gateway_status: gw.and_then(|g| g.status),
        gateway_source: gw.map(|g| g.source.clone()),
        gateway_timeout_ms: gw_timeout_ms,
        service_budget_ms,
        stream,
        stream_component,
        threshold_tokens: cfg.threshold_tokens,
        thresholds: &cfg.rules,
        disabled: &cfg.disabled_rules,
    };
    let (mut root_cause, contributing) = if outcome == Outcome::Ok {
        let (mut rc, c) = root_cause(&facts);
        rc.summary = format!("request succeeded; {}", rc.summary);
        (rc, c)
    } else {
        root_cause(&facts)
    };
    if !tree.orphans.is_empty() {
        root_cause.evidence.push(orphan_evidence(trace, tree));
    }
    if root_cause.kind == RootCauseKind::Unknown && trace.spans.is_empty() {
        root_cause
            .evidence
            .push(format!("no spans arrived for trace {}", trace.id));
    }
    let findings = findings(&FindingFacts {
        calls,
        elapsed_ms,
        service: &service,
        service_budget_ms,
        gateway: &trace.gateway,
        deciding,
        timeouts,
        service_answer: outcome::service_answer(trace, tree),
    });
    let (total, source) = outcome::budget(trace, tree, gw_timeout_ms, cfg.default_budget_ms);
    Verdict {
        trace_id: trace.id.clone(),
        request_id: gw
            .and_then(|g| g.request_id.clone())
            .or_else(|| trace.spans.iter().find_map(|s| s.request_id.clone())),
        started_at: Timestamp::from_us(tree.origin_us()).floor_ms(),
        outcome,
        gateway: gw.map(|g| GatewayView {
            source: g.source.clone(),
            status: g.status,
            request_time_ms: g.request_time_ms,
            upstream_connect_ms: g.upstream_connect_sum_ms(),
            upstream_header_ms: g.upstream_header_sum_ms(),
            upstream_response_ms: g.upstream_response_sum_ms(),
            upstream_status: g.upstream_status_raw.clone(),
            upstream_tries: g.upstream_tries() as u32,
            timeout_ms: gw_timeout_ms,
        }),
        budget: BudgetView {
            total_ms: total,
            source: source.map(String::from),
            consumed_ms: elapsed_ms,
        },
        timeline: timeline(trace, tree, calls),
        root_cause,
        contributing,
        findings,
    }
}

/// How many spans arrived without their parent, and where they went.
fn orphan_evidence(trace: &Trace, tree: &TraceTree) -> String {
    let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
    for o in &tree.orphans {
        let host = o
            .placed_under
            .map(|h| format!("{} ({})", trace.spans[h].name, trace.spans[h].service))
            .unwrap_or_else(|| "the request's root".into());
        *hosts.entry(host).or_default() += 1;
    }
    let placed: Vec<String> = hosts
        .iter()
        .map(|(h, n)| format!("{n} under {h}"))
        .collect();
    format!(
        "{} span(s) arrived without their parent (never exported): placed {}",
        tree.orphans.len(),
        placed.join(", ")
    )
}

fn timeline(trace: &Trace, tree: &TraceTree, calls: &[Call]) -> Vec<TimelineEntry> {
    let origin = tree.origin_us();
    let mut components = span_components(trace, tree, calls);
    // Each LLM call's phases and their source, on its first span.
    let mut llm_phases: BTreeMap<usize, overtime_model::CallPhases> = calls
        .iter()
        .filter_map(|c| Some((*c.spans.first()?, crate::calls::call_phases(c)?)))
        .collect();
    let mut out: Vec<TimelineEntry> = tree
        .nodes
        .iter()
        .filter_map(|n| {
            let i = n.span?;
            let s = &trace.spans[i];
            let start = s.start_us + tree.shift_us[i];
            Some(TimelineEntry {
                span_id: s.span_id.clone(),
                parent_span_id: s.parent_span_id.clone(),
                name: s.name.clone(),
                service: s.service.clone(),
                stage: s.stage,
                component: std::mem::take(&mut components[i]),
                start_offset_ms: (start - origin) as f64 / 1000.0,
                duration_ms: s.duration_ms(),
                critical_ms: n.critical_us as f64 / 1000.0,
                timeout_ms: s.timeout_ms,
                remaining_budget_ms: s.remaining_budget_ms,
                attempt: s.attempt.unwrap_or(0),
                status: s.status,
                phases: s.phases.iter().map(|(k, v)| (k.to_string(), v)).collect(),
                llm_phases: llm_phases.remove(&i),
            })
        })
        .collect();
    out.sort_by(|a, b| a.start_offset_ms.total_cmp(&b.start_offset_ms));
    out
}
