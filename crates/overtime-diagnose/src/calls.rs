//! Calls: the units a root cause can name. A call is a topmost span of a
//! calling stage (LLM, judge, tool, memory, network, queue) with everything
//! under it; retries of one call (same parent, same stage and target, an
//! `attempt` > 0 among them) are one call. Two pseudo-calls complete the
//! picture: the wait of a service span before its first child began
//! (a worker or connection pool), and the gateway's own wait before the
//! first span began (or the whole request when there are no spans).

use crate::assemble::Trace;
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

/// Which nodes are calls. A plain network hop (an HTTP client span) that
/// leads to further calls is a transport between services, not a call of
/// its own: the calls under it are what an SRE would blame.
fn call_nodes(trace: &Trace, tree: &TraceTree) -> Vec<bool> {
    let n = tree.nodes.len();
    let stage = |i: usize| tree.nodes[i].span.map(|s| trace.spans[s].stage);
    // Nodes are created parents first, so a backwards walk sees children first.
    let mut has_call_below = vec![false; n];
    for i in (0..n).rev() {
        has_call_below[i] = tree.nodes[i]
            .children
            .iter()
            .any(|&c| has_call_below[c] || stage(c).is_some_and(is_call_stage));
    }
    (0..n)
        .map(|i| match stage(i) {
            Some(Stage::Network) => !has_call_below[i],
            Some(s) => is_call_stage(s),
            None => false,
        })
        .collect()
}

/// The name an SRE knows a span's target by.
pub(crate) fn component_of(s: &SpanRecord) -> String {
    component_name(s).to_string()
}

/// [`component_of`], borrowed from the span (for grouping, which needs no
/// copy of each call's name).
fn component_name(s: &SpanRecord) -> &str {
    let pick = match s.stage {
        Stage::Llm | Stage::Judge => s.model.as_deref().or(s.tool.as_deref()),
        Stage::Tool | Stage::Memory => s.tool.as_deref().or(s.peer.as_deref()),
        Stage::Network => s.peer.as_deref().or(s.tool.as_deref()),
        Stage::Queue | Stage::Service | Stage::Gateway => Some(s.service.as_str()),
        Stage::Other => s.tool.as_deref().or(s.model.as_deref()),
    };
    pick.filter(|p| !p.is_empty()).unwrap_or(s.name.as_str())
}

/// DNS and connect time of one span (fields first, else its events), ms.
fn span_dns_connect(s: &SpanRecord) -> (Option<f64>, Option<f64>) {
    let mut dns = s.dns_ms;
    let mut connect = s.connect_ms;
    let mut last_phase_end = s.start_us;
    let mut evs: Vec<_> = s.events.iter().collect();
    evs.sort_by_key(|e| e.time_us);
    for e in evs {
        let name = e.name.to_ascii_lowercase();
        let slot = if name == "dns" || name.starts_with("dns.") || name.contains("dns_") {
            &mut dns
        } else if name == "connect" || name.starts_with("connect") || name.contains("tls") {
            &mut connect
        } else {
            continue;
        };
        let d = e
            .duration_ms
            .unwrap_or(((e.time_us - last_phase_end) as f64 / 1000.0).max(0.0));
        last_phase_end = e.time_us.max(last_phase_end);
        if slot.is_none() {
            *slot = Some(d);
        } else if e.duration_ms.is_some() && s.dns_ms.is_none() && s.connect_ms.is_none() {
            *slot = Some(slot.unwrap_or(0.0) + d);
        }
    }
    (dns, connect)
}

fn add(a: &mut Option<f64>, b: Option<f64>) {
    if let Some(b) = b {
        *a = Some(a.unwrap_or(0.0) + b);
    }
}

fn merge_phases(into: &mut LlmPhases, p: &LlmPhases) {
    add(&mut into.queue_ms, p.queue_ms);
    add(&mut into.prefill_ms, p.prefill_ms);
    add(&mut into.decode_ms, p.decode_ms);
    add(&mut into.io_ms, p.io_ms);
    for (n, v) in &p.other {
        match into.other.iter_mut().find(|(k, _)| k == n) {
            Some((_, x)) => *x += v,
            None => into.other.push((n.clone(), *v)),
        }
    }
    into.malformed |= p.malformed;
}

/// A span's own phases: parsed already, else its raw `X-LLM-Reason`.
pub(crate) fn span_phases(s: &SpanRecord) -> LlmPhases {
    if !s.phases.is_empty() {
        return s.phases.clone();
    }
    s.llm_reason
        .as_deref()
        .map(parse_llm_reason)
        .unwrap_or_default()
}

/// Phase spans (a model server may emit `queue`/`prefill`/`decode` spans).
fn phase_of_name(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase();
    let n = n.rsplit(['.', ' ', '/']).next().unwrap_or(&n).to_string();
    match n.as_str() {
        "queue" | "queue_wait" | "queueing" => Some("queue"),
        "prefill" | "kv_cache_build" => Some("prefill"),
        "decode" | "decode_loop" => Some("decode"),
        _ => None,
    }
}

/// Groups the trace's calls, with their critical-path time.
pub fn collect(trace: &Trace, tree: &TraceTree) -> Vec<Call> {
    let spans = &trace.spans;
    let mut calls: Vec<Call> = Vec::new();
    // Topmost call spans, grouped by (parent node, stage, component).
    let mut groups: BTreeMap<(usize, &'static str, &str), Vec<usize>> = BTreeMap::new();
    let is_call = call_nodes(trace, tree);
    // Nodes are created parents first: one forward pass marks call subtrees.
    let mut under_call = vec![false; tree.nodes.len()];
    for n in 0..tree.nodes.len() {
        if let Some(p) = tree.nodes[n].parent {
            under_call[n] = under_call[p] || is_call[p];
        }
    }
    for (n, node) in tree.nodes.iter().enumerate() {
        let Some(si) = node.span else { continue };
        if !is_call[n] {
            continue;
        }
        let topmost = !under_call[n];
        if topmost {
            let key = (
                node.parent.unwrap_or(usize::MAX),
                spans[si].stage.as_str(),
                component_name(&spans[si]),
            );
            groups.entry(key).or_default().push(n);
        }
    }
    for (_, mut nodes) in groups {
        nodes.sort_by_key(|&n| tree.nodes[n].start_us);
        let span_of = |n: usize| &spans[tree.nodes[n].span.expect("call nodes are spans")];
        let marked = nodes.iter().any(|&n| span_of(n).attempt.unwrap_or(0) > 0);
        // Without `attempt`: one after the other, every one but the last failed.
        let sequential_failures = nodes.windows(2).all(|w| {
            let failed = matches!(
                span_of(w[0]).status,
                SpanStatus::Error | SpanStatus::Timeout
            );
            failed && tree.nodes[w[1]].start_us >= tree.nodes[w[0]].raw_end_us - 1_000
        });
        let retried = nodes.len() > 1 && (marked || sequential_failures);
        let sets: Vec<Vec<usize>> = if retried {
            vec![nodes]
        } else {
            nodes.into_iter().map(|n| vec![n]).collect()
        };
        for set in sets {
            calls.push(span_call(trace, tree, &set));
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
        dns_connect_ms: None,
        dns_ms: None,
        model: None,
        input_tokens: None,
        output_tokens: None,
        max_tokens: None,
        ttft_ms: None,
        gpu_load: None,
        remaining_budget_ms: None,
    }
}

fn descendants(tree: &TraceTree, node: usize) -> Vec<usize> {
    let mut out = vec![node];
    let mut i = 0;
    while i < out.len() {
        out.extend(tree.nodes[out[i]].children.iter().copied());
        i += 1;
    }
    out
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

/// The HTTP client spans directly under a call's span, in start order.
fn http_children(trace: &Trace, tree: &TraceTree, node: usize) -> Vec<usize> {
    let mut kids: Vec<usize> = tree.nodes[node]
        .children
        .iter()
        .copied()
        .filter(|&k| {
            tree.nodes[k]
                .span
                .is_some_and(|i| trace.spans[i].stage == Stage::Network)
        })
        .collect();
    kids.sort_by_key(|&k| tree.nodes[k].start_us);
    kids
}

/// Several HTTP client spans one after the other under one call (an LLM
/// client's or an SDK's own retries) are that call's attempts: their
/// durations and critical time are the attempts', and the phases each
/// attempt's reply reported add up.
fn client_retries(trace: &Trace, tree: &TraceTree, node: usize, c: &mut Call) {
    let kids = http_children(trace, tree, node);
    let sequential = kids
        .windows(2)
        .all(|w| tree.nodes[w[1]].start_us >= tree.nodes[w[0]].raw_end_us - 1_000);
    if kids.len() < 2 || !sequential {
        return;
    }
    c.attempt_critical_us = kids.iter().map(|&k| tree.subtree_critical_us(k)).collect();
    c.attempt_duration_us = kids
        .iter()
        .map(|&k| tree.nodes[k].end_us - tree.nodes[k].start_us)
        .collect();
    c.attempt_raw_ms = kids
        .iter()
        .map(|&k| trace.spans[tree.nodes[k].span.expect("filtered")].duration_ms())
        .collect();
    let mut phases = LlmPhases::default();
    for &k in &kids {
        let found = descendants(tree, k)
            .into_iter()
            .filter_map(|d| tree.nodes[d].span)
            .map(|i| span_phases(&trace.spans[i]))
            .find(|p| !p.is_empty());
        if let Some(p) = found {
            merge_phases(&mut phases, &p);
        }
    }
    if !phases.is_empty() {
        c.phases = phases;
    }
}

/// Instrumentation records no configured timeouts, only the errors they
/// raise: a call (or one of its attempts, or the HTTP request under it)
/// that ended in a timeout error had a timeout, and it fired at about that
/// span's duration. A configured timeout (`timeout_ms`) is kept as it is.
fn observe_timeout(trace: &Trace, tree: &TraceTree, nodes: &[usize], c: &mut Call) {
    let mut fired: Vec<(f64, Option<String>)> = Vec::new();
    for &n in nodes {
        let own = tree.nodes[n].span.map(|i| &trace.spans[i]);
        let kids = http_children(trace, tree, n);
        let spans = own.into_iter().chain(
            kids.iter()
                .filter_map(|&k| tree.nodes[k].span)
                .map(|i| &trace.spans[i]),
        );
        for s in spans {
            if s.status == SpanStatus::Timeout {
                fired.push((s.duration_ms(), s.error_type.clone()));
            } else if c.error_type.is_none() && s.status == SpanStatus::Error {
                c.error_type = s.error_type.clone();
            }
        }
    }
    if fired.is_empty() {
        return;
    }
    c.timed_out = true;
    c.error_type = fired
        .iter()
        .find_map(|(_, e)| e.clone())
        .or(c.error_type.take());
    if c.timeout_ms.is_none() {
        // The shortest: an attempt's timeout, not the whole retry loop's.
        c.timeout_ms = fired.iter().map(|(d, _)| *d).reduce(f64::min);
        c.timeout_observed = true;
    }
}

fn span_call(trace: &Trace, tree: &TraceTree, nodes: &[usize]) -> Call {
    let spans = &trace.spans;
    let first = &spans[tree.nodes[nodes[0]].span.unwrap()];
    let parent_service = tree.nodes[nodes[0]]
        .parent
        .and_then(|p| tree.nodes[p].span)
        .map(|p| spans[p].service.clone())
        .unwrap_or_else(|| first.service.clone());
    let mut c = pseudo(CallKind::Span, first.stage, &parent_service, 0, vec![]);
    c.component = component_of(first);
    c.attempt_critical_us.clear();
    c.attempt_duration_us.clear();
    let root_end = tree.nodes[tree.root].end_us;
    for &n in nodes {
        let si = tree.nodes[n].span.unwrap();
        let s = &spans[si];
        c.spans.push(si);
        let crit = tree.subtree_critical_us(n);
        c.critical_us += crit;
        c.attempt_critical_us.push(crit);
        c.attempt_duration_us
            .push(tree.nodes[n].end_us - tree.nodes[n].start_us);
        c.attempt_raw_ms.push(s.duration_ms());
        c.timeout_ms = c.timeout_ms.or(s.timeout_ms);
        c.remaining_budget_ms = c.remaining_budget_ms.or(s.remaining_budget_ms);
        c.timed_out |= s.status == SpanStatus::Timeout;
        c.cut |= tree.nodes[n].raw_end_us > root_end;
        let mut phases = LlmPhases::default();
        let mut dns = None;
        let mut connect = None;
        let mut phase_spans = LlmPhases::default();
        let mut nested_timeout: Option<f64> = None;
        for d in descendants(tree, n) {
            let Some(di) = tree.nodes[d].span else {
                continue;
            };
            let ds = &spans[di];
            if phases.is_empty() {
                phases = span_phases(ds);
            }
            let (a, b) = span_dns_connect(ds);
            add(&mut dns, a);
            add(&mut connect, b);
            if d != n {
                if let Some(t) = ds.timeout_ms {
                    nested_timeout = Some(nested_timeout.map_or(t, |x: f64| x.min(t)));
                }
                if let Some(p) = phase_of_name(&ds.name) {
                    let ms = Some(ds.duration_ms());
                    match p {
                        "queue" => add(&mut phase_spans.queue_ms, ms),
                        "prefill" => add(&mut phase_spans.prefill_ms, ms),
                        _ => add(&mut phase_spans.decode_ms, ms),
                    }
                }
            }
            c.model = c.model.clone().or(ds.model.clone());
            c.input_tokens = c.input_tokens.or(ds.input_tokens);
            c.output_tokens = c.output_tokens.or(ds.output_tokens);
            c.max_tokens = c.max_tokens.or(ds.max_tokens);
            c.ttft_ms = c.ttft_ms.or(ds.ttft_ms);
            c.gpu_load = c.gpu_load.or(ds.gpu_load);
        }
        if phases.is_empty() {
            phases = phase_spans;
        }
        merge_phases(&mut c.phases, &phases);
        add(&mut c.dns_ms, dns);
        add(&mut c.dns_connect_ms, dns);
        add(&mut c.dns_connect_ms, connect);
        if c.timeout_ms.is_none() {
            c.timeout_ms = nested_timeout;
        }
    }
    if let [only] = nodes {
        client_retries(trace, tree, *only, &mut c);
    }
    observe_timeout(trace, tree, nodes, &mut c);
    // An LLM call made inside an application span that is a judge
    // (`judge_answer`, or one carrying the evaluation result) is the judge.
    if c.stage == Stage::Llm && inside_judge(trace, tree, nodes[0]) {
        c.stage = Stage::Judge;
    }
    // A bare HTTP call that reached a model server (its phases, or a model
    // name below it) is an LLM call.
    if c.stage == Stage::Network && (!c.phases.is_empty() || c.model.is_some()) {
        c.stage = Stage::Llm;
    }
    if c.is_llm()
        && let Some(m) = &c.model
    {
        c.component = m.clone();
    }
    c
}
