//! One trace join for both engines: the incident fixtures re-keyed as
//! `$request_id`-keyed platforms write them — nginx starting a trace of
//! its own, inner layers logging the request id alone, the service's root
//! span carrying the request id, and other traces' spans claiming the
//! same id later or earlier — then shuffled, split and duplicated, give
//! the live engine exactly the batch engine's verdicts (crate `join.rs`).
//!
//! Generated, not hand-picked: every trace of every incident is re-keyed,
//! and which of them get a conflicting claimant, and where in time, comes
//! from the trace id.

use crate::live_parity::{incident, live_equals_batch};
use overtime_diagnose::assemble_tables;
use overtime_model::{GatewayRecord, SpanRecord};
use std::collections::BTreeMap;

/// A stable 32-hex id derived from `seed` and `salt`.
fn derived(seed: &str, salt: u8) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in seed.bytes().chain([salt]) {
        h = (h ^ b as u128).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("{:032x}", h | 1)
}

/// The re-keying, chosen per trace by its id: the line keeps its
/// traceparent and gains a request id; or logs the request id alone; or
/// nginx starts a trace of its own and an inner layer (a copy of the
/// line one layer in) logs the request id alone. The service's root spans
/// carry the request id; `claimant_at` picks, for a trace, where a span of
/// another trace claiming the same request id starts relative to its root
/// (`None`: no claimant).
fn rekey(
    gateway: &[GatewayRecord],
    spans: &[SpanRecord],
    claimant_at: impl Fn(&str) -> Option<i64>,
) -> (Vec<GatewayRecord>, Vec<SpanRecord>) {
    let mut gw = Vec::new();
    for g in gateway {
        let mut g = g.clone();
        let Some(t) = g.trace_id.take() else {
            gw.push(g);
            continue;
        };
        g.request_id = Some(rid(&t));
        match t.as_bytes()[29] % 3 {
            0 => g.trace_id = Some(t),
            1 => {}
            _ => {
                let mut inner = g.clone();
                inner.layer += 1;
                inner.source = "inner".into();
                g.trace_id = Some(derived(&t, 0));
                gw.push(inner);
            }
        }
        gw.push(g);
    }
    let mut out: Vec<SpanRecord> = Vec::new();
    let mut roots: BTreeMap<String, i64> = BTreeMap::new();
    for s in spans {
        let mut s = s.clone();
        if s.parent_span_id.is_none() {
            s.request_id = Some(rid(&s.trace_id));
            roots.entry(s.trace_id.clone()).or_insert(s.start_us);
        }
        out.push(s);
    }
    for (trace, start) in roots {
        if let Some(dt) = claimant_at(&trace) {
            let other = derived(&trace, 1);
            let mut c = SpanRecord::new(
                &other,
                "c1a1c1a1c1a1c1a1",
                "batch-job",
                "nightly sync",
                start + dt,
                start + dt + 1_000,
            );
            c.request_id = Some(rid(&trace));
            out.push(c);
        }
    }
    (gw, out)
}

fn rid(trace: &str) -> String {
    format!("rq-{}", &trace[..12])
}

fn claimant(trace: &str) -> Option<i64> {
    match trace.as_bytes()[30] % 4 {
        0 => None,
        1 => Some(-5_000_000),
        2 => Some(5_000_000),
        _ => Some(0),
    }
}

fn check(name: &str) {
    let (gateway, spans, cfg) = incident(name);
    let (gateway, mut spans) = rekey(&gateway, &spans, claimant);
    // Exporter retries: some spans twice.
    let twice: Vec<SpanRecord> = spans.iter().step_by(5).cloned().collect();
    spans.extend(twice);
    live_equals_batch(name, gateway, spans, cfg, |s| {
        s.trace_id.as_bytes()[31] % 3 == 0
    });
}

#[test]
fn live_and_batch_join_request_id_keyed_lines_alike_on_incident_a() {
    check("a_prefill");
}

#[test]
fn live_and_batch_join_request_id_keyed_lines_alike_on_incident_b() {
    check("b_tool_no_timeout");
}

#[test]
fn live_and_batch_join_request_id_keyed_lines_alike_on_incident_c() {
    check("c_dns_retry");
}

/// The service's span decides where an inner layer's line goes, whatever
/// else claims its request id: nginx's own trace, or a later span of
/// another trace. An earlier claimant wins (a tie goes to the lower trace
/// id) — and no line is left in a stand-in trace of its own.
#[test]
fn the_earliest_span_claiming_a_request_id_gets_its_lines() {
    let (gateway, spans, _) = incident("a_prefill");
    let (gateway, spans) = rekey(&gateway, &spans, claimant);
    let mut cols = overtime_model::GatewayColumns::new();
    gateway.iter().for_each(|g| cols.append(g));
    let a = assemble_tables(&[cols.finish()], spans.clone(), true).unwrap();
    let lines_by_rid: BTreeMap<&str, usize> = a
        .traces
        .iter()
        .map(|t| {
            (
                t.id.as_str(),
                t.gateway.iter().filter(|g| g.trace_id.is_none()).count(),
            )
        })
        .collect();
    // (A request id no span carries — a trace the gateway alone saw, a
    // line the fixture logged without a traceparent — is a stand-in rightly.)
    let carried: std::collections::BTreeSet<String> = spans
        .iter()
        .filter_map(|s| s.request_id.as_ref().map(|r| format!("request:{r}")))
        .collect();
    let stand_ins: Vec<&&str> = lines_by_rid
        .keys()
        .filter(|id| carried.contains(**id))
        .collect();
    assert!(
        stand_ins.is_empty(),
        "no stand-in where a span carries the id: {stand_ins:?}"
    );
    let mut checked = 0;
    for s in spans
        .iter()
        .filter(|s| s.parent_span_id.is_none() && s.service != "batch-job")
    {
        let other = derived(&s.trace_id, 1);
        let owner = match claimant(&s.trace_id) {
            Some(dt) if dt < 0 => other,
            Some(0) => other.min(s.trace_id.clone()),
            _ => s.trace_id.clone(),
        };
        let by_rid_alone = gateway
            .iter()
            .any(|g| g.trace_id.is_none() && g.request_id.as_deref() == s.request_id.as_deref());
        if by_rid_alone {
            assert!(
                lines_by_rid.get(owner.as_str()).is_some_and(|n| *n > 0),
                "{}: its lines logged by request id alone are in {owner}",
                s.trace_id
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "the fixture has traces to re-key ({checked})");
}
