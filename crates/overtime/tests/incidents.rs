//! End to end on the incident fixtures: the real `overtime diagnose` binary
//! on `tests/fixtures/incidents/*` (written by `tests/fixtures/gen_incidents.py`),
//! checked against each fixture's `truth.json` and SPEC §4/§5.
//!
//! Every failing trace of every fixture must get the expected outcome, kind
//! and component; the tests collect every mismatch before failing so one
//! run shows the whole picture.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

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
const BUCKETS: &[&str] = &["<50", "50-200", "200-500", ">500"];

// ------------------------------------------------------------------ running

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
}

fn truth(name: &str) -> Value {
    let p = fixture_dir(name).join("truth.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The fixture's `diagnose` arguments (truth.json `args`): paths made
/// absolute, `@file` replaced by the file's contents.
fn fixture_args(name: &str) -> Vec<String> {
    let dir = fixture_dir(name);
    let t = truth(name);
    let args = t["args"].as_array().expect("truth.json has args");
    let mut out = Vec::new();
    let mut prev_is_path = false;
    for a in args {
        let a = a.as_str().unwrap();
        if let Some(file) = a.strip_prefix('@') {
            let body = std::fs::read_to_string(dir.join(file)).unwrap();
            out.push(body.trim_end().to_string());
        } else if prev_is_path {
            out.push(dir.join(a).to_string_lossy().into_owned());
        } else {
            out.push(a.to_string());
        }
        prev_is_path = matches!(
            a,
            "--nginx-log" | "--nginx-conf" | "--spans" | "--otlp-json"
        );
    }
    out
}

fn overtime(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(args)
        .output()
        .expect("run the overtime binary")
}

fn diagnose(args: &[String]) -> Value {
    let mut full = vec!["diagnose".to_string()];
    full.extend_from_slice(args);
    full.push("--json".into());
    let out = overtime(&full);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "overtime {} exited {:?}\nstderr:\n{stderr}",
        full.join(" "),
        out.status.code()
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "--json must print one JSON document: {e}\nstdout starts: {}\nstderr:\n{stderr}",
            String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(400)])
        )
    });
    assert!(
        doc["verdicts"].is_array(),
        "document has a `verdicts` array"
    );
    assert!(
        doc["incidents"].is_array(),
        "document has an `incidents` array"
    );
    doc
}

/// `diagnose --json` on a fixture, run once per test binary.
fn doc(name: &str) -> &'static Value {
    static A: OnceLock<Value> = OnceLock::new();
    static B: OnceLock<Value> = OnceLock::new();
    static C: OnceLock<Value> = OnceLock::new();
    static H: OnceLock<Value> = OnceLock::new();
    let cell = match name {
        "a_prefill" => &A,
        "b_tool_no_timeout" => &B,
        "c_dns_retry" => &C,
        "healthy" => &H,
        _ => unreachable!(),
    };
    cell.get_or_init(|| diagnose(&fixture_args(name)))
}

// ------------------------------------------------------------------ helpers

fn verdicts(d: &Value) -> &Vec<Value> {
    d["verdicts"].as_array().unwrap()
}

fn incidents(d: &Value) -> &Vec<Value> {
    d["incidents"].as_array().unwrap()
}

fn by_trace(d: &Value) -> BTreeMap<String, &Value> {
    verdicts(d)
        .iter()
        .filter_map(|v| Some((v["trace_id"].as_str()?.to_string(), v)))
        .collect()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("<missing>")
}

fn rfc3339(v: &Value) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(v.as_str()?).ok()
}

fn evidence(v: &Value) -> Vec<String> {
    v["root_cause"]["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every "<number> s" in a text, in seconds.
fn seconds_in(text: &str) -> Vec<f64> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !(b[i - 1].is_ascii_digit() || b[i - 1] == b'.')) {
            let st = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let unit_ok = b.get(i) == Some(&b' ')
                && b.get(i + 1) == Some(&b's')
                && !b.get(i + 2).is_some_and(|c| c.is_ascii_alphanumeric());
            if unit_ok {
                if let Ok(x) = text[st..i].parse::<f64>() {
                    out.push(x);
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

fn finding_kinds(v: &Value) -> BTreeSet<String> {
    v["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["kind"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn fail_all(name: &str, problems: Vec<String>) {
    if !problems.is_empty() {
        let shown: Vec<_> = problems.iter().take(40).cloned().collect();
        panic!(
            "{name}: {} problem(s):\n  {}{}",
            problems.len(),
            shown.join("\n  "),
            if problems.len() > 40 { "\n  …" } else { "" }
        );
    }
}

// ------------------------------------------------------------------ shape

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
    for e in v["timeline"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
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
    for c in v["contributing"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if !KINDS.contains(&s(c, "kind")) || !c["component"].is_string() || !c["share"].is_number()
        {
            p.push(format!("{ctx}: contributing entry {c}"));
        }
    }
    for f in v["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        if !FINDINGS.contains(&s(f, "kind")) || !f["summary"].is_string() {
            p.push(format!("{ctx}: finding {f}"));
        }
    }
}

fn check_incident_shape(p: &mut Vec<String>, inc: &Value, lines: u64) {
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
    if let (Some(r), Some(f)) = (num("requests"), num("failures")) {
        if f > r || r > lines {
            p.push(format!(
                "{ctx}: totals: failures {f} ≤ requests {r} ≤ lines {lines}"
            ));
        }
    }
    for c in inc["causes"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
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
    for b in inc["llm_latency_by_input_tokens"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if !BUCKETS.contains(&s(b, "bucket")) || !b["calls"].is_u64() {
            p.push(format!("{ctx}: latency row {b}"));
        }
        for k in ["p50_ms", "p90_ms", "p99_ms", "max_ms", "share_504"] {
            check_num_or_null(p, &format!("{ctx} latency {}", b["bucket"]), b, k);
        }
    }
    for f in inc["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        if !FINDINGS.contains(&s(f, "kind")) || !f["summary"].is_string() {
            p.push(format!("{ctx}: finding {f}"));
        }
    }
    if inc["example_trace_ids"]
        .as_array()
        .is_none_or(|a| a.is_empty())
    {
        p.push(format!(
            "{ctx}: example_trace_ids must name at least one trace"
        ));
    }
}

// ------------------------------------------------------------------ per trace

/// Every failing trace of the fixture gets the expected verdict, and no
/// other trace gets a non-ok one.
fn check_failing(name: &str) {
    let t = truth(name);
    let d = doc(name);
    let v = by_trace(d);
    let mut p = Vec::new();
    let failing = t["failing"].as_object().unwrap();
    for (tid, want) in failing {
        let Some(got) = v.get(tid) else {
            p.push(format!("{tid}: no verdict (expected {})", want["kind"]));
            continue;
        };
        let rc = &got["root_cause"];
        let (gk, gc) = (s(rc, "kind"), s(rc, "component"));
        let (wk, wc) = (s(want, "kind"), s(want, "component"));
        if s(got, "outcome") != s(want, "outcome") {
            p.push(format!(
                "{tid}: outcome {} ≠ {}",
                got["outcome"], want["outcome"]
            ));
        }
        if (gk, gc) != (wk, wc) {
            p.push(format!(
                "{tid}: root cause {gk}/{gc} ≠ {wk}/{wc}; summary: {}",
                rc["summary"]
            ));
            continue;
        }
        if got["request_id"] != want["request_id"] {
            p.push(format!(
                "{tid}: request_id {} ≠ {}",
                got["request_id"], want["request_id"]
            ));
        }
        let g = &got["gateway"];
        if g["status"].as_u64() != want["gateway_status"].as_u64() {
            p.push(format!(
                "{tid}: gateway.status {} ≠ {}",
                g["status"], want["gateway_status"]
            ));
        }
        let rt = want["request_time_ms"].as_f64().unwrap();
        if g["request_time_ms"]
            .as_f64()
            .is_none_or(|x| (x - rt).abs() > 1.5)
        {
            p.push(format!(
                "{tid}: gateway.request_time_ms {} ≠ {rt}",
                g["request_time_ms"]
            ));
        }
        let call = s(want, "call_span");
        let timeline = got["timeline"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if !timeline.iter().any(|e| s(e, "span_id") == call) {
            p.push(format!(
                "{tid}: the guilty call's span {call} is not in the timeline"
            ));
        }
        let ev = evidence(got);
        let all = ev.join(" | ");
        for needle in want["evidence_contains"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let n = needle.as_str().unwrap();
            if !ev.iter().any(|e| e.contains(n)) {
                p.push(format!("{tid}: evidence lacks {n:?}: [{all}]"));
            }
        }
        if let Some(any) = want["evidence_number_any"].as_array() {
            let found = seconds_in(&all);
            let hit = any
                .iter()
                .filter_map(Value::as_f64)
                .any(|x| found.iter().any(|y| (x - y).abs() <= 0.15));
            if !hit {
                p.push(format!("{tid}: evidence names none of {any:?} s: [{all}]"));
            }
        }
        if let Some(min) = want["min_share"].as_f64() {
            if rc["share"].as_f64().is_none_or(|x| x < min) {
                p.push(format!("{tid}: share {} < {min}", rc["share"]));
            }
        }
        for c in want["contributing"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let ok = got["contributing"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|x| x["kind"] == c["kind"] && x["component"] == c["component"])
            });
            if !ok {
                p.push(format!(
                    "{tid}: contributing lacks {c}: {}",
                    got["contributing"]
                ));
            }
        }
        let f = finding_kinds(got);
        for k in t["findings_every_failing"].as_array().unwrap() {
            if !f.contains(k.as_str().unwrap()) {
                p.push(format!("{tid}: findings lack {k}: {f:?}"));
            }
        }
        if let Some(by_kind) = t["findings_by_kind"][wk].as_array() {
            for k in by_kind {
                if !f.contains(k.as_str().unwrap()) {
                    p.push(format!("{tid}: findings lack {k}: {f:?}"));
                }
            }
        }
    }
    for (tid, got) in &v {
        if s(got, "outcome") != "ok" && !failing.contains_key(tid) {
            p.push(format!(
                "{tid}: verdict {} / {} for a trace that did not fail",
                got["outcome"], got["root_cause"]["kind"]
            ));
        }
    }
    fail_all(name, p);
}

// ------------------------------------------------------------------ incidents

/// Incidents whose own fingerprint is (kind, component).
fn incidents_of<'a>(d: &'a Value, kind: &str, component: &str) -> Vec<&'a Value> {
    incidents(d)
        .iter()
        .filter(|i| s(i, "kind") == kind && s(i, "component") == component)
        .collect()
}

fn cause_count(inc: &Value, kind: &str, component: &str) -> Option<u64> {
    inc["causes"]
        .as_array()?
        .iter()
        .find(|c| s(c, "kind") == kind && s(c, "component") == component)?["count"]
        .as_u64()
}

fn check_incidents(name: &str) {
    let t = truth(name);
    let d = doc(name);
    let mut p = Vec::new();
    let lines = t["gateway_lines"].as_u64().unwrap();
    for inc in incidents(d) {
        check_incident_shape(&mut p, inc, lines);
    }
    let failing = t["failing"].as_object().unwrap();
    for want in t["incidents"].as_array().unwrap() {
        let (k, c) = (s(want, "kind"), s(want, "component"));
        let count = want["count"].as_u64().unwrap();
        let found = incidents_of(d, k, c);
        if found.is_empty() {
            p.push(format!("no incident {k}/{c} (expected {count} failures)"));
            continue;
        }
        let total: u64 = found.iter().filter_map(|i| cause_count(i, k, c)).sum();
        if total != count {
            p.push(format!("incidents {k}/{c}: causes count {total} ≠ {count}"));
        }
        let ours: BTreeSet<&str> = failing
            .iter()
            .filter(|(_, v)| s(v, "kind") == k && s(v, "component") == c)
            .map(|(id, _)| id.as_str())
            .collect();
        for inc in &found {
            for ex in inc["example_trace_ids"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                if !ours.contains(ex.as_str().unwrap_or("")) {
                    p.push(format!(
                        "incident {k}/{c}: example {ex} is not one of its traces"
                    ));
                }
            }
        }
        if want.get("headline_contains").is_none() {
            continue;
        }
        // The main incidents of a fixture are one incident each.
        if found.len() != 1 {
            p.push(format!("{k}/{c}: {} incidents, expected one", found.len()));
            continue;
        }
        let inc = found[0];
        let headline = s(inc, "headline");
        for n in want["headline_contains"].as_array().unwrap() {
            if !headline.contains(n.as_str().unwrap()) {
                p.push(format!("{k}/{c}: headline {headline:?} lacks {n}"));
            }
        }
        let tot = &inc["totals"];
        if tot["failures"].as_u64().is_none_or(|f| f < count) {
            p.push(format!(
                "{k}/{c}: totals.failures {} < {count}",
                tot["failures"]
            ));
        }
        let f = finding_kinds(inc);
        for want_f in want["findings"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if !f.contains(want_f.as_str().unwrap()) {
                p.push(format!("{k}/{c}: incident findings lack {want_f}: {f:?}"));
            }
        }
        if let Some(m) = want["findings_summary_contains"].as_object() {
            for (fk, needles) in m {
                let summaries: Vec<&str> = inc["findings"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                    .iter()
                    .filter(|x| s(x, "kind") == fk)
                    .map(|x| s(x, "summary"))
                    .collect();
                for n in needles.as_array().unwrap() {
                    let n = n.as_str().unwrap();
                    if !summaries.iter().any(|x| x.contains(n)) {
                        p.push(format!("{k}/{c}: {fk} summary lacks {n:?}: {summaries:?}"));
                    }
                }
            }
        }
        if let Some(needles) = want["cause_stats_contains"].as_array() {
            let text = inc["cause_stats"].to_string();
            for n in needles {
                if !text.contains(n.as_str().unwrap()) {
                    p.push(format!("{k}/{c}: cause_stats lacks {n}: {text}"));
                }
            }
        }
    }
    // Every failing trace is in an incident of its fingerprint.
    let mut fps: BTreeMap<(String, String), u64> = BTreeMap::new();
    for v in failing.values() {
        *fps.entry((s(v, "kind").into(), s(v, "component").into()))
            .or_default() += 1;
    }
    for ((k, c), n) in fps {
        if incidents_of(d, &k, &c).is_empty() {
            p.push(format!(
                "{n} failing {k}/{c} traces but no incident {k}/{c}"
            ));
        }
    }
    fail_all(name, p);
}

fn all_findings(d: &Value) -> BTreeSet<String> {
    let mut f = BTreeSet::new();
    for x in verdicts(d).iter().chain(incidents(d)) {
        f.extend(finding_kinds(x));
    }
    f
}

fn check_findings(name: &str) {
    let t = truth(name);
    let f = all_findings(doc(name));
    let mut p = Vec::new();
    for k in t["findings_expected"].as_array().unwrap() {
        if !f.contains(k.as_str().unwrap()) {
            p.push(format!("finding {k} missing (found {f:?})"));
        }
    }
    fail_all(name, p);
}

fn check_shape(name: &str) {
    let mut p = Vec::new();
    for v in verdicts(doc(name)) {
        check_verdict_shape(&mut p, v);
    }
    fail_all(name, p);
}

// ------------------------------------------------------------------ tests

#[test]
fn a_prefill_every_failing_trace() {
    check_failing("a_prefill");
}

#[test]
fn a_prefill_incidents() {
    check_incidents("a_prefill");
}

#[test]
fn a_prefill_findings() {
    check_findings("a_prefill");
}

#[test]
fn a_prefill_verdict_shape() {
    check_shape("a_prefill");
}

#[test]
fn a_prefill_gateway_hid_the_503() {
    // The "information black hole": nginx 504 at 60 s, service 503 at 30.5 s.
    let t = truth("a_prefill");
    let v = by_trace(doc("a_prefill"));
    let mut p = Vec::new();
    for tid in t["failing"].as_object().unwrap().keys() {
        let Some(got) = v.get(tid) else { continue };
        if got["gateway"]["upstream_status"].as_str() != Some("504") {
            p.push(format!(
                "{tid}: gateway.upstream_status {}",
                got["gateway"]["upstream_status"]
            ));
        }
        let summaries: Vec<&str> = got["findings"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .filter(|f| s(f, "kind") == "semantic_mask")
            .map(|f| s(f, "summary"))
            .collect();
        if !summaries
            .iter()
            .any(|x| x.contains("503") && x.contains("504"))
        {
            p.push(format!(
                "{tid}: semantic_mask must name 503 and 504: {summaries:?}"
            ));
        }
    }
    fail_all("a_prefill", p);
}

#[test]
fn a_prefill_latency_by_input_tokens() {
    let d = doc("a_prefill");
    let found = incidents_of(d, "llm_prefill_slow", "deepseek-v4-pro");
    let inc = found.first().expect("an llm_prefill_slow incident");
    let rows = inc["llm_latency_by_input_tokens"]
        .as_array()
        .expect("llm_latency_by_input_tokens");
    let names: Vec<&str> = rows.iter().map(|r| s(r, "bucket")).collect();
    assert_eq!(names, BUCKETS, "the four buckets, in order");
    let row = |b: &str| rows.iter().find(|r| s(r, "bucket") == b).unwrap();
    let f = |b: &str, k: &str| row(b)[k].as_f64().unwrap_or(f64::NAN);
    let mut p = Vec::new();
    for b in BUCKETS {
        let r = row(b);
        if r["calls"].as_u64().unwrap_or(0) == 0 {
            p.push(format!("{b}: no calls"));
            continue;
        }
        let (p50, p90, p99, max) = (
            f(b, "p50_ms"),
            f(b, "p90_ms"),
            f(b, "p99_ms"),
            f(b, "max_ms"),
        );
        if !(p50 <= p90 && p90 <= p99 && p99 <= max) {
            p.push(format!(
                "{b}: P50 {p50} ≤ P90 {p90} ≤ P99 {p99} ≤ max {max} broken"
            ));
        }
        let share = f(b, "share_504");
        if !(0.0..=1.0).contains(&share) {
            p.push(format!("{b}: share_504 {share} not in 0..1"));
        }
    }
    // INCIDENTS.md A: < 50 tokens P50 1.2 s, P90 2.8 s, 0 % 504s.
    let within = |x: f64, want: f64, tol: f64| (x - want).abs() <= want * tol;
    if !within(f("<50", "p50_ms"), 1200.0, 0.15) {
        p.push(format!(
            "<50: P50 {} ms, expected ~1200",
            f("<50", "p50_ms")
        ));
    }
    if !within(f("<50", "p90_ms"), 2800.0, 0.2) {
        p.push(format!(
            "<50: P90 {} ms, expected ~2800",
            f("<50", "p90_ms")
        ));
    }
    if f("<50", "share_504") != 0.0 {
        p.push(format!(
            "<50: share_504 {} must be 0",
            f("<50", "share_504")
        ));
    }
    // 200-500 tokens P50 8.7 s; > 500 slower; the 504 share grows with input.
    if !within(f("200-500", "p50_ms"), 8700.0, 0.2) {
        p.push(format!(
            "200-500: P50 {} ms, expected ~8700",
            f("200-500", "p50_ms")
        ));
    }
    if !(f("<50", "p50_ms") < f("200-500", "p50_ms")
        && f("200-500", "p50_ms") < f(">500", "p50_ms"))
    {
        p.push("P50 must grow with input tokens".into());
    }
    if !(f(">500", "share_504") >= 0.4 && f(">500", "share_504") > f("200-500", "share_504")) {
        p.push(format!(
            ">500: share_504 {} must be high (≥ 0.4) and above 200-500's {}",
            f(">500", "share_504"),
            f("200-500", "share_504")
        ));
    }
    fail_all("a_prefill", p);
}

#[test]
fn a_prefill_markdown_report() {
    let d = doc("a_prefill");
    let inc = incidents_of(d, "llm_prefill_slow", "deepseek-v4-pro");
    let headline = s(
        inc.first().expect("an llm_prefill_slow incident"),
        "headline",
    )
    .to_string();
    let mut args = vec!["diagnose".to_string()];
    args.extend(fixture_args("a_prefill"));
    args.push("--markdown".into());
    let out = overtime(&args);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "--markdown exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        md.contains(&headline),
        "markdown lacks the headline {headline:?}:\n{md}"
    );
    let table_rows: Vec<&str> = md
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .collect();
    for b in ["50-200", "200-500"] {
        let alt = b.replace('-', "–");
        assert!(
            table_rows.iter().any(|l| l.contains(b) || l.contains(&alt)),
            "markdown has no table row for bucket {b}:\n{md}"
        );
    }
    assert!(
        table_rows
            .iter()
            .any(|l| l.contains("500") && (l.contains('>') || l.contains("&gt;"))),
        "markdown has no table row for bucket >500:\n{md}"
    );
}

#[test]
fn b_tool_no_timeout_every_failing_trace() {
    check_failing("b_tool_no_timeout");
}

#[test]
fn b_tool_no_timeout_incidents() {
    check_incidents("b_tool_no_timeout");
}

#[test]
fn b_tool_no_timeout_findings() {
    check_findings("b_tool_no_timeout");
}

#[test]
fn b_tool_no_timeout_verdict_shape() {
    check_shape("b_tool_no_timeout");
}

#[test]
fn c_dns_retry_every_failing_trace() {
    check_failing("c_dns_retry");
}

#[test]
fn c_dns_retry_incidents() {
    check_incidents("c_dns_retry");
}

#[test]
fn c_dns_retry_findings() {
    check_findings("c_dns_retry");
}

#[test]
fn c_dns_retry_verdict_shape() {
    check_shape("c_dns_retry");
}

#[test]
fn healthy_has_no_failure_and_no_incident() {
    let d = doc("healthy");
    let bad: Vec<String> = verdicts(d)
        .iter()
        .filter(|v| s(v, "outcome") != "ok")
        .map(|v| {
            format!(
                "{} {} {}",
                s(v, "trace_id"),
                v["outcome"],
                v["root_cause"]["kind"]
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "healthy traffic got failing verdicts: {bad:#?}"
    );
    assert!(
        incidents(d).is_empty(),
        "healthy traffic opened incidents: {:#?}",
        incidents(d)
    );
    check_shape("healthy");
}

/// Everything but the incident ids, which may be minted per run.
fn without_ids(d: &Value) -> Value {
    let mut d = d.clone();
    if let Some(incs) = d["incidents"].as_array_mut() {
        for i in incs {
            if let Some(o) = i.as_object_mut() {
                o.remove("id");
            }
        }
    }
    d
}

fn twice(args: &[String], flag: &str) -> Vec<String> {
    let mut out = args.to_vec();
    let i = out.iter().position(|a| a == flag).expect("the span flag");
    let file = out[i + 1].clone();
    out.extend([flag.to_string(), file]);
    out
}

#[test]
fn every_span_counts_once_when_a_span_file_is_given_twice() {
    for (name, flag) in [
        ("a_prefill", "--spans"),
        ("b_tool_no_timeout", "--otlp-json"),
    ] {
        let once = doc(name);
        let doubled = diagnose(&twice(&fixture_args(name), flag));
        let (a, b) = (without_ids(once), without_ids(&doubled));
        if a != b {
            let va = by_trace(&a);
            let vb = by_trace(&b);
            let differ: Vec<&String> = va
                .iter()
                .filter(|(k, v)| vb.get(*k) != Some(*v))
                .map(|(k, _)| k)
                .take(5)
                .collect();
            panic!(
                "{name}: giving {flag} twice changed the result ({} vs {} verdicts; first differing traces {differ:?})",
                verdicts(&a).len(),
                verdicts(&b).len()
            );
        }
    }
}

#[test]
fn spans_sent_twice_inside_one_file_count_once() {
    // b_tool_no_timeout's OTLP file repeats some spans (an SDK retry).
    let t = truth("b_tool_no_timeout");
    let distinct = t["distinct_spans"].as_u64().unwrap();
    let mut p = Vec::new();
    let mut timeline_spans = 0u64;
    for v in verdicts(doc("b_tool_no_timeout")) {
        timeline_spans += v["timeline"].as_array().map_or(0, |a| a.len() as u64);
    }
    if timeline_spans > distinct {
        p.push(format!(
            "{timeline_spans} timeline entries > {distinct} distinct spans"
        ));
    }
    check_shape("b_tool_no_timeout"); // includes "no span twice in a timeline"
    fail_all("b_tool_no_timeout", p);
}

#[test]
fn verdicts_start_inside_the_traffic_window() {
    let mut p = Vec::new();
    for name in ["a_prefill", "b_tool_no_timeout", "c_dns_retry"] {
        let t = truth(name);
        let w = &t["traffic_window"];
        let (lo, hi) = (rfc3339(&w[0]).unwrap(), rfc3339(&w[1]).unwrap());
        let slack = chrono::Duration::minutes(3);
        for v in verdicts(doc(name)) {
            match rfc3339(&v["started_at"]) {
                Some(st) if st >= lo - slack && st <= hi + slack => {}
                _ => p.push(format!(
                    "{name} {}: started_at {} outside {lo} .. {hi}",
                    s(v, "trace_id"),
                    v["started_at"]
                )),
            }
        }
    }
    fail_all("traffic window", p);
}
