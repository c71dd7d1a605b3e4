//! Several `overtime serve` collectors working as one, every part real and
//! started here: an S3-compatible server (s3rver) holding the Parquet of
//! all of them (`[store] url = "s3://…"`), a tansu Kafka broker whose
//! topics they read in one consumer group, a real Alertmanager they page
//! and the Jira stand-in (overtime-jira's tests' own, which refuses what
//! Jira refuses) they ticket, each collector listing all of them as
//! `[cluster] peers`.
//!
//! Incident C (`tests/fixtures/incidents/c_dns_retry`, played as the
//! last two minutes' traffic) is produced into the topics keyed by trace id, so each collector
//! diagnoses the traces of its partitions. What a user checks then holds
//! on every collector: SQL counts every line and span, every failing trace
//! of the truth has its verdict, and `/api/incidents` shows the one
//! incident with all its failures; one ticket reaches Jira and one page
//! Alertmanager, sent by the fingerprint's owner.
//!
//! What a kill -9 of the owner mid-incident does: `crash.rs`.
//!
//! Needs tansu (`scripts/tansu`), node and npm (s3rver) and Debian's
//! `prometheus-alertmanager`; a missing one fails the test naming it.

use overtime_test_support::net::{get, wait_until};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

mod compare;
mod crash;
mod rig;
mod traffic;
mod two_incidents;
mod waits;
use rig::{GRACE_MS, Rig, WAIT_S};
use traffic::{
    EDGE, SPANS, count, incident_traffic, produce, producer, truth_failing, truth_fingerprint,
};

// The Jira stand-in of overtime-jira's tests (it refuses what Jira
// refuses), compiled into this binary too rather than copied.
#[path = "../../../overtime-jira/tests/support/mod.rs"]
#[allow(clippy::all, unused)]
mod jira_standin;

#[test]
fn three_collectors_in_one_group_answer_for_all_traffic_and_notify_once() {
    let started = Instant::now();
    let rig = Rig::start(3);
    let traffic = incident_traffic();
    let failing = truth_failing();
    let fingerprint = truth_fingerprint();
    let (p, deliveries) = producer(&rig.broker.addr);
    produce(&p, &traffic, 0, Duration::ZERO);
    assert!(deliveries.failed.lock().unwrap().is_empty());
    assert_eq!(deliveries.ok.load(Relaxed), traffic.len() as u64);

    // SQL on any collector counts every record, whichever collector read it.
    rig.wait_for_counts(
        count(&traffic, EDGE),
        count(&traffic, SPANS),
        "every line and span counted by every collector",
    );
    rig.wait_for_verdicts(&failing);
    // The traffic really was split: each failing trace gets its live
    // verdict from one collector, and not all from the same one.
    let judged = || -> Vec<usize> {
        rig.alive()
            .map(|c| {
                failing
                    .keys()
                    .filter(|id| {
                        matches!(
                            get(c.port, &format!("/api/traces/{id}?local=1")),
                            Some((200, _))
                        )
                    })
                    .count()
            })
            .collect()
    };
    wait_until(
        WAIT_S,
        "each failing trace judged live by one collector",
        || judged().iter().sum::<usize>() == failing.len(),
        || format!("{:?}", judged()),
    );
    let judged = judged();
    assert!(
        judged.iter().filter(|n| **n > 0).count() >= 2,
        "the group split the failing traces: {judged:?}"
    );
    let incident = rig.wait_for_one_incident(&fingerprint, failing.len());

    // One ticket, filed once the grace period is over, whoever owns it.
    wait_until(
        WAIT_S,
        "a Jira ticket for the incident",
        || !rig.jira.issues().is_empty(),
        || rig.logs(),
    );
    // Every collector has seen the incident for more than the grace
    // period: a non-owner that tickets would have by now.
    std::thread::sleep(Duration::from_millis(3 * GRACE_MS + 3_000));
    let (issues, rejected) = rig.tickets();
    assert!(rejected.is_empty(), "Jira refused: {rejected:#?}");
    assert_eq!(
        issues.len(),
        1,
        "one ticket for incident {incident}: {:#?}",
        issues
            .iter()
            .map(|i| (&i.key, &i.summary, &i.labels))
            .collect::<Vec<_>>()
    );
    assert_eq!(rig.jira.count("POST", "/rest/api/3/issue"), 1);
    let ids: Vec<&str> = rig.collectors.iter().map(|c| c.id.as_str()).collect();
    let owner_id = overtime_server::fingerprint_owner(&fingerprint, ids).unwrap();
    let owner = rig.collectors.iter().find(|c| c.id == owner_id).unwrap();
    rig.check_one_page_from(&fingerprint, owner);
    eprintln!(
        "cluster_collectors: 3 collectors, {} records, {} failing traces found from each, \
         judged {judged:?} by each, incident {incident} owned by {owner_id}: 1 ticket, 1 page, \
         in {:.0?}",
        traffic.len(),
        failing.len(),
        started.elapsed()
    );
}
