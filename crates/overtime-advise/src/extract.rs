//! From overtime's tables to what advice and replay need: every request
//! with its calls (each attempt's start, duration and how it ended), the
//! service's own answer and budget, and what each gateway layer logged.
//! The traces are assembled, joined and cut into calls exactly as the
//! diagnosis does (`overtime-diagnose`), so advice and verdicts agree.

use crate::AdviseError;
use arrow::record_batch::RecordBatch;
use overtime_diagnose::calls::{self, CallKind};
use overtime_diagnose::{DiagnoseConfig, Trace, assemble_tables, outcome, tree};
use overtime_diagnose::{LayerTimeout, layer_timeouts};
use overtime_model::{GatewayRows, Outcome, SpanRecord, SpanStatus, Stage};
use std::collections::{BTreeMap, BinaryHeap};

/// How one attempt of a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// It answered: its duration is its latency.
    Finished,
    /// It answered with an error (not a timeout).
    Failed,
    /// Its own timeout fired: it would have lasted longer (censored).
    TimedOut,
    /// It was cancelled or cut with its request (censored).
    Cut,
}

impl End {
    /// Whether the attempt's duration is only a lower bound on its latency
    /// (timed out or cut).
    pub fn censored(self) -> bool {
        matches!(self, End::TimedOut | End::Cut)
    }
}

/// One attempt of a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attempt {
    /// From the request's start (ms).
    pub start_ms: f64,
    /// How long it ran (ms): its latency when it finished, a lower bound
    /// when censored.
    pub ms: f64,
    /// How it ended.
    pub end: End,
    /// A cut LLM call's full latency as its model server reported it
    /// (`X-LLM-Duration`): the server ran on after the caller gave up.
    pub known_ms: Option<f64>,
    /// The server answered it (an HTTP status came back): whatever went
    /// wrong, no timeout fired on it.
    pub answered: bool,
}

impl Attempt {
    /// A finished attempt.
    pub fn finished(start_ms: f64, ms: f64) -> Self {
        Attempt {
            start_ms,
            ms,
            end: End::Finished,
            known_ms: None,
            answered: true,
        }
    }

    /// What survival sees: the latency when known (finished, or reported
    /// by the server), else a cut at `ms`; `None` for an error (its time
    /// says how fast it failed, not how long the work takes).
    pub(crate) fn obs(&self) -> Option<crate::stats::Obs> {
        use crate::stats::Obs;
        match (self.end, self.known_ms) {
            (End::Failed, _) => None,
            (End::Finished, _) => Some(Obs {
                ms: self.ms,
                finished: true,
            }),
            (_, Some(k)) => Some(Obs {
                ms: k,
                finished: true,
            }),
            _ => Some(Obs {
                ms: self.ms,
                finished: false,
            }),
        }
    }
}

/// What kind of downstream a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A call to an LLM (stages `llm` and `judge`).
    Llm,
    /// A call to a tool or over the network.
    Tool,
    /// A read or write of a memory store.
    Memory,
}

/// One call (its retries included).
#[derive(Debug, Clone, PartialEq)]
pub struct CallFacts {
    /// What kind of downstream it went to.
    pub class: Class,
    /// The model of an LLM call, the tool or store of the others.
    pub component: String,
    /// The span's stage, as recorded.
    pub stage: Stage,
    /// Input tokens of an LLM call; `None` when not recorded.
    pub tokens_in: Option<i64>,
    /// The model server's GPU load (0–1) when the call began; `None` when
    /// not recorded.
    pub gpu_load: Option<f64>,
    /// Calls of the same model in flight when this one began.
    pub in_flight: f64,
    /// Its attempts in order: the first try, then each retry.
    pub attempts: Vec<Attempt>,
    /// The timeout the call was given, when recorded or observed.
    pub timeout_ms: Option<f64>,
    /// `timeout_ms` was not recorded but is the duration at which a timeout
    /// error ended the call.
    pub timeout_observed: bool,
    /// What was left of the request's budget when the call began (ms), when
    /// recorded.
    pub remaining_budget_ms: Option<f64>,
    /// The call holds time on the request's critical path.
    pub critical: bool,
    /// A fallback answered after this call failed (ms it took).
    pub fallback_ms: Option<f64>,
    /// Absolute start of the first attempt (µs), for load.
    pub abs_start_us: i64,
    /// The LLM gateway that made the attempts on the call's behalf (its
    /// service), when the call went through one.
    pub gateway: Option<String>,
}

impl CallFacts {
    /// When the first attempt began (ms from the request's start).
    pub fn start_ms(&self) -> f64 {
        self.attempts.first().map_or(0.0, |a| a.start_ms)
    }
    /// When the last attempt ended (ms from the request's start).
    pub fn end_ms(&self) -> f64 {
        self.attempts.last().map_or(0.0, |a| a.start_ms + a.ms)
    }
    /// What its attempts say of its latency (see [`Attempt`]'s `obs`);
    /// with `same_work`, an attempt cut again after one cut before says
    /// nothing new (the same work, cut at the same point) and is left out.
    pub(crate) fn latency_obs(&self, same_work: bool) -> Vec<crate::stats::Obs> {
        let mut out = Vec::with_capacity(self.attempts.len());
        let mut cut_before = false;
        for a in &self.attempts {
            let Some(o) = a.obs() else {
                continue;
            };
            if !(same_work && cut_before && !o.finished) {
                out.push(o);
            }
            cut_before |= !o.finished;
        }
        out
    }
    /// Whether the last attempt did not finish (an error, a timeout or a
    /// cut).
    pub fn failed(&self) -> bool {
        self.attempts.last().is_some_and(|a| a.end != End::Finished)
    }
    /// The load the latency model sees: `gpu_load` when recorded, else
    /// calls in flight on the model.
    pub fn load(&self, gpu: bool) -> f64 {
        if gpu {
            self.gpu_load.unwrap_or(0.0)
        } else {
            self.in_flight
        }
    }
}

/// One request as the user and the service saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceFacts {
    /// The trace id (32 hex digits).
    pub trace_id: String,
    /// When the request began (µs since the Unix epoch).
    pub start_us: i64,
    /// What the client got, as the diagnosis classified it.
    pub outcome: Outcome,
    /// The status the client got (the deciding gateway's), if logged.
    pub status: Option<u16>,
    /// The layers that logged it, outermost first.
    pub layers: Vec<String>,
    /// What the client waited (ms).
    pub elapsed_ms: f64,
    /// The service that owns it (the top span's service); `None` with
    /// gateway records only.
    pub service: Option<String>,
    /// When the service answered, from the request's start (ms) — also
    /// after the gateway had already cut it.
    pub service_end_ms: Option<f64>,
    /// The status the service answered with, when its span recorded one.
    pub service_status: Option<u16>,
    /// The service's own budget for the request (a span's `budget_ms`), when
    /// recorded.
    pub budget_ms: Option<f64>,
    /// A streamed answer's longest silence (ms).
    pub stream_gap_ms: Option<f64>,
    /// The calls the request made downstream, in start order.
    pub calls: Vec<CallFacts>,
}

/// What one gateway layer logged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LayerFacts {
    /// The layer's name (`edge`, `gateway`…), outermost first in
    /// [`Dataset::layers`].
    pub name: String,
    /// The read timeout: configured or inferred from the 504s.
    pub timeout: Option<LayerTimeout>,
    /// (`$request_time` ms, status) of every line.
    pub requests: Vec<(f64, Option<u16>)>,
}

/// Everything the advice and the replay read.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// The requests, in start order.
    pub traces: Vec<TraceFacts>,
    /// Outermost first (as configured, then as seen).
    pub layers: Vec<LayerFacts>,
    /// Spans seen twice (same span id) and counted once.
    pub duplicate_spans: usize,
    /// Per component seen retrying after a timeout: how much a retry takes
    /// as long as the attempt before it (0: a fresh draw, 1: the same
    /// work, the same time), from how often its retries timed out again
    /// against how often its first attempts did.
    pub same_work: BTreeMap<String, f64>,
}

impl Dataset {
    /// Settles how every attempt ended and the timeouts that fired, from
    /// where attempts cluster (the rules of `fired`): [`dataset`] does it;
    /// a dataset built by hand calls it once its traces are in.
    pub fn settle_timeouts(&mut self) {
        self.same_work = crate::fired::settle(&mut self.traces);
    }

    /// Whether retries of `component` redo the same work in the same time
    /// (more than half the time).
    pub(crate) fn repeats_work(&self, component: &str) -> bool {
        self.same_work.get(component).is_some_and(|s| *s > 0.5)
    }

    /// The current read timeout of `layer`.
    pub fn layer_timeout_ms(&self, layer: &str) -> Option<f64> {
        self.layers
            .iter()
            .find(|l| l.name == layer)
            .and_then(|l| l.timeout.as_ref())
            .map(|t| t.ms)
    }
}

fn classify(stage: Stage) -> Option<Class> {
    match stage {
        Stage::Llm | Stage::Judge => Some(Class::Llm),
        Stage::Tool | Stage::Network => Some(Class::Tool),
        Stage::Memory => Some(Class::Memory),
        _ => None,
    }
}

fn attempt_end(s: &SpanRecord, last: bool, call_timed_out: bool) -> End {
    match s.status {
        SpanStatus::Timeout => End::TimedOut,
        SpanStatus::Cancelled => End::Cut,
        _ if last && call_timed_out => End::TimedOut,
        SpanStatus::Error => End::Failed,
        _ if s.http_status.is_some_and(|h| h >= 500) => End::Failed,
        _ => End::Finished,
    }
}

fn trace_facts(
    trace: &Trace,
    timeouts: &BTreeMap<String, LayerTimeout>,
    cfg: &DiagnoseConfig,
) -> TraceFacts {
    let deciding = outcome::deciding_gateway(trace, timeouts);
    let tree = tree::build(trace, deciding, cfg.clock_skew_ms);
    let gw = deciding.map(|i| &trace.gateway[i]);
    let gw_timeout = gw.and_then(|g| timeouts.get(&g.source)).map(|t| t.ms);
    let out = outcome::outcome(trace, &tree, gw, gw_timeout);
    let origin = tree.origin_us();
    let mut node_of = vec![usize::MAX; trace.spans.len()];
    for (n, node) in tree.nodes.iter().enumerate() {
        if let Some(s) = node.span {
            node_of[s] = n;
        }
    }
    let found = calls::collect(trace, &tree);
    let mut facts: Vec<CallFacts> = Vec::new();
    for c in found.iter().filter(|c| c.kind == CallKind::Span) {
        let Some(class) = classify(c.stage) else {
            continue;
        };
        let raw = c.raw_attempts_ms();
        let spans = attempt_spans(trace, &tree, &node_of, &c.spans, &raw);
        let n = spans.len();
        let attempts: Vec<Attempt> = spans
            .iter()
            .enumerate()
            .map(|(k, &si)| {
                let node = &tree.nodes[node_of[si]];
                let s = &trace.spans[si];
                let ms = raw.get(k).copied().unwrap_or_else(|| s.duration_ms());
                let end = attempt_end(s, k + 1 == n, c.timed_out);
                Attempt {
                    start_ms: (node.start_us - origin) as f64 / 1000.0,
                    ms,
                    end,
                    known_ms: end
                        .censored()
                        .then(|| reported_ms(trace, &tree, node_of[si]))
                        .flatten()
                        .filter(|d| *d > ms),
                    answered: s.http_status.is_some(),
                }
            })
            .collect();
        if attempts.is_empty() {
            continue;
        }
        let first = &trace.spans[c.spans[0]];
        facts.push(CallFacts {
            class,
            component: c.component.clone(),
            stage: c.stage,
            tokens_in: c.input_tokens,
            gpu_load: c.gpu_load,
            in_flight: 0.0,
            attempts,
            timeout_ms: c.timeout_ms,
            timeout_observed: c.timeout_observed,
            remaining_budget_ms: c.remaining_budget_ms,
            critical: c.critical_us > 0,
            fallback_ms: None,
            abs_start_us: first.start_us,
            gateway: c.gateway.clone(),
        });
    }
    facts.sort_by(|a, b| a.start_ms().total_cmp(&b.start_ms()));
    // A fallback: a span marked `fallback` that began right after a call
    // failed answers for it.
    for fb in trace.spans.iter().filter(|s| s.fallback.is_some()) {
        let at = (fb.start_us - origin) as f64 / 1000.0;
        if let Some(c) = facts
            .iter_mut()
            .filter(|c| c.failed() && c.end_ms() <= at + 1.0)
            .max_by(|a, b| a.end_ms().total_cmp(&b.end_ms()))
        {
            c.fallback_ms = Some(fb.duration_ms());
        }
    }
    let answer = outcome::service_answer(trace, &tree);
    let mut layers: Vec<(u32, String)> = trace
        .gateway
        .iter()
        .map(|g| (g.layer, g.source.clone()))
        .collect();
    layers.sort();
    layers.dedup();
    TraceFacts {
        trace_id: trace.id.clone(),
        start_us: origin,
        outcome: out,
        status: gw.and_then(|g| g.status),
        layers: layers.into_iter().map(|(_, n)| n).collect(),
        elapsed_ms: tree.elapsed_us() as f64 / 1000.0,
        service: outcome::owning_service(trace, &tree),
        service_end_ms: answer.map(|a| a.at_ms),
        service_status: answer.map(|a| a.status),
        budget_ms: outcome::service_budget_ms(trace, &tree),
        stream_gap_ms: outcome::stream_gap(trace, &tree).map(|g| g.gap_ms),
        calls: facts,
    }
}

/// The spans of a call's attempts, first try first: its operation spans —
/// or, for one operation whose client retried under it (the openai
/// client's HTTP attempts under its `chat` span), the spans below it that
/// are its attempts (the call's attempt durations are theirs). Taking the
/// operation span for the only attempt would make a call that timed out
/// and then succeeded on a retry one finished attempt at the timeout.
fn attempt_spans(
    trace: &Trace,
    tree: &tree::TraceTree,
    node_of: &[usize],
    ops: &[usize],
    raw: &[f64],
) -> Vec<usize> {
    if ops.len() != 1 || raw.len() < 2 || node_of[ops[0]] == usize::MAX {
        return ops.to_vec();
    }
    let mut below = Vec::new();
    let mut stack = vec![node_of[ops[0]]];
    while let Some(n) = stack.pop() {
        for &ch in &tree.nodes[n].children {
            below.extend(tree.nodes[ch].span);
            stack.push(ch);
        }
    }
    below.sort_by_key(|&si| (trace.spans[si].start_us, si));
    let mut out: Vec<usize> = Vec::with_capacity(raw.len());
    for ms in raw {
        match below
            .iter()
            .find(|&&si| !out.contains(&si) && (trace.spans[si].duration_ms() - ms).abs() < 1e-6)
        {
            Some(&si) => out.push(si),
            None => return ops.to_vec(),
        }
    }
    out.sort_by_key(|&si| (trace.spans[si].start_us, si));
    out
}

/// The model server's own total (`X-LLM-Duration`) for the call under
/// `node` — on its span or on a span below it (the server's own span, when
/// the model server is instrumented): it ran on after the caller gave up.
fn reported_ms(trace: &Trace, tree: &tree::TraceTree, node: usize) -> Option<f64> {
    let mut stack = vec![node];
    let mut best: Option<f64> = None;
    while let Some(n) = stack.pop() {
        if let Some(d) = tree.nodes[n]
            .span
            .and_then(|i| trace.spans[i].llm_duration_ms)
            .filter(|d| d.is_finite())
        {
            best = Some(best.map_or(d, |b: f64| b.max(d)));
        }
        stack.extend(tree.nodes[n].children.iter().copied());
    }
    best
}

/// Calls of one model in flight at each call's start (a sweep over start
/// and end times).
fn fill_in_flight(traces: &mut [TraceFacts]) {
    let mut by_model: BTreeMap<String, Vec<(i64, i64, usize, usize)>> = BTreeMap::new();
    for (ti, t) in traces.iter().enumerate() {
        for (ci, c) in t.calls.iter().enumerate() {
            if c.class == Class::Llm {
                let end = c.abs_start_us + ((c.end_ms() - c.start_ms()) * 1000.0) as i64;
                by_model.entry(c.component.clone()).or_default().push((
                    c.abs_start_us,
                    end,
                    ti,
                    ci,
                ));
            }
        }
    }
    for (_, mut v) in by_model {
        v.sort();
        let mut ends: BinaryHeap<std::cmp::Reverse<i64>> = BinaryHeap::new();
        for (start, end, ti, ci) in v {
            while ends.peek().is_some_and(|e| e.0 <= start) {
                ends.pop();
            }
            traces[ti].calls[ci].in_flight = ends.len() as f64;
            ends.push(std::cmp::Reverse(end));
        }
    }
}

/// Reads `gateway_requests` batches and span rows into a [`Dataset`].
pub fn dataset(
    gateway: &[RecordBatch],
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
) -> Result<Dataset, AdviseError> {
    let readers: Vec<GatewayRows> = gateway
        .iter()
        .map(GatewayRows::new)
        .collect::<Result<_, _>>()?;
    let timeouts = layer_timeouts(
        readers.iter().flat_map(|r| {
            (0..r.len()).map(move |i| (r.source(i), r.status(i), r.request_time_ms(i)))
        }),
        cfg,
    );
    let mut layers: Vec<LayerFacts> = cfg
        .layers
        .iter()
        .map(|l| LayerFacts {
            name: l.name.clone(),
            ..Default::default()
        })
        .collect();
    for r in &readers {
        for i in 0..r.len() {
            let name = r.source(i);
            let idx = match layers.iter().position(|l| l.name == name) {
                Some(x) => x,
                None => {
                    layers.push(LayerFacts {
                        name: name.to_string(),
                        ..Default::default()
                    });
                    layers.len() - 1
                }
            };
            if let Some(rt) = r.request_time_ms(i) {
                layers[idx].requests.push((rt, r.status(i)));
            }
        }
    }
    drop(readers);
    for l in &mut layers {
        l.timeout = timeouts.get(&l.name).cloned();
    }
    let assembled = assemble_tables(gateway, spans, true)?;
    let traces = assembled.traces;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let per = traces.len().div_ceil(threads).max(1);
    let mut out: Vec<TraceFacts> = std::thread::scope(|s| {
        let handles: Vec<_> = traces
            .chunks(per)
            .map(|chunk| {
                let timeouts = &timeouts;
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|t| trace_facts(t, timeouts, cfg))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("advice thread panicked"))
            .collect()
    });
    out.sort_by(|a, b| {
        a.start_us
            .cmp(&b.start_us)
            .then(a.trace_id.cmp(&b.trace_id))
    });
    let same_work = crate::fired::settle(&mut out);
    fill_in_flight(&mut out);
    Ok(Dataset {
        same_work,
        traces: out,
        layers,
        duplicate_spans: assembled.stats.duplicate_spans,
    })
}
