//! A kill -9 of the fingerprint's owner mid-incident, while traffic
//! flows: the survivors answer and name the dead peer; the dead
//! collector's Kafka offsets were committed at its flushes to the bucket,
//! so they read again whatever it had not flushed and count every
//! produced record while it is down; the next owner pages (same labels:
//! still one page in Alertmanager) and the Jira notifier finds the first
//! ticket instead of filing a second. It comes back on its own volume, as
//! an orchestrator restarts it: it replays nothing Kafka delivered again
//! (its Kafka rows were never in its WAL), so every record is still
//! counted once on every collector, every failing trace has its verdict,
//! the incident has all its failures, and still one ticket and one page.

use super::*;
use crate::support::sql_answer;

#[test]
fn killing_the_owner_mid_incident_loses_nothing_acknowledged_and_files_no_second_ticket() {
    let started = Instant::now();
    let mut rig = Rig::start(3);
    let traffic = incident_traffic();
    let failing = truth_failing();
    let fingerprint = truth_fingerprint();
    let ids: Vec<String> = rig.collectors.iter().map(|c| c.id.clone()).collect();
    let owner_id = overtime_server::fingerprint_owner(&fingerprint, ids.iter().map(String::as_str))
        .unwrap()
        .to_string();

    // Up to the gateway line of the middle failing trace: the incident
    // is under way.
    let cut = traffic
        .iter()
        .enumerate()
        .filter(|(_, r)| r.topic == EDGE && failing.contains_key(&r.key))
        .nth(failing.len() / 2)
        .unwrap()
        .0;
    let (head, tail) = traffic.split_at(cut);
    let (p, deliveries) = producer(&rig.broker.addr);
    produce(&p, head, 0, Duration::ZERO);
    let failing_in_head: BTreeMap<String, String> = failing
        .iter()
        .filter(|(id, _)| head.iter().any(|r| r.topic == EDGE && &r.key == *id))
        .map(|(a, b)| (a.clone(), b.clone()))
        .collect();
    assert!(
        !failing_in_head.is_empty() && failing_in_head.len() < failing.len(),
        "the cut falls mid-incident"
    );
    rig.wait_for_counts(
        count(head, EDGE),
        count(head, SPANS),
        "the first part counted by every collector",
    );
    rig.wait_for_verdicts(&failing_in_head);
    wait_until(
        WAIT_S,
        "the owner's ticket",
        || !rig.jira.issues().is_empty(),
        || rig.logs(),
    );
    let owner = rig.collectors.iter().find(|c| c.id == owner_id).unwrap();
    rig.check_one_page_from(&fingerprint, owner);

    // The rest flows while the owner dies.
    let killer = {
        let tail = tail.to_vec();
        let first = head.len() as u64;
        std::thread::spawn(move || {
            produce(&p, &tail, first, Duration::from_millis(5));
        })
    };
    std::thread::sleep(Duration::from_millis(tail.len() as u64 * 5 / 3));
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

    // The survivors answer, saying who did not.
    for c in rig.alive() {
        let a = sql_answer(c.port, None, "SELECT count(*) AS n FROM gateway_requests")
            .expect("a survivor answers SQL");
        assert_eq!(a.status, 200, "{}: {}", c.id, a.text());
        let v = a.json();
        let unanswered: Vec<&str> = v["peers"]["unanswered"]
            .as_array()
            .map(|u| u.iter().filter_map(|p| p["peer"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(unanswered, [dead_url.as_str()], "{}: {v}", c.id);
    }
    // Another collector speaks for the fingerprint now: its page (same
    // labels, so still one).
    let survivors: Vec<&str> = rig.alive().map(|c| c.id.as_str()).collect();
    let heir_id = overtime_server::fingerprint_owner(&fingerprint, survivors)
        .unwrap()
        .to_string();
    let heir = rig.collectors.iter().find(|c| c.id == heir_id).unwrap();
    wait_until(
        WAIT_S,
        "the page re-sent by the new owner",
        || {
            rig.pages(&fingerprint).iter().any(|p| {
                p["annotations"]["report_url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(&heir.url()))
            })
        },
        || format!("{:#?}{}", rig.pages(&fingerprint), rig.logs()),
    );
    rig.check_one_page_from(&fingerprint, heir);
    // Nothing acknowledged is lost: the dead collector's offsets were
    // committed at its flushes, so the survivors read again everything
    // the bucket lacks — every produced record, once, on each of them.
    let total = (count(&traffic, EDGE), count(&traffic, SPANS));
    rig.wait_for_counts(
        total.0,
        total.1,
        "every record counted once by the survivors while the owner is down",
    );
    std::thread::sleep(Duration::from_millis(3 * GRACE_MS + 3_000));
    let (issues, rejected) = rig.tickets();
    assert!(rejected.is_empty(), "Jira refused: {rejected:#?}");
    assert_eq!(
        issues.len(),
        1,
        "no second ticket after the owner died: {:#?}",
        issues
            .iter()
            .map(|i| (&i.key, &i.summary))
            .collect::<Vec<_>>()
    );

    // The dead collector comes back on its volume (as an orchestrator
    // restarts it): its WAL is flushed and every produced record is
    // counted exactly once on every collector; it speaks for the
    // fingerprint again and still no second ticket is filed.
    rig.start_collector(i);
    rig.wait_for_counts(
        total.0,
        total.1,
        "every record counted once on every collector",
    );
    rig.wait_for_verdicts(&failing);
    let incident = rig.wait_for_one_incident(&fingerprint, failing.len());
    std::thread::sleep(Duration::from_millis(3 * GRACE_MS + 3_000));
    let (issues, rejected) = rig.tickets();
    assert!(rejected.is_empty(), "Jira refused: {rejected:#?}");
    assert_eq!(
        issues.len(),
        1,
        "no second ticket after the owner came back: {:#?}",
        issues
            .iter()
            .map(|i| (&i.key, &i.summary))
            .collect::<Vec<_>>()
    );
    let pages = rig.pages(&fingerprint);
    assert_eq!(pages.len(), 1, "one page per fingerprint: {pages:#?}");
    eprintln!(
        "cluster_collectors: owner {owner_id} killed mid-incident, {heir_id} took over; the survivors \
         counted all {total:?} (lines, spans) while it was down, and so did it once back; \
         incident {incident}: 1 ticket ({} comments), 1 page; in {:.0?}",
        issues[0].comments.len(),
        started.elapsed()
    );
}
