//! Calls: the units a root cause can name — one call model for every
//! instrumentation (docs/diagnosis.md, "Calls").
//!
//! A **call** is an operation span of any convention (a GenAI `chat` or
//! `execute_tool`, an OpenInference `LLM`/`TOOL`/`RETRIEVER`, a Traceloop
//! or LangChain run, a framework span named for a tool, a memory lookup, a
//! queue wait) together with its transport **attempts** — the HTTP, RPC
//! or database client spans below it, or beside it (`shape` moves those
//! under it first). A plain transport span that no operation covers is a
//! call of its own. Everything under a call belongs to it: phases,
//! tokens, model, timeouts and errors are gathered from every span of it.
//!
//! Design rules:
//! - **Topmost wins.** A call nested in a call (the model server's span
//!   under the LLM gateway's, a judge's inner `chat`) is the outer call
//!   seen again, not another one. An LLM span with tool or memory
//!   operations under it is an agent loop, not a call: its steps are.
//! - **Retries are one call** however they are written (`attempts`):
//!   several attempts under one operation, or several operation spans of
//!   one target side by side under one parent.
//! - **One name** per call, from [`crate::naming::call_component`].
//! - Two pseudo-calls complete the picture: the wait of a service span
//!   before its first child began (a worker or connection pool), and the
//!   gateway's own wait before the first span began (or the whole request
//!   when there are no spans).

mod attempts;
mod measure;

mod infer;

pub(crate) use attempts::family;
pub(crate) use infer::{call_phases, infer_phases, server_answer};
pub(crate) use measure::span_phases;

use crate::assemble::Trace;
use crate::naming::call_component;
use crate::shape::{Role, role};
use crate::tree::TraceTree;
use overtime_model::{LlmPhases, SpanRecord, SpanStatus, Stage};
use overtime_parse::llm_reason::parse_llm_reason;
use std::collections::BTreeMap;

/// What a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CallKind {
    /// Spans of a calling stage.
    Span,
    /// A service span waiting before its first child began.
    PoolWait,
    /// The gateway waiting on its upstream (no span covers that time).
    Upstream,
}

/// One call that held time in a trace: a span of a calling stage with its retries, or a wait no span covers. The rules judge these.
/// Serialized as collectors exchange it (inside a [`TraceSummary`](crate::verdict::TraceSummary)).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Call {
    /// A span, a pool wait or the gateway's wait on its upstream.
    pub kind: CallKind,
    /// What kind of call (`llm`, `tool`, …).
    pub stage: Stage,
    /// What a person would call it: the model, the tool's name, else an address.
    pub component: String,
    /// The service the call was made from (or that waited).
    pub service: String,
    /// Span indices of the attempts, in start order (empty for pseudo-calls
    /// other than a service's pool wait, which holds the service span).
    pub spans: Vec<usize>,
    /// Critical-path time of the whole call (all attempts, subtrees), µs.
    pub critical_us: i64,
    /// Critical-path time per attempt, µs.
    pub attempt_critical_us: Vec<i64>,
    /// Effective duration per attempt (clamped to the request), µs.
    pub attempt_duration_us: Vec<i64>,
    /// Each attempt's own span duration, ms (unclamped: a cut attempt
    /// shows how long it really ran).
    pub attempt_raw_ms: Vec<f64>,
    /// The call's timeout, ms: the first its spans give (or one found inside it); `None`: none known.
    pub timeout_ms: Option<f64>,
    /// Some attempt ended by its own timeout.
    pub timed_out: bool,
    /// `timeout_ms` is not a configured value but the duration at which a
    /// timeout error ended the call (instrumentation records no timeouts).
    pub timeout_observed: bool,
    /// The error that ended the call, when it failed.
    pub error_type: Option<String>,
    /// Some attempt was still running when the request ended (cut).
    pub cut: bool,
    /// The model server's phases over its attempts, ms (LLM calls).
    pub phases: LlmPhases,
    /// Where the phases were read (`X-LLM-Reason header`, `vLLM span`,
    /// `TGI headers` …), as the evidence names it.
    #[serde(default)]
    pub phase_source: Option<String>,
    /// When the phases were inferred: the finished calls they came from.
    #[serde(default)]
    pub phase_neighbours: Option<overtime_model::PhaseNeighbours>,
    /// DNS + connect time over all attempts (ms), when known.
    pub dns_connect_ms: Option<f64>,
    /// DNS time over all attempts, ms, when known.
    pub dns_ms: Option<f64>,
    /// The model, from the first of its spans that names it.
    pub model: Option<String>,
    /// Prompt tokens, from the first of its spans (attempts and what ran inside them) that gives them.
    pub input_tokens: Option<i64>,
    /// Generated tokens, from the first of its spans (attempts and what ran inside them) that gives them.
    pub output_tokens: Option<i64>,
    /// The generation limit asked for, from the first of its spans that gives it.
    pub max_tokens: Option<i64>,
    /// Time to first token, ms, from the first of its spans that gives it.
    pub ttft_ms: Option<f64>,
    /// The model server's reported GPU load, 0–1, when given.
    pub gpu_load: Option<f64>,
    /// Budget left when the call started, ms, from the first of its spans that gives it.
    pub remaining_budget_ms: Option<f64>,
    /// The LLM gateway the call went through (its service), when its one
    /// attempt reached one ([`attempts`]).
    #[serde(default)]
    pub gateway: Option<String>,
    /// The models the gateway tried, in order, when it tried more than one
    /// (a fallback): the first is the call's own.
    #[serde(default)]
    pub models_tried: Vec<String>,
    /// The id of the completion the model server answered with
    /// (`gen_ai.response.id` on any span of the call): what joins a
    /// server's answer written in a trace of its own ([`crate::answers`]).
    #[serde(default)]
    pub response_id: Option<String>,
    /// `[inference ms, prompt tokens, generated tokens]` when the server
    /// timed prefill and decode only together and they were split by the
    /// fixed token estimate: a model's learned costs split it again
    /// ([`crate::costs`]).
    #[serde(default)]
    pub unsplit: Option<[f64; 3]>,
}

impl Call {
    /// Number of attempts (at least 1).
    pub fn attempts(&self) -> usize {
        self.attempt_duration_us.len().max(1)
    }
    /// Effective time of all attempts, µs (clamped to the request).
    pub fn duration_us(&self) -> i64 {
        self.attempt_duration_us.iter().sum()
    }
    /// Attempt durations as the spans report them (ms).
    pub fn raw_attempts_ms(&self) -> Vec<f64> {
        if self.attempt_raw_ms.is_empty() {
            self.attempt_duration_us
                .iter()
                .map(|d| *d as f64 / 1000.0)
                .collect()
        } else {
            self.attempt_raw_ms.clone()
        }
    }
    /// An LLM call: stage `llm` or `judge`.
    pub fn is_llm(&self) -> bool {
        matches!(self.stage, Stage::Llm | Stage::Judge)
    }
}

/// Stages whose spans are calls of the request (what can hold its time
/// and fail on its behalf): the one list root causes and SLIs both use.
pub(crate) fn is_call_stage(s: Stage) -> bool {
    matches!(
        s,
        Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory | Stage::Network | Stage::Queue
    )
}

/// Which nodes are calls (see the module's design rules): operations,
/// except an LLM span with tool or memory operations under it (an agent
/// loop, such as the AI SDK's `generateText` running tools between its
/// steps: the steps and the tools are the calls); and transports with no
/// call under them (a hop between services leads to the calls an SRE
/// would blame).
fn call_nodes(trace: &Trace, tree: &TraceTree) -> Vec<bool> {
    let n = tree.nodes.len();
    let span = |i: usize| tree.nodes[i].span.map(|s| &trace.spans[s]);
    // Nodes are created parents first, so a backwards walk sees children
    // first: which operation families, and whether any call, lie below.
    let mut below_ops: Vec<[bool; 2]> = vec![[false; 2]; n];
    let mut call_below = vec![false; n];
    let mut is_call = vec![false; n];
    for i in (0..n).rev() {
        let mut below = [false; 2];
        for &c in &tree.nodes[i].children {
            below[0] |= below_ops[c][0];
            below[1] |= below_ops[c][1];
            call_below[i] |= is_call[c] || call_below[c];
            if let Some(cs) = span(c)
                && role(cs) == Role::Operation
            {
                below[usize::from(family(cs.stage) != Stage::Llm)] = true;
            }
        }
        below_ops[i] = below;
        is_call[i] = match span(i) {
            Some(s) => match role(s) {
                Role::Operation => !(family(s.stage) == Stage::Llm && below[1]),
                Role::Transport => !call_below[i],
                Role::Application | Role::Moment | Role::Phase => false,
            },
            None => false,
        };
    }
    is_call
}

/// The name an SRE knows one span's target by, from that span alone (the
/// timeline's spans that belong to no call). A call's own name comes from
/// [`crate::naming::call_component`].
pub(crate) fn component_of(s: &SpanRecord) -> String {
    let pick = match s.stage {
        Stage::Llm | Stage::Judge => s.model.as_deref().or(s.tool.as_deref()),
        Stage::Tool | Stage::Memory => s.tool.as_deref().or(s.peer.as_deref()),
        Stage::Network => s.peer.as_deref().or(s.tool.as_deref()),
        Stage::Queue | Stage::Service | Stage::Gateway => Some(s.service.as_str()),
        Stage::Other => s.tool.as_deref().or(s.model.as_deref()),
    };
    pick.filter(|p| !p.is_empty())
        .unwrap_or(s.name.as_str())
        .to_string()
}

/// Groups the trace's calls, with their critical-path time.
pub fn collect(trace: &Trace, tree: &TraceTree) -> Vec<Call> {
    let spans = &trace.spans;
    let mut calls: Vec<Call> = Vec::new();
    let is_call = call_nodes(trace, tree);
    // Nodes are created parents first: one forward pass marks call subtrees.
    let mut under_call = vec![false; tree.nodes.len()];
    for n in 0..tree.nodes.len() {
        if let Some(p) = tree.nodes[n].parent {
            under_call[n] = under_call[p] || is_call[p];
        }
    }
    let name = |n: usize| {
        let stage = tree.nodes[n].span.map_or(Stage::Other, |i| spans[i].stage);
        call_component(trace, tree, &[n], stage)
    };
    // The parent each orphan lost: orphans of one lost operation are the
    // attempts of that one call.
    let lost: std::collections::HashMap<usize, &str> = tree
        .orphans
        .iter()
        .filter_map(|o| Some((o.span, spans[o.span].parent_span_id.as_deref()?)))
        .collect();
    // Topmost calls, grouped by (parent node, family, name, lost parent): a
    // group is one call retried, or calls of one target made one after
    // another.
    type Key<'a> = (usize, &'static str, String, Option<&'a str>);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (n, node) in tree.nodes.iter().enumerate() {
        let Some(si) = node.span else { continue };
        if is_call[n] && !under_call[n] {
            let key = (
                node.parent.unwrap_or(usize::MAX),
                family(spans[si].stage).as_str(),
                name(n),
                lost.get(&si).copied(),
            );
            groups.entry(key).or_default().push(n);
        }
    }
    for ((_, _, _, lost_parent), mut nodes) in groups {
        nodes.sort_by_key(|&n| tree.nodes[n].start_us);
        let one_lost_call =
            lost_parent.is_some() && nodes.len() > 1 && attempts::sequential(trace, tree, &nodes);
        if one_lost_call || attempts::retried(trace, tree, &nodes) {
            calls.push(span_call(trace, tree, &nodes, &nodes));
        } else {
            for n in nodes {
                let (tries, gateway) = attempts::attempts_under(trace, tree, n, &name);
                let mut c = span_call(trace, tree, &[n], &tries);
                if let Some(g) = gateway {
                    behind_gateway(trace, tree, &g, &mut c);
                }
                calls.push(c);
            }
        }
    }
    // A service span's wait before its first child began.
    for node in &tree.nodes {
        let Some(si) = node.span else { continue };
        if node.lead_us > 0
            && matches!(spans[si].stage, Stage::Service | Stage::Other)
            && node.children.iter().any(|&c| !tree.nodes[c].moment)
        {
            calls.push(pseudo(
                CallKind::PoolWait,
                Stage::Queue,
                &spans[si].service,
                node.lead_us,
                vec![si],
            ));
        }
    }
    // The gateway's wait before any span began, or the whole request.
    if let Some(g) = tree.gateway {
        let root = &tree.nodes[tree.root];
        let upstream_time = if root.children.is_empty() {
            root.critical_us
        } else {
            root.lead_us
        };
        if upstream_time > 0 {
            let rec = &trace.gateway[g];
            let comp = rec
                .upstream_addr
                .iter()
                .rev()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_else(|| "upstream".into());
            let mut c = pseudo(
                CallKind::Upstream,
                Stage::Gateway,
                &rec.source,
                upstream_time,
                vec![],
            );
            c.component = comp;
            c.dns_connect_ms = rec.upstream_connect_sum_ms();
            c.attempt_duration_us = vec![upstream_time];
            if root.children.is_empty()
                && let Some(r) = rec.llm_reason.as_deref()
            {
                c.phases = parse_llm_reason(r);
                if !c.phases.is_empty() {
                    c.stage = Stage::Llm;
                    c.component = rec
                        .extra("upstream_http_x_llm_model")
                        .map(String::from)
                        .unwrap_or(c.component);
                }
            }
            calls.push(c);
        }
    }
    calls.sort_by_key(|c| std::cmp::Reverse(c.critical_us));
    calls
}

fn pseudo(
    kind: CallKind,
    stage: Stage,
    service: &str,
    critical_us: i64,
    spans: Vec<usize>,
) -> Call {
    Call {
        kind,
        stage,
        component: service.to_string(),
        service: service.to_string(),
        spans,
        critical_us,
        attempt_critical_us: vec![critical_us],
        attempt_duration_us: vec![critical_us],
        attempt_raw_ms: Vec::new(),
        timeout_ms: None,
        timed_out: false,
        timeout_observed: false,
        error_type: None,
        cut: false,
        phases: LlmPhases::default(),
        phase_source: None,
        phase_neighbours: None,
        dns_connect_ms: None,
        dns_ms: None,
        model: None,
        input_tokens: None,
        output_tokens: None,
        max_tokens: None,
        ttft_ms: None,
        gpu_load: None,
        remaining_budget_ms: None,
        gateway: None,
        models_tried: Vec::new(),
        response_id: None,
        unsplit: None,
    }
}

/// What the LLM gateway behind a call says of it: its name, the models it
/// tried, and the timeouts that fired inside it (its own, per attempt).
fn behind_gateway(trace: &Trace, tree: &TraceTree, g: &attempts::Gateway, c: &mut Call) {
    c.gateway = Some(g.service.clone());
    let models = g.models(trace, tree);
    if models.len() > 1 {
        c.models_tried = models;
    }
    let mut fired: Option<f64> = None;
    let mut stated: Option<f64> = None;
    for &n in &g.ops {
        let Some(s) = tree.nodes[n].span.map(|i| &trace.spans[i]) else {
            continue;
        };
        if s.status == SpanStatus::Timeout {
            let d = s.duration_ms();
            fired = Some(fired.map_or(d, |f: f64| f.min(d)));
            stated = stated.or_else(|| stated_timeout_ms(s));
        }
    }
    if let Some(d) = fired
        && (c.timeout_ms.is_none() || c.timeout_observed)
    {
        // The gateway's own timeout fired first: the one that shaped the
        // call — as its error states it, else as observed.
        c.timeout_ms = Some(stated.unwrap_or(c.timeout_ms.map_or(d, |t| t.min(d))));
        c.timeout_observed = stated.is_none();
        c.timed_out = true;
    }
}

/// The timeout a gateway's timeout error states it was given, in ms:
/// LiteLLM writes `… timeout value=1.0, time taken=1.04 seconds` (seconds)
/// in `error.message`.
fn stated_timeout_ms(s: &SpanRecord) -> Option<f64> {
    let msg = s
        .attributes
        .iter()
        .find(|(k, _)| k == "error.message")
        .map(|(_, v)| v.as_str())
        .or(s.status_message.as_deref())?;
    let rest = &msg[msg.find("timeout value=")? + "timeout value=".len()..];
    let end = rest
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .unwrap_or(rest.len());
    let secs: f64 = rest[..end].parse().ok()?;
    (secs.is_finite() && secs > 0.0).then_some(secs * 1000.0)
}

/// Is `node` under an application (non-service) span that names a judge
/// or carries `gen_ai.evaluation.result`? Stops at the first service span.
fn inside_judge(trace: &Trace, tree: &TraceTree, node: usize) -> bool {
    let mut anc = tree.nodes[node].parent;
    while let Some(a) = anc {
        let Some(si) = tree.nodes[a].span else {
            return false;
        };
        let s = &trace.spans[si];
        if matches!(s.stage, Stage::Service | Stage::Gateway) {
            return false;
        }
        let name = s.name.to_ascii_lowercase();
        let evaluates = s
            .events
            .iter()
            .any(|e| e.name == "gen_ai.evaluation.result");
        if s.stage == Stage::Judge || name.contains("judg") || evaluates {
            return true;
        }
        anc = tree.nodes[a].parent;
    }
    false
}

/// A tool span whose tool no attribute names, only its span name
/// (`deepseek-v4-pro call`): what it calls is told by what answered.
fn named_only_by_its_name(s: &SpanRecord) -> bool {
    s.stage == Stage::Tool
        && s.tool.as_deref().is_some_and(|t| {
            overtime_parse::spans::names::tool_in_name(&s.name) == Some(t)
                && !s
                    .attributes
                    .iter()
                    .any(|(k, _)| k == "gen_ai.operation.name")
        })
}

/// One call: its operation spans `ops` (several when it was retried as
/// repeated operations) and, for one operation, the attempts under it
/// (`tries`, empty when it was tried once).
fn span_call(trace: &Trace, tree: &TraceTree, ops: &[usize], tries: &[usize]) -> Call {
    let spans = &trace.spans;
    let first = &spans[tree.nodes[ops[0]].span.expect("call nodes are spans")];
    let parent_service = tree.nodes[ops[0]]
        .parent
        .and_then(|p| tree.nodes[p].span)
        .map(|p| spans[p].service.clone())
        .unwrap_or_else(|| first.service.clone());
    let mut c = pseudo(CallKind::Span, first.stage, &parent_service, 0, vec![]);
    c.attempt_critical_us.clear();
    c.attempt_duration_us.clear();
    let root_end = tree.nodes[tree.root].end_us;
    for &n in ops {
        let si = tree.nodes[n].span.expect("call nodes are spans");
        let s = &spans[si];
        c.spans.push(si);
        c.critical_us += tree.subtree_critical_us(n);
        c.timeout_ms = c.timeout_ms.or(s.timeout_ms);
        c.remaining_budget_ms = c.remaining_budget_ms.or(s.remaining_budget_ms);
        c.timed_out |= s.status == SpanStatus::Timeout;
        c.cut |= tree.nodes[n].raw_end_us > root_end;
        measure::gather(trace, tree, n, &mut c);
    }
    // Each attempt: an operation span of a retried call, or a transport
    // (or operation) span under the one operation.
    let per_attempt: &[usize] = if tries.len() >= 2 { tries } else { ops };
    for &n in per_attempt {
        let si = tree.nodes[n].span.expect("attempts are spans");
        c.attempt_critical_us.push(tree.subtree_critical_us(n));
        c.attempt_duration_us
            .push(tree.nodes[n].end_us - tree.nodes[n].start_us);
        c.attempt_raw_ms.push(spans[si].duration_ms());
    }
    if tries.len() >= 2 {
        // The phases each attempt's reply reported add up.
        let mut phases = LlmPhases::default();
        let mut source = None;
        for &k in tries {
            if let Some((p, s)) = measure::attempt_phases(trace, tree, k) {
                measure::merge_phases(&mut phases, &p);
                source = source.or(Some(s));
            }
        }
        if !phases.is_empty() {
            c.phases = phases;
            c.phase_source = source;
        }
    }
    let judged: Vec<usize> = ops.iter().chain(tries).copied().collect();
    measure::observe_timeout(trace, tree, &judged, &mut c);
    // A bare transport, or a span only its name calls a tool (`X call`),
    // that reached a model server (its phases, or a model name below it)
    // is an LLM call.
    let reached_model = !c.phases.is_empty() || c.model.is_some();
    if reached_model && (c.stage == Stage::Network || named_only_by_its_name(first)) {
        c.stage = Stage::Llm;
    }
    // An LLM call made inside an application span that is a judge
    // (`judge_answer`, or one carrying the evaluation result) is the judge.
    if c.stage == Stage::Llm && inside_judge(trace, tree, ops[0]) {
        c.stage = Stage::Judge;
    }
    c.component = call_component(trace, tree, ops, c.stage);
    measure::split_inference(&mut c);
    c
}
