use super::*;
use crate::AlertConfig;
use chrono::TimeZone;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap() + TimeDelta::seconds(secs)
}

fn book() -> AlertBook {
    AlertBook::new(&AlertConfig::default()) // resend 60 s, 3 resolved sends
}

fn burn(window: &str) -> Alert {
    Alert::new("OvertimeTimeoutBudgetBurnFast", "page")
        .label("route", "/chat")
        .annotation("summary", window)
}

fn statuses(v: &[Notice]) -> Vec<&'static str> {
    v.iter().map(|n| n.status.as_str()).collect()
}

#[test]
fn new_alert_fires_to_both_targets_with_four_resend_intervals_of_life() {
    let mut b = book();
    let out = b.update(vec![burn("x")], t(0));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert_eq!(statuses(&out.webhook), ["firing"]);
    let n = &out.alertmanager[0];
    assert_eq!(n.starts_at, t(0));
    assert_eq!(n.ends_at, t(240));
    assert_eq!(n.generator_url, "http://localhost:8080");
    assert_eq!(b.firing()["OvertimeTimeoutBudgetBurnFast"], 1);
}

#[test]
fn still_active_alert_is_resent_to_alertmanager_only_when_due() {
    let mut b = book();
    b.update(vec![burn("a")], t(0));
    for s in [10, 20, 59] {
        assert!(b.update(vec![burn("a")], t(s)).is_empty(), "at {s}s");
    }
    let out = b.update(vec![burn("newer summary")], t(60));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert!(out.webhook.is_empty(), "the webhook only hears transitions");
    let n = &out.alertmanager[0];
    assert_eq!(n.starts_at, t(0), "startsAt kept from the first sighting");
    assert_eq!(n.ends_at, t(300));
    assert_eq!(n.alert.annotations["summary"], "newer summary");
}

#[test]
fn gone_alert_resolves_at_once_then_is_resent_resolved_and_forgotten() {
    let mut b = book();
    b.update(vec![burn("a")], t(0));
    let out = b.update(vec![], t(30));
    assert_eq!(statuses(&out.alertmanager), ["resolved"]);
    assert_eq!(statuses(&out.webhook), ["resolved"]);
    assert_eq!(out.alertmanager[0].ends_at, t(30));
    assert!(b.firing().is_empty());
    assert!(b.update(vec![], t(60)).is_empty());
    let again = b.update(vec![], t(90));
    assert_eq!(statuses(&again.alertmanager), ["resolved"]);
    assert_eq!(
        again.alertmanager[0].ends_at,
        t(30),
        "endsAt stays the resolve time"
    );
    assert!(again.webhook.is_empty());
    assert_eq!(
        statuses(&b.update(vec![], t(150)).alertmanager),
        ["resolved"]
    );
    // three sends done: forgotten
    for s in [210, 270, 330] {
        assert!(b.update(vec![], t(s)).is_empty(), "at {s}s");
    }
}

#[test]
fn an_alert_back_after_resolving_is_a_new_firing() {
    let mut b = book();
    b.update(vec![burn("a")], t(0));
    b.update(vec![], t(30));
    let out = b.update(vec![burn("a")], t(40));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert_eq!(out.alertmanager[0].starts_at, t(40));
    assert_eq!(statuses(&out.webhook), ["firing"]);
}

#[test]
fn labels_are_the_identity_and_duplicates_count_once() {
    let mut b = book();
    let m1 = Alert::new("OvertimeModelBreakerL1", "page").label("model", "m1");
    let m2 = Alert::new("OvertimeModelBreakerL1", "page").label("model", "m2");
    let out = b.update(vec![m1.clone(), m1.clone(), m2.clone()], t(0));
    assert_eq!(out.alertmanager.len(), 2);
    assert_eq!(b.firing()["OvertimeModelBreakerL1"], 2);
    let out = b.update(vec![m2], t(5));
    assert_eq!(statuses(&out.alertmanager), ["resolved"]);
    assert_eq!(out.alertmanager[0].alert.labels["model"], "m1");
}

#[test]
fn given_starts_at_is_kept() {
    let mut b = book();
    let out = b.update(vec![burn("a").starting_at(t(-120))], t(0));
    assert_eq!(out.alertmanager[0].starts_at, t(-120));
}

#[test]
fn extra_labels_are_added_but_do_not_override() {
    let mut cfg = AlertConfig::default();
    cfg.extra_labels.insert("cluster".into(), "prod-eu".into());
    cfg.extra_labels.insert("severity".into(), "ignored".into());
    let mut b = AlertBook::new(&cfg);
    let out = b.update(vec![burn("a")], t(0));
    let labels = &out.alertmanager[0].alert.labels;
    assert_eq!(labels["cluster"], "prod-eu");
    assert_eq!(labels["severity"], "page");
}

fn incident(id: &str) -> Alert {
    Alert::incident(
        "tool_no_timeout",
        "weather-api",
        "tool_no_timeout/weather-api",
        "all 504s sat > 40 s in weather-api",
        id,
        "http://overtime:8080",
    )
}

#[test]
fn one_shot_fires_once_is_deduplicated_and_lives_its_lifetime() {
    let mut b = book(); // lifetime 1 h
    let out = b.fire_once(incident("inc-1"), t(0));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert_eq!(out.alertmanager[0].ends_at, t(3600));
    assert!(
        b.fire_once(incident("inc-1"), t(5)).is_empty(),
        "deduplicated"
    );
    // continuous updates do not resolve it, but re-send it
    assert!(b.update(vec![], t(30)).is_empty());
    let out = b.update(vec![], t(60));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert_eq!(out.alertmanager[0].ends_at, t(3600), "fixed end");
    assert_eq!(b.firing()["Overtime504Incident"], 1);
    let out = b.update(vec![], t(3600));
    assert_eq!(statuses(&out.alertmanager), ["resolved"]);
    assert_eq!(statuses(&out.webhook), ["resolved"]);
    assert_eq!(out.alertmanager[0].ends_at, t(3600));
    assert!(b.firing().is_empty());
}

#[test]
fn one_shot_resolved_early_and_fired_again_is_a_new_alert() {
    let mut b = book();
    let a = incident("inc-1");
    b.fire_once(a.clone(), t(0));
    let out = b.resolve_once(&a.labels, t(100));
    assert_eq!(statuses(&out.alertmanager), ["resolved"]);
    assert_eq!(out.alertmanager[0].ends_at, t(100));
    assert!(
        b.resolve_once(&a.labels, t(101)).is_empty(),
        "already resolved"
    );
    let out = b.fire_once(incident("inc-2"), t(200));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
    assert_eq!(out.alertmanager[0].starts_at, t(200));
    assert!(
        out.alertmanager[0].alert.annotations["report_url"].ends_with("/inc-2?format=markdown")
    );
}

#[test]
fn webhook_repeats_long_firing_alerts_on_its_own_interval() {
    let cfg = AlertConfig {
        webhook_repeat_interval_ms: 300_000,
        ..Default::default()
    };
    let mut b = AlertBook::new(&cfg);
    b.update(vec![burn("a")], t(0));
    let mut webhook = 0;
    for s in (10..=600).step_by(10) {
        webhook += b.update(vec![burn("a")], t(s)).webhook.len();
    }
    assert_eq!(webhook, 2, "at 300 s and 600 s");
}

#[test]
fn a_one_shot_handed_over_is_neither_resent_nor_resolved_and_can_fire_again() {
    let mut b = book();
    let a = incident("inc-1");
    b.fire_once(a.clone(), t(0));
    b.hand_over_once(&a.labels);
    // Past its re-send interval and its lifetime: nothing from this book.
    for s in [60, 120, 3600, 3700] {
        assert!(b.update(vec![], t(s)).is_empty(), "at {s} s");
    }
    assert!(b.firing().is_empty());
    assert!(b.resolve_once(&a.labels, t(3800)).is_empty(), "not ours");
    // Handed back: it fires again at once.
    let out = b.fire_once(a, t(4000));
    assert_eq!(statuses(&out.alertmanager), ["firing"]);
}
