//! The generic JSON webhook against a local axum receiver: payload shape,
//! transitions only, retries with backoff, permanent failures, and the
//! bounded queue dropping the oldest deliveries.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use chrono::Utc;
use overtime_alert::{Alert, AlertConfig, AlertError, AlertSender};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Receiver {
    bodies: Arc<Mutex<Vec<Value>>>,
    /// Answer 503 to this many requests first.
    fail_first: Arc<AtomicUsize>,
    /// Answer every request with this status instead (0: off).
    always: Arc<AtomicUsize>,
}

async fn receive(State(r): State<Receiver>, Json(body): Json<Value>) -> StatusCode {
    let always = r.always.load(Ordering::SeqCst);
    if always != 0 {
        return StatusCode::from_u16(always as u16).unwrap();
    }
    if r.fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    r.bodies.lock().unwrap().push(body);
    StatusCode::OK
}

/// Starts the receiver; returns its URL.
async fn serve(r: Receiver) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/hook", post(receive)).with_state(r);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

fn config(url: String) -> AlertConfig {
    AlertConfig {
        webhook_url: Some(url),
        external_url: "http://overtime.test:8080".into(),
        backoff_initial_ms: 20,
        backoff_max_ms: 100,
        ..Default::default()
    }
}

async fn wait_bodies(r: &Receiver, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = r.bodies.lock().unwrap().clone();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} bodies: {got:#?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn webhook_gets_firing_then_resolved_in_alertmanager_webhook_format() {
    let r = Receiver::default();
    let sender = AlertSender::spawn(config(serve(r.clone()).await)).unwrap();
    let l2 = Alert::new("OvertimeModelBreakerL2", "page")
        .label("model", "deepseek-v4-pro")
        .annotation("summary", "P99 2.25x its baseline");
    let t0 = Utc::now();
    sender.update(vec![l2.clone()], t0);
    // still firing: Alertmanager would get re-sends, the webhook nothing new
    sender.update(vec![l2.clone()], t0 + chrono::TimeDelta::seconds(120));
    sender.update(vec![], t0 + chrono::TimeDelta::seconds(130));
    let bodies = wait_bodies(&r, 2).await;
    let stats = sender.shutdown(Duration::from_secs(5)).await;
    assert_eq!(bodies.len(), 2, "{bodies:#?}");

    let firing = &bodies[0];
    assert_eq!(firing["version"], "4");
    assert_eq!(firing["status"], "firing");
    assert_eq!(firing["receiver"], "overtime");
    assert_eq!(firing["externalURL"], "http://overtime.test:8080");
    assert_eq!(firing["groupLabels"]["alertname"], "OvertimeModelBreakerL2");
    assert_eq!(firing["commonLabels"]["model"], "deepseek-v4-pro");
    assert_eq!(
        firing["commonAnnotations"]["summary"],
        "P99 2.25x its baseline"
    );
    let alert = &firing["alerts"][0];
    assert_eq!(alert["status"], "firing");
    assert_eq!(alert["labels"]["severity"], "page");
    assert_eq!(alert["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(alert["startsAt"], overtime_alert::rfc3339(t0));
    assert_eq!(alert["generatorURL"], "http://overtime.test:8080");
    assert_eq!(
        alert["fingerprint"],
        overtime_alert::fingerprint(&l2.labels)
    );

    let resolved = &bodies[1];
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["alerts"][0]["status"], "resolved");
    assert_eq!(
        resolved["alerts"][0]["endsAt"],
        overtime_alert::rfc3339(t0 + chrono::TimeDelta::seconds(130))
    );
    assert_eq!(resolved["alerts"][0]["fingerprint"], alert["fingerprint"]);
    assert_eq!((stats.sent(), stats.failed(), stats.dropped()), (2, 0, 0));
    assert_eq!(stats.targets[0].deliveries, 2);
}

#[tokio::test]
async fn a_receiver_answering_503_is_retried_until_it_takes_the_alert() {
    let r = Receiver::default();
    r.fail_first.store(2, Ordering::SeqCst);
    let sender = AlertSender::spawn(config(serve(r.clone()).await)).unwrap();
    sender.fire_once(
        Alert::incident(
            "dns_slow",
            "weather-api",
            "dns_slow/weather-api",
            "DNS 2.8 s",
            "inc-7",
            "http://o/",
        ),
        Utc::now(),
    );
    let bodies = wait_bodies(&r, 1).await;
    assert_eq!(bodies[0]["alerts"][0]["labels"]["kind"], "dns_slow");
    let stats = sender.shutdown(Duration::from_secs(5)).await;
    let t = &stats.targets[0];
    assert_eq!((t.sent, t.failed, t.retries), (1, 0, 2), "{t:?}");
    assert!(t.last_error.as_deref().unwrap().contains("503"), "{t:?}");
}

#[tokio::test]
async fn a_receiver_that_keeps_failing_costs_max_attempts_then_counts_failed() {
    let r = Receiver::default();
    r.always.store(503, Ordering::SeqCst);
    let cfg = AlertConfig {
        max_attempts: 3,
        ..config(serve(r.clone()).await)
    };
    let sender = AlertSender::spawn(cfg).unwrap();
    sender.update(
        vec![Alert::new("OvertimeChainHealthLow", "page")],
        Utc::now(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while sender.stats().failed() == 0 {
        assert!(Instant::now() < deadline, "{:?}", sender.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = sender.shutdown(Duration::from_secs(5)).await.targets[0].clone();
    assert_eq!((t.sent, t.failed, t.retries), (0, 1, 2), "{t:?}");
    assert!(t.last_error.unwrap().contains("attempt 3/3"));
}

#[tokio::test]
async fn a_hung_receiver_fills_the_bounded_queue_and_the_oldest_are_dropped() {
    // accepts connections and never answers
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            h.lock().unwrap().push(conn);
        }
    });
    let cfg = AlertConfig {
        queue_capacity: 2,
        timeout_ms: 60_000,
        ..config(format!("http://{addr}/hook"))
    };
    let sender = AlertSender::spawn(cfg).unwrap();
    let now = Utc::now();
    let incident = |i: usize| {
        let id = format!("inc-{i}");
        Alert::incident(
            "tool_no_timeout",
            &format!("api-{i}"),
            &id,
            "hung",
            &id,
            "http://o/",
        )
    };
    sender.fire_once(incident(0), now);
    // the worker takes the first delivery and hangs on it
    let deadline = Instant::now() + Duration::from_secs(10);
    while held.lock().unwrap().is_empty() || sender.stats().targets[0].queued != 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 1..=5 {
        sender.fire_once(incident(i), now);
    }
    let s = sender.stats();
    assert_eq!(s.targets[0].queued, 2, "{s:?}");
    assert_eq!(s.dropped(), 3, "incidents 1-3 dropped, 4 and 5 kept: {s:?}");
    assert_eq!(s.firing["Overtime504Incident"], 6, "tracking goes on");
    // stopped: the hung delivery counts as failed, the queued ones as dropped
    let s = sender.shutdown(Duration::from_millis(200)).await;
    assert_eq!((s.sent(), s.failed(), s.dropped()), (0, 1, 5), "{s:?}");
    assert_eq!(s.targets[0].queued, 0);
}

#[test]
fn spawning_outside_a_runtime_is_a_clear_error() {
    let err = AlertSender::spawn(AlertConfig::default()).err().unwrap();
    assert!(matches!(err, AlertError::NoRuntime), "{err}");
    let bad = AlertConfig {
        webhook_url: Some("not a url".into()),
        ..Default::default()
    };
    let err = AlertSender::spawn(bad).err().unwrap();
    assert!(err.to_string().starts_with("alert.webhook_url: "), "{err}");
}
