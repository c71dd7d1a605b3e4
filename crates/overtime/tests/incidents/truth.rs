//! Verdicts, incidents and findings against a fixture's truth.json.

use super::harness::{doc, truth};
use super::helpers::{
    by_trace, cause_count, evidence, fail_all, finding_kinds, finding_summaries, incidents,
    incidents_of, items, s, seconds_in, verdicts,
};
use super::shape::check_incident_shape;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Every failing trace of the fixture gets the expected verdict, and no
/// other trace gets a non-ok one.
pub fn check_failing(name: &str) {
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
        let timeline = items(&got["timeline"]);
        if !timeline.iter().any(|e| s(e, "span_id") == call) {
            p.push(format!(
                "{tid}: the guilty call's span {call} is not in the timeline"
            ));
        }
        let ev = evidence(got);
        let all = ev.join(" | ");
        for needle in items(&want["evidence_contains"]) {
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
        if let Some(min) = want["min_share"].as_f64()
            && rc["share"].as_f64().is_none_or(|x| x < min)
        {
            p.push(format!("{tid}: share {} < {min}", rc["share"]));
        }
        for c in items(&want["contributing"]) {
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

pub fn check_incidents(name: &str) {
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
            for ex in items(&inc["example_trace_ids"]) {
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
        for want_f in items(&want["findings"]) {
            if !f.contains(want_f.as_str().unwrap()) {
                p.push(format!("{k}/{c}: incident findings lack {want_f}: {f:?}"));
            }
        }
        if let Some(m) = want["findings_summary_contains"].as_object() {
            for (fk, needles) in m {
                let summaries = finding_summaries(inc, fk);
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

pub fn check_findings(name: &str) {
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
