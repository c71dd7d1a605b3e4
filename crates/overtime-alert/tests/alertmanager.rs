//! AlertSender against a real Alertmanager (Debian `prometheus-alertmanager`):
//! firing, resolving, re-sends keeping an alert alive, per-incident pages
//! deduplicated by labels, and a rejected alert counted as failed.

use chrono::Utc;
use overtime_alert::{Alert, AlertConfig, AlertSender};
use overtime_test_support::monitoring::Alertmanager;
use std::time::Duration;

/// How long a wait for Alertmanager to show a change may take before the
/// test calls it a hang: generous, so a slow, loaded machine still passes.
const PATIENCE: Duration = Duration::from_secs(60);

fn config(am: &Alertmanager) -> AlertConfig {
    AlertConfig {
        alertmanager_urls: vec![am.url.clone()],
        external_url: "http://overtime.test:8080".into(),
        backoff_initial_ms: 100,
        ..Default::default()
    }
}

fn chain_health() -> Alert {
    Alert::new("OvertimeChainHealthLow", "page")
        .label("service", "agent-api")
        .annotation("summary", "Chain health 0.71 < 0.8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firing_alert_is_active_with_our_labels_then_resolved() {
    let am = Alertmanager::start();
    let sender = AlertSender::spawn(config(&am)).unwrap();
    let started = Utc::now();
    sender.update(vec![chain_health()], started);

    let alerts = am.wait_for("firing OvertimeChainHealthLow", PATIENCE, |a| {
        a.iter()
            .any(|x| x["labels"]["alertname"] == "OvertimeChainHealthLow")
    });
    let a = alerts
        .iter()
        .find(|x| x["labels"]["alertname"] == "OvertimeChainHealthLow")
        .unwrap();
    assert_eq!(a["labels"]["severity"], "page");
    assert_eq!(a["labels"]["service"], "agent-api");
    assert_eq!(a["annotations"]["summary"], "Chain health 0.71 < 0.8");
    assert_eq!(a["status"]["state"], "active");
    assert_eq!(a["generatorURL"], "http://overtime.test:8080");
    let starts = chrono::DateTime::parse_from_rfc3339(a["startsAt"].as_str().unwrap()).unwrap();
    assert!((starts.timestamp_millis() - started.timestamp_millis()).abs() <= 1);
    let ends = chrono::DateTime::parse_from_rfc3339(a["endsAt"].as_str().unwrap()).unwrap();
    assert_eq!(
        (ends.timestamp_millis() - started.timestamp_millis() + 500) / 1000,
        240,
        "endsAt = startsAt + 4 x the 60 s resend interval"
    );
    assert_eq!(sender.stats().firing["OvertimeChainHealthLow"], 1);

    sender.update(vec![], Utc::now());
    am.wait_for("resolved OvertimeChainHealthLow gone", PATIENCE, |a| {
        !a.iter()
            .any(|x| x["labels"]["alertname"] == "OvertimeChainHealthLow")
    });
    let stats = sender.shutdown(Duration::from_secs(5)).await;
    assert!(stats.firing.is_empty());
    assert_eq!(stats.sent(), 2, "one firing, one resolved: {stats:?}");
    assert_eq!(stats.failed(), 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_keep_an_alert_alive_past_its_first_ends_at() {
    let am = Alertmanager::start();
    // endsAt = now + 4 x 4 s = 16 s after each send, a re-send every 4 s:
    // the kept alert survives any stall of this test shorter than 12 s.
    let cfg = AlertConfig {
        resend_interval_ms: 4_000,
        ..config(&am)
    };
    let kept = AlertSender::spawn(cfg.clone()).unwrap();
    let abandoned = AlertSender::spawn(cfg).unwrap();
    let l1 = |model: &str| {
        Alert::new("OvertimeModelBreakerL1", "page")
            .label("model", model)
            .annotation("summary", "3 consecutive timeouts")
    };
    let t0 = Utc::now();
    kept.update(vec![l1("kept")], t0);
    abandoned.update(vec![l1("abandoned")], t0); // and never again
    let models = |a: &[serde_json::Value]| -> Vec<String> {
        let mut m: Vec<String> = a
            .iter()
            .filter(|x| x["labels"]["alertname"] == "OvertimeModelBreakerL1")
            .map(|x| x["labels"]["model"].as_str().unwrap().to_string())
            .collect();
        m.sort();
        m
    };
    let ends_at = |a: &[serde_json::Value], model: &str| {
        let x = a.iter().find(|x| x["labels"]["model"] == model)?;
        Some(chrono::DateTime::parse_from_rfc3339(x["endsAt"].as_str().unwrap()).unwrap())
    };
    let alerts = am.wait_for("both firing", PATIENCE, |a| {
        models(a) == ["abandoned", "kept"]
    });
    let first_ends_at = ends_at(&alerts, "kept").unwrap();
    assert_eq!(
        Some(first_ends_at),
        ends_at(&alerts, "abandoned"),
        "both fired at t0, both expire at t0 + 16 s unless re-sent"
    );

    // Evaluate every 100 ms until Alertmanager drops the alert nobody
    // re-sent: its clock is then past the first endsAt the two shared.
    let deadline = std::time::Instant::now() + PATIENCE;
    let alerts = loop {
        kept.update(vec![l1("kept")], Utc::now());
        let alerts = am.alerts();
        if !models(&alerts).contains(&"abandoned".to_string()) {
            break alerts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the alert nobody re-sent never expired: {alerts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        models(&alerts),
        ["kept"],
        "past the first endsAt, only the re-sent alert is active: {alerts:#?}"
    );
    assert!(
        ends_at(&alerts, "kept").unwrap() > first_ends_at,
        "a re-send moved endsAt past the first one: {alerts:#?}"
    );
    let a = alerts
        .iter()
        .find(|x| x["labels"]["model"] == "kept")
        .unwrap();
    let starts = chrono::DateTime::parse_from_rfc3339(a["startsAt"].as_str().unwrap()).unwrap();
    assert!(
        (starts.timestamp_millis() - t0.timestamp_millis()).abs() <= 1,
        "re-sends keep the first startsAt"
    );
    let stats = kept.shutdown(Duration::from_secs(5)).await;
    assert!(stats.sent() >= 2, "the first send and a re-send: {stats:?}");
    assert_eq!(stats.failed(), 0, "{stats:?}");
    abandoned.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_page_per_incident_deduplicated_by_labels() {
    let am = Alertmanager::start();
    let cfg = config(&am);
    // two collectors see the same incident; one of them fires it twice
    let a = AlertSender::spawn(cfg.clone()).unwrap();
    let b = AlertSender::spawn(cfg).unwrap();
    let incident = |kind: &str, component: &str, id: &str| {
        Alert::incident(
            kind,
            component,
            &format!("{kind}/{component}"),
            &format!("73 % of 504s came from {kind} on {component}"),
            id,
            "http://overtime.test:8080/",
        )
    };
    let now = Utc::now();
    a.fire_once(
        incident("llm_prefill_slow", "deepseek-v4-pro", "inc-1"),
        now,
    );
    a.fire_once(
        incident("llm_prefill_slow", "deepseek-v4-pro", "inc-1"),
        now,
    );
    b.fire_once(
        incident("llm_prefill_slow", "deepseek-v4-pro", "inc-1"),
        now,
    );
    a.fire_once(incident("tool_no_timeout", "weather-api", "inc-2"), now);

    let alerts = am.wait_for("two incidents", PATIENCE, |x| {
        x.iter()
            .filter(|a| a["labels"]["alertname"] == "Overtime504Incident")
            .count()
            == 2
    });
    let mut pages: Vec<_> = alerts
        .iter()
        .filter(|a| a["labels"]["alertname"] == "Overtime504Incident")
        .collect();
    pages.sort_by_key(|a| a["labels"]["kind"].as_str().unwrap().to_string());
    assert_eq!(pages[0]["labels"]["kind"], "llm_prefill_slow");
    assert_eq!(pages[0]["labels"]["component"], "deepseek-v4-pro");
    assert_eq!(
        pages[0]["labels"]["fingerprint"],
        "llm_prefill_slow/deepseek-v4-pro"
    );
    assert_eq!(pages[0]["labels"]["severity"], "page");
    assert_eq!(
        pages[0]["annotations"]["summary"],
        "73 % of 504s came from llm_prefill_slow on deepseek-v4-pro"
    );
    assert_eq!(
        pages[0]["annotations"]["report_url"],
        "http://overtime.test:8080/api/incidents/inc-1?format=markdown"
    );
    assert_eq!(pages[1]["labels"]["kind"], "tool_no_timeout");
    // endsAt is the one-shot lifetime (1 h by default)
    let ends = chrono::DateTime::parse_from_rfc3339(pages[1]["endsAt"].as_str().unwrap()).unwrap();
    assert!((ends.timestamp() - now.timestamp() - 3600).abs() <= 1);
    assert_eq!(a.stats().firing["Overtime504Incident"], 2);

    // the second incident closes: only it goes away
    a.resolve_once(
        &incident("tool_no_timeout", "weather-api", "inc-2").labels,
        Utc::now(),
    );
    am.wait_for("inc-2 resolved", PATIENCE, |x| {
        let kinds: Vec<_> = x
            .iter()
            .filter(|a| a["labels"]["alertname"] == "Overtime504Incident")
            .map(|a| a["labels"]["kind"].clone())
            .collect();
        kinds == ["llm_prefill_slow"]
    });
    let sa = a.shutdown(Duration::from_secs(5)).await;
    let sb = b.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        sa.sent(),
        3,
        "inc-1 once (the repeat deduplicated), inc-2, its resolve: {sa:?}"
    );
    assert_eq!(sb.sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_alertmanager_rejects_is_failed_not_retried() {
    let am = Alertmanager::start();
    let sender = AlertSender::spawn(config(&am)).unwrap();
    // a label name Prometheus does not allow: Alertmanager answers 400
    sender.update(
        vec![Alert::new("OvertimeChainHealthLow", "page").label("bad-name", "x")],
        Utc::now(),
    );
    let deadline = std::time::Instant::now() + PATIENCE;
    while sender.stats().failed() == 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", sender.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = sender.shutdown(Duration::from_secs(5)).await;
    let t = &stats.targets[0];
    assert_eq!((t.sent, t.failed, t.retries), (0, 1, 0), "{t:?}");
    let err = t.last_error.as_deref().unwrap();
    assert!(err.contains("400"), "{err}");
    assert!(err.starts_with("alertmanager:127.0.0.1:"), "{err}");
}
