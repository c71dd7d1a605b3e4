//! The PagerDuty channel against the stand-in: one alert per fingerprint,
//! re-triggered as it grows and resolved on close, through rate limits,
//! outages and restarts.

use crate::support::pagerduty::{PagerDuty, ROUTING_KEY};
use crate::support::{Fault, down_port, fast_retry, incident, pending_files, stop, wait_for};
use overtime_notify::pagerduty::{self, PagerDutyConfig, Severity};
use overtime_notify::{Accepted, Durable, IncidentChannel, Notice};
use std::path::Path;
use std::time::Duration;

fn config(url: &str) -> PagerDutyConfig {
    PagerDutyConfig {
        events_url: url.into(),
        request_timeout_secs: 5,
        retry: fast_retry(),
        ..Default::default()
    }
}

fn start(url: &str, dir: &Path) -> Durable<pagerduty::PagerDuty> {
    pagerduty::start(&config(url), Some(ROUTING_KEY.into()), dir).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pagerduty_alert_per_fingerprint_retriggered_as_it_grows_and_resolved_on_close() {
    let pd = PagerDuty::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start(&pd.events_url(), dir.path());
    let i = incident("llm_prefill_slow", "deepseek-v4-pro", 3);
    c.notify(&Notice::Page(i.clone())).unwrap();
    c.notify(&Notice::Update(incident(
        "llm_prefill_slow",
        "deepseek-v4-pro",
        6,
    )))
    .unwrap();
    c.notify(&Notice::Update(incident(
        "llm_prefill_slow",
        "deepseek-v4-pro",
        11,
    )))
    .unwrap();
    assert_eq!(
        c.notify(&Notice::Page(i.clone())).unwrap(),
        Accepted::Duplicate
    );
    assert_eq!(
        c.notify(&Notice::Rename {
            from: "a".into(),
            to: "b".into()
        })
        .unwrap(),
        Accepted::Ignored,
        "the fingerprint is the key: a rename changes nothing"
    );
    wait_for("the triggers", || c.stats(), |s| s.queued == 0).await;
    let alerts = pd.alerts();
    assert_eq!(alerts.len(), 1, "one alert per fingerprint: {alerts:?}");
    assert_eq!(alerts[0].dedup_key, i.fingerprint);
    assert!(alerts[0].open);
    assert!(alerts[0].triggers >= 2);
    assert_eq!(alerts[0].severity, "critical");
    let ev = &alerts[0].event;
    assert_eq!(ev["payload"]["custom_details"]["failures"], 11);
    assert_eq!(ev["payload"]["class"], "llm_prefill_slow");
    assert_eq!(ev["payload"]["component"], "deepseek-v4-pro");
    assert!(
        ev["links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("/#/incidents/")
    );

    c.notify(&Notice::Resolve(i)).unwrap();
    let st = wait_for(
        "the resolve",
        || c.stats(),
        |s| s.delivered("resolved") == 1,
    )
    .await;
    assert!(!pd.alerts()[0].open);
    assert_eq!(st.failed, 0);
    assert!(pd.rejections().is_empty(), "{:?}", pd.rejections());
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrence_after_the_resolve_opens_a_new_alert_for_the_same_fingerprint() {
    let pd = PagerDuty::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start(&pd.events_url(), dir.path());
    let first = incident("tool_timeout", "search", 2);
    let mut again = incident("tool_timeout", "search", 4);
    again.id = "tool_timeout:search@2026-03-01T11:00:00.000Z".into();
    c.notify(&Notice::Page(first.clone())).unwrap();
    c.notify(&Notice::Resolve(first)).unwrap();
    c.notify(&Notice::Page(again)).unwrap();
    wait_for("all three", || c.stats(), |s| s.queued == 0).await;
    let alerts = pd.alerts();
    assert_eq!(alerts.len(), 2);
    assert!(!alerts[0].open && alerts[1].open);
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_pagerduty_is_waited_out_for_its_retry_after() {
    let pd = PagerDuty::start().await;
    pd.fault(Fault::RateLimit {
        retry_after_secs: 1,
    });
    let dir = tempfile::tempdir().unwrap();
    let c = start(&pd.events_url(), dir.path());
    c.notify(&Notice::Page(incident("tool_timeout", "search", 2)))
        .unwrap();
    let st = wait_for(
        "the trigger",
        || c.stats(),
        |s| s.delivered("triggered") == 1,
    )
    .await;
    assert_eq!((st.rate_limited, st.retries), (1, 1));
    let log = pd.log();
    assert_eq!(log[0].status, 429);
    let waited = log[1].at.duration_since(log[0].at);
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    assert_eq!(pd.alerts().len(), 1);
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pagerduty_outage_and_a_restart_page_each_incident_once() {
    let (addr, port) = down_port();
    let url = format!("http://{addr}/v2/enqueue");
    let dir = tempfile::tempdir().unwrap();
    let a = incident("llm_prefill_slow", "m1", 3);
    let b = incident("tool_timeout", "search", 2);
    let c1 = start(&url, dir.path());
    c1.notify(&Notice::Page(a.clone())).unwrap();
    c1.notify(&Notice::Page(b)).unwrap();
    wait_for(
        "retries while PagerDuty is down",
        || c1.stats(),
        |s| s.retries >= 2,
    )
    .await;
    stop(c1).await;
    assert_eq!(pending_files(dir.path()), 2, "both pages are on disk");

    let pd = PagerDuty::start_on(port);
    pd.fault(Fault::Status(500));
    pd.fault(Fault::Status(503));
    let c2 = start(&url, dir.path());
    wait_for(
        "both triggers",
        || c2.stats(),
        |s| s.delivered("triggered") == 2,
    )
    .await;
    stop(c2).await;

    let c3 = start(&url, dir.path());
    assert_eq!(
        c3.notify(&Notice::Page(a.clone())).unwrap(),
        Accepted::Duplicate
    );
    c3.notify(&Notice::Resolve(a)).unwrap();
    wait_for(
        "the resolve",
        || c3.stats(),
        |s| s.delivered("resolved") == 1,
    )
    .await;
    let alerts = pd.alerts();
    assert_eq!(alerts.len(), 2, "{alerts:?}");
    assert_eq!(
        alerts.iter().map(|a| a.triggers).sum::<usize>(),
        2,
        "each page once"
    );
    assert!(!alerts[0].open && alerts[1].open);
    assert!(pd.rejections().is_empty(), "{:?}", pd.rejections());
    stop(c3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_headline_is_clipped_to_pagerdutys_summary_limit() {
    let pd = PagerDuty::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start(&pd.events_url(), dir.path());
    let mut i = incident("tool_timeout", "search", 2);
    i.headline = "x".repeat(5000);
    c.notify(&Notice::Page(i)).unwrap();
    wait_for(
        "the trigger",
        || c.stats(),
        |s| s.delivered("triggered") == 1,
    )
    .await;
    let summary = pd.alerts()[0].summary.clone();
    assert_eq!(summary.chars().count(), 1024);
    assert!(summary.ends_with('…'));
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_routing_key_is_a_permanent_failure_never_retried() {
    let pd = PagerDuty::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = pagerduty::start(&config(&pd.events_url()), Some("wrong".into()), dir.path()).unwrap();
    c.notify(&Notice::Page(incident("tool_timeout", "search", 2)))
        .unwrap();
    let st = wait_for("the failure", || c.stats(), |s| s.failed == 1).await;
    assert_eq!(st.retries, 0);
    assert!(st.last_error.unwrap().contains("HTTP 400"));
    stop(c).await;
}

#[test]
fn the_severity_is_one_of_pagerdutys_four() {
    for (s, want) in [
        (Severity::Critical, "critical"),
        (Severity::Error, "error"),
        (Severity::Warning, "warning"),
        (Severity::Info, "info"),
    ] {
        assert_eq!(serde_json::to_value(s).unwrap(), want);
    }
}
