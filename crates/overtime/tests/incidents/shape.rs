//! The shape of every verdict and incident (docs/diagnosis.md): required fields,
//! types and the closed sets of stages, statuses, outcomes, kinds,
//! findings and token buckets.

use super::harness::doc;
use super::helpers::{evidence, fail_all, items, rfc3339, s, verdicts};
use serde_json::Value;
use std::collections::BTreeSet;

const STAGES: &[&str] = &[
    "gateway", "service", "llm", "tool", "memory", "judge", "queue", "network", "other",
];
const STATUSES: &[&str] = &["unset", "ok", "error", "timeout", "cancelled"];
const OUTCOMES: &[&str] = &["gateway_timeout", "service_timeout", "error", "ok"];
const KINDS: &[&str] = &[
    "stream_idle_gap",
    "gateway_timeout_mismatch",
    "serial_budget_exhaustion",
    "pool_saturation",
    "judge_slow",
    "llm_queueing",
    "llm_prefill_slow",
    "llm_decode_slow",
    "llm_slow",
    "upstream_connect_slow",
    "retry_amplification",
    "tool_no_timeout",
    "tool_slow",
    "unknown",
];
const FINDINGS: &[&str] = &[
    "timeout_misaligned",
    "semantic_mask",
    "no_timeout",
    "gateway_timeout_inferred",
];
pub const BUCKETS: &[&str] = &["<50", "50-200", "200-500", ">500"];

/// Every finding of a verdict or an incident has a known kind and a summary.
fn check_finding_shapes(p: &mut Vec<String>, ctx: &str, v: &Value) {
    for f in items(&v["findings"]) {
        if !FINDINGS.contains(&s(f, "kind")) || !f["summary"].is_string() {
            p.push(format!("{ctx}: finding {f}"));
        }
    }
}

fn check_num_or_null(p: &mut Vec<String>, ctx: &str, v: &Value, k: &str) {
    if !(v[k].is_number() || v[k].is_null()) || v.get(k).is_none() {
        p.push(format!(
            "{ctx}: `{k}` must be present, a number or null (got {})",
            v[k]
        ));
    }
}

fn check_verdict_shape(p: &mut Vec<String>, v: &Value) {
    let ctx = format!("verdict {}", s(v, "trace_id"));
    for k in [
        "trace_id",
        "request_id",
        "started_at",
        "outcome",
        "gateway",
        "budget",
        "timeline",
        "root_cause",
        "contributing",
        "findings",
    ] {
        if v.get(k).is_none() {
            p.push(format!("{ctx}: missing `{k}`"));
        }
    }
    let tid = s(v, "trace_id");
    if tid.len() != 32
        || !tid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        p.push(format!("{ctx}: trace_id must be 32 lowercase hex"));
    }
    if rfc3339(&v["started_at"]).is_none() {
        p.push(format!(
            "{ctx}: started_at {} is not RFC 3339",
            v["started_at"]
        ));
    }
    if !OUTCOMES.contains(&s(v, "outcome")) {
        p.push(format!("{ctx}: outcome {}", v["outcome"]));
    }
    let g = &v["gateway"];
    if !g.is_null() {
        for k in [
            "status",
            "request_time_ms",
            "upstream_connect_ms",
            "upstream_header_ms",
            "upstream_response_ms",
        ] {
            check_num_or_null(p, &format!("{ctx} gateway"), g, k);
        }
        if !(g["upstream_status"].is_string() || g["upstream_status"].is_null()) {
            p.push(format!(
                "{ctx}: gateway.upstream_status must be a string or null"
            ));
        }
    }
    let b = &v["budget"];
    check_num_or_null(p, &format!("{ctx} budget"), b, "total_ms");
    if !b["consumed_ms"].is_number() {
        p.push(format!("{ctx}: budget.consumed_ms must be a number"));
    }
    if !(b["source"].is_null()
        || ["x-max-wait", "span", "gateway", "config"].contains(&s(b, "source")))
    {
        p.push(format!("{ctx}: budget.source {}", b["source"]));
    }
    let mut ids = BTreeSet::new();
    for e in items(&v["timeline"]) {
        let sid = s(e, "span_id");
        if !ids.insert(sid.to_string()) {
            p.push(format!(
                "{ctx}: span {sid} twice in the timeline (spans must count once)"
            ));
        }
        for k in ["name", "component"] {
            if !e[k].is_string() {
                p.push(format!("{ctx}: timeline {sid}: `{k}` must be a string"));
            }
        }
        if !STAGES.contains(&s(e, "stage")) {
            p.push(format!("{ctx}: timeline {sid}: stage {}", e["stage"]));
        }
        if !STATUSES.contains(&s(e, "status")) {
            p.push(format!("{ctx}: timeline {sid}: status {}", e["status"]));
        }
        for k in ["start_offset_ms", "duration_ms", "critical_ms"] {
            if !e[k].is_number() {
                p.push(format!("{ctx}: timeline {sid}: `{k}` must be a number"));
            }
        }
        for k in ["timeout_ms", "remaining_budget_ms"] {
            check_num_or_null(p, &format!("{ctx} timeline {sid}"), e, k);
        }
        if e.get("parent_span_id").is_none() || !e["attempt"].is_u64() {
            p.push(format!(
                "{ctx}: timeline {sid}: parent_span_id and attempt are required"
            ));
        }
    }
    let rc = &v["root_cause"];
    if !KINDS.contains(&s(rc, "kind")) {
        p.push(format!("{ctx}: root_cause.kind {}", rc["kind"]));
    }
    let share = rc["share"].as_f64().unwrap_or(-1.0);
    if !(0.0..=1.0001).contains(&share) {
        p.push(format!(
            "{ctx}: root_cause.share {} not in 0..1",
            rc["share"]
        ));
    }
    if !rc["component"].is_string() || !rc["summary"].is_string() || !rc["evidence"].is_array() {
        p.push(format!(
            "{ctx}: root_cause needs component, summary, evidence"
        ));
    }
    if s(v, "outcome") != "ok" && s(rc, "kind") != "unknown" && evidence(v).is_empty() {
        p.push(format!("{ctx}: a diagnosed failure needs evidence"));
    }
    for c in items(&v["contributing"]) {
        if !KINDS.contains(&s(c, "kind")) || !c["component"].is_string() || !c["share"].is_number()
        {
            p.push(format!("{ctx}: contributing entry {c}"));
        }
    }
    check_finding_shapes(p, &ctx, v);
}

pub fn check_incident_shape(p: &mut Vec<String>, inc: &Value, lines: u64) {
    let ctx = format!(
        "incident {} ({}/{})",
        inc["id"], inc["kind"], inc["component"]
    );
    for k in [
        "id",
        "fingerprint",
        "kind",
        "component",
        "status",
        "window",
        "headline",
        "totals",
        "causes",
        "cause_stats",
        "llm_latency_by_input_tokens",
        "findings",
        "example_trace_ids",
    ] {
        if inc.get(k).is_none() {
            p.push(format!("{ctx}: missing `{k}`"));
        }
    }
    if inc["id"].as_str().is_none_or(str::is_empty) && !inc["id"].is_u64() {
        p.push(format!("{ctx}: id must be a non-empty string or a number"));
    }
    if inc["fingerprint"].is_null() || inc["fingerprint"] == Value::String(String::new()) {
        p.push(format!("{ctx}: empty fingerprint"));
    }
    if !KINDS.contains(&s(inc, "kind")) || s(inc, "kind") == "unknown" {
        p.push(format!(
            "{ctx}: kind must be a root-cause kind other than unknown"
        ));
    }
    if !inc["status"].is_string() {
        p.push(format!("{ctx}: status must be a string"));
    }
    match (
        rfc3339(&inc["window"]["start"]),
        rfc3339(&inc["window"]["end"]),
    ) {
        (Some(a), Some(b)) if a <= b => {}
        _ => p.push(format!(
            "{ctx}: window {} must be RFC 3339, start ≤ end",
            inc["window"]
        )),
    }
    if inc["headline"]
        .as_str()
        .is_none_or(|h| h.trim().is_empty() || h.contains('\n'))
    {
        p.push(format!("{ctx}: headline must be one non-empty line"));
    }
    let t = &inc["totals"];
    let num = |k: &str| t[k].as_u64();
    for k in [
        "requests",
        "failures",
        "gateway_504",
        "gateway_503",
        "timeouts",
    ] {
        if num(k).is_none() {
            p.push(format!("{ctx}: totals.{k} must be a count"));
        }
    }
    if let (Some(r), Some(f)) = (num("requests"), num("failures"))
        && (f > r || r > lines)
    {
        p.push(format!(
            "{ctx}: totals: failures {f} ≤ requests {r} ≤ lines {lines}"
        ));
    }
    for c in items(&inc["causes"]) {
        if !KINDS.contains(&s(c, "kind"))
            || !c["component"].is_string()
            || !c["count"].is_u64()
            || !c["share"]
                .as_f64()
                .is_some_and(|x| (0.0..=1.0001).contains(&x))
        {
            p.push(format!(
                "{ctx}: cause {c} needs kind, component, count, share 0..1"
            ));
        }
    }
    for b in items(&inc["llm_latency_by_input_tokens"]) {
        if !BUCKETS.contains(&s(b, "bucket")) || !b["calls"].is_u64() {
            p.push(format!("{ctx}: latency row {b}"));
        }
        for k in ["p50_ms", "p90_ms", "p99_ms", "max_ms", "share_504"] {
            check_num_or_null(p, &format!("{ctx} latency {}", b["bucket"]), b, k);
        }
    }
    check_finding_shapes(p, &ctx, inc);
    if inc["example_trace_ids"]
        .as_array()
        .is_none_or(|a| a.is_empty())
    {
        p.push(format!(
            "{ctx}: example_trace_ids must name at least one trace"
        ));
    }
}

pub fn check_shape(name: &str) {
    let mut p = Vec::new();
    for v in verdicts(doc(name)) {
        check_verdict_shape(&mut p, v);
    }
    fail_all(name, p);
}
