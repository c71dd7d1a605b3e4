//! The timeline of one trace as a tree, and its critical path.
//!
//! Design rules:
//! - The root is the gateway record when there is one (the request as the
//!   user saw it), otherwise the trace's root span (or a synthetic node
//!   spanning every top-level span).
//! - A gateway line written with a one-second clock (`$time_iso8601`) is
//!   anchored to the first span inside that second.
//! - A child that starts before its parent (another host's clock) is
//!   shifted inside it, up to `clock_skew_ms`; then every child is clamped
//!   to its parent. Spans that ran on after the gateway gave up are cut at
//!   the gateway's end: that time was never part of the user's wait.
//! - The critical path is the last-finishing-child walk back from the
//!   root's end (Jaeger, CRISP): each node's `critical_us` is the time it
//!   holds on the path exclusively (not covered by a critical child).

use crate::assemble::Trace;
use crate::shape::{Role, attach_beside, is_moment, role};
use overtime_model::GatewayRecord;
use std::collections::HashMap;

/// One node of the timeline.
#[derive(Debug, Clone)]
pub struct Node {
    /// Index into `Trace::spans`; `None` for the gateway or a synthetic root.
    pub span: Option<usize>,
    /// Effective interval (skew-shifted, clamped to the parent): its
    /// start, µs since the epoch.
    pub start_us: i64,
    /// The effective interval's end, µs since the epoch.
    pub end_us: i64,
    /// The span's own end after the skew shift, before clamping.
    pub raw_end_us: i64,
    /// Index of the parent node; `None` for the root.
    pub parent: Option<usize>,
    /// Indexes of the child nodes (empty for a leaf).
    pub children: Vec<usize>,
    /// Exclusive time on the critical path, µs.
    pub critical_us: i64,
    /// Of `critical_us`, the part before its first critical child began:
    /// time the node waited (for a worker, a connection) before work began.
    /// Zero for a leaf.
    pub lead_us: i64,
    /// An ASGI event span (`http send`, `http receive`): a moment of the
    /// request, not work; the critical path does not walk through it.
    pub moment: bool,
}

impl Node {
    /// A node over `[start_us, end_us]` under `parent`, with no children
    /// and no critical time yet; `span: None` for the gateway or a
    /// synthetic root.
    fn new(span: Option<usize>, start_us: i64, end_us: i64, parent: Option<usize>) -> Node {
        Node {
            span,
            start_us,
            end_us,
            raw_end_us: end_us,
            parent,
            children: vec![],
            critical_us: 0,
            lead_us: 0,
            moment: false,
        }
    }
}

/// A trace's timeline as a tree: the gateway (or a synthetic root) over
/// the spans, each node with its share of the critical path.
#[derive(Debug, Clone)]
pub struct TraceTree {
    /// Every node; indexes into it are what `root`, `parent` and
    /// `children` hold.
    pub nodes: Vec<Node>,
    /// Index of the root node (the gateway's record, a root span, or a
    /// synthetic root over several).
    pub root: usize,
    /// The gateway record the root stands for, if any.
    pub gateway: Option<usize>,
    /// Span shift applied for skew, by span index (µs).
    pub shift_us: Vec<i64>,
    /// Spans whose parent never arrived, and where each was placed.
    pub orphans: Vec<Orphan>,
}

/// A span whose parent never arrived (a parent cancelled mid-stream is
/// often never exported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// Index into `Trace::spans`.
    pub span: usize,
    /// The span it was placed under (`None`: the request's root).
    pub placed_under: Option<usize>,
}

/// Spans that ended within this of each other ended together, µs.
const ENDED_TOGETHER_US: i64 = 50_000;

/// Most span comparisons spent placing orphans in one trace; past it the
/// rest hang from the root (a trace of a million orphans stays linear).
const MAX_ADOPTION_WORK: usize = 50_000_000;

/// Places every span whose parent never arrived under its nearest known
/// ancestor: the innermost span of the trace that was running when it
/// started (the latest start, then the shortest), else nothing (it hangs
/// from the request's root). ASGI event spans never adopt, nor do
/// transport spans (an HTTP client's children are the far service's,
/// which name their parent); an orphaned piece of a call (an operation or
/// an attempt whose operation was lost) is never given to another call
/// running beside it. Orphans of one lost parent go together, where the
/// earliest of them went. A candidate whose own chain of parents leads
/// back to the orphan is skipped, so no cycle is made.
///
/// ```
/// use overtime_diagnose::{tree::build, Trace};
/// use overtime_model::SpanRecord;
/// let t = "0af7651916cd43dd8448eb211c80319c";
/// let server = SpanRecord::new(t, "00000000000000a1", "api", "POST /chat", 0, 10_000_000);
/// let mut post = SpanRecord::new(t, "00000000000000a3", "api", "POST", 5_000, 20_000);
/// post.parent_span_id = Some("00000000000000a2".into()); // the chat span never arrived
/// let trace = Trace { id: t.into(), gateway: vec![], spans: vec![server, post] };
/// let tree = build(&trace, None, 0.0);
/// assert_eq!(tree.orphans.len(), 1);
/// assert_eq!(tree.orphans[0].placed_under, Some(0));
/// ```
fn adopt_orphans(
    spans: &[overtime_model::SpanRecord],
    parent_of: &mut [Option<usize>],
) -> Vec<Orphan> {
    let mut orphans: Vec<usize> = (0..spans.len())
        .filter(|&i| parent_of[i].is_none() && spans[i].parent_span_id.is_some())
        .collect();
    // Earliest first: orphans of one lost parent (the attempts of one call
    // whose operation span never arrived) all go where the first went.
    orphans.sort_by_key(|&i| (spans[i].start_us, i));
    let mut placed: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::with_capacity(orphans.len());
    for i in orphans {
        let o = &spans[i];
        let lost = o.parent_span_id.as_deref().unwrap_or_default();
        let leads_back = |mut c: usize, parent_of: &[Option<usize>]| {
            for _ in 0..spans.len() {
                if c == i {
                    return true;
                }
                match parent_of[c] {
                    Some(p) => c = p,
                    None => return false,
                }
            }
            true
        };
        // An ASGI event whose parent is missing lost its server span: it
        // is a moment of the request itself, not of whatever ran then.
        let adoptable = !is_moment(o);
        let piece_of_call = matches!(role(o), Role::Operation | Role::Transport);
        let may_host = |j: usize| match role(&spans[j]) {
            Role::Moment | Role::Transport | Role::Phase => false,
            Role::Operation => !piece_of_call,
            Role::Application => true,
        };
        if let Some(&host) = placed.get(lost)
            && !leads_back(host, parent_of)
        {
            parent_of[i] = Some(host);
            out.push(Orphan {
                span: i,
                placed_under: Some(host),
            });
            continue;
        }
        let work_left = spans.len().saturating_mul(out.len() + 1) <= MAX_ADOPTION_WORK;
        let mut hosts: Vec<usize> = if adoptable && work_left {
            (0..spans.len())
                .filter(|&j| j != i && may_host(j))
                .filter(|&j| spans[j].start_us <= o.start_us && o.start_us < spans[j].end_us)
                .collect()
        } else {
            Vec::new()
        };
        // The innermost: the latest start; of spans that started together
        // (clocks of whole milliseconds), one still running when the orphan
        // ended, then the shortest.
        hosts.sort_by_key(|&j| {
            std::cmp::Reverse((
                spans[j].start_us,
                spans[j].end_us >= o.end_us,
                std::cmp::Reverse(spans[j].end_us - spans[j].start_us),
                std::cmp::Reverse(j),
            ))
        });
        // Nothing running when it began (it began after everything else
        // ended, as a call made after the gateway's cut): the innermost of
        // the application spans that ended last before it (together, within
        // 50 ms), which is what made it.
        if hosts.is_empty() && adoptable && work_left && piece_of_call {
            let before = |j: usize| {
                j != i
                    && may_host(j)
                    && spans[j].end_us <= o.start_us
                    && spans[j].kind.as_deref() != Some("client")
            };
            if let Some(last) = (0..spans.len())
                .filter(|&j| before(j))
                .map(|j| spans[j].end_us)
                .max()
            {
                let depth = |mut j: usize| {
                    let mut d = 0;
                    while let Some(p) = parent_of[j].filter(|_| d < spans.len()) {
                        d += 1;
                        j = p;
                    }
                    d
                };
                hosts.extend(
                    (0..spans.len())
                        .filter(|&j| before(j) && spans[j].end_us >= last - ENDED_TOGETHER_US)
                        .max_by_key(|&j| (spans[j].start_us, depth(j), std::cmp::Reverse(j))),
                );
            }
        }
        let host = hosts.into_iter().find(|&j| !leads_back(j, parent_of));
        parent_of[i] = host;
        if let Some(h) = host {
            placed.insert(lost, h);
        }
        // A server span with nothing around it is where the trace entered
        // this system: its parent is the caller's, never ours to see.
        let entry = host.is_none() && matches!(o.kind.as_deref(), Some("server" | "consumer"));
        if !entry {
            out.push(Orphan {
                span: i,
                placed_under: host,
            });
        }
    }
    out
}

impl TraceTree {
    /// The root's duration, µs.
    pub fn elapsed_us(&self) -> i64 {
        let r = &self.nodes[self.root];
        r.end_us - r.start_us
    }
    /// The root's start, µs since the epoch (what `…_ms after the
    /// request's start` values count from).
    pub fn origin_us(&self) -> i64 {
        self.nodes[self.root].start_us
    }
    /// Node index of span `i` (for the unit tests).
    #[cfg(test)]
    fn node_of_span(&self, i: usize) -> Option<usize> {
        self.nodes.iter().position(|n| n.span == Some(i))
    }
    /// Critical time of the subtree under `node`, itself included.
    pub(crate) fn subtree_critical_us(&self, node: usize) -> i64 {
        let mut total = 0;
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            total += self.nodes[n].critical_us;
            stack.extend(self.nodes[n].children.iter().copied());
        }
        total
    }
}

/// Where the gateway's request began, on the spans' clock.
fn gateway_interval(g: &GatewayRecord, first_span_start: Option<i64>) -> (i64, i64) {
    // A format without $request_time: the upstream's time, else from the
    // first span to the line.
    let rt_ms = g
        .request_time_ms
        .or_else(|| g.upstream_response_sum_ms())
        .or_else(|| first_span_start.map(|f| ((g.time_us - f).max(0) as f64) / 1000.0))
        .unwrap_or(0.0);
    let rt = (rt_ms * 1000.0).round() as i64;
    let est_start = g.time_us - rt;
    let precision = g.time_precision_us.max(0);
    let start = match first_span_start {
        Some(first) if precision >= 100_000 => {
            let connect = (g
                .upstream_connect_ms
                .first()
                .copied()
                .flatten()
                .unwrap_or(0.0)
                * 1000.0) as i64;
            (first - connect).clamp(est_start, est_start + precision)
        }
        _ => est_start,
    };
    (start, start + rt)
}

/// Builds the tree of `trace`, rooted at gateway record `gateway` if given.
pub fn build(trace: &Trace, gateway: Option<usize>, clock_skew_ms: f64) -> TraceTree {
    let spans = &trace.spans;
    let index: HashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    let mut parent_of: Vec<Option<usize>> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.parent_span_id
                .as_deref()
                .and_then(|p| index.get(p).copied())
                .filter(|&p| p != i)
        })
        .collect();
    let mut orphans = adopt_orphans(spans, &mut parent_of);
    // One nesting for every instrumentation: attempts beside their
    // operation go under it (shape.rs).
    if attach_beside(spans, &mut parent_of) > 0 {
        for o in &mut orphans {
            o.placed_under = parent_of[o.span];
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    let mut tops = Vec::new();
    for (i, p) in parent_of.iter().enumerate() {
        match p {
            Some(p) => children[*p].push(i),
            None => tops.push(i),
        }
    }
    // A parent cycle leaves spans unreachable from any top: promote them.
    let reachable = {
        let mut seen = vec![false; spans.len()];
        let mut stack = tops.clone();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut seen[n], true) {
                stack.extend(children[n].iter().copied());
            }
        }
        seen
    };
    for (i, ok) in reachable.iter().enumerate() {
        if !ok {
            if let Some(p) = parent_of[i] {
                children[p].retain(|&c| c != i);
            }
            tops.push(i);
        }
    }

    // Skew: shift a child that starts before its parent, top-down.
    let skew_us = (clock_skew_ms * 1000.0) as i64;
    let mut shift = vec![0i64; spans.len()];
    let mut stack: Vec<usize> = tops.clone();
    while let Some(p) = stack.pop() {
        let p_start = spans[p].start_us + shift[p];
        for &c in &children[p] {
            let inherited = if spans[c].service == spans[p].service {
                shift[p]
            } else {
                0
            };
            let c_start = spans[c].start_us + inherited;
            let early = p_start - c_start;
            shift[c] = if early > 0 && early <= skew_us {
                inherited + early
            } else {
                inherited
            };
            stack.push(c);
        }
    }

    let mut nodes: Vec<Node> = Vec::with_capacity(spans.len() + 1);
    let first_start = tops.iter().map(|&t| spans[t].start_us + shift[t]).min();
    let root = if let Some(g) = gateway {
        let (s, e) = gateway_interval(&trace.gateway[g], first_start);
        nodes.push(Node::new(None, s, e, None));
        Some(0)
    } else if tops.len() != 1 && !tops.is_empty() {
        let s = first_start.unwrap_or(0);
        let e = tops
            .iter()
            .map(|&t| spans[t].end_us + shift[t])
            .max()
            .unwrap_or(s);
        nodes.push(Node::new(None, s, e, None));
        Some(0)
    } else {
        None
    };
    // Breadth-first creation so parents precede children.
    let mut queue: std::collections::VecDeque<(usize, Option<usize>)> =
        tops.iter().map(|&t| (t, root)).collect();
    while let Some((i, parent)) = queue.pop_front() {
        let (raw_s, raw_e) = (spans[i].start_us + shift[i], spans[i].end_us + shift[i]);
        let raw_e = raw_e.max(raw_s);
        let (s, e) = match parent {
            Some(p) => {
                let (ps, pe) = (nodes[p].start_us, nodes[p].end_us);
                let s = raw_s.clamp(ps, pe);
                (s, raw_e.clamp(s, pe))
            }
            None => (raw_s, raw_e),
        };
        let id = nodes.len();
        nodes.push(Node {
            raw_end_us: raw_e,
            moment: is_moment(&spans[i]),
            ..Node::new(Some(i), s, e, parent)
        });
        if let Some(p) = parent {
            nodes[p].children.push(id);
        }
        for &c in &children[i] {
            queue.push_back((c, Some(id)));
        }
    }
    if nodes.is_empty() {
        nodes.push(Node::new(None, 0, 0, None));
    }
    let root = root.unwrap_or(0);
    let mut tree = TraceTree {
        nodes,
        root,
        gateway,
        shift_us: shift,
        orphans,
    };
    let end = tree.nodes[root].end_us;
    critical_path(&mut tree, root, end);
    tree
}

/// Last-finishing-child walk: fills `critical_us` of `node`'s subtree for
/// the part of it that ends by `limit`. Iterative, so a trace of any depth
/// cannot exhaust the stack.
fn critical_path(tree: &mut TraceTree, node: usize, limit: i64) {
    struct Frame {
        node: usize,
        kids: Vec<usize>,
        next: usize,
        cursor: i64,
        own: i64,
        picked: bool,
    }
    let frame = |tree: &TraceTree, node: usize, limit: i64| {
        let mut kids: Vec<usize> = tree.nodes[node]
            .children
            .iter()
            .copied()
            .filter(|&c| !tree.nodes[c].moment)
            .collect();
        kids.sort_by_key(|&c| std::cmp::Reverse((tree.nodes[c].end_us, tree.nodes[c].start_us)));
        Frame {
            node,
            kids,
            next: 0,
            cursor: tree.nodes[node].end_us.min(limit),
            own: 0,
            picked: false,
        }
    };
    let mut stack = vec![frame(tree, node, limit)];
    while let Some(f) = stack.last_mut() {
        let start = tree.nodes[f.node].start_us;
        let mut descend = None;
        while f.next < f.kids.len() {
            let c = f.kids[f.next];
            f.next += 1;
            let (cs, ce) = (tree.nodes[c].start_us, tree.nodes[c].end_us);
            if cs >= f.cursor || f.cursor <= start {
                continue;
            }
            let c_end = ce.min(f.cursor);
            if c_end <= cs {
                continue;
            }
            f.own += f.cursor - c_end;
            f.cursor = cs.max(start);
            f.picked = true;
            descend = Some((c, c_end));
            break;
        }
        if let Some((c, c_end)) = descend {
            let child = frame(tree, c, c_end);
            stack.push(child);
            continue;
        }
        let f = stack.pop().expect("non-empty");
        let lead = (f.cursor - start).max(0);
        let n = &mut tree.nodes[f.node];
        n.critical_us += f.own + lead;
        // Children that all began after the end (the work never started
        // before the request was cut): the whole time was a wait.
        if f.picked || !f.kids.is_empty() {
            n.lead_us += lead;
        }
    }
}

#[cfg(test)]
mod tests;
