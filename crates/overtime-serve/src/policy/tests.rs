//! The policy's rules, one test each, named as the rule.

use super::*;

const GRACE: Duration = Duration::from_secs(30);

fn open(id: &str, gateway_504: usize) -> Sighting<'_> {
    Sighting {
        id,
        fingerprint: "llm_prefill_slow|llm",
        open: true,
        gateway_504,
        owned: true,
        failures: 1,
        headline: "h",
    }
}

/// `s` with another cause's fingerprint.
fn cause<'a>(fingerprint: &'a str, s: Sighting<'a>) -> Sighting<'a> {
    Sighting { fingerprint, ..s }
}

fn closed(id: &str) -> Sighting<'_> {
    Sighting {
        open: false,
        ..open(id, 3)
    }
}

fn page(id: &str) -> Action {
    Action::Page {
        incident_id: id.into(),
    }
}

fn resolve(id: &str) -> Action {
    Action::ResolvePage {
        incident_id: id.into(),
    }
}

fn ticket(id: &str) -> Action {
    Action::Ticket {
        incident_id: id.into(),
    }
}

fn secs(t0: Instant, s: u64) -> Instant {
    t0 + Duration::from_secs(s)
}

#[test]
fn a_page_goes_out_the_first_time_an_incident_with_504s_is_seen_open() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 1)]), [page("i1")]);
}

#[test]
fn an_incident_without_504s_is_not_paged() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 2), &[closed("i1")]), []);
}

#[test]
fn a_closed_incident_is_neither_paged_nor_ticketed() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[closed("i1")]), []);
    assert_eq!(p.step(secs(t0, 60), &[closed("i1")]), []);
}

#[test]
fn a_page_is_resolved_when_its_incident_closes() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    p.step(t0, &[open("i1", 1)]);
    assert_eq!(p.step(secs(t0, 2), &[closed("i1")]), [resolve("i1")]);
    assert_eq!(p.step(secs(t0, 4), &[closed("i1")]), []);
}

#[test]
fn a_page_is_resolved_when_its_incident_disappears() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    p.step(t0, &[open("i1", 1)]);
    assert_eq!(p.step(secs(t0, 2), &[]), [resolve("i1")]);
}

#[test]
fn a_ticket_waits_until_the_incident_has_been_open_for_the_full_grace_period() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 29), &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 30), &[open("i1", 0)]), [ticket("i1")]);
}

#[test]
fn an_incident_with_504s_is_paged_at_once_and_ticketed_after_the_grace() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 2)]), [page("i1")]);
    assert_eq!(p.step(secs(t0, 31), &[open("i1", 2)]), [ticket("i1")]);
}

#[test]
fn a_zero_grace_tickets_on_first_sight_after_the_page() {
    let mut p = NotifyPolicy::new(Duration::ZERO);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 1)]), [page("i1"), ticket("i1")]);
}

#[test]
fn each_incident_id_is_paged_once_and_ticketed_once() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    let mut all = Vec::new();
    for s in [0, 10, 40, 80] {
        all.extend(p.step(secs(t0, s), &[open("i1", 1)]));
    }
    // Closed, then open again: still no second page or ticket.
    all.extend(p.step(secs(t0, 90), &[closed("i1")]));
    all.extend(p.step(secs(t0, 100), &[open("i1", 1)]));
    all.extend(p.step(secs(t0, 200), &[open("i1", 1)]));
    assert_eq!(all, [page("i1"), ticket("i1"), resolve("i1")]);
}

#[test]
fn an_incident_whose_cause_changed_before_the_grace_never_reaches_jira() {
    // Early verdicts blamed one cause; late spans moved the traces to
    // another, whose incident has a new id.
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    let fin = |id| cause("tool_timeout|search", open(id, 3));
    assert_eq!(p.step(t0, &[open("early", 3)]), [page("early")]);
    assert_eq!(
        p.step(secs(t0, 10), &[fin("final")]),
        [resolve("early"), page("final")]
    );
    assert_eq!(p.step(secs(t0, 40), &[fin("final")]), [ticket("final")]);
    assert_eq!(p.step(secs(t0, 100), &[fin("final")]), []);
}

#[test]
fn an_incident_that_stops_being_open_waits_the_full_grace_again() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    p.step(t0, &[open("i1", 0)]);
    p.step(secs(t0, 20), &[closed("i1")]);
    assert_eq!(p.step(secs(t0, 25), &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 50), &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 55), &[open("i1", 0)]), [ticket("i1")]);
}

#[test]
fn resolutions_come_before_new_pages_and_incidents_keep_their_order() {
    let mut p = NotifyPolicy::new(Duration::ZERO);
    let t0 = Instant::now();
    p.step(t0, &[open("b", 1), open("a", 1)]);
    assert_eq!(
        p.step(
            secs(t0, 1),
            &[cause("d", open("d", 1)), cause("c", open("c", 0))]
        ),
        [
            resolve("a"),
            resolve("b"),
            page("d"),
            ticket("d"),
            ticket("c")
        ]
    );
}

#[test]
fn a_sighting_reads_status_and_504s_of_an_incident_report() {
    let r: IncidentReport = serde_json::from_value(serde_json::json!({
        "id": "inc-1", "fingerprint": "fp", "kind": "llm_prefill_slow",
        "component": "llm", "status": "open",
        "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:05:00Z"},
        "headline": "h",
        "headline_share": {"of": "failures", "count": 2, "total": 2,
            "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:05:00Z"}},
        "totals": {"requests": 4, "failures": 2, "gateway_504": 2, "gateway_503": 0, "timeouts": 2},
        "causes": [], "cause_stats": {}, "llm_latency_by_input_tokens": [],
        "findings": [], "example_trace_ids": [], "trace_count": 2
    }))
    .expect("an incident report");
    assert_eq!(
        Sighting::from(&r),
        Sighting {
            id: "inc-1",
            fingerprint: "fp",
            open: true,
            gateway_504: 2,
            owned: true,
            failures: 2,
            headline: "h",
        }
    );
}

fn rename(from: &str, to: &str) -> Action {
    Action::Rename {
        from: from.into(),
        to: to.into(),
    }
}

#[test]
fn an_incident_renamed_by_an_earlier_late_failure_keeps_its_page_and_ticket() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("fp@10:00:05", 3)]), [page("fp@10:00:05")]);
    assert_eq!(
        p.step(secs(t0, 30), &[open("fp@10:00:05", 3)]),
        [ticket("fp@10:00:05")]
    );
    // A failure that started earlier joins: the incident's id changes.
    assert_eq!(
        p.step(secs(t0, 31), &[open("fp@10:00:01", 4)]),
        [rename("fp@10:00:05", "fp@10:00:01")]
    );
    assert_eq!(p.step(secs(t0, 90), &[open("fp@10:00:01", 4)]), []);
    // Its page is still the one to resolve.
    assert_eq!(
        p.step(secs(t0, 95), &[closed("fp@10:00:01")]),
        [resolve("fp@10:00:01")]
    );
}

#[test]
fn a_renamed_incident_not_yet_ticketed_keeps_its_first_sightings_clock() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("a", 1)]), [page("a")]);
    assert_eq!(p.step(secs(t0, 20), &[open("b", 1)]), [rename("a", "b")]);
    assert_eq!(p.step(secs(t0, 30), &[open("b", 1)]), [ticket("b")]);
}

#[test]
fn a_recurrence_while_the_first_incident_is_listed_is_a_new_incident() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    p.step(t0, &[open("i1", 1)]);
    p.step(secs(t0, 30), &[open("i1", 1)]);
    assert_eq!(
        p.step(secs(t0, 40), &[closed("i1"), open("i2", 1)]),
        [resolve("i1"), page("i2")]
    );
    assert_eq!(
        p.step(secs(t0, 70), &[closed("i1"), open("i2", 1)]),
        [ticket("i2")]
    );
}

#[test]
fn an_incident_gone_for_a_while_is_not_inherited_by_a_later_one() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    p.step(t0, &[open("i1", 1)]);
    p.step(secs(t0, 30), &[open("i1", 1)]);
    assert_eq!(p.step(secs(t0, 40), &[]), [resolve("i1")]);
    assert_eq!(p.step(secs(t0, 50), &[open("i2", 1)]), [page("i2")]);
}

fn update(id: &str) -> Action {
    Action::Update {
        incident_id: id.into(),
    }
}

/// `s` with `failures` failures.
fn grown(failures: usize, s: Sighting<'_>) -> Sighting<'_> {
    Sighting { failures, ..s }
}

#[test]
fn a_paged_incident_that_grows_is_updated_at_most_once_per_update_every() {
    let mut p = NotifyPolicy::new(Duration::from_secs(600));
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 1)]), [page("i1")]);
    // Grew, but the page went out 10 s ago: wait.
    assert_eq!(p.step(secs(t0, 10), &[grown(4, open("i1", 4))]), []);
    assert_eq!(
        p.step(secs(t0, 30), &[grown(4, open("i1", 4))]),
        [update("i1")]
    );
    // Unchanged: nothing to update, however long it stays open.
    assert_eq!(p.step(secs(t0, 90), &[grown(4, open("i1", 4))]), []);
    let renamed = Sighting {
        headline: "another headline",
        ..grown(4, open("i1", 4))
    };
    assert_eq!(p.step(secs(t0, 95), &[renamed]), [update("i1")]);
}

#[test]
fn an_incident_that_was_not_paged_is_never_updated() {
    let mut p = NotifyPolicy::new(Duration::from_secs(600)).update_every(Duration::ZERO);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 0)]), []);
    assert_eq!(p.step(secs(t0, 40), &[grown(9, open("i1", 0))]), []);
}

#[test]
fn a_renamed_incident_is_updated_under_its_new_id_and_a_resolved_one_never() {
    let mut p = NotifyPolicy::new(Duration::from_secs(600)).update_every(Duration::ZERO);
    let t0 = Instant::now();
    p.step(t0, &[open("a", 1)]);
    assert_eq!(
        p.step(secs(t0, 1), &[grown(3, open("b", 1))]),
        [rename("a", "b"), update("b")]
    );
    assert_eq!(p.step(secs(t0, 2), &[closed("b")]), [resolve("b")]);
    assert_eq!(p.step(secs(t0, 3), &[grown(7, closed("b"))]), []);
}

fn elsewhere(id: &str, gateway_504: usize) -> Sighting<'_> {
    Sighting {
        owned: false,
        ..open(id, gateway_504)
    }
}

#[test]
fn an_incident_another_collector_owns_is_neither_paged_nor_ticketed() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[elsewhere("i1", 3)]), []);
    assert_eq!(p.step(secs(t0, 60), &[elsewhere("i1", 3)]), []);
}

#[test]
fn taking_over_from_a_dead_owner_pages_at_once_and_tickets_on_the_first_sightings_clock() {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[elsewhere("i1", 3)]), []);
    // 10 s later the owner stops answering: this collector owns it now.
    assert_eq!(p.step(secs(t0, 10), &[open("i1", 3)]), [page("i1")]);
    // The grace period counts from the first sighting, not the takeover.
    assert_eq!(p.step(secs(t0, 30), &[open("i1", 3)]), [ticket("i1")]);
    assert_eq!(p.step(secs(t0, 90), &[open("i1", 3)]), []);
}

#[test]
fn a_collector_that_loses_a_paged_fingerprint_hands_the_page_over_and_pages_again_if_it_wins_it_back()
 {
    let mut p = NotifyPolicy::new(GRACE);
    let t0 = Instant::now();
    assert_eq!(p.step(t0, &[open("i1", 3)]), [page("i1")]);
    // The owner it took over from is back: stop re-sending, no resolve.
    assert_eq!(
        p.step(secs(t0, 5), &[elsewhere("i1", 3)]),
        [Action::HandOverPage {
            incident_id: "i1".into()
        }]
    );
    assert_eq!(p.step(secs(t0, 10), &[elsewhere("i1", 3)]), []);
    // The incident closing elsewhere resolves nothing here.
    assert_eq!(p.step(secs(t0, 15), &[]), []);
    // Back to this collector: its page again, at once.
    assert_eq!(p.step(secs(t0, 20), &[open("i1", 3)]), [page("i1")]);
}
