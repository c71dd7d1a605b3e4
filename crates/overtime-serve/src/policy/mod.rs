//! Who is told what about an incident, and when: a pure state machine.
//! Shown the incidents as they are now (a [`Sighting`] each) and the
//! time, [`NotifyPolicy::step`] returns the [`Action`]s to take; it reads
//! no clock, does no I/O and needs no runtime, so every rule below is a
//! plain unit test. The async side (`notify.rs`: the alert sender, the
//! Jira notifier) only carries the actions out.
//!
//! The rules:
//! - A page goes out the first time an incident with 504s is seen open:
//!   that can be on an early verdict, seconds after the 504 (see
//!   `diagnose.failure_grace_ms`). It is resolved when the incident closes
//!   or disappears (late spans moved its traces to another cause).
//! - A ticket waits until the incident has been open for the full grace
//!   period (`diagnose.grace_ms`): by then its verdicts are final, so a
//!   cause that early verdicts got wrong never reaches Jira. An incident
//!   that stops being open before then starts its wait again if it comes
//!   back.
//! - Each incident id is paged once and ticketed once for the life of the
//!   process (Jira's outbox remembers across restarts, so a restart never
//!   files twice).
//!
//! - With several collectors, each sees every collector's incidents but
//!   only the owner of a fingerprint pages and tickets it
//!   ([`Sighting::owned`]). The others keep the incident's clock, so a
//!   collector that takes over from an owner that died pages at once (the
//!   alert's labels are the same, so Alertmanager keeps one page) and
//!   tickets when the grace period, counted from the first sighting, is
//!   over (the Jira notifier finds the owner's ticket and comments on it).
//! - A collector that loses a fingerprint it paged (a collector it had
//!   taken over from is back) hands the page over: it stops re-sending it
//!   without resolving it ([`Action::HandOverPage`]), since the owner's
//!   page with the same labels keeps the alert firing; if the fingerprint
//!   comes back to it, it pages again (Alertmanager keeps it one page).
//!
//! - An incident's id names its first failure, so a late record that
//!   failed earlier (a span held back, a line joined from another
//!   collector, two runs of failures merged by one between them) renames
//!   it. A renamed incident is the same incident: when an id the policy
//!   knows is no longer listed and a new id of the same fingerprint is,
//!   the new id inherits the old one's page, ticket and clock
//!   ([`Action::Rename`]) — no second page, and no "recurrence" comment
//!   on the ticket just filed. A recurrence is a new id while the old
//!   one is still listed (closed), which is how incidents recur.
//!
//! This is the one place that decides whether a notification goes out.

use overtime_diagnose::IncidentReport;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// What the policy reads of an incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting<'a> {
    /// The incident id (stable while its traces keep their cause).
    pub id: &'a str,
    /// The cause's fingerprint (kind, component), shared by the incidents
    /// of the same cause.
    pub fingerprint: &'a str,
    /// Still failing within the quiet period (`status == "open"`).
    pub open: bool,
    /// Gateway 504s among its failures.
    pub gateway_504: usize,
    /// This collector speaks for the fingerprint (always, alone).
    pub owned: bool,
}

impl<'a> From<&'a IncidentReport> for Sighting<'a> {
    fn from(r: &'a IncidentReport) -> Self {
        Sighting {
            id: &r.id,
            fingerprint: &r.fingerprint,
            open: r.status == "open",
            gateway_504: r.totals.gateway_504,
            owned: true,
        }
    }
}

/// One notification to carry out, naming its incident by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Page about this open incident (it has 504s).
    Page {
        /// The incident's id, as in `/api/incidents/{id}`.
        incident_id: String,
    },
    /// Resolve the page of this incident: it closed or disappeared.
    ResolvePage {
        /// The id of the incident whose page resolves.
        incident_id: String,
    },
    /// Stop re-sending this incident's page without resolving it: another
    /// collector owns its fingerprint now and sends the same page.
    HandOverPage {
        /// The id of the incident whose page is handed over.
        incident_id: String,
    },
    /// The incident `from` is now listed as `to` (late records moved its
    /// first failure): what was sent for `from` stands for `to`.
    Rename {
        /// The id it had.
        from: String,
        /// The id it has now.
        to: String,
    },
    /// Open a Jira ticket for this incident (or comment on the open ticket
    /// of its fingerprint: the Jira notifier deduplicates).
    Ticket {
        /// The incident's id, as in `/api/incidents/{id}`.
        incident_id: String,
    },
}

/// The page-once, ticket-after-grace policy. See the module doc.
#[derive(Debug, Clone)]
pub struct NotifyPolicy {
    /// How long an incident stays open before it is ticketed.
    ticket_after: Duration,
    /// Open incidents not ticketed yet, with when they were first seen.
    first_seen: HashMap<String, Instant>,
    ticketed: HashSet<String>,
    /// Every incident ever paged.
    paged: HashSet<String>,
    /// The paged incidents whose page is not resolved yet (ordered, so
    /// resolutions come out in a stable order).
    firing: BTreeSet<String>,
    /// The ids listed at the last step, with their fingerprints.
    listed: HashMap<String, String>,
}

impl NotifyPolicy {
    /// A policy that tickets an incident once it has been open for
    /// `ticket_after`.
    pub fn new(ticket_after: Duration) -> NotifyPolicy {
        NotifyPolicy {
            ticket_after,
            first_seen: HashMap::new(),
            ticketed: HashSet::new(),
            paged: HashSet::new(),
            firing: BTreeSet::new(),
            listed: HashMap::new(),
        }
    }

    /// Does the policy hold anything for `id`?
    fn knows(&self, id: &str) -> bool {
        self.paged.contains(id)
            || self.ticketed.contains(id)
            || self.first_seen.contains_key(id)
            || self.firing.contains(id)
    }

    /// Renames: an id listed at the last step and not now whose
    /// fingerprint has an id listed now for the first time gives that id
    /// (the first, in the given order) its page, ticket and clock.
    fn renames(&mut self, incidents: &[Sighting<'_>]) -> Vec<Action> {
        let listed: HashSet<&str> = incidents.iter().map(|s| s.id).collect();
        let mut gone: Vec<(String, String)> = self
            .listed
            .iter()
            .filter(|(id, _)| !listed.contains(id.as_str()))
            .map(|(id, fp)| (id.clone(), fp.clone()))
            .collect();
        gone.sort();
        let mut actions = Vec::new();
        for s in incidents {
            if self.listed.contains_key(s.id) || self.knows(s.id) {
                continue;
            }
            let (from, rest): (Vec<_>, Vec<_>) = gone
                .into_iter()
                .partition(|(_, fp)| fp.as_str() == s.fingerprint);
            gone = rest;
            let to = s.id.to_string();
            let from: Vec<String> = from
                .into_iter()
                .map(|(old, _)| old)
                .filter(|old| self.knows(old))
                .collect();
            for old in from {
                if self.paged.remove(&old) {
                    self.paged.insert(to.clone());
                }
                if self.firing.remove(&old) {
                    self.firing.insert(to.clone());
                }
                if self.ticketed.remove(&old) {
                    self.ticketed.insert(to.clone());
                }
                if let Some(t) = self.first_seen.remove(&old) {
                    let e = self.first_seen.entry(to.clone()).or_insert(t);
                    *e = (*e).min(t);
                }
                actions.push(Action::Rename {
                    from: old,
                    to: to.clone(),
                });
            }
        }
        self.listed = incidents
            .iter()
            .map(|s| (s.id.to_string(), s.fingerprint.to_string()))
            .collect();
        actions
    }

    /// The actions the incidents as they are at `now` call for: first the
    /// pages to resolve, then, incident by incident in the given order, its
    /// page and its ticket.
    pub fn step(&mut self, now: Instant, incidents: &[Sighting<'_>]) -> Vec<Action> {
        let mut actions = self.renames(incidents);
        let open: HashSet<&str> = incidents.iter().filter(|s| s.open).map(|s| s.id).collect();
        let gone: Vec<String> = self
            .firing
            .iter()
            .filter(|id| !open.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.firing.remove(&id);
            actions.push(Action::ResolvePage { incident_id: id });
        }
        self.first_seen.retain(|id, _| open.contains(id.as_str()));
        for s in incidents.iter().filter(|s| s.open) {
            if !s.owned {
                if self.firing.remove(s.id) {
                    self.paged.remove(s.id);
                    actions.push(Action::HandOverPage {
                        incident_id: s.id.to_string(),
                    });
                }
                // Watched, not told: its wait counts from now all the same.
                if !self.ticketed.contains(s.id) {
                    self.first_seen.entry(s.id.to_string()).or_insert(now);
                }
                continue;
            }
            if s.gateway_504 > 0 && self.paged.insert(s.id.to_string()) {
                self.firing.insert(s.id.to_string());
                actions.push(Action::Page {
                    incident_id: s.id.to_string(),
                });
            }
            if self.ticketed.contains(s.id) {
                continue;
            }
            let seen = *self.first_seen.entry(s.id.to_string()).or_insert(now);
            if now.saturating_duration_since(seen) >= self.ticket_after {
                self.first_seen.remove(s.id);
                self.ticketed.insert(s.id.to_string());
                actions.push(Action::Ticket {
                    incident_id: s.id.to_string(),
                });
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(30);

    fn open(id: &str, gateway_504: usize) -> Sighting<'_> {
        Sighting {
            id,
            fingerprint: "llm_prefill_slow|llm",
            open: true,
            gateway_504,
            owned: true,
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
}
