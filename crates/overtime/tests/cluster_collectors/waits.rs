//! What the cluster tests wait for, on every collector running: counts,
//! verdicts, one incident, one page.

use super::rig::{Collector, Rig, WAIT_S};
use super::traffic::truth_failing;
use crate::support::sql_count;
use overtime_test_support::net::{get, wait_until};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

impl Rig {
    /// Waits until every running collector holds `lines` gateway lines
    /// and `spans` spans (its own, its peers' and the bucket's).
    pub(super) fn wait_for_counts(&self, lines: u64, spans: u64, what: &str) {
        let last = std::cell::RefCell::new(String::new());
        wait_until(
            WAIT_S,
            what,
            || {
                let mut seen = String::new();
                let mut ok = true;
                for c in self.alive() {
                    let g = sql_count(c.port, None, "SELECT count(*) AS n FROM gateway_requests");
                    let s = sql_count(c.port, None, "SELECT count(*) AS n FROM spans");
                    seen += &format!("{}: {g} lines, {s} spans; ", c.id);
                    ok &= g == lines && s == spans;
                }
                *last.borrow_mut() = seen;
                ok
            },
            || {
                format!(
                    "want {lines} lines, {spans} spans; {}{}",
                    last.borrow(),
                    self.logs()
                )
            },
        );
    }

    /// Waits until every running collector finds every failing trace of
    /// the truth with its verdict's cause.
    pub(super) fn wait_for_verdicts(&self, failing: &BTreeMap<String, String>) {
        let last = std::cell::RefCell::new(Vec::<String>::new());
        wait_until(
            WAIT_S,
            "every failing trace's verdict from every collector",
            || {
                let mut missing = Vec::new();
                for c in self.alive() {
                    for (id, kind) in failing {
                        let got = get(c.port, &format!("/api/traces/{id}"));
                        let found = got.as_ref().is_some_and(|(st, body)| {
                            *st == 200
                                && serde_json::from_str::<Value>(body)
                                    .is_ok_and(|v| v["root_cause"]["kind"] == kind.as_str())
                        });
                        if !found {
                            missing.push(format!(
                                "{} {id}: {}",
                                c.id,
                                got.map_or("no answer".into(), |(st, b)| {
                                    let v: Value = serde_json::from_str(&b).unwrap_or_default();
                                    format!(
                                        "{st} {} {} {}",
                                        v["outcome"],
                                        v["root_cause"]["kind"],
                                        v["root_cause"]["component"]
                                    )
                                })
                            ));
                        }
                    }
                }
                let done = missing.is_empty();
                *last.borrow_mut() = missing;
                done
            },
            || format!("{:#?}", last.borrow().iter().take(10).collect::<Vec<_>>()),
        );
    }

    /// Waits until every running collector lists exactly one incident,
    /// the same one, of `fingerprint` with `count` failing traces; its id.
    pub(super) fn wait_for_one_incident(&self, fingerprint: &str, count: usize) -> String {
        let last = std::cell::RefCell::new(BTreeMap::<String, Vec<Value>>::new());
        wait_until(
            WAIT_S,
            "one incident with every failure on every collector",
            || {
                let seen: BTreeMap<String, Vec<Value>> = self
                    .alive()
                    .map(|c| (c.id.clone(), self.incidents(c)))
                    .collect();
                let ids: BTreeSet<String> = seen
                    .values()
                    .flatten()
                    .map(|i| i["id"].as_str().unwrap_or("").to_string())
                    .collect();
                let ok = ids.len() == 1
                    && seen.values().all(|l| {
                        l.len() == 1
                            && l[0]["fingerprint"] == fingerprint
                            && l[0]["trace_count"] == count
                            && l[0]["status"] == "open"
                    });
                *last.borrow_mut() = seen;
                ok
            },
            || {
                let seen = last.borrow();
                let brief: BTreeMap<&String, Vec<String>> = seen
                    .iter()
                    .map(|(c, l)| {
                        (
                            c,
                            l.iter()
                                .map(|i| {
                                    format!(
                                        "{} {} traces={} {}",
                                        i["id"], i["fingerprint"], i["trace_count"], i["status"]
                                    )
                                })
                                .collect(),
                        )
                    })
                    .collect();
                // Which collector judged each failing trace live, and how:
                // where the views part, a trace two collectors judged.
                let held: BTreeMap<String, Vec<String>> = truth_failing()
                    .keys()
                    .map(|id| {
                        let by = self
                            .alive()
                            .filter_map(|c| {
                                let (st, body) = get(c.port, &format!("/api/traces/{id}?local=1"))?;
                                let v: Value = serde_json::from_str(&body).ok()?;
                                (st == 200).then(|| {
                                    format!(
                                        "{} {} rev {} ({} timeline entries)",
                                        c.id,
                                        v["root_cause"]["kind"],
                                        v["revision"],
                                        v["timeline"].as_array().map_or(0, Vec::len)
                                    )
                                })
                            })
                            .collect();
                        (id.clone(), by)
                    })
                    .collect();
                format!("{brief:#?}\nlive verdicts of the failing traces: {held:#?}")
            },
        );
        let first = self.alive().next().unwrap();
        self.incidents(first)[0]["id"].as_str().unwrap().to_string()
    }

    /// Waits until Alertmanager lists the page of `fingerprint`, then
    /// watches it over several resend intervals: exactly one, always sent
    /// by `owner` (its report link names the sender).
    pub(super) fn check_one_page_from(&self, fingerprint: &str, owner: &Collector) {
        wait_until(
            WAIT_S,
            "the incident's page in Alertmanager",
            || !self.pages(fingerprint).is_empty(),
            || format!("alertmanager lists {:#?}{}", self.am.alerts(), self.logs()),
        );
        let deadline = Instant::now() + Duration::from_secs(6);
        while Instant::now() < deadline {
            let pages = self.pages(fingerprint);
            assert_eq!(pages.len(), 1, "one page per fingerprint: {pages:#?}");
            let link = pages[0]["annotations"]["report_url"].as_str().unwrap_or("");
            assert!(
                link.starts_with(&owner.url()),
                "the page comes from the owner {} ({}): {link}",
                owner.id,
                owner.url()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
