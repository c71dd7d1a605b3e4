//! What each span is to a call, and the one nesting every instrumentation
//! is brought to before calls are formed (docs/diagnosis.md, "Calls").
//!
//! A *call* is an operation span of any convention together with its
//! transport attempts. Instrumentations disagree on where the attempts
//! sit: OpenTelemetry's HTTP client spans are *children* of the GenAI
//! span that made them; LangChain's callback spans are never made
//! current, so the HTTP attempt lands *beside* the `ChatOpenAI.chat` span,
//! under the same parent. This module gives every span a [`Role`] and
//! moves attempts that sit beside their operation under it, so that the
//! critical path, the calls and their names see one shape.
//!
//! Design rules:
//! - **Roles come from the span alone.** [`role`] reads only the span's
//!   own columns (its stage, kind and kept attributes): an operation
//!   (LLM, judge, tool, memory, queue), a transport (an HTTP, RPC or
//!   database client span), an application span, or a moment (an ASGI
//!   event). Structure decides the rest, in `calls`.
//! - **Beside means contained.** A transport is an attempt of a sibling
//!   operation only when it runs inside that operation's interval (a few
//!   ms of slack for clocks), the operation has no attempts or operations
//!   of its own under it, and the two do not name different endpoints.
//!   Of several such operations the tightest wins. Anything less certain
//!   stays where its parent put it.
//! - **Nothing is dropped or invented.** Moving a span changes only its
//!   parent in the tree; every span keeps its times and attributes.
//!
//! ```
//! use overtime_diagnose::{tree::build, Trace};
//! use overtime_model::{SpanRecord, Stage};
//! let t = "0af7651916cd43dd8448eb211c80319c";
//! let root = SpanRecord::new(t, "00000000000000a1", "api", "POST /chat", 0, 10_000_000);
//! let mut chat = SpanRecord::new(t, "00000000000000a2", "api", "ChatOpenAI.chat", 1_000_000, 9_000_000);
//! chat.parent_span_id = Some(root.span_id.clone());
//! chat.stage = Stage::Llm;
//! chat.model = Some("gpt-4o".into());
//! // The HTTP attempt beside it, under the same parent.
//! let mut post = SpanRecord::new(t, "00000000000000a3", "api", "POST", 1_001_000, 8_999_000);
//! post.parent_span_id = Some(root.span_id.clone());
//! post.stage = Stage::Network;
//! post.kind = Some("client".into());
//! let trace = Trace { id: t.into(), gateway: vec![], spans: vec![root, chat, post] };
//! let tree = build(&trace, None, 0.0);
//! let node_of = |i| tree.nodes.iter().position(|n| n.span == Some(i)).unwrap();
//! assert_eq!(tree.nodes[node_of(2)].parent, Some(node_of(1)));
//! ```

use overtime_model::{SpanRecord, Stage};

/// What a span is to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An operation a person would call a call: an LLM, judge, tool,
    /// memory or queue span.
    Operation,
    /// One attempt on the wire: an HTTP, RPC or database client span.
    Transport,
    /// The application's own work (a service's server span, a handler,
    /// an agent loop).
    Application,
    /// An ASGI event (`http send`, `http receive`): a moment of the
    /// request, never anyone's parent and never work.
    Moment,
    /// A connection phase written as a span of its own (Node's
    /// `dns.lookup`, `tcp.connect`, `tls.connect`): part of the attempt it
    /// opens the connection for, never a call nor anyone's parent.
    Phase,
}

/// Span names of connection phases, lowercase.
const PHASE_NAMES: &[&str] = &[
    "dns.lookup",
    "dns.lookupservice",
    "dns.resolve",
    "tcp.connect",
    "tls.connect",
    "ipc.connect",
    "net.connect",
    "socket.connect",
];

/// A connection phase span (see [`Role::Phase`]).
pub fn is_phase(s: &SpanRecord) -> bool {
    let n = s.name.to_ascii_lowercase();
    PHASE_NAMES.contains(&n.as_str())
}

/// An ASGI event span (`… http send`, `… http receive`).
pub fn is_moment(s: &SpanRecord) -> bool {
    s.attributes.iter().any(|(k, _)| k == "asgi.event.type")
        || s.name.ends_with(" http send")
        || s.name.ends_with(" http receive")
}

fn has_attribute(s: &SpanRecord, key: &str) -> bool {
    s.attributes.iter().any(|(k, _)| k == key)
}

/// A database client span (`db.system` on a client span that no GenAI
/// operation names): the wire under a memory call.
fn is_db_client(s: &SpanRecord) -> bool {
    s.kind.as_deref() == Some("client")
        && (has_attribute(s, "db.system") || has_attribute(s, "db.system.name"))
        && !has_attribute(s, "gen_ai.operation.name")
        && s.tool.is_none()
}

/// A span's role, from the span alone (see the module's design rules).
pub fn role(s: &SpanRecord) -> Role {
    if is_moment(s) {
        return Role::Moment;
    }
    if is_phase(s) {
        return Role::Phase;
    }
    match s.stage {
        Stage::Network => Role::Transport,
        Stage::Memory if is_db_client(s) => Role::Transport,
        Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory | Stage::Queue => Role::Operation,
        Stage::Service | Stage::Gateway | Stage::Other => Role::Application,
    }
}

/// Stages whose operations reach another system (and so have attempts).
fn remote(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory
    )
}

/// Slack for "inside": clocks of one process agree, but a span's end is
/// taken a moment after its attempt's.
fn slack_us(op: &SpanRecord) -> i64 {
    ((op.end_us - op.start_us) / 50).clamp(2_000, 50_000)
}

fn host(peer: &str) -> &str {
    peer.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(peer, |(h, _)| h)
}

/// The two name no different endpoints (either names none, or the same host).
fn same_endpoint(op: &SpanRecord, t: &SpanRecord) -> bool {
    match (op.peer.as_deref(), t.peer.as_deref()) {
        (Some(a), Some(b)) => host(a).eq_ignore_ascii_case(host(b)),
        _ => true,
    }
}

/// Moves every transport that sits beside its operation under it (see
/// the module's design rules). `parent_of` holds each span's parent index
/// (after orphans were placed); returns how many spans moved.
///
/// *Beside* is the transport's parent's subtree, reached through
/// application spans only: LangChain's callback spans are never made
/// current, so an attempt lands under the request's span while its
/// `ChatOpenAI` run sits under an application span of the app (a judge).
pub fn attach_beside(spans: &[SpanRecord], parent_of: &mut [Option<usize>]) -> usize {
    let n = spans.len();
    let roles: Vec<Role> = spans.iter().map(role).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut tops = Vec::new();
    for (i, p) in parent_of.iter().enumerate() {
        match p {
            Some(p) => children[*p].push(i),
            None => tops.push(i),
        }
    }
    // Operations with an attempt or an operation of their own under them.
    let busy: Vec<bool> = (0..n)
        .map(|i| {
            children[i]
                .iter()
                .any(|&c| matches!(roles[c], Role::Transport | Role::Operation))
        })
        .collect();
    let leaf_op = |o: usize| roles[o] == Role::Operation && remote(spans[o].stage) && !busy[o];
    let mut moved = 0;
    let groups = (0..n)
        .map(|p| &children[p][..])
        .chain(std::iter::once(&tops[..]));
    for siblings in groups {
        moved += attach_phases(spans, &roles, siblings, parent_of);
        if !siblings.iter().any(|&t| roles[t] == Role::Transport) {
            continue;
        }
        // Leaf operations beside them: among the siblings, or under
        // application spans among them.
        let mut ops = Vec::new();
        let mut stack: Vec<usize> = siblings.to_vec();
        let mut budget = MAX_BESIDE_WALK;
        while let Some(x) = stack.pop() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            if leaf_op(x) {
                ops.push(x);
            } else if roles[x] == Role::Application {
                stack.extend(children[x].iter().copied());
            }
        }
        if ops.is_empty() {
            continue;
        }
        for &t in siblings.iter().filter(|&&t| roles[t] == Role::Transport) {
            let ts = &spans[t];
            let host_op = ops
                .iter()
                .copied()
                .filter(|&o| {
                    let os = &spans[o];
                    let slack = slack_us(os);
                    os.start_us - slack <= ts.start_us
                        && ts.end_us <= os.end_us + slack
                        && same_endpoint(os, ts)
                })
                .min_by_key(|&o| (spans[o].end_us - spans[o].start_us, o));
            if let Some(o) = host_op {
                parent_of[t] = Some(o);
                moved += 1;
            }
        }
    }
    moved
}

/// Most spans looked at to find the operations beside one group of
/// transports (a trace of a million spans stays linear).
const MAX_BESIDE_WALK: usize = 10_000;

/// Moves each connection phase under the attempt beside it that it opened
/// the connection for: a transport sibling running when the phase began
/// (or starting right after it ended), to the same endpoint. Returns how
/// many moved.
fn attach_phases(
    spans: &[SpanRecord],
    roles: &[Role],
    siblings: &[usize],
    parent_of: &mut [Option<usize>],
) -> usize {
    const SLACK_US: i64 = 50_000;
    let mut moved = 0;
    for &p in siblings.iter().filter(|&&p| roles[p] == Role::Phase) {
        let ps = &spans[p];
        let opened = siblings
            .iter()
            .copied()
            .filter(|&t| roles[t] == Role::Transport && same_endpoint(&spans[t], ps))
            .filter(|&t| {
                let ts = &spans[t];
                (ts.start_us - 2_000 <= ps.start_us && ps.start_us <= ts.end_us)
                    || (ps.end_us <= ts.start_us && ts.start_us <= ps.end_us + SLACK_US)
            })
            .min_by_key(|&t| ((spans[t].start_us - ps.start_us).abs(), t));
        if let Some(t) = opened {
            parent_of[p] = Some(t);
            moved += 1;
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0af7651916cd43dd8448eb211c80319c";

    fn span(id: &str, parent: Option<&str>, stage: Stage, s: i64, e: i64) -> SpanRecord {
        let mut r = SpanRecord::new(T, id, "api", id, s, e);
        r.parent_span_id = parent.map(str::to_string);
        r.stage = stage;
        if stage == Stage::Network {
            r.kind = Some("client".into());
        }
        r
    }

    fn parents(spans: &[SpanRecord]) -> Vec<Option<usize>> {
        spans
            .iter()
            .map(|s| {
                s.parent_span_id
                    .as_deref()
                    .and_then(|p| spans.iter().position(|x| x.span_id == p))
            })
            .collect()
    }

    #[test]
    fn an_attempt_beside_its_operation_moves_under_it_and_retries_follow() {
        let spans = vec![
            span("root", None, Stage::Service, 0, 100_000_000),
            span("chat", Some("root"), Stage::Llm, 1_000_000, 50_000_000),
            span("post1", Some("root"), Stage::Network, 1_100_000, 20_000_000),
            span(
                "post2",
                Some("root"),
                Stage::Network,
                21_000_000,
                49_990_000,
            ),
            // After the chat ended: not its attempt.
            span(
                "post3",
                Some("root"),
                Stage::Network,
                60_000_000,
                70_000_000,
            ),
        ];
        let mut p = parents(&spans);
        assert_eq!(attach_beside(&spans, &mut p), 2);
        assert_eq!(p, [None, Some(0), Some(1), Some(1), Some(0)]);
    }

    #[test]
    fn an_operation_with_attempts_of_its_own_adopts_none() {
        let spans = vec![
            span("root", None, Stage::Service, 0, 100_000_000),
            span("tool", Some("root"), Stage::Tool, 1_000_000, 50_000_000),
            span("own", Some("tool"), Stage::Network, 1_100_000, 20_000_000),
            span(
                "other",
                Some("root"),
                Stage::Network,
                21_000_000,
                30_000_000,
            ),
        ];
        let mut p = parents(&spans);
        assert_eq!(attach_beside(&spans, &mut p), 0);
    }

    #[test]
    fn different_endpoints_and_the_tightest_operation_decide() {
        let mut spans = vec![
            span("root", None, Stage::Service, 0, 100_000_000),
            span("wide", Some("root"), Stage::Tool, 0, 90_000_000),
            span("tight", Some("root"), Stage::Tool, 10_000_000, 30_000_000),
            span("t", Some("root"), Stage::Network, 11_000_000, 29_000_000),
            span(
                "elsewhere",
                Some("root"),
                Stage::Network,
                12_000_000,
                13_000_000,
            ),
        ];
        spans[2].peer = Some("rates.internal:443".into());
        spans[3].peer = Some("rates.internal:8443".into());
        spans[4].peer = Some("maps.internal:443".into());
        let mut p = parents(&spans);
        attach_beside(&spans, &mut p);
        assert_eq!(p[3], Some(2), "same host, tightest operation");
        assert_eq!(p[4], Some(1), "another host: not the tight one's");
    }

    #[test]
    fn a_database_client_is_a_transport_a_memory_operation_is_not() {
        let mut db = span("db", None, Stage::Memory, 0, 1);
        db.kind = Some("client".into());
        db.attributes.push(("db.system".into(), "redis".into()));
        assert_eq!(role(&db), Role::Transport);
        db.attributes
            .push(("gen_ai.operation.name".into(), "search_memory".into()));
        assert_eq!(role(&db), Role::Operation);
    }
}
