//! The logical content of a trace, free of how its spans were written:
//! the *structure* (service, route, application spans: everything that is
//! not a call) kept as parsed, and the *calls*, each an operation with its
//! transport attempts and everything its spans said.
//!
//! Design rules:
//! - A call is a topmost span of a calling stage (llm, judge, tool, memory,
//!   or an HTTP client span with no call under it) with its whole subtree;
//!   an HTTP client span that leads to further calls is structure (a hop
//!   between services), as `docs/diagnosis.md` says.
//! - Retries written as repeated operation spans (same parent, stage and
//!   target; an `attempt` > 0 among them, or each but the last failed and
//!   the next began after it ended) are one call with one attempt each.
//! - Otherwise the attempts are the operation's direct children (each
//!   child's subtree folded into it: the model server's span under an HTTP
//!   client span is the same attempt); an operation with no child is its
//!   own single attempt, with the operation's times.
//! - Facts are gathered from every span of the call, first found wins, so
//!   that a rewrite can put each where its convention puts it.

use overtime_model::{SpanEvent, SpanRecord, SpanStatus, Stage};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What kind of call, as the original's spans say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Llm,
    Judge,
    Tool,
    Memory,
    Network,
}

impl Class {
    pub fn of(stage: Stage) -> Option<Class> {
        Some(match stage {
            Stage::Llm => Class::Llm,
            Stage::Judge => Class::Judge,
            Stage::Tool => Class::Tool,
            Stage::Memory => Class::Memory,
            Stage::Network => Class::Network,
            _ => return None,
        })
    }
    pub fn stage(self) -> &'static str {
        match self {
            Class::Llm => "llm",
            Class::Judge => "judge",
            Class::Tool => "tool",
            Class::Memory => "memory",
            Class::Network => "network",
        }
    }
    pub fn is_llm(self) -> bool {
        matches!(self, Class::Llm | Class::Judge)
    }
}

/// Where a call went: a host and, when known, a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub host: String,
    pub port: Option<u16>,
}

impl Address {
    /// The component a call named only by its address gets: `host:port`.
    pub fn component(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }
    fn parse(peer: &str) -> Address {
        match peer.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() && !h.is_empty() => Address {
                host: h.to_string(),
                port: p.parse().ok(),
            },
            _ => Address {
                host: peer.to_string(),
                port: None,
            },
        }
    }
    /// An address for a call whose spans gave none: a private IP drawn from
    /// the call's class and name, so one target has one address everywhere
    /// and nothing in it names the target.
    fn assigned(class: Class, name: &str) -> Address {
        let h = fnv(&format!("{}/{name}", class.stage()));
        Address {
            host: format!(
                "10.{}.{}.{}",
                1 + h % 250,
                1 + (h >> 8) % 250,
                1 + (h >> 16) % 250
            ),
            port: Some(if class.is_llm() { 8000 } else { 8080 }),
        }
    }
}

pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One transport attempt of a call.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The original span this attempt was read from.
    pub span_id: String,
    /// True when that span was a child of the operation (an HTTP client or
    /// a server span), false when the operation was its own attempt.
    pub own_span: bool,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub status_message: Option<String>,
    pub error_type: Option<String>,
    pub http_status: Option<u16>,
    pub address: Address,
    /// The HTTP method, when the original said it (its span name).
    pub method: &'static str,
    pub llm_reason: Option<String>,
    pub llm_duration_ms: Option<f64>,
    pub dns_ms: Option<f64>,
    pub connect_ms: Option<f64>,
    /// DNS / connect / TLS events, as the original had them.
    pub net_events: Vec<SpanEvent>,
    pub attempt: Option<u32>,
}

/// One logical call.
#[derive(Debug, Clone)]
pub struct Call {
    pub class: Class,
    /// The model (LLM, judge), tool or store the original names it by.
    pub target: Option<String>,
    /// The original operation span's name (or the first one's).
    pub op_name: String,
    /// Every original span id of the call (operations and what is under them).
    pub span_ids: Vec<String>,
    /// Ids of the original operation spans (one, or one per repeated try).
    pub op_ids: Vec<String>,
    pub service: String,
    pub parent: Option<String>,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub status_message: Option<String>,
    pub error_type: Option<String>,
    pub timeout_ms: Option<f64>,
    pub remaining_budget_ms: Option<f64>,
    pub model: Option<String>,
    /// The `tool` field or attribute, as the original gave it.
    pub tool: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub gpu_load: Option<f64>,
    pub fallback: Option<String>,
    pub fallback_accepted: Option<bool>,
    /// Events of the operation that are not DNS/connect (chunks, heartbeats…).
    pub events: Vec<SpanEvent>,
    /// Attributes no column took, from the operation spans.
    pub leftovers: Vec<(String, String)>,
    pub attempts: Vec<Attempt>,
    /// The original numbered its attempts (`attempt`): the rewrites carry
    /// the numbers (`agent.attempt`), and invent none.
    pub numbered: bool,
    /// How the original wrote it: `op`, `op+children`, `repeated`.
    pub original_shape: &'static str,
}

impl Call {
    /// Every attempt goes to one address (siblings and repeated operations
    /// can only be told apart from other calls by that).
    pub fn one_endpoint(&self) -> bool {
        self.attempts
            .windows(2)
            .all(|w| w[0].address == w[1].address)
    }
    /// The address a call named by nothing else is blamed on.
    pub fn address(&self) -> &Address {
        &self.attempts[0].address
    }
    /// The names the original diagnosis may have given this call.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.target.iter().cloned().collect();
        v.extend(self.model.clone());
        v.extend(self.attempts.iter().map(|a| a.address.component()));
        v.push(self.op_name.clone());
        v
    }
    /// The name this call's store or tool is written under when it has no
    /// target of its own (a memory span named only by its span name).
    pub fn label(&self) -> String {
        self.target.clone().unwrap_or_else(|| self.op_name.clone())
    }
}

/// One trace, as calls and structure.
#[derive(Debug, Clone)]
pub struct Logical {
    /// Spans that are not calls, as parsed (the same in every rewrite).
    pub structure: Vec<SpanRecord>,
    pub calls: Vec<Call>,
}

/// Attribute keys a memory store's name may come under.
const STORE_KEYS: &[&str] = &[
    "gen_ai.memory.store.name",
    "gen_ai.data_source.id",
    "db.namespace",
    "db.name",
];

fn is_call_stage(s: Stage) -> bool {
    matches!(
        s,
        Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory | Stage::Network | Stage::Queue
    )
}

/// Splits one trace's parsed spans (duplicates already removed) into
/// structure and calls.
pub fn logical(spans: &[SpanRecord]) -> Logical {
    let by_id: HashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        if let Some(p) = s.parent_span_id.as_deref() {
            children.entry(p).or_default().push(i);
        }
    }
    for c in children.values_mut() {
        c.sort_by_key(|&i| (spans[i].start_us, spans[i].span_id.clone()));
    }
    // Has a span of a calling stage somewhere below it?
    fn below(
        i: usize,
        spans: &[SpanRecord],
        children: &HashMap<&str, Vec<usize>>,
        memo: &mut HashMap<usize, bool>,
    ) -> bool {
        if let Some(&m) = memo.get(&i) {
            return m;
        }
        let r = children
            .get(spans[i].span_id.as_str())
            .into_iter()
            .flatten()
            .any(|&c| is_call_stage(spans[c].stage) || below(c, spans, children, memo));
        memo.insert(i, r);
        r
    }
    let mut memo = HashMap::new();
    let is_call: Vec<bool> = (0..spans.len())
        .map(|i| match spans[i].stage {
            Stage::Network => !below(i, spans, &children, &mut memo),
            Stage::Queue => false,
            s => Class::of(s).is_some(),
        })
        .collect();
    // Topmost calls: no ancestor is a call.
    let topmost: Vec<usize> = (0..spans.len())
        .filter(|&i| {
            if !is_call[i] {
                return false;
            }
            let mut p = spans[i].parent_span_id.as_deref();
            let mut seen = HashSet::new();
            while let Some(pid) = p {
                let Some(&j) = by_id.get(pid) else { break };
                if !seen.insert(j) {
                    break;
                }
                if is_call[j] {
                    return false;
                }
                p = spans[j].parent_span_id.as_deref();
            }
            true
        })
        .collect();
    let subtree = |i: usize| {
        let mut out = vec![i];
        let mut k = 0;
        while k < out.len() {
            if let Some(cs) = children.get(spans[out[k]].span_id.as_str()) {
                for &c in cs {
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
            k += 1;
        }
        out
    };
    // Group repeated operations: (parent, stage, target).
    let mut groups: BTreeMap<(String, &'static str, String), Vec<usize>> = BTreeMap::new();
    for &i in &topmost {
        let s = &spans[i];
        let target = target_of(s, spans, &subtree(i)).unwrap_or_else(|| s.name.clone());
        groups
            .entry((
                s.parent_span_id.clone().unwrap_or_default(),
                s.stage.as_str(),
                target,
            ))
            .or_default()
            .push(i);
    }
    let mut in_call = HashSet::new();
    let mut calls = Vec::new();
    for (_, mut ops) in groups {
        ops.sort_by_key(|&i| spans[i].start_us);
        let numbered = ops.iter().any(|&i| spans[i].attempt.unwrap_or(0) > 0);
        let sequential_failures = ops.windows(2).all(|w| {
            matches!(spans[w[0]].status, SpanStatus::Error | SpanStatus::Timeout)
                && spans[w[1]].start_us >= spans[w[0]].end_us - 1_000
        });
        let sets: Vec<Vec<usize>> = if ops.len() > 1 && (numbered || sequential_failures) {
            vec![ops]
        } else {
            ops.into_iter().map(|i| vec![i]).collect()
        };
        for set in sets {
            let members: Vec<usize> = set.iter().flat_map(|&i| subtree(i)).collect();
            in_call.extend(members.iter().copied());
            calls.push(call(spans, &children, &set, &members, &subtree));
        }
    }
    calls.sort_by_key(|c| (c.start_us, c.op_ids[0].clone()));
    let structure = (0..spans.len())
        .filter(|i| !in_call.contains(i))
        .map(|i| spans[i].clone())
        .collect();
    Logical { structure, calls }
}

/// The model, tool or store an operation (or its subtree) names.
fn target_of(op: &SpanRecord, spans: &[SpanRecord], members: &[usize]) -> Option<String> {
    let first = |f: &dyn Fn(&SpanRecord) -> Option<String>| {
        f(op).or_else(|| members.iter().find_map(|&m| f(&spans[m])))
    };
    let leftover = |s: &SpanRecord| {
        STORE_KEYS.iter().find_map(|k| {
            s.attributes
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        })
    };
    match op.stage {
        Stage::Llm | Stage::Judge => {
            first(&|s| s.model.clone()).or_else(|| first(&|s| s.tool.clone()))
        }
        Stage::Tool => first(&|s| s.tool.clone()),
        Stage::Memory => op.tool.clone().or_else(|| leftover(op)),
        _ => None,
    }
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

fn call(
    spans: &[SpanRecord],
    children: &HashMap<&str, Vec<usize>>,
    ops: &[usize],
    members: &[usize],
    subtree: &dyn Fn(usize) -> Vec<usize>,
) -> Call {
    let op = &spans[ops[0]];
    let last = &spans[*ops.last().unwrap()];
    let class = Class::of(op.stage).expect("calls have a calling stage");
    let find = |f: &dyn Fn(&SpanRecord) -> Option<f64>| members.iter().find_map(|&m| f(&spans[m]));
    let findi = |f: &dyn Fn(&SpanRecord) -> Option<i64>| members.iter().find_map(|&m| f(&spans[m]));
    let finds =
        |f: &dyn Fn(&SpanRecord) -> Option<String>| members.iter().find_map(|&m| f(&spans[m]));
    // The attempts: the repeated operations, else the operation's children.
    let mut attempts = Vec::new();
    let kids: Vec<usize> = if ops.len() == 1 {
        children
            .get(op.span_id.as_str())
            .cloned()
            .unwrap_or_default()
    } else {
        vec![]
    };
    let tries: Vec<(usize, bool)> = if kids.is_empty() {
        ops.iter().map(|&i| (i, false)).collect()
    } else {
        kids.iter().map(|&i| (i, true)).collect()
    };
    let label = target_of(op, spans, members).unwrap_or_else(|| op.name.clone());
    for &(i, own) in &tries {
        let s = &spans[i];
        let sub = subtree(i);
        let in_sub =
            |f: &dyn Fn(&SpanRecord) -> Option<String>| sub.iter().find_map(|&m| f(&spans[m]));
        let in_subf =
            |f: &dyn Fn(&SpanRecord) -> Option<f64>| sub.iter().find_map(|&m| f(&spans[m]));
        let address = in_sub(&|x| x.peer.clone())
            .or_else(|| op.peer.clone())
            .map(|p| Address::parse(&p))
            .unwrap_or_else(|| Address::assigned(class, &label));
        attempts.push(Attempt {
            span_id: s.span_id.clone(),
            own_span: own,
            start_us: s.start_us,
            end_us: s.end_us,
            status: s.status,
            status_message: s.status_message.clone(),
            error_type: s.error_type.clone(),
            http_status: s
                .http_status
                .or_else(|| sub.iter().find_map(|&m| spans[m].http_status)),
            address,
            method: method_of(&s.name).unwrap_or("POST"),
            llm_reason: in_sub(&|x| x.llm_reason.clone()),
            llm_duration_ms: in_subf(&|x| x.llm_duration_ms),
            dns_ms: s.dns_ms,
            connect_ms: s.connect_ms,
            net_events: s
                .events
                .iter()
                .filter(|e| is_net_event(e))
                .cloned()
                .collect(),
            attempt: s.attempt,
        });
    }
    // Chunks, heartbeats and the like stay with the operation; DNS and
    // connect belong to an attempt (an operation's own go to its first).
    let events: Vec<SpanEvent> = ops
        .iter()
        .flat_map(|&i| spans[i].events.iter())
        .filter(|e| !is_net_event(e))
        .cloned()
        .collect();
    if !kids.is_empty()
        && let Some(first) = attempts.first_mut()
    {
        first
            .net_events
            .extend(op.events.iter().filter(|e| is_net_event(e)).cloned());
        first.dns_ms = first.dns_ms.or(op.dns_ms);
        first.connect_ms = first.connect_ms.or(op.connect_ms);
    }
    // What the operation itself carried for the transport goes to the
    // attempt that got the answer (the last), when no attempt carried it.
    if !kids.is_empty()
        && let Some(a) = attempts.last_mut()
    {
        a.llm_reason = a.llm_reason.take().or(op.llm_reason.clone());
        a.llm_duration_ms = a.llm_duration_ms.or(op.llm_duration_ms);
        a.http_status = a.http_status.or(op.http_status);
    }
    let mut leftovers: Vec<(String, String)> = ops
        .iter()
        .flat_map(|&i| spans[i].attributes.iter().cloned())
        .collect();
    leftovers.dedup();
    let any_numbered = ops.iter().any(|&i| spans[i].attempt.is_some())
        || kids.iter().any(|&i| spans[i].attempt.is_some());
    let model = finds(&|s| s.model.clone());
    // An HTTP call that reached a model server which named its model is an
    // LLM call: the rewrites write it as one.
    let (class, target) = match (class, &model) {
        (Class::Network, Some(m)) => (Class::Llm, Some(m.clone())),
        _ => (class, target_of(op, spans, members)),
    };
    Call {
        class,
        target,
        op_name: op.name.clone(),
        span_ids: members.iter().map(|&m| spans[m].span_id.clone()).collect(),
        op_ids: ops.iter().map(|&i| spans[i].span_id.clone()).collect(),
        service: op.service.clone(),
        parent: op.parent_span_id.clone(),
        start_us: op.start_us,
        end_us: ops.iter().map(|&i| spans[i].end_us).max().unwrap(),
        status: last.status,
        status_message: last.status_message.clone(),
        error_type: last.error_type.clone(),
        timeout_ms: find(&|s| s.timeout_ms),
        remaining_budget_ms: op
            .remaining_budget_ms
            .or_else(|| find(&|s| s.remaining_budget_ms)),
        model,
        tool: finds(&|s| s.tool.clone()),
        input_tokens: findi(&|s| s.input_tokens),
        output_tokens: findi(&|s| s.output_tokens),
        max_tokens: findi(&|s| s.max_tokens),
        temperature: find(&|s| s.temperature),
        ttft_ms: find(&|s| s.ttft_ms),
        gpu_load: find(&|s| s.gpu_load),
        fallback: finds(&|s| s.fallback.clone()),
        fallback_accepted: members.iter().find_map(|&m| spans[m].fallback_accepted),
        events,
        leftovers,
        attempts,
        numbered: any_numbered,
        original_shape: if ops.len() > 1 {
            "repeated"
        } else if kids.is_empty() {
            "op"
        } else {
            "op+children"
        },
    }
}
