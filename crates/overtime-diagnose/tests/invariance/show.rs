//! A failing rewrite, printed so that the cause can be read off: the
//! original's span tree and the rewrite's side by side (name, stage as
//! parsed, kind, key attributes, start and duration from the request's
//! first span, status), then both verdicts.

use overtime_model::{SpanRecord, Verdict};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

const WIDTH: usize = 110;

fn line(s: &SpanRecord, depth: usize, t0: i64) -> String {
    let mut keys = Vec::new();
    if let Some(m) = &s.model {
        keys.push(format!("model={m}"));
    }
    if let Some(t) = &s.tool {
        keys.push(format!("tool={t}"));
    }
    if let Some(p) = &s.peer {
        keys.push(format!("peer={p}"));
    }
    if let Some(t) = s.timeout_ms {
        keys.push(format!("timeout={t}"));
    }
    if let Some(a) = s.attempt {
        keys.push(format!("attempt={a}"));
    }
    if !s.phases.is_empty() {
        let p: Vec<String> = s
            .phases
            .iter()
            .map(|(n, v)| format!("{n}:{v:.0}"))
            .collect();
        keys.push(format!("phases={}", p.join(",")));
    }
    if let Some(e) = &s.error_type {
        keys.push(format!("err={e}"));
    }
    let chunks = s.events.iter().filter(|e| e.name == "chunk").count();
    if chunks > 0 {
        keys.push(format!("chunks={chunks}"));
    }
    format!(
        "{:indent$}{} [{} {}] +{:.0}ms {:.0}ms {} {}",
        "",
        s.name,
        s.stage,
        s.kind.as_deref().unwrap_or("-"),
        (s.start_us - t0) as f64 / 1000.0,
        (s.end_us - s.start_us) as f64 / 1000.0,
        s.status,
        keys.join(" "),
        indent = depth * 2
    )
}

/// The tree of `spans` as lines: roots (and orphans) first, children in
/// start order.
pub fn tree(spans: &[SpanRecord]) -> Vec<String> {
    let t0 = spans.iter().map(|s| s.start_us).min().unwrap_or(0);
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut kids: HashMap<&str, Vec<&SpanRecord>> = HashMap::new();
    let mut roots = Vec::new();
    for s in spans {
        match s.parent_span_id.as_deref() {
            Some(p) if ids.contains(p) => kids.entry(p).or_default().push(s),
            _ => roots.push(s),
        }
    }
    for v in kids.values_mut() {
        v.sort_by_key(|s| (s.start_us, s.span_id.clone()));
    }
    roots.sort_by_key(|s| (s.start_us, s.span_id.clone()));
    let mut out = Vec::new();
    let mut stack: Vec<(&SpanRecord, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((s, d)) = stack.pop() {
        let orphan = s
            .parent_span_id
            .as_deref()
            .is_some_and(|p| !ids.contains(p))
            && d == 0;
        let mut l = line(s, d, t0);
        if orphan {
            l.push_str(" (parent absent)");
        }
        out.push(l);
        if let Some(k) = kids.get(s.span_id.as_str()) {
            stack.extend(k.iter().rev().map(|c| (*c, d + 1)));
        }
    }
    out
}

fn verdict(v: Option<&Verdict>) -> Vec<String> {
    match v {
        None => vec!["no verdict".into()],
        Some(v) => {
            let mut l = vec![format!(
                "{} / {} / {} (share {:.2})",
                v.root_cause.kind, v.root_cause.component, v.outcome, v.root_cause.share
            )];
            l.extend(
                v.root_cause
                    .evidence
                    .iter()
                    .take(4)
                    .map(|e| format!("  {e}")),
            );
            l
        }
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= WIDTH {
        format!("{s:WIDTH$}")
    } else {
        let c: String = s.chars().take(WIDTH - 1).collect();
        format!("{c}…")
    }
}

/// Two columns: the original on the left, the rewrite on the right.
pub fn side_by_side(
    title: &str,
    original: &[SpanRecord],
    v0: Option<&Verdict>,
    rewrite: &[SpanRecord],
    v1: Option<&Verdict>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "--- {title}");
    let (l, r) = (tree(original), tree(rewrite));
    let _ = writeln!(s, "{} | REWRITE", clip("ORIGINAL"));
    for i in 0..l.len().max(r.len()) {
        let a = l.get(i).map(String::as_str).unwrap_or("");
        let b = r.get(i).map(String::as_str).unwrap_or("");
        let _ = writeln!(s, "{} | {b}", clip(a));
    }
    let (l, r) = (verdict(v0), verdict(v1));
    for i in 0..l.len().max(r.len()) {
        let a = l.get(i).map(String::as_str).unwrap_or("");
        let b = r.get(i).map(String::as_str).unwrap_or("");
        let _ = writeln!(s, "{} | {b}", clip(a));
    }
    s
}

/// The decomposition of one original trace, for `OVERTIME_INVARIANCE_TRACE`:
/// its span tree, its verdict, and the calls the harness read in it.
pub fn explain(
    title: &str,
    spans: &[SpanRecord],
    v: Option<&Verdict>,
    l: &super::model::Logical,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "=== {title}");
    for line in tree(spans) {
        let _ = writeln!(s, "  {line}");
    }
    for line in verdict(v) {
        let _ = writeln!(s, "  verdict: {line}");
    }
    let t0 = spans.iter().map(|x| x.start_us).min().unwrap_or(0);
    for x in spans {
        let _ = writeln!(
            s,
            "  span {} {:?} +{}..{}us parent={:?} kind={:?} stage={} events={:?} attrs={:?}",
            x.span_id,
            x.name,
            x.start_us - t0,
            x.end_us - t0,
            x.parent_span_id,
            x.kind,
            x.stage,
            x.events.iter().map(|e| &e.name).collect::<Vec<_>>(),
            x.attributes
        );
    }
    let name: HashMap<&str, &str> = spans
        .iter()
        .map(|x| (x.span_id.as_str(), x.name.as_str()))
        .collect();
    let ms = |us: i64| (us - t0) as f64 / 1000.0;
    for c in &l.calls {
        let _ = writeln!(
            s,
            "  call {} {:?} target={:?} op={:?} shape={} lost={:?} parent={:?} +{:.0}..{:.0}ms {}",
            c.class.stage(),
            c.op_ids
                .iter()
                .map(|i| name.get(i.as_str()).copied().unwrap_or("(absent)"))
                .collect::<Vec<_>>(),
            c.target,
            c.op_name,
            c.original_shape,
            c.lost_op,
            c.parent
                .as_deref()
                .map(|p| name.get(p).copied().unwrap_or("(absent)")),
            ms(c.start_us),
            ms(c.end_us),
            c.status,
        );
        for a in &c.attempts {
            let _ = writeln!(
                s,
                "    attempt {} {} +{:.0}..{:.0}ms {} http={:?} dns={:?} connect={:?} reason={}",
                name.get(a.span_id.as_str()).copied().unwrap_or("?"),
                a.address.component(),
                ms(a.start_us),
                ms(a.end_us),
                a.status,
                a.http_status,
                a.dns_ms,
                a.connect_ms,
                a.llm_reason.is_some(),
            );
        }
    }
    s
}
