//! The original's span tree brought to the one nesting every call is
//! read in (docs/diagnosis.md, "Calls"), derived here from the documented
//! rules on its own — the harness never calls the diagnosis's code, so a
//! rule the two read differently shows up as a changed verdict.
//!
//! Design rules:
//! - **Roles come from the span alone**: a connection phase written as a
//!   span (`dns.lookup`, `tcp.connect`…), an ASGI moment (`… http send`),
//!   a transport (an HTTP/RPC client span, a database client span no
//!   GenAI operation names), an operation (LLM, judge, tool, memory,
//!   queue), else the application's own work.
//! - **Orphans** — spans whose parent never arrived — go under the
//!   innermost span running when they started (latest start, then the
//!   shortest); a piece of a call (operation or transport) never under an
//!   operation, nothing under a transport, a phase or a moment; a moment
//!   is never placed. Orphans of one lost parent go together, where the
//!   earliest went, and remember the parent they lost.
//! - **Phases** go under the transport beside them that they opened the
//!   connection for: running when the phase began, or starting right
//!   after it ended, to the same host.
//! - **Beside**: a transport inside the interval of a leaf operation (a
//!   remote one — LLM, judge, tool, memory — with no transport or
//!   operation under it) found among its siblings, or under application
//!   spans among them, to the same host when both name one, goes under the
//!   tightest such operation.
//!
//! ```text
//! request                          request
//! ├─ ChatOpenAI  (leaf)      ==>   ├─ ChatOpenAI
//! ├─ POST  (inside it)             │  └─ POST
//! │  ·                             │     └─ tcp.connect
//! ├─ tcp.connect (opens POST)      └─ answer_judge
//! ├─ answer_judge                     └─ ChatOpenAI
//! │  └─ ChatOpenAI (leaf)                └─ POST
//! └─ POST  (inside the judge's)
//! ```

use overtime_model::{SpanRecord, Stage};
use std::collections::HashMap;

/// What a span is to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Operation,
    Transport,
    Application,
    Moment,
    Phase,
}

/// Connection phases written as spans of their own (Node's `net`/`dns`
/// instrumentation, and the like), lowercase.
const PHASES: &[&str] = &[
    "dns.lookup",
    "dns.lookupservice",
    "dns.resolve",
    "tcp.connect",
    "tls.connect",
    "net.connect",
    "socket.connect",
    "ipc.connect",
];

pub fn is_phase(s: &SpanRecord) -> bool {
    PHASES.contains(&s.name.to_ascii_lowercase().as_str())
}

fn has(s: &SpanRecord, key: &str) -> bool {
    s.attributes.iter().any(|(k, _)| k == key)
}

pub fn role(s: &SpanRecord) -> Role {
    if has(s, "asgi.event.type")
        || s.name.ends_with(" http send")
        || s.name.ends_with(" http receive")
    {
        return Role::Moment;
    }
    if is_phase(s) {
        return Role::Phase;
    }
    let db_client = s.kind.as_deref() == Some("client")
        && (has(s, "db.system") || has(s, "db.system.name"))
        && !has(s, "gen_ai.operation.name")
        && s.tool.is_none();
    match s.stage {
        Stage::Network => Role::Transport,
        Stage::Memory if db_client => Role::Transport,
        Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory | Stage::Queue => Role::Operation,
        _ => Role::Application,
    }
}

/// An operation that reaches another system (and so has attempts).
pub fn remote(s: Stage) -> bool {
    matches!(s, Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory)
}

/// The host of a `host:port` peer.
pub fn host(peer: &str) -> &str {
    peer.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(peer, |(h, _)| h)
}

fn same_host(a: &SpanRecord, b: &SpanRecord) -> bool {
    match (a.peer.as_deref(), b.peer.as_deref()) {
        (Some(x), Some(y)) => host(x).eq_ignore_ascii_case(host(y)),
        _ => true,
    }
}

/// The trace as one nesting.
pub struct Tree {
    pub roles: Vec<Role>,
    pub parent: Vec<Option<usize>>,
    /// Children in start order.
    pub children: Vec<Vec<usize>>,
    /// The parent id an orphan lost (orphans only).
    pub lost: Vec<Option<String>>,
}

impl Tree {
    /// `i` and everything under it, breadth-first.
    pub fn subtree(&self, i: usize) -> Vec<usize> {
        let mut out = vec![i];
        let mut k = 0;
        while k < out.len() {
            out.extend(self.children[out[k]].iter().copied());
            k += 1;
        }
        out
    }
}

pub fn build(spans: &[SpanRecord]) -> Tree {
    let roles: Vec<Role> = spans.iter().map(role).collect();
    let index: HashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    let mut parent: Vec<Option<usize>> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.parent_span_id
                .as_deref()
                .and_then(|p| index.get(p).copied())
                .filter(|&p| p != i)
        })
        .collect();
    let lost = place_orphans(spans, &roles, &mut parent);
    let children = kids(spans, &parent);
    beside(spans, &roles, &children, &mut parent);
    let children = kids(spans, &parent);
    Tree {
        roles,
        parent,
        children,
        lost,
    }
}

fn kids(spans: &[SpanRecord], parent: &[Option<usize>]) -> Vec<Vec<usize>> {
    let mut c: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            c[*p].push(i);
        }
    }
    for v in &mut c {
        v.sort_by_key(|&i| (spans[i].start_us, spans[i].span_id.clone()));
    }
    c
}

fn leads_back(mut c: usize, to: usize, parent: &[Option<usize>]) -> bool {
    for _ in 0..parent.len() + 1 {
        if c == to {
            return true;
        }
        match parent[c] {
            Some(p) => c = p,
            None => return false,
        }
    }
    true
}

fn place_orphans(
    spans: &[SpanRecord],
    roles: &[Role],
    parent: &mut [Option<usize>],
) -> Vec<Option<String>> {
    let mut lost: Vec<Option<String>> = vec![None; spans.len()];
    let mut orphans: Vec<usize> = (0..spans.len())
        .filter(|&i| parent[i].is_none() && spans[i].parent_span_id.is_some())
        .collect();
    orphans.sort_by_key(|&i| (spans[i].start_us, i));
    let mut placed: HashMap<String, usize> = HashMap::new();
    for i in orphans {
        let o = &spans[i];
        let lost_id = o.parent_span_id.clone().unwrap_or_default();
        let piece = matches!(roles[i], Role::Operation | Role::Transport);
        let server_entry = matches!(o.kind.as_deref(), Some("server" | "consumer"));
        lost[i] = Some(lost_id.clone());
        if let Some(&h) = placed.get(&lost_id)
            && !leads_back(h, i, parent)
        {
            parent[i] = Some(h);
            continue;
        }
        if roles[i] == Role::Moment {
            continue;
        }
        let may_host = |j: usize| match roles[j] {
            Role::Moment | Role::Transport | Role::Phase => false,
            Role::Operation => !piece,
            Role::Application => true,
        };
        let host = (0..spans.len())
            .filter(|&j| j != i && may_host(j))
            .filter(|&j| spans[j].start_us <= o.start_us && o.start_us < spans[j].end_us)
            .filter(|&j| !leads_back(j, i, parent))
            .max_by_key(|&j| {
                (
                    spans[j].start_us,
                    std::cmp::Reverse(spans[j].end_us - spans[j].start_us),
                    j,
                )
            });
        parent[i] = host;
        if let Some(h) = host {
            placed.insert(lost_id, h);
        } else if server_entry {
            // Where the trace entered this system: not an orphan.
            lost[i] = None;
        }
    }
    lost
}

/// Phases under the transport they opened, then transports under the
/// leaf operation they sit beside (see the module's rules).
fn beside(
    spans: &[SpanRecord],
    roles: &[Role],
    children: &[Vec<usize>],
    parent: &mut [Option<usize>],
) {
    let busy: Vec<bool> = children
        .iter()
        .map(|c| {
            c.iter()
                .any(|&k| matches!(roles[k], Role::Transport | Role::Operation))
        })
        .collect();
    let leaf = |o: usize| roles[o] == Role::Operation && remote(spans[o].stage) && !busy[o];
    let tops: Vec<usize> = (0..spans.len()).filter(|&i| parent[i].is_none()).collect();
    let groups: Vec<&[usize]> = children
        .iter()
        .map(Vec::as_slice)
        .chain(std::iter::once(tops.as_slice()))
        .collect();
    for sib in groups {
        for &p in sib.iter().filter(|&&p| roles[p] == Role::Phase) {
            let ps = &spans[p];
            let opened = sib
                .iter()
                .copied()
                .filter(|&t| roles[t] == Role::Transport && same_host(&spans[t], ps))
                .filter(|&t| {
                    let ts = &spans[t];
                    (ts.start_us - 2_000 <= ps.start_us && ps.start_us <= ts.end_us)
                        || (ps.end_us <= ts.start_us && ts.start_us <= ps.end_us + 50_000)
                })
                .min_by_key(|&t| ((spans[t].start_us - ps.start_us).abs(), t));
            if opened.is_some() {
                parent[p] = opened;
            }
        }
        if !sib.iter().any(|&t| roles[t] == Role::Transport) {
            continue;
        }
        let mut ops = Vec::new();
        let mut stack: Vec<usize> = sib.to_vec();
        while let Some(x) = stack.pop() {
            if leaf(x) {
                ops.push(x);
            } else if roles[x] == Role::Application {
                stack.extend(children[x].iter().copied());
            }
        }
        for &t in sib.iter().filter(|&&t| roles[t] == Role::Transport) {
            let ts = &spans[t];
            let host_op = ops
                .iter()
                .copied()
                .filter(|&o| {
                    let os = &spans[o];
                    let slack = ((os.end_us - os.start_us) / 50).clamp(2_000, 50_000);
                    os.start_us - slack <= ts.start_us
                        && ts.end_us <= os.end_us + slack
                        && same_host(os, ts)
                })
                .min_by_key(|&o| (spans[o].end_us - spans[o].start_us, o));
            if host_op.is_some() {
                parent[t] = host_op;
            }
        }
    }
}
