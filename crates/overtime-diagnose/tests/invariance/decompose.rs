//! Taking an original trace apart into structure and calls, by the call
//! model of docs/diagnosis.md ("Calls"), on the tree `normal` brought to
//! one nesting.
//!
//! Design rules:
//! - **What is a call.** An operation span (LLM, judge, tool, memory),
//!   except an LLM span with tool or memory operations under it (an agent
//!   loop: its steps and tools are the calls); a transport with no call
//!   under it (one that leads to further calls is a hop between services:
//!   structure). Topmost wins: a call inside a call is the outer one seen
//!   again. Queue waits are calls no convention writes: kept as structure.
//! - **Retries.** Topmost calls of one parent, kind and name are one call
//!   retried when an attempt number says so (`attempt` > 0) or every
//!   earlier one failed and each began after the one before ended — or,
//!   orphans of one lost parent, when they ran one after the other.
//!   Under one operation (through a chain of single operations of its own
//!   kind, as the AI SDK writes `generateText` → `doGenerate`), retries
//!   are two or more operations of its target that retried, or two or more
//!   transports; a single transport there is the one attempt; with none,
//!   the operation is its own attempt.
//! - **Facts** (model, tokens, phases, DNS and connect — a connection
//!   phase span counts as its attempt's —, timeouts, errors) are gathered
//!   from every span of the call, first found wins, so that a rewrite can
//!   put each where its convention puts it.

use super::model::{Address, Attempt, Call, Class, Logical};
use super::normal::{self, Role, Tree};
use overtime_model::{SpanEvent, SpanRecord, SpanStatus, Stage};
use overtime_parse::spans::names::{model_in_name, store_in_name, tool_in_name};
use std::collections::{BTreeMap, HashSet};

/// Attribute keys a memory store's, data source's or service's name may
/// come under, in the order they win.
const STORE_KEYS: &[&str] = &[
    "gen_ai.memory.store.name",
    "gen_ai.memory.store.names",
    "gen_ai.data_source.id",
    "db.namespace",
    "db.name",
    "rpc.service",
    "peer.service",
    "gen_ai.memory.store.id",
];

/// Slack for "one after the other", µs.
const SEQUENTIAL_US: i64 = 1_000;

/// How the original wrote a call (`Call::original_shape`).
mod shape {
    /// The operation alone: it is its own attempt.
    pub const OP: &str = "op";
    /// Attempts under the operation, as its instrumentation put them.
    pub const CHILDREN: &str = "op+children";
    /// Some attempt sat beside the operation.
    pub const BESIDE: &str = "beside";
    /// Retries under one operation, as operations of its own kind.
    pub const INNER_RETRIES: &str = "op+retried-ops";
    /// One operation span per try, side by side.
    pub const REPEATED: &str = "repeated";
    /// Transports whose operation never arrived.
    pub const ORPHANS: &str = "orphans";
    /// A transport no operation covers.
    pub const TRANSPORT: &str = "transport";
}

fn family(s: Stage) -> Stage {
    if s == Stage::Judge { Stage::Llm } else { s }
}

fn nonempty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
}

fn attribute(s: &SpanRecord, key: &str) -> Option<String> {
    let v = s.attributes.iter().find(|(k, _)| k == key)?.1.trim();
    let v = v
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .map_or(v, |inner| inner.split(',').next().unwrap_or(""));
    let v = v.trim().trim_matches('"').trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// `POST`, `GET /x`, `HTTP GET`, `SELECT …`: what every client span is called.
fn transport_name(name: &str) -> bool {
    let method = |w: &str| {
        matches!(
            w.to_ascii_uppercase().as_str(),
            "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS" | "CONNECT" | "HTTP"
        )
    };
    let mut words = name.split_whitespace();
    let first = words.next().unwrap_or("");
    method(first)
        || words.next().is_some_and(method)
        || matches!(
            first.to_ascii_uppercase().as_str(),
            "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "CALL" | "EXECUTE"
        )
        || name.starts_with('/')
        || name.contains("://")
}

/// What a call of operation spans `ops` is called (docs/diagnosis.md,
/// "Names"): its target, else an address, else the span's name.
fn name_of(spans: &[SpanRecord], t: &Tree, ops: &[usize]) -> String {
    target_of(spans, t, ops)
        .or_else(|| {
            ops.iter()
                .flat_map(|&o| t.subtree(o))
                .find_map(|i| nonempty(&spans[i].peer))
        })
        .unwrap_or_else(|| spans[ops[0]].name.clone())
}

/// What names a call of operation spans `ops` (docs/diagnosis.md,
/// "Names"), read from the operations, everything under them, then the
/// first one's parent (not a service's span): the model for LLM calls
/// (the model column, a GenAI span name `chat <model>`, the target an
/// operation's name names); for the rest the tool, the store or data
/// source, else the operation's own name when it is not a transport's.
fn target_of(spans: &[SpanRecord], t: &Tree, ops: &[usize]) -> Option<String> {
    let mut order: Vec<usize> = ops.to_vec();
    let mut k = 0;
    while k < order.len() {
        order.extend(t.children[order[k]].iter().copied());
        k += 1;
    }
    if let Some(p) = t.parent[ops[0]]
        && !matches!(spans[p].stage, Stage::Service | Stage::Gateway)
    {
        order.push(p);
    }
    let all = || order.iter().map(|&i| &spans[i]);
    let opss = || ops.iter().map(|&i| &spans[i]);
    match spans[ops[0]].stage {
        Stage::Llm | Stage::Judge => all()
            .find_map(|s| nonempty(&s.model))
            .or_else(|| all().find_map(|s| model_in_name(&s.name).map(str::to_string)))
            .or_else(|| opss().find_map(|s| tool_in_name(&s.name).map(str::to_string))),
        _ => all()
            .find_map(|s| nonempty(&s.tool))
            .or_else(|| {
                all().find_map(|s| {
                    STORE_KEYS
                        .iter()
                        .find_map(|k| attribute(s, k))
                        .or_else(|| store_in_name(&s.name).map(str::to_string))
                        .or_else(|| tool_in_name(&s.name).map(str::to_string))
                })
            })
            .or_else(|| {
                opss()
                    .find(|s| normal::role(s) == Role::Operation && !transport_name(&s.name))
                    .map(|s| s.name.clone())
            }),
    }
}

fn sequential(spans: &[SpanRecord], set: &[usize]) -> bool {
    set.windows(2)
        .all(|w| spans[w[1]].start_us >= spans[w[0]].end_us - SEQUENTIAL_US)
}

/// Operation spans of one target (in start order) are one call retried.
fn retried(spans: &[SpanRecord], set: &[usize]) -> bool {
    let marked = set.iter().any(|&i| spans[i].attempt.unwrap_or(0) > 0);
    let failed_before = set[..set.len().saturating_sub(1)]
        .iter()
        .all(|&i| matches!(spans[i].status, SpanStatus::Error | SpanStatus::Timeout));
    set.len() > 1 && (marked || (failed_before && sequential(spans, set)))
}

/// Which spans are calls (see the module's rules).
fn calls_in(spans: &[SpanRecord], t: &Tree) -> Vec<bool> {
    let n = spans.len();
    // Parents before children; spans in a parent cycle are walked too.
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    let roots = (0..n).filter(|&i| t.parent[i].is_none());
    for r in roots.chain(0..n) {
        if seen[r] {
            continue;
        }
        seen[r] = true;
        let mut k = order.len();
        order.push(r);
        while k < order.len() {
            for &c in &t.children[order[k]] {
                if !std::mem::replace(&mut seen[c], true) {
                    order.push(c);
                }
            }
            k += 1;
        }
    }
    let mut other_op_below = vec![false; n];
    let mut call_below = vec![false; n];
    let mut is_call = vec![false; n];
    for &i in order.iter().rev() {
        for &c in &t.children[i] {
            other_op_below[i] |= other_op_below[c]
                || (t.roles[c] == Role::Operation && family(spans[c].stage) != Stage::Llm);
            call_below[i] |= is_call[c] || call_below[c];
        }
        is_call[i] = match t.roles[i] {
            Role::Operation => !(family(spans[i].stage) == Stage::Llm && other_op_below[i]),
            Role::Transport => !call_below[i],
            _ => false,
        };
    }
    is_call
}

/// Splits one trace's parsed spans (duplicates already removed) into
/// structure and calls.
pub fn logical(spans: &[SpanRecord]) -> Logical {
    let t = normal::build(spans);
    let is_call = calls_in(spans, &t);
    let topmost = |i: usize| {
        let mut p = t.parent[i];
        let mut hops = 0;
        while let Some(j) = p {
            if is_call[j] || hops > spans.len() {
                return false;
            }
            p = t.parent[j];
            hops += 1;
        }
        true
    };
    type Key = (usize, &'static str, String, Option<String>);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for i in (0..spans.len()).filter(|&i| is_call[i] && topmost(i)) {
        let key = (
            t.parent[i].unwrap_or(usize::MAX),
            family(spans[i].stage).as_str(),
            name_of(spans, &t, &[i]),
            t.lost[i].clone(),
        );
        groups.entry(key).or_default().push(i);
    }
    let mut in_call = HashSet::new();
    let mut calls = Vec::new();
    for ((_, _, _, lost), mut set) in groups {
        set.sort_by_key(|&i| (spans[i].start_us, i));
        let queue = spans[set[0]].stage == Stage::Queue;
        let one =
            (lost.is_some() && set.len() > 1 && sequential(spans, &set)) || retried(spans, &set);
        let sets: Vec<Vec<usize>> = if one {
            vec![set]
        } else {
            set.into_iter().map(|i| vec![i]).collect()
        };
        for ops in sets {
            if queue {
                // No convention writes a pool wait: it stays as it was.
                continue;
            }
            let c = call(spans, &t, &ops, lost.as_deref());
            in_call.extend(ops.iter().flat_map(|&o| t.subtree(o)));
            calls.push(c);
        }
    }
    calls.sort_by_key(|c| (c.start_us, c.op_ids[0].clone()));
    let structure = (0..spans.len())
        .filter(|i| !in_call.contains(i))
        .map(|i| spans[i].clone())
        .collect();
    Logical { structure, calls }
}

/// The attempts under the one operation `op` (see the module's rules),
/// and whether they are operations tried again.
fn attempts_under(spans: &[SpanRecord], t: &Tree, op: usize) -> (Vec<usize>, bool) {
    let fam = family(spans[op].stage);
    let mut at = op;
    for _ in 0..spans.len() {
        let ops: Vec<usize> = t.children[at]
            .iter()
            .copied()
            .filter(|&k| t.roles[k] == Role::Operation && family(spans[k].stage) == fam)
            .collect();
        if ops.len() >= 2 {
            let target = name_of(spans, t, &ops[..1]);
            if ops.iter().all(|&k| name_of(spans, t, &[k]) == target) && retried(spans, &ops) {
                return (ops, true);
            }
        }
        let transports: Vec<usize> = t.children[at]
            .iter()
            .copied()
            .filter(|&k| t.roles[k] == Role::Transport)
            .collect();
        match ops.as_slice() {
            [only] if transports.is_empty() => at = *only,
            _ => return (transports, false),
        }
    }
    (Vec::new(), false)
}

fn method_of(name: &str) -> Option<&'static str> {
    let first = name.split_whitespace().next().unwrap_or("");
    ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
        .into_iter()
        .find(|m| first.eq_ignore_ascii_case(m))
}

fn is_net_event(e: &SpanEvent) -> bool {
    let n = e.name.to_ascii_lowercase();
    n == "dns" || n.starts_with("dns.") || n.starts_with("connect") || n.contains("tls")
}

/// DNS and connect time a connection phase span stands for.
fn phase_time(s: &SpanRecord) -> (Option<f64>, Option<f64>) {
    let d = Some(s.duration_ms());
    if s.name.to_ascii_lowercase().starts_with("dns") {
        (d, None)
    } else {
        (None, d)
    }
}

fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, y) => x.or(y),
    }
}

/// One call: its operation spans `ops` (several: retried as repeated
/// operations; a transport: a call of its own), `lost` the parent they
/// lost when they are orphans.
fn call(spans: &[SpanRecord], t: &Tree, ops: &[usize], lost: Option<&str>) -> Call {
    let op = &spans[ops[0]];
    let last = &spans[*ops.last().unwrap()];
    let has_op = t.roles[ops[0]] == Role::Operation;
    let members: Vec<usize> = ops.iter().flat_map(|&o| t.subtree(o)).collect();
    let ms: Vec<&SpanRecord> = members.iter().map(|&m| &spans[m]).collect();
    let (tries, inner) = if ops.len() == 1 && has_op {
        attempts_under(spans, t, ops[0])
    } else {
        (Vec::new(), false)
    };
    // One transport under the operation is its attempt; several are its
    // attempts when they ran one after the other (else it was tried once,
    // each of them its part).
    let own = !tries.is_empty();
    let per: Vec<usize> = if own { tries.clone() } else { ops.to_vec() };
    // Transports whose operation never arrived are attempts of their own.
    let own_span = own || (lost.is_some() && !has_op);
    let moved = |i: usize| {
        t.parent[i].map(|p| spans[p].span_id.as_str()) != spans[i].parent_span_id.as_deref()
    };
    let beside = own && per.iter().any(|&a| moved(a));
    let class = Class::of(op.stage).expect("calls have a calling stage");
    let named = target_of(spans, t, ops);
    let label = named.clone().unwrap_or_else(|| op.name.clone());
    let op_peer = ms.iter().find_map(|s| s.peer.clone());
    let mut covered = HashSet::new();
    let mut attempts = Vec::new();
    for &i in &per {
        let s = &spans[i];
        let sub = t.subtree(i);
        covered.extend(sub.iter().copied());
        let subs: Vec<&SpanRecord> = sub.iter().map(|&m| &spans[m]).collect();
        let in_sub = |f: &dyn Fn(&SpanRecord) -> Option<String>| subs.iter().find_map(|m| f(m));
        let in_subf = |f: &dyn Fn(&SpanRecord) -> Option<f64>| subs.iter().find_map(|m| f(m));
        let address = in_sub(&|x| x.peer.clone())
            .or_else(|| op_peer.clone())
            .map(|p| Address::parse(&p))
            .unwrap_or_else(|| Address::assigned(class, &label));
        // A phase span under the attempt is its DNS or connect time.
        let (mut dns, mut connect) = (s.dns_ms, s.connect_ms);
        for p in subs.iter().filter(|p| normal::is_phase(p)) {
            let (d, c) = phase_time(p);
            if s.dns_ms.is_none() {
                dns = add(dns, d);
            }
            if s.connect_ms.is_none() {
                connect = add(connect, c);
            }
        }
        attempts.push(Attempt {
            span_id: s.span_id.clone(),
            own_span,
            start_us: s.start_us,
            end_us: s.end_us,
            status: s.status,
            status_message: s.status_message.clone(),
            error_type: s.error_type.clone(),
            http_status: s
                .http_status
                .or_else(|| subs.iter().find_map(|m| m.http_status)),
            address,
            method: method_of(&s.name).unwrap_or("POST"),
            llm_reason: in_sub(&|x| x.llm_reason.clone()),
            llm_duration_ms: in_subf(&|x| x.llm_duration_ms),
            dns_ms: dns,
            connect_ms: connect,
            net_events: s
                .events
                .iter()
                .filter(|e| is_net_event(e))
                .cloned()
                .collect(),
            attempt: s.attempt,
        });
    }
    // What the operations carried for the transport, and phase spans no
    // attempt holds: DNS and connect to the first attempt, the model
    // server's reply to the last (the one that got it).
    if own {
        let mut dns = op.dns_ms;
        let mut connect = op.connect_ms;
        for &m in members.iter().filter(|m| !covered.contains(*m)) {
            if normal::is_phase(&spans[m]) {
                let (d, c) = phase_time(&spans[m]);
                dns = add(dns, d);
                connect = add(connect, c);
            }
        }
        let first = attempts.first_mut().unwrap();
        first
            .net_events
            .extend(op.events.iter().filter(|e| is_net_event(e)).cloned());
        first.dns_ms = add(first.dns_ms, dns);
        first.connect_ms = add(first.connect_ms, connect);
        let a = attempts.last_mut().unwrap();
        let outside = |f: &dyn Fn(&SpanRecord) -> Option<String>| {
            members
                .iter()
                .filter(|m| !covered.contains(*m))
                .find_map(|&m| f(&spans[m]))
        };
        a.llm_reason = a
            .llm_reason
            .take()
            .or_else(|| outside(&|x| x.llm_reason.clone()));
        a.llm_duration_ms = a.llm_duration_ms.or_else(|| {
            members
                .iter()
                .filter(|m| !covered.contains(*m))
                .find_map(|&m| spans[m].llm_duration_ms)
        });
        a.http_status = a.http_status.or(op.http_status);
    }
    let events: Vec<SpanEvent> = if has_op {
        ops.iter()
            .flat_map(|&i| spans[i].events.iter())
            .filter(|e| !is_net_event(e))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut leftovers: Vec<(String, String)> = if has_op {
        ops.iter()
            .flat_map(|&i| spans[i].attributes.iter().cloned())
            .collect()
    } else {
        Vec::new()
    };
    leftovers.dedup();
    let find = |f: &dyn Fn(&SpanRecord) -> Option<f64>| ms.iter().find_map(|s| f(s));
    let findi = |f: &dyn Fn(&SpanRecord) -> Option<i64>| ms.iter().find_map(|s| f(s));
    let finds = |f: &dyn Fn(&SpanRecord) -> Option<String>| ms.iter().find_map(|s| f(s));
    let model = finds(&|s| nonempty(&s.model));
    // A transport that reached a model server which named its model is an
    // LLM call: the rewrites write it as one.
    let (class, target) = match (class, &model) {
        (Class::Network, Some(m)) => (Class::Llm, Some(m.clone())),
        _ => (class, named),
    };
    let lost_op = lost.filter(|_| !has_op).map(str::to_string);
    let original_shape = if lost_op.is_some() {
        shape::ORPHANS
    } else if !has_op && ops.len() == 1 {
        shape::TRANSPORT
    } else if ops.len() > 1 {
        shape::REPEATED
    } else if inner {
        shape::INNER_RETRIES
    } else if beside {
        shape::BESIDE
    } else if own {
        shape::CHILDREN
    } else {
        shape::OP
    };
    let all_tries: &[usize] = &per;
    Call {
        class,
        target,
        op_name: op.name.clone(),
        span_ids: members.iter().map(|&m| spans[m].span_id.clone()).collect(),
        op_ids: match &lost_op {
            Some(l) => vec![l.clone()],
            None => ops.iter().map(|&i| spans[i].span_id.clone()).collect(),
        },
        service: op.service.clone(),
        parent: t.parent[ops[0]].map(|p| spans[p].span_id.clone()),
        start_us: ops.iter().map(|&i| spans[i].start_us).min().unwrap(),
        end_us: ops.iter().map(|&i| spans[i].end_us).max().unwrap(),
        status: last.status,
        status_message: last.status_message.clone(),
        error_type: last.error_type.clone(),
        timeout_ms: find(&|s| s.timeout_ms),
        remaining_budget_ms: op
            .remaining_budget_ms
            .or_else(|| find(&|s| s.remaining_budget_ms)),
        model,
        tool: finds(&|s| nonempty(&s.tool)),
        input_tokens: findi(&|s| s.input_tokens),
        output_tokens: findi(&|s| s.output_tokens),
        max_tokens: findi(&|s| s.max_tokens),
        temperature: find(&|s| s.temperature),
        ttft_ms: find(&|s| s.ttft_ms),
        gpu_load: find(&|s| s.gpu_load),
        fallback: finds(&|s| s.fallback.clone()),
        fallback_accepted: ms.iter().find_map(|s| s.fallback_accepted),
        events,
        leftovers,
        attempts,
        numbered: all_tries
            .iter()
            .chain(ops)
            .any(|&i| spans[i].attempt.is_some()),
        original_shape,
        lost_op,
        sequential: sequential(spans, all_tries),
    }
}
