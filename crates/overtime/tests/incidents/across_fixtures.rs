//! Checks over several fixtures: spans count once however often they are
//! given, and verdicts start inside each fixture's traffic window.

use super::harness::{diagnose, doc, fixture_args, truth};
use super::helpers::{by_trace, fail_all, rfc3339, s, verdicts};
use super::shape::check_shape;
use serde_json::Value;

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
