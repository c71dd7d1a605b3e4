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
//! - A paged incident that grows (more failures, or another headline) is
//!   updated ([`Action::Update`]: a Slack message edited, a PagerDuty
//!   alert re-triggered), at most once per [`UPDATE_EVERY`] so a storm of
//!   verdicts edits a message a few times a minute, not every step. The
//!   resolution carries the last state, so nothing waits for the next
//!   update.
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

/// The least time between two updates of one paged incident.
pub const UPDATE_EVERY: Duration = Duration::from_secs(30);

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
    /// Failing traces in the incident.
    pub failures: usize,
    /// The report's headline.
    pub headline: &'a str,
}

impl<'a> From<&'a IncidentReport> for Sighting<'a> {
    fn from(r: &'a IncidentReport) -> Self {
        Sighting {
            id: &r.id,
            fingerprint: &r.fingerprint,
            open: r.status == "open",
            gateway_504: r.totals.gateway_504,
            owned: true,
            failures: r.trace_count,
            headline: &r.headline,
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
    /// This paged incident grew (more failures, another headline): update
    /// what its page sent (a Slack message, a PagerDuty alert).
    Update {
        /// The incident's id.
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
    /// Of each firing incident: the failures and headline last sent (page
    /// or update) and when.
    shown: HashMap<String, (usize, String, Instant)>,
    update_every: Duration,
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
            shown: HashMap::new(),
            update_every: UPDATE_EVERY,
        }
    }

    /// The same policy with another least time between two updates of an
    /// incident (default [`UPDATE_EVERY`]).
    pub fn update_every(mut self, every: Duration) -> NotifyPolicy {
        self.update_every = every;
        self
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
                if let Some(shown) = self.shown.remove(&old) {
                    self.shown.insert(to.clone(), shown);
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
            self.shown.remove(&id);
            actions.push(Action::ResolvePage { incident_id: id });
        }
        self.first_seen.retain(|id, _| open.contains(id.as_str()));
        for s in incidents.iter().filter(|s| s.open) {
            if !s.owned {
                if self.firing.remove(s.id) {
                    self.paged.remove(s.id);
                    self.shown.remove(s.id);
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
                self.shown
                    .insert(s.id.to_string(), (s.failures, s.headline.to_string(), now));
                actions.push(Action::Page {
                    incident_id: s.id.to_string(),
                });
            } else if let Some((failures, headline, at)) = self.shown.get_mut(s.id) {
                let grew = *failures != s.failures || headline != s.headline;
                if grew && now.saturating_duration_since(*at) >= self.update_every {
                    *failures = s.failures;
                    *headline = s.headline.to_string();
                    *at = now;
                    actions.push(Action::Update {
                        incident_id: s.id.to_string(),
                    });
                }
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
mod tests;
