//! What a user compares between a collector of the group and the lone
//! collector given all the traffic: the verdict of every failing trace,
//! the trace search, the incident reports (counts, shares, headlines) and
//! SQL answers over every table. [`Rig::wait_until_like_single`] waits
//! until every collector running answers as the lone one does, and says
//! where they differ when they never do.

use super::rig::{Collector, Rig, WAIT_S};
use crate::support::sql_answer;
use overtime_test_support::net::{get, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;

/// The SQL whose answers must not depend on which collector is asked
/// (deterministic: no approximate aggregates).
pub(super) const SQL: [&str; 6] = [
    "SELECT count(*) AS n FROM gateway_requests",
    "SELECT count(*) AS n FROM spans",
    "SELECT status, count(*) AS n FROM gateway_requests GROUP BY status ORDER BY status",
    "SELECT kind, component, count(*) AS n FROM verdicts WHERE outcome = 'gateway_timeout' \
     GROUP BY kind, component ORDER BY kind, component",
    "SELECT outcome, count(*) AS n FROM verdicts GROUP BY outcome ORDER BY outcome",
    "SELECT id, fingerprint, status, trace_count, requests, failures, gateway_504, headline \
     FROM incidents ORDER BY id",
];

/// How much of an incident's configuration findings is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Findings {
    /// Every finding with its wording and how many traces showed it.
    Whole,
    /// Which findings an incident has. Their wording and trace counts are
    /// those of each trace's verdict when it was judged ("inferred as
    /// 60.0 s from 23 of 42 504s"): a collector that judges a trace later
    /// than the lone one (the survivors judge a dead collector's traces in
    /// flight after the group's session timeout) has seen more 504s.
    Kinds,
}

/// One collector's answers to everything compared, by what was asked.
pub(super) fn answers(
    c: &Collector,
    failing: &[String],
    findings: Findings,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for sql in SQL {
        let v = match sql_answer(c.port, None, sql) {
            Some(a) if a.status == 200 => a.json()["rows"].clone(),
            Some(a) => Value::from(format!("{} {}", a.status, a.text())),
            None => Value::from("no answer"),
        };
        out.insert(format!("sql: {sql}"), v);
    }
    let json = |path: &str| -> Value {
        match get(c.port, path) {
            Some((200, body)) => serde_json::from_str(&body).unwrap_or(Value::Null),
            Some((st, body)) => Value::from(format!("{st} {body}")),
            None => Value::from("no answer"),
        }
    };
    // The search: which traces failed, and how (a phantom shows here).
    let search = json("/api/traces?limit=10000");
    let listed: BTreeMap<String, Value> = search["traces"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|t| {
                    (
                        t["trace_id"].as_str().unwrap_or("").to_string(),
                        serde_json::json!([t["outcome"], t["kind"], t["component"]]),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.insert("search".into(), serde_json::to_value(listed).unwrap());
    // Each incident's report, whole but for what names the collector.
    let list = json("/api/incidents");
    for i in list["incidents"].as_array().cloned().unwrap_or_default() {
        let id = i["id"].as_str().unwrap_or("").to_string();
        let enc = percent_encode(&id);
        let r = json(&format!("/api/incidents/{enc}"));
        for part in [
            "fingerprint",
            "status",
            "window",
            "headline",
            "headline_share",
            "totals",
            "causes",
            "cause_stats",
            "llm_latency_by_input_tokens",
            "findings",
            "trace_count",
        ] {
            let v = match (part, findings) {
                ("findings", Findings::Kinds) => r[part]
                    .as_array()
                    .map(|l| l.iter().map(|f| f["kind"].clone()).collect())
                    .unwrap_or_default(),
                _ => r[part].clone(),
            };
            out.insert(format!("incident {id}: {part}"), v);
        }
    }
    // The verdict of each failing trace, looked up.
    for id in failing {
        let v = json(&format!("/api/traces/{id}"));
        out.insert(
            format!("trace {id}"),
            serde_json::json!([
                v["outcome"],
                v["root_cause"]["kind"],
                v["root_cause"]["component"],
                v["root_cause"]["summary"],
            ]),
        );
    }
    out
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Where `got` differs from `want`, one line each (at most `max`).
pub(super) fn differences(
    want: &BTreeMap<String, Value>,
    got: &BTreeMap<String, Value>,
    max: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, w) in want {
        match got.get(k) {
            Some(g) if g == w => {}
            Some(g) => out.push(format!("{k}:\n      single: {w}\n      this:   {g}")),
            None => out.push(format!("{k}: missing (single: {w})")),
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("{k}: only here: {}", got[k]));
    }
    out.truncate(max);
    out
}

impl Rig {
    /// Waits until every collector running answers everything compared
    /// exactly as the lone collector does (the failing traces being
    /// `failing`); panics with the differences after [`WAIT_S`].
    pub(super) fn wait_until_like_single(&self, failing: &[String], what: &str) {
        self.wait_until_like_single_with(failing, Findings::Whole, what)
    }

    /// [`Rig::wait_until_like_single`], comparing as much of the
    /// incidents' findings as `findings` says.
    pub(super) fn wait_until_like_single_with(
        &self,
        failing: &[String],
        findings: Findings,
        what: &str,
    ) {
        let single = self.single.as_ref().expect("a rig with the lone collector");
        let last = std::cell::RefCell::new(String::new());
        wait_until(
            WAIT_S,
            what,
            || {
                let want = answers(single, failing, findings);
                let mut report = String::new();
                for c in self.alive() {
                    let d = differences(&want, &answers(c, failing, findings), 12);
                    if !d.is_empty() {
                        report += &format!("\n--- {} differs from the lone collector:\n", c.id);
                        for l in d {
                            report += &format!("  {l}\n");
                        }
                    }
                }
                let same = report.is_empty();
                *last.borrow_mut() = report;
                same
            },
            || format!("{}{}", last.borrow(), self.logs()),
        );
    }
}
