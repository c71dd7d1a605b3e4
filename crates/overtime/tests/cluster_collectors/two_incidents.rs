//! The issue's run: two recorded incidents that overlap in time (A, an
//! LLM's slow prefill behind a 60 s gateway, four causes; C, a slow DNS
//! behind a 10 s one) played into three collectors of one group and into
//! a lone collector reading the same topics. A's lines are keyed as
//! `docs/kafka.md` says (the traceparent's trace id, else `$request_id`);
//! C's services are auto-instrumented behind an nginx that passes no
//! traceparent, so every C line is keyed by its `$request_id`, which is
//! not its spans' trace id, and lands on a collector that never sees its
//! spans. Mid-incident the collector that speaks for C's fingerprint is
//! killed with `kill -9`, and restarted later on its volume.
//!
//! Mid-incident, every collector answers as the lone one: the same
//! verdict for every failing trace, the same trace search (no trace
//! invented from a request id), the same incident reports, the same SQL
//! over `verdicts`, `incidents`, lines and spans. While one is down and
//! after it is back, every record is counted once, the survivors name it
//! as not answering; once it is back, every collector answers as the lone
//! one again — the traces in flight at the kill, split between the dead
//! collector's flushes and what the next owner read again, judged whole,
//! their LLM calls and 504s counted once (which findings an incident has
//! is compared then, not their wording: see `compare::Findings`). One
//! Jira ticket per fingerprint, with no comment; one page per
//! fingerprint. Not yet asserted (issue 42, open): that the survivors
//! answer exactly as the lone one while it is down. The traces it had
//! stored and not judged are read again from Kafka by its partitions' new
//! owners, a line keyed by request id is looked up until the takeover has
//! passed, and a line it judged alone is judged again by the survivors;
//! measured under load, the failing traces, search and SQL then agree,
//! but an incident's LLM calls by input size can still differ by a few
//! calls of the traces in flight at the kill.

use super::compare::Findings;
use super::rig::{GRACE_MS, Rig, Spec, WAIT_S};
use super::traffic::{Incident, Keying, failing_of, lines, play, produce, producer};
use crate::support::{fixture, sql_answer};
use overtime_test_support::net::wait_until;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const EDGE_A: &str = "cluster-edge-a";
const EDGE_C: &str = "cluster-edge-c";

#[test]
fn two_overlapping_incidents_keyed_by_request_id_read_alike_from_every_collector_through_a_kill_and_a_restart()
 {
    let started = Instant::now();
    let c_format = std::fs::read_to_string(fixture("c_dns_retry", "log_format.txt")).unwrap();
    let mut rig = Rig::start_spec(Spec {
        collectors: 3,
        edges: vec![(EDGE_A, "overtime".into()), (EDGE_C, c_format)],
        single: true,
        session_timeout_ms: 10_000,
    });
    let traffic = play(
        &[
            Incident {
                fixture: "a_prefill",
                edge_topic: EDGE_A,
                keying: Keying::AsDocs,
            },
            Incident {
                fixture: "c_dns_retry",
                edge_topic: EDGE_C,
                keying: Keying::RequestIdOnly,
            },
        ],
        75_000,
    );
    let mut failing: BTreeMap<String, String> = failing_of("a_prefill");
    failing.extend(failing_of("c_dns_retry"));
    let failing_ids: Vec<String> = failing.keys().cloned().collect();
    let fingerprints: BTreeSet<String> = {
        let t = |f: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(fixture(f, "truth.json")).unwrap())
                .unwrap()
        };
        ["a_prefill", "c_dns_retry"]
            .iter()
            .flat_map(|f| {
                t(f)["failing"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| {
                        format!(
                            "{}:{}",
                            v["kind"].as_str().unwrap(),
                            v["component"].as_str().unwrap()
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let c_fingerprint = "upstream_connect_slow:weather_api";
    let ids: Vec<String> = rig.collectors.iter().map(|c| c.id.clone()).collect();
    let owner_id =
        overtime_server::fingerprint_owner(c_fingerprint, ids.iter().map(String::as_str))
            .unwrap()
            .to_string();

    // Up to C's middle failing line: both incidents under way.
    let c_failing = failing_of("c_dns_retry");
    let cut = traffic
        .iter()
        .enumerate()
        .filter(|(_, r)| r.topic == EDGE_C && c_failing.contains_key(&r.trace))
        .nth(c_failing.len() / 2)
        .unwrap()
        .0;
    let (head, tail) = traffic.split_at(cut);
    let (p, deliveries) = producer(&rig.broker.addr);
    produce(&p, head, 0, Duration::ZERO);
    let head_failing: Vec<String> = failing_ids
        .iter()
        .filter(|id| {
            head.iter()
                .any(|r| r.topic != super::traffic::SPANS && &r.trace == *id)
        })
        .cloned()
        .collect();
    rig.wait_for_counts(
        lines(head),
        head.len() as u64 - lines(head),
        "the first part counted by every collector",
    );
    rig.wait_until_like_single(
        &head_failing,
        "every collector answering as the lone one, mid-incident",
    );

    // The rest flows while C's owner dies.
    let killer = {
        let tail = tail.to_vec();
        let first = head.len() as u64;
        std::thread::spawn(move || produce(&p, &tail, first, Duration::from_millis(3)))
    };
    std::thread::sleep(Duration::from_millis(tail.len() as u64 * 3 / 3));
    let i = rig
        .collectors
        .iter()
        .position(|c| c.id == owner_id)
        .unwrap();
    rig.collectors[i].serve.take().unwrap().kill9();
    let dead_url = rig.collectors[i].url();
    killer.join().unwrap();
    assert!(deliveries.failed.lock().unwrap().is_empty());
    assert_eq!(deliveries.ok.load(Relaxed), traffic.len() as u64);

    // While it is down: the survivors count every record and name it as
    // not answering.
    let total_lines = lines(&traffic);
    let total_spans = traffic.len() as u64 - total_lines;
    rig.wait_for_counts(
        total_lines,
        total_spans,
        "every record counted once by the survivors",
    );
    // What it had read, flushed and not told them of (traces waiting for
    // their grace period at its death, or judged after its last answer) is
    // read again from Kafka by its partitions' new owners, for their
    // diagnosis only. Exact equality with the lone collector while it is
    // down is not asserted yet (issue 42, open): under load an incident's
    // LLM calls by input size can still differ by a few calls of the
    // traces in flight at the kill. Checked here: every record counted
    // once, and the dead collector named.
    for c in rig.alive() {
        let a = sql_answer(c.port, None, "SELECT count(*) AS n FROM verdicts").unwrap();
        let v = a.json();
        let unanswered: Vec<&str> = v["peers"]["unanswered"]
            .as_array()
            .map(|u| u.iter().filter_map(|p| p["peer"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(unanswered, [dead_url.as_str()], "{}: {v}", c.id);
    }

    // Back on its volume: nothing counted twice, everything as before.
    rig.start_collector(i);
    rig.wait_for_counts(
        total_lines,
        total_spans,
        "every record counted once on every collector",
    );
    // Every collector, the restarted one included, answers as the lone
    // collector: the same verdicts and search, the same incident reports
    // (counts, shares, headlines, causes, the LLM calls in the latency
    // buckets, which findings), the same SQL (verdicts per kind) —
    // nothing of the traces in flight at the kill lost, nothing replayed
    // counted twice. (A finding's wording is its traces' when they were
    // judged: see `Findings::Kinds`.) Each gateway is its own layer (the
    // rig): when A's and C's gateways (60 s and 10 s read timeouts) shared
    // one, that layer's inferred timeout changed as their 504s arrived,
    // and a judge_slow trace judged later after the restart could read as
    // gateway_timeout_mismatch — a verdict is not revised when its layer's
    // inferred timeout changes (issue 42, open).
    rig.wait_until_like_single_with(
        &failing_ids,
        Findings::Kinds,
        "every collector answering as the lone one after the kill and the restart",
    );
    // Notifications: one ticket per fingerprint, never commented; one page
    // per fingerprint.
    // A ticket's summary is its incident's headline, "… from KIND on
    // COMPONENT …".
    let of = |i: &super::jira_standin::Issue, fp: &str| {
        let (kind, component) = fp.split_once(':').unwrap();
        i.summary.contains(&format!(" from {kind} on {component}"))
    };
    wait_until(
        WAIT_S,
        "a ticket for every fingerprint",
        || {
            let issues = rig.jira.issues();
            fingerprints
                .iter()
                .all(|fp| issues.iter().any(|i| of(i, fp)))
        },
        || {
            format!(
                "{:#?}{}",
                rig.jira
                    .issues()
                    .iter()
                    .map(|i| &i.summary)
                    .collect::<Vec<_>>(),
                rig.logs()
            )
        },
    );
    std::thread::sleep(Duration::from_millis(3 * GRACE_MS + 3_000));
    let (issues, rejected) = rig.tickets();
    assert!(rejected.is_empty(), "Jira refused: {rejected:#?}");
    let brief: Vec<(String, String, usize)> = issues
        .iter()
        .map(|i| (i.key.clone(), i.summary.clone(), i.comments.len()))
        .collect();
    for fp in &fingerprints {
        let n = issues.iter().filter(|i| of(i, fp)).count();
        assert_eq!(n, 1, "one ticket for {fp}: {brief:#?}");
        let pages = rig.pages(fp);
        assert_eq!(pages.len(), 1, "one page for {fp}: {pages:#?}");
    }
    assert!(
        issues.iter().all(|i| i.comments.is_empty()),
        "no comment on any ticket: {brief:#?}"
    );
    // The platform's SLO, burn-rate and breaker conditions are left to
    // Prometheus over every collector's counters (`[cluster] slo_alerts`
    // by default): no collector pages them over its own partitions (each
    // of them, seeing these 504s among its own requests, would).
    let per_partition: Vec<String> = rig
        .am
        .alerts()
        .iter()
        .filter(|a| a["labels"]["alertname"] != overtime_slo::alert_names::INCIDENT)
        .map(|a| a["labels"].to_string())
        .collect();
    assert!(
        per_partition.is_empty(),
        "no SLO alert from a collector of the group: {per_partition:#?}"
    );
    eprintln!(
        "cluster_collectors: A and C overlapping, C keyed by request id; {} records, {} failing \
         traces, {} fingerprints; {owner_id} killed mid-incident and restarted; every collector \
         answered as the lone one mid-incident and after the restart; {} tickets, no comment; in {:.0?}",
        traffic.len(),
        failing.len(),
        fingerprints.len(),
        issues.len(),
        started.elapsed()
    );
}
