//! One rewrite of one trace: its structure as it was, each call in a
//! family's convention, nested one way, spelled one way.
//!
//! Nestings (`nesting`): attempts as children, as siblings, one operation
//! per try (`repeated`: numbered by `agent.attempt` only where the
//! original numbered its attempts), or orphans of an operation that never
//! arrived (an application span around it, a judge's, arrives). Where a
//! nesting cannot express a call, the call is written in one that can,
//! and counted (`Emitted::fallbacks`, `nesting::nesting_for`). An
//! operation that never arrived in the original (orphans of one lost
//! parent) gets that lost id wherever a rewrite writes it.
//!
//! Information is the same in every rewrite: times to the microsecond,
//! statuses, the budget fields (`agent.timeout_ms` on the operation and
//! on each attempt: each try was given it), phases as the captured
//! `X-LLM-Reason` response header of the attempt that got them, DNS and
//! connect as the attempt's events. Chunks stay on the operation; with
//! no operation (orphans) they go to the attempt that streamed (the last).

use super::families::{self, Family, Naming, Shape, Tells};
use super::model::{Attempt, Call, Logical, fnv};
pub use super::nesting::Nesting;
use super::nesting::nesting_for;
use super::write::{Ev, Out, V};
use overtime_model::{SpanEvent, SpanRecord, Stage};
use std::collections::{BTreeMap, HashSet};

/// A rewrite's spans, and the calls written another way than asked.
pub struct Emitted {
    pub outs: Vec<Out>,
    /// Calls written in another nesting than asked, by why.
    pub fallbacks: BTreeMap<&'static str, usize>,
}

/// Fresh span ids, the same on every run, never one the trace has.
struct Ids {
    used: HashSet<String>,
}

impl Ids {
    fn derive(&mut self, base: &str, salt: &str) -> String {
        let mut n = 0u32;
        loop {
            let h = fnv(&format!("{base}/{salt}/{n}"));
            let id = format!("{h:016x}");
            if h != 0 && self.used.insert(id.clone()) {
                return id;
            }
            n += 1;
        }
    }
}

/// The attribute keys the parser maps to a column: a leftover under one of
/// them would be read again, so structure spans do not carry them over.
fn mapped(key: &str) -> bool {
    overtime_parse::spans::ATTRIBUTE_MAPPINGS
        .iter()
        .any(|m| m.attribute.eq_ignore_ascii_case(key))
        || key == "stage"
        || key.starts_with("agent.")
}

fn events_of(evs: &[SpanEvent]) -> Vec<Ev> {
    evs.iter()
        .map(|e| Ev {
            name: e.name.clone(),
            time_us: e.time_us,
            attrs: e
                .duration_ms
                .map(|d| vec![("duration_ms".to_string(), V::F(d))])
                .unwrap_or_default(),
        })
        .collect()
}

fn method_of(name: &str) -> Option<&'static str> {
    let first = name.split_whitespace().next().unwrap_or("");
    ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
        .into_iter()
        .find(|m| first.eq_ignore_ascii_case(m))
}

/// A span that is not a call, as `family` writes the service around its
/// calls: the same for every family but for its spelling.
fn structure(family: Family, naming: Naming, s: &SpanRecord) -> Out {
    let mut f: Vec<(String, V)> = Vec::new();
    let kind: &'static str = match s.kind.as_deref() {
        Some("server") => "server",
        Some("client") => "client",
        Some("producer") => "producer",
        Some("consumer") => "consumer",
        Some(_) => "internal",
        None if s.stage == Stage::Service => "server",
        None => "internal",
    };
    let mut events = events_of(&s.events);
    if family.jsonl() {
        f.push(("stage".into(), V::S(s.stage.as_str().into())));
        let opt = |f: &mut Vec<(String, V)>, k: &str, v: Option<V>| {
            if let Some(v) = v {
                f.push((k.to_string(), v));
            }
        };
        opt(&mut f, "http_status", s.http_status.map(|h| V::I(h as i64)));
        opt(&mut f, "request_id", s.request_id.clone().map(V::S));
        opt(&mut f, "max_wait_ms", s.max_wait_ms.map(V::F));
        opt(&mut f, "budget_ms", s.budget_ms.map(V::F));
        opt(
            &mut f,
            "remaining_budget_ms",
            s.remaining_budget_ms.map(V::F),
        );
        opt(&mut f, "timeout_ms", s.timeout_ms.map(V::F));
        opt(&mut f, "attempt", s.attempt.map(|a| V::I(a as i64)));
        opt(&mut f, "judge_score", s.judge_score.map(V::F));
        opt(&mut f, "fallback", s.fallback.clone().map(V::S));
        opt(&mut f, "fallback_accepted", s.fallback_accepted.map(V::B));
        opt(&mut f, "peer", s.peer.clone().map(V::S));
        opt(&mut f, "model", s.model.clone().map(V::S));
        opt(&mut f, "tool", s.tool.clone().map(V::S));
        opt(&mut f, "llm_reason", s.llm_reason.clone().map(V::S));
        let attrs: serde_json::Map<String, serde_json::Value> = s
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        if !attrs.is_empty() {
            f.push(("attributes".into(), V::J(serde_json::Value::Object(attrs))));
        }
    } else {
        let is_client_http = s.stage == Stage::Network;
        if kind == "server" || is_client_http {
            let m = method_of(&s.name).unwrap_or("POST");
            f.push((naming.method().into(), V::S(m.into())));
        }
        if is_client_http && let Some(p) = &s.peer {
            let (host, port) = match p.rsplit_once(':') {
                Some((h, port)) if port.parse::<i64>().is_ok() => {
                    (h.to_string(), port.parse().ok())
                }
                _ => (p.clone(), None),
            };
            f.push((naming.host().into(), V::S(host.clone())));
            if let Some(port) = port {
                f.push((naming.port().into(), V::I(port)));
            }
            let authority = match port {
                Some(port) => format!("{host}:{port}"),
                None => host,
            };
            f.push((naming.url().into(), V::S(format!("http://{authority}/"))));
        }
        if let Some(h) = s.http_status {
            f.push((naming.status_code().into(), V::I(h as i64)));
        }
        if let Some(r) = &s.request_id {
            f.push(naming.header("request", "x-request-id", r, false));
        }
        if let Some(w) = s.max_wait_ms {
            f.push(naming.header("request", "x-max-wait", &format!("{w}ms"), false));
        }
        let agent = |f: &mut Vec<(String, V)>, k: &str, v: Option<V>| {
            if let Some(v) = v {
                f.push((format!("agent.{k}"), v));
            }
        };
        agent(&mut f, "budget_ms", s.budget_ms.map(V::F));
        agent(
            &mut f,
            "remaining_budget_ms",
            s.remaining_budget_ms.map(V::F),
        );
        agent(&mut f, "timeout_ms", s.timeout_ms.map(V::F));
        agent(&mut f, "attempt", s.attempt.map(|a| V::I(a as i64)));
        agent(&mut f, "fallback", s.fallback.clone().map(V::S));
        agent(&mut f, "fallback_accepted", s.fallback_accepted.map(V::B));
        if matches!(
            s.stage,
            Stage::Queue | Stage::Gateway | Stage::Llm | Stage::Judge | Stage::Tool | Stage::Memory
        ) {
            // No convention names a pool wait or a gateway hop; an agent
            // loop (an LLM span with tools under it) or what ran inside a
            // pool wait keeps its stage as it was, and what names it.
            f.push(("agent.stage".into(), V::S(s.stage.as_str().into())));
            if let Some(m) = &s.model {
                f.push(("gen_ai.request.model".into(), V::S(m.clone())));
            }
            if let Some(t) = &s.tool {
                f.push(("gen_ai.tool.name".into(), V::S(t.clone())));
            }
        }
        if let Some(j) = s.judge_score {
            events.push(Ev {
                name: "gen_ai.evaluation.result".into(),
                time_us: s.end_us,
                attrs: vec![("gen_ai.evaluation.score.value".into(), V::F(j))],
            });
        }
        for (k, v) in &s.attributes {
            if !mapped(k) {
                f.push((k.clone(), V::S(v.clone())));
            }
        }
    }
    Out {
        id: s.span_id.clone(),
        parent: s.parent_span_id.clone(),
        service: s.service.clone(),
        name: s.name.clone(),
        kind,
        start_us: s.start_us,
        end_us: s.end_us,
        status: s.status,
        message: s.status_message.clone(),
        error_type: s.error_type.clone(),
        fields: f,
        events,
        call: None,
        tells: Tells::default(),
        reason: None,
    }
}

/// One transport attempt, as an HTTP client span of `family`.
fn attempt(family: Family, naming: Naming, c: &Call, a: &Attempt, numbered: Option<u32>) -> Out {
    let mut f: Vec<(String, V)> = Vec::new();
    let mut events = events_of(&a.net_events);
    let has_events = |n: &str| a.net_events.iter().any(|e| e.name.eq_ignore_ascii_case(n));
    let tells = Tells {
        names: false,
        llm: a.llm_reason.is_some(),
        judge: false,
    };
    if family.jsonl() {
        f.push(("stage".into(), V::S("network".into())));
        f.push(("peer".into(), V::S(a.address.component())));
        let mut opt = |k: &str, v: Option<V>| {
            if let Some(v) = v {
                f.push((k.to_string(), v));
            }
        };
        opt("http_status", a.http_status.map(|h| V::I(h as i64)));
        opt("llm_reason", a.llm_reason.clone().map(V::S));
        opt("llm_duration_ms", a.llm_duration_ms.map(V::F));
        opt("dns_ms", a.dns_ms.map(V::F));
        opt("connect_ms", a.connect_ms.map(V::F));
        opt("timeout_ms", c.timeout_ms.map(V::F));
        opt("attempt", numbered.map(|n| V::I(n as i64)));
    } else {
        f.push((naming.method().into(), V::S(a.method.into())));
        f.push((naming.host().into(), V::S(a.address.host.clone())));
        if let Some(p) = a.address.port {
            f.push((naming.port().into(), V::I(p as i64)));
        }
        // Bare framework spans: the HTTP attempt says only where it went.
        if family != Family::Bare {
            let path = if c.class.is_llm() {
                "/v1/chat/completions"
            } else {
                "/invoke"
            };
            let authority = a.address.component();
            f.push((
                naming.url().into(),
                V::S(format!("http://{authority}{path}")),
            ));
        }
        if let Some(h) = a.http_status {
            f.push((naming.status_code().into(), V::I(h as i64)));
        }
        if let Some(r) = &a.llm_reason {
            f.push(naming.header("response", "x-llm-reason", r, true));
        }
        if let Some(d) = a.llm_duration_ms {
            f.push(naming.header(
                "response",
                "x-llm-duration",
                &format!("{:.3}", d / 1000.0),
                false,
            ));
        }
        if let Some(t) = c.timeout_ms {
            f.push(("agent.timeout_ms".into(), V::F(t)));
        }
        if let Some(n) = numbered {
            f.push(("agent.attempt".into(), V::I(n as i64)));
        }
        // DNS and connect as events, when the original gave them as fields.
        let mut at = a.start_us;
        for (n, d) in [("dns", a.dns_ms), ("connect", a.connect_ms)] {
            if let Some(d) = d
                && !has_events(n)
            {
                at += (d * 1000.0).round() as i64;
                events.push(Ev {
                    name: n.into(),
                    time_us: at,
                    attrs: vec![("duration_ms".into(), V::F(d))],
                });
            }
        }
    }
    Out {
        id: String::new(),
        parent: None,
        service: c.service.clone(),
        name: a.method.to_string(),
        kind: "client",
        start_us: a.start_us,
        end_us: a.end_us,
        status: a.status,
        message: a.status_message.clone(),
        error_type: a.error_type.clone(),
        fields: f,
        events,
        call: None,
        tells,
        reason: a.llm_reason.clone(),
    }
}

/// The operation span: the family's shape with the call's times, status,
/// budget fields and events.
fn op_out(family: Family, c: &Call, shape: &Shape, numbered: Option<u32>) -> Out {
    let mut f = shape.fields.clone();
    let budget = |f: &mut Vec<(String, V)>, k: &str, v: Option<V>| {
        if let Some(v) = v {
            let key = if family.jsonl() {
                k.to_string()
            } else {
                format!("agent.{k}")
            };
            f.push((key, v));
        }
    };
    budget(&mut f, "timeout_ms", c.timeout_ms.map(V::F));
    budget(
        &mut f,
        "remaining_budget_ms",
        c.remaining_budget_ms.map(V::F),
    );
    budget(&mut f, "attempt", numbered.map(|n| V::I(n as i64)));
    budget(&mut f, "fallback", c.fallback.clone().map(V::S));
    budget(&mut f, "fallback_accepted", c.fallback_accepted.map(V::B));
    let mut events = events_of(&c.events);
    if family == Family::OpenInference
        && let Some(t) = c.ttft_ms
    {
        events.push(Ev {
            name: "First Token Stream Event".into(),
            time_us: c.start_us + (t * 1000.0).round() as i64,
            attrs: vec![],
        });
    }
    Out {
        id: String::new(),
        parent: None,
        service: c.service.clone(),
        name: shape.name.clone(),
        kind: shape.kind,
        start_us: c.start_us,
        end_us: c.end_us,
        status: c.status,
        message: c.status_message.clone(),
        error_type: c.error_type.clone(),
        fields: f,
        events,
        call: None,
        tells: shape.tells,
        reason: None,
    }
}

/// Every span of one trace, rewritten.
pub fn trace(l: &Logical, family: Family, nesting: Nesting, naming: Naming) -> Emitted {
    let mut ids = Ids {
        used: l
            .structure
            .iter()
            .map(|s| s.span_id.clone())
            .chain(l.calls.iter().flat_map(|c| c.span_ids.iter().cloned()))
            .collect(),
    };
    let mut outs: Vec<Out> = l
        .structure
        .iter()
        .map(|s| structure(family, naming, s))
        .collect();
    let mut fallbacks = BTreeMap::new();
    let mut op_ids_used = HashSet::new();
    for (ci, c) in l.calls.iter().enumerate() {
        let shapes = families::op(family, c);
        let (nest, fell) = nesting_for(c, shapes.is_some(), nesting);
        if let Some(why) = fell {
            *fallbacks.entry(why).or_default() += 1;
        }
        // One id per operation span written, even where two calls lost
        // one parent.
        let op_id = if op_ids_used.insert(c.op_ids[0].clone()) {
            c.op_ids[0].clone()
        } else {
            ids.derive(&c.op_ids[0], "op")
        };
        let mut spans: Vec<Out> = Vec::new();
        let mut parent = c.parent.clone();
        if let Some(w) = shapes.as_ref().and_then(|s| s.wrapper.as_ref()) {
            let mut o = op_out(family, c, w, None);
            o.fields = w.fields.clone();
            o.events.clear();
            o.status = overtime_model::SpanStatus::Ok;
            o.message = None;
            o.error_type = None;
            o.id = ids.derive(&c.op_ids[0], "wrapper");
            o.parent = parent.clone();
            parent = Some(o.id.clone());
            spans.push(o);
        }
        // The original's attempt numbers, when it wrote them: a stack that
        // writes one operation per try without numbers is the case to see
        // through (earlier tries ended in an error).
        let numbered = |i: usize| {
            c.numbered
                .then(|| c.attempts[i].attempt.unwrap_or(i as u32))
        };
        let attempt_id = |ids: &mut Ids, a: &Attempt| {
            if a.own_span {
                a.span_id.clone()
            } else {
                ids.derive(&a.span_id, "attempt")
            }
        };
        match (&shapes, nest) {
            (None, _) => {
                // No operation span: the attempts alone, under the caller
                // (orphans: under the operation that never arrived).
                let p = if nest == Nesting::Orphans {
                    Some(c.op_ids[0].clone())
                } else {
                    parent.clone()
                };
                let n = c.attempts.len();
                for (i, a) in c.attempts.iter().enumerate() {
                    let mut o = attempt(family, naming, c, a, numbered(i));
                    // An operation that was its own attempt keeps its id,
                    // unless that id is the parent that never arrived.
                    o.id = match c.op_ids.get(i) {
                        Some(id) if !a.own_span && nest != Nesting::Orphans => id.clone(),
                        _ => attempt_id(&mut ids, a),
                    };
                    o.parent = p.clone();
                    if i + 1 == n {
                        o.events.extend(events_of(&c.events));
                    }
                    spans.push(o);
                }
            }
            (Some(s), Nesting::Children | Nesting::Siblings) => {
                let mut o = op_out(family, c, &s.op, None);
                o.id = op_id.clone();
                o.parent = parent.clone();
                let under = if nest == Nesting::Children {
                    Some(o.id.clone())
                } else {
                    parent.clone()
                };
                spans.push(o);
                for (i, a) in c.attempts.iter().enumerate() {
                    let mut o = attempt(family, naming, c, a, numbered(i));
                    o.id = attempt_id(&mut ids, a);
                    o.parent = under.clone();
                    spans.push(o);
                }
            }
            (Some(s), Nesting::Repeated) => {
                let n = c.attempts.len();
                for (i, a) in c.attempts.iter().enumerate() {
                    let mut op = op_out(family, c, &s.op, numbered(i));
                    op.id = match c.op_ids.get(i) {
                        Some(id) if c.op_ids.len() == n => id.clone(),
                        _ if i == 0 => op_id.clone(),
                        _ => ids.derive(&c.op_ids[0], &format!("op{i}")),
                    };
                    op.parent = parent.clone();
                    op.start_us = a.start_us;
                    op.end_us = a.end_us;
                    op.status = a.status;
                    op.message = a.status_message.clone();
                    op.error_type = a.error_type.clone();
                    let last = i + 1 == n;
                    op.events.retain(|e| {
                        (e.time_us >= a.start_us && e.time_us <= a.end_us)
                            || (last
                                && !c
                                    .attempts
                                    .iter()
                                    .any(|b| e.time_us >= b.start_us && e.time_us <= b.end_us))
                    });
                    let mut o = attempt(family, naming, c, a, numbered(i));
                    o.id = attempt_id(&mut ids, a);
                    o.parent = Some(op.id.clone());
                    spans.push(op);
                    spans.push(o);
                }
            }
            (Some(_), Nesting::Orphans) => {
                let n = c.attempts.len();
                for (i, a) in c.attempts.iter().enumerate() {
                    let mut o = attempt(family, naming, c, a, numbered(i));
                    o.id = attempt_id(&mut ids, a);
                    o.parent = Some(c.op_ids[0].clone());
                    if i + 1 == n {
                        o.events.extend(events_of(&c.events));
                    }
                    spans.push(o);
                }
            }
        }
        for s in &mut spans {
            s.call = Some(ci);
        }
        outs.extend(spans);
    }
    Emitted { outs, fallbacks }
}

/// What the spans written for call `ci` tell about it, together.
pub fn tells(outs: &[Out], ci: usize) -> Tells {
    outs.iter()
        .filter(|o| o.call == Some(ci))
        .fold(Tells::default(), |t, o| t.or(o.tells))
}
