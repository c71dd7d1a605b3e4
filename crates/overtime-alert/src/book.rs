//! The alert book: what was sent, diffed against what is active now.
//! Pure (time is passed in); the sender turns its output into HTTP posts.

use crate::alert::{Alert, identity};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;

/// Firing or resolved, as Alertmanager's webhook says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    Firing,
    /// The condition no longer holds (`ends_at` says since when).
    Resolved,
}

impl Status {
    /// `"firing"` or `"resolved"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Firing => "firing",
            Status::Resolved => "resolved",
        }
    }
}

/// One alert in one delivery, every timestamp fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Labels (extra labels merged in) and annotations.
    pub alert: Alert,
    /// Firing or resolved.
    pub status: Status,
    /// When it started (first sighting, kept while active).
    pub starts_at: DateTime<Utc>,
    /// For Alertmanager: when it should be considered resolved if not
    /// re-sent (firing) or when it was resolved (resolved). The webhook
    /// shows a firing alert's end as `0001-01-01T00:00:00Z`, as Alertmanager.
    pub ends_at: DateTime<Utc>,
    /// The `generatorURL`.
    pub generator_url: String,
}

/// What one call to the book wants sent now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outgoing {
    /// To every Alertmanager: new, re-sent and resolved alerts.
    pub alertmanager: Vec<Notice>,
    /// To the webhook: transitions (and repeats of long-firing alerts).
    pub webhook: Vec<Notice>,
}

impl Outgoing {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.alertmanager.is_empty() && self.webhook.is_empty()
    }
}

/// The book's timing, from the config.
#[derive(Debug, Clone)]
pub struct BookSettings {
    /// Re-send period to Alertmanager.
    pub resend: TimeDelta,
    /// Times a resolved alert goes to Alertmanager.
    pub resolved_resends: u32,
    /// Re-send period of a still-firing alert to the webhook (0: never).
    pub webhook_repeat: TimeDelta,
    /// Lifetime of a one-shot alert.
    pub one_shot_lifetime: TimeDelta,
    /// Default `generatorURL`.
    pub external_url: String,
    /// Added to every alert's labels (the alert's own labels win).
    pub extra_labels: BTreeMap<String, String>,
}

#[derive(Debug)]
struct Entry {
    alert: Alert,
    starts_at: DateTime<Utc>,
    /// One-shot alerts end by themselves at this instant.
    until: Option<DateTime<Utc>>,
    last_am: DateTime<Utc>,
    last_webhook: DateTime<Utc>,
    resolved: Option<Resolved>,
}

#[derive(Debug)]
struct Resolved {
    at: DateTime<Utc>,
    am_sends_left: u32,
}

/// Tracks continuous alerts (the full active set handed over every
/// evaluation) and one-shot alerts (fired once, living for a lifetime).
///
/// ```
/// use overtime_alert::{Alert, AlertBook, AlertConfig, Status};
/// use chrono::{TimeZone, Utc};
/// let mut book = AlertBook::new(&AlertConfig::default());
/// let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
/// let out = book.update(vec![Alert::new("OvertimeChainHealthLow", "page")], t0);
/// assert_eq!(out.alertmanager[0].status, Status::Firing);
/// assert_eq!(out.alertmanager[0].ends_at, t0 + chrono::TimeDelta::minutes(4));
/// let out = book.update(vec![], t0 + chrono::TimeDelta::seconds(10));
/// assert_eq!(out.alertmanager[0].status, Status::Resolved);
/// ```
#[derive(Debug)]
pub struct AlertBook {
    settings: BookSettings,
    continuous: BTreeMap<String, Entry>,
    one_shots: BTreeMap<String, Entry>,
}

impl AlertBook {
    /// An empty book with the config's timing.
    pub fn new(cfg: &crate::AlertConfig) -> AlertBook {
        let ms = |v: u64| TimeDelta::milliseconds(v.min(i64::MAX as u64) as i64);
        AlertBook::with_settings(BookSettings {
            resend: ms(cfg.resend_interval_ms),
            resolved_resends: cfg.resolved_resends.max(1),
            webhook_repeat: ms(cfg.webhook_repeat_interval_ms),
            one_shot_lifetime: ms(cfg.one_shot_lifetime_ms),
            external_url: cfg.external_url.clone(),
            extra_labels: cfg.extra_labels.clone(),
        })
    }

    /// An empty book with explicit settings.
    pub fn with_settings(settings: BookSettings) -> AlertBook {
        AlertBook {
            settings,
            continuous: BTreeMap::new(),
            one_shots: BTreeMap::new(),
        }
    }

    /// Hands over the complete set of continuous alerts active at `now`
    /// (alerts with equal labels count once: the last one's annotations
    /// win). New ones fire, still-active ones are re-sent when due, missing
    /// ones resolve; one-shot alerts are re-sent or expire.
    pub fn update(&mut self, active: Vec<Alert>, now: DateTime<Utc>) -> Outgoing {
        let mut out = Outgoing::default();
        let mut seen: BTreeMap<String, Alert> = BTreeMap::new();
        for alert in active {
            let alert = self.with_extra_labels(alert);
            seen.insert(identity(&alert.labels), alert);
        }
        for (key, alert) in seen.iter() {
            match self.continuous.get_mut(key) {
                Some(e) if e.resolved.is_none() => {
                    e.alert.annotations = alert.annotations.clone();
                    e.alert.generator_url = alert.generator_url.clone();
                }
                _ => {
                    // New, or back after being resolved: a new firing.
                    let e = Entry::firing(alert.clone(), now, None);
                    self.continuous.insert(key.clone(), e);
                    let e = &self.continuous[key];
                    out.alertmanager.push(self.notice(e, Status::Firing, now));
                    out.webhook.push(self.notice(e, Status::Firing, now));
                }
            }
        }
        let settings = &self.settings;
        for (key, e) in self.continuous.iter_mut() {
            if e.resolved.is_none() && !seen.contains_key(key) {
                e.resolved = Some(Resolved {
                    at: now,
                    am_sends_left: settings.resolved_resends,
                });
                e.last_am = now - settings.resend; // due at once
                out.webhook.push(notice(settings, e, Status::Resolved, now));
            }
        }
        for (_, e) in self.one_shots.iter_mut() {
            if e.resolved.is_none() && e.until.is_some_and(|u| now >= u) {
                let at = e.until.unwrap_or(now);
                e.resolved = Some(Resolved {
                    at,
                    am_sends_left: settings.resolved_resends,
                });
                e.last_am = now - settings.resend;
                out.webhook.push(notice(settings, e, Status::Resolved, now));
            }
        }
        for map in [&mut self.continuous, &mut self.one_shots] {
            resend_due(settings, map, now, &mut out);
        }
        out
    }

    /// Fires a one-shot alert (one per 504 incident): sent at once, re-sent
    /// every resend interval with `endsAt` fixed at `now + lifetime`, then
    /// resolved. Firing it again while it is active (same labels) sends
    /// nothing: it is deduplicated. Continuous updates never touch it.
    pub fn fire_once(&mut self, alert: Alert, now: DateTime<Utc>) -> Outgoing {
        let alert = self.with_extra_labels(alert);
        let key = identity(&alert.labels);
        let mut out = Outgoing::default();
        if let Some(e) = self.one_shots.get_mut(&key)
            && e.resolved.is_none()
        {
            e.alert.annotations = alert.annotations;
            return out;
        }
        let until = now + self.settings.one_shot_lifetime;
        let e = Entry::firing(alert, now, Some(until));
        out.alertmanager.push(self.notice(&e, Status::Firing, now));
        out.webhook.push(self.notice(&e, Status::Firing, now));
        self.one_shots.insert(key, e);
        out
    }

    /// Resolves a one-shot alert before its lifetime ends (the incident
    /// closed). `labels` are the alert's own labels, as given to
    /// [`AlertBook::fire_once`]. Unknown or already resolved: nothing.
    pub fn resolve_once(
        &mut self,
        labels: &BTreeMap<String, String>,
        now: DateTime<Utc>,
    ) -> Outgoing {
        let mut merged = self.settings.extra_labels.clone();
        merged.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut out = Outgoing::default();
        let settings = &self.settings;
        if let Some(e) = self.one_shots.get_mut(&identity(&merged))
            && e.resolved.is_none()
        {
            e.resolved = Some(Resolved {
                at: now,
                am_sends_left: settings.resolved_resends.saturating_sub(1),
            });
            e.last_am = now;
            out.alertmanager
                .push(notice(settings, e, Status::Resolved, now));
            out.webhook.push(notice(settings, e, Status::Resolved, now));
        }
        out
    }

    /// Stops re-sending a one-shot alert without resolving it: another
    /// sender (the collector that owns the incident now) sends the same
    /// alert, which keeps it firing in Alertmanager. `labels` as given to
    /// [`AlertBook::fire_once`]. Unknown: nothing.
    pub fn hand_over_once(&mut self, labels: &BTreeMap<String, String>) {
        let mut merged = self.settings.extra_labels.clone();
        merged.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.one_shots.remove(&identity(&merged));
    }

    /// Alerts firing now, counted by `alertname` (`overtime_alerts_firing`).
    pub fn firing(&self) -> BTreeMap<String, usize> {
        let mut n = BTreeMap::new();
        for e in self.continuous.values().chain(self.one_shots.values()) {
            if e.resolved.is_none() {
                *n.entry(e.alert.name().to_string()).or_insert(0) += 1;
            }
        }
        n
    }

    fn with_extra_labels(&self, mut alert: Alert) -> Alert {
        for (k, v) in &self.settings.extra_labels {
            alert.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        alert
    }

    fn notice(&self, e: &Entry, status: Status, now: DateTime<Utc>) -> Notice {
        notice(&self.settings, e, status, now)
    }
}

impl Entry {
    fn firing(alert: Alert, now: DateTime<Utc>, until: Option<DateTime<Utc>>) -> Entry {
        Entry {
            starts_at: alert.starts_at.unwrap_or(now),
            alert,
            until,
            last_am: now,
            last_webhook: now,
            resolved: None,
        }
    }
}

/// Re-sends what is due: firing alerts every `resend` to Alertmanager (and
/// every `webhook_repeat` to the webhook), resolved ones until their count
/// runs out, after which they are forgotten.
fn resend_due(
    s: &BookSettings,
    map: &mut BTreeMap<String, Entry>,
    now: DateTime<Utc>,
    out: &mut Outgoing,
) {
    map.retain(|_, e| match &mut e.resolved {
        None => {
            if now - e.last_am >= s.resend {
                e.last_am = now;
                out.alertmanager.push(notice(s, e, Status::Firing, now));
            }
            if s.webhook_repeat > TimeDelta::zero() && now - e.last_webhook >= s.webhook_repeat {
                e.last_webhook = now;
                out.webhook.push(notice(s, e, Status::Firing, now));
            }
            true
        }
        Some(r) if r.am_sends_left == 0 => false,
        Some(_) => {
            if now - e.last_am >= s.resend {
                e.last_am = now;
                out.alertmanager.push(notice(s, e, Status::Resolved, now));
                if let Some(r) = &mut e.resolved {
                    r.am_sends_left -= 1;
                }
            }
            true
        }
    });
}

fn notice(s: &BookSettings, e: &Entry, status: Status, now: DateTime<Utc>) -> Notice {
    let ends_at = match (&e.resolved, e.until) {
        (Some(r), _) => r.at,
        (None, Some(until)) => until,
        // As Prometheus: four resend intervals, so one lost re-send or a
        // slow evaluation does not flap the alert.
        (None, None) => now + s.resend * 4,
    };
    Notice {
        alert: e.alert.clone(),
        status,
        starts_at: e.starts_at,
        ends_at,
        generator_url: e
            .alert
            .generator_url
            .clone()
            .unwrap_or_else(|| s.external_url.clone()),
    }
}

#[cfg(test)]
#[path = "book_tests.rs"]
mod tests;
