//! Which spans are the attempts of a call, and when several operation
//! spans are one call retried.
//!
//! Design rules:
//! - **Two ways to write a retry, one call.** An SDK retries either under
//!   one operation span (several transport attempts, or several operation
//!   spans of the same target, under it) or by writing one operation span
//!   per attempt, side by side under the caller. Both are one call with N
//!   attempts.
//! - **Retries are one after the other.** Attempts never overlap (a few
//!   ms of slack); operations running side by side are separate calls.
//! - **A gateway's retries are the call's.** When the call's one attempt
//!   reached an LLM gateway — a server that names the call's kind of
//!   operation again (LiteLLM's `litellm_request`) — the attempts the
//!   gateway made on its behalf, one after the other, are the call's
//!   attempts, and the models its operations name are the models tried
//!   (more than one: a fallback).
//! - **Side by side needs a sign.** Two operation spans of one target one
//!   after the other under the same parent are one retried call only when
//!   an attempt number says so (`attempt` > 0) or every earlier one failed
//!   — an agent calling the same model twice in a row is two calls.

use crate::assemble::Trace;
use crate::shape::{Role, role};
use crate::tree::TraceTree;
use overtime_model::{SpanStatus, Stage};

/// Slack for "one after the other", µs.
const SEQUENTIAL_SLACK_US: i64 = 1_000;

/// Stages that are one kind of call when nested or retried (an LLM call
/// inside a judge is the judge's).
pub(crate) fn family(s: Stage) -> Stage {
    match s {
        Stage::Judge => Stage::Llm,
        s => s,
    }
}

/// A node's own start (skew-shifted, not clamped to the request: an
/// attempt that began after the gateway's cut still began after the one
/// before it).
fn raw_start(trace: &Trace, tree: &TraceTree, n: usize) -> i64 {
    tree.nodes[n].span.map_or(tree.nodes[n].start_us, |i| {
        trace.spans[i].start_us + tree.shift_us[i]
    })
}

/// The nodes, in start order, one after the other?
pub(super) fn sequential(trace: &Trace, tree: &TraceTree, nodes: &[usize]) -> bool {
    nodes
        .windows(2)
        .all(|w| raw_start(trace, tree, w[1]) >= tree.nodes[w[0]].raw_end_us - SEQUENTIAL_SLACK_US)
}

/// Operation spans of one target (in start order) are one call retried
/// when an attempt number says so, or when they ran one after the other
/// and every earlier one failed.
pub(super) fn retried(trace: &Trace, tree: &TraceTree, nodes: &[usize]) -> bool {
    let span_of = |n: usize| &trace.spans[tree.nodes[n].span.expect("operation nodes are spans")];
    let marked = nodes.iter().any(|&n| span_of(n).attempt.unwrap_or(0) > 0);
    let failed_before = nodes[..nodes.len().saturating_sub(1)]
        .iter()
        .all(|&n| matches!(span_of(n).status, SpanStatus::Error | SpanStatus::Timeout));
    nodes.len() > 1 && (marked || (failed_before && sequential(trace, tree, nodes)))
}

fn sorted_children(tree: &TraceTree, node: usize, keep: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut kids: Vec<usize> = tree.nodes[node]
        .children
        .iter()
        .copied()
        .filter(|&k| keep(k))
        .collect();
    kids.sort_by_key(|&k| tree.nodes[k].start_us);
    kids
}

/// An LLM gateway behind a call's one attempt (see the module's rules).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Gateway {
    /// The gateway's service (its server span's, else its operations').
    pub service: String,
    /// Its operation nodes of the call's family (one per model tried), in
    /// start order.
    pub ops: Vec<usize>,
    /// Its attempts on the wire — transports under no other transport —
    /// in start order.
    pub attempts: Vec<usize>,
}

impl Gateway {
    /// The models its operations name, each once, in the order tried.
    pub fn models(&self, trace: &Trace, tree: &TraceTree) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for &n in &self.ops {
            let model = tree.nodes[n]
                .span
                .and_then(|i| trace.spans[i].model.clone());
            if let Some(m) = model.filter(|m| !out.contains(m)) {
                out.push(m);
            }
        }
        out
    }
}

/// The LLM gateway behind `transport`, an attempt of a call of family
/// `fam`: a server of another service under it that names an operation
/// of that family again; `None` when there is none.
pub(crate) fn gateway_behind(
    trace: &Trace,
    tree: &TraceTree,
    transport: usize,
    fam: Stage,
) -> Option<Gateway> {
    let span = |n: usize| tree.nodes[n].span.map(|i| &trace.spans[i]);
    let caller = span(transport)?.service.clone();
    let mut g = Gateway::default();
    let mut stack: Vec<usize> = tree.nodes[transport].children.clone();
    while let Some(n) = stack.pop() {
        let Some(s) = span(n) else { continue };
        match role(s) {
            Role::Transport => {
                g.attempts.push(n);
                continue;
            }
            Role::Operation if family(s.stage) == fam => g.ops.push(n),
            _ => {}
        }
        if s.kind.as_deref() == Some("server") && s.service != caller && g.service.is_empty() {
            g.service = s.service.clone();
        }
        stack.extend(&tree.nodes[n].children);
    }
    if g.ops.is_empty() {
        return None;
    }
    g.ops.sort_by_key(|&n| raw_start(trace, tree, n));
    g.attempts.sort_by_key(|&n| raw_start(trace, tree, n));
    if g.service.is_empty() {
        g.service = span(g.ops[0])
            .map(|s| s.service.clone())
            .unwrap_or_default();
    }
    Some(g)
}

/// The attempts of the call whose one operation span is node `op`, in
/// start order; empty when it was tried once. With them, the LLM gateway
/// its one attempt reached, if any. Either operation spans of
/// its own target under it that retried (`component` names targets), or
/// — through a chain of single operation spans of its family, as an SDK
/// writes `generateText` → `doGenerate` — two or more transport spans
/// one after the other.
pub(super) fn attempts_under(
    trace: &Trace,
    tree: &TraceTree,
    op: usize,
    component: &dyn Fn(usize) -> String,
) -> (Vec<usize>, Option<Gateway>) {
    let span = |n: usize| tree.nodes[n].span.map(|i| &trace.spans[i]);
    let Some(own) = span(op) else {
        return (Vec::new(), None);
    };
    let fam = family(own.stage);
    let same_family_op =
        |k: usize| span(k).is_some_and(|s| role(s) == Role::Operation && family(s.stage) == fam);
    let mut at = op;
    loop {
        let ops = sorted_children(tree, at, same_family_op);
        if ops.len() >= 2 {
            let target = component(ops[0]);
            if ops.iter().all(|&k| component(k) == target) && retried(trace, tree, &ops) {
                return (ops, None);
            }
        }
        let transports = sorted_children(tree, at, |k| {
            span(k).is_some_and(|s| role(s) == Role::Transport)
        });
        if transports.len() >= 2 && sequential(trace, tree, &transports) {
            return (transports, None);
        }
        match (ops.as_slice(), transports.as_slice()) {
            ([only], []) => at = *only,
            ([], [one]) => {
                let g = gateway_behind(trace, tree, *one, fam);
                let tries = g
                    .as_ref()
                    .map(|g| g.attempts.clone())
                    .filter(|a| a.len() >= 2 && sequential(trace, tree, a))
                    .unwrap_or_default();
                return (tries, g);
            }
            _ => return (Vec::new(), None),
        }
    }
}
