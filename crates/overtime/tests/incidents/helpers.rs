//! Reading the document `diagnose --json` prints, and reporting every
//! problem at once.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub fn verdicts(d: &Value) -> &Vec<Value> {
    d["verdicts"].as_array().unwrap()
}

pub fn incidents(d: &Value) -> &Vec<Value> {
    d["incidents"].as_array().unwrap()
}

pub fn by_trace(d: &Value) -> BTreeMap<String, &Value> {
    verdicts(d)
        .iter()
        .filter_map(|v| Some((v["trace_id"].as_str()?.to_string(), v)))
        .collect()
}

/// An array's elements; none when `v` is missing or not an array.
pub fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

pub fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("<missing>")
}

pub fn rfc3339(v: &Value) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(v.as_str()?).ok()
}

pub fn evidence(v: &Value) -> Vec<String> {
    items(&v["root_cause"]["evidence"])
        .iter()
        .filter_map(|x| x.as_str().map(String::from))
        .collect()
}

/// Every "<number> s" in a text, in seconds.
pub fn seconds_in(text: &str) -> Vec<f64> {
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
            if unit_ok && let Ok(x) = text[st..i].parse::<f64>() {
                out.push(x);
            }
        } else {
            i += 1;
        }
    }
    out
}

pub fn finding_kinds(v: &Value) -> BTreeSet<String> {
    items(&v["findings"])
        .iter()
        .filter_map(|f| f["kind"].as_str().map(String::from))
        .collect()
}

/// The summaries of `v`'s findings of one kind.
pub fn finding_summaries<'a>(v: &'a Value, kind: &str) -> Vec<&'a str> {
    items(&v["findings"])
        .iter()
        .filter(|f| s(f, "kind") == kind)
        .map(|f| s(f, "summary"))
        .collect()
}

pub fn fail_all(name: &str, problems: Vec<String>) {
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

/// Incidents whose own fingerprint is (kind, component).
pub fn incidents_of<'a>(d: &'a Value, kind: &str, component: &str) -> Vec<&'a Value> {
    incidents(d)
        .iter()
        .filter(|i| s(i, "kind") == kind && s(i, "component") == component)
        .collect()
}

pub fn cause_count(inc: &Value, kind: &str, component: &str) -> Option<u64> {
    inc["causes"]
        .as_array()?
        .iter()
        .find(|c| s(c, "kind") == kind && s(c, "component") == component)?["count"]
        .as_u64()
}
