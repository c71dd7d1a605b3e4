//! The series behind the UI's charts over incident C, fed through the
//! pipeline's sink: each number held against the same count asked of the
//! store or the verdicts another way.

use crate::api::{call, feed, json, state};
use axum::http::StatusCode;
use overtime_server::SqlConfig;
use serde_json::Value;

async fn get(s: &std::sync::Arc<overtime_server::AppState>, uri: &str) -> Value {
    let (st, body) = call(s, "GET", uri, "", None).await;
    assert_eq!(st, StatusCode::OK, "{uri}: {body}");
    json(&body)
}

async fn one(s: &std::sync::Arc<overtime_server::AppState>, q: &str) -> i64 {
    let (st, body) = call(s, "POST", "/api/sql", q, None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    json(&body)["rows"][0]["n"].as_i64().unwrap()
}

fn sum(v: &Value) -> i64 {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap_or(0))
        .sum()
}

fn ts(ms: i64) -> String {
    format!("to_timestamp_micros({})", ms * 1000)
}

#[tokio::test]
async fn an_incidents_timeline_counts_its_failures_by_minute_and_its_calls_latency() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    feed(&s);
    let incidents = get(&s, "/api/incidents").await;
    let inc = incidents["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "upstream_connect_slow")
        .unwrap()
        .clone();
    let id = inc["id"].as_str().unwrap();
    let t = get(&s, &format!("/api/incidents/{id}/timeline")).await;
    let times = t["t_ms"].as_array().unwrap();
    let n = times.len();
    let (from, step) = (times[0].as_i64().unwrap(), t["step_ms"].as_i64().unwrap());
    let to = from + step * n as i64;
    assert_eq!(step, 60_000, "one bucket per minute");
    let (ws, we) = (
        t["window"]["start_ms"].as_i64().unwrap(),
        t["window"]["end_ms"].as_i64().unwrap(),
    );
    assert!(
        from <= ws - 3_600_000 && ws - 3_600_000 < from + step,
        "the hour before the window"
    );
    assert!(to >= we + 600_000, "and ten minutes after it");

    // Stacked by cause: incident C's own first, every failing verdict counted once.
    let causes = t["causes"].as_array().unwrap();
    assert_eq!(causes[0]["kind"], "upstream_connect_slow");
    assert_eq!(sum(&causes[0]["failures"]), 23);
    let failing = get(&s, "/api/traces?limit=10000").await;
    let failing = failing["traces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["outcome"] != "ok")
        .count();
    let stacked: i64 = causes.iter().map(|c| sum(&c["failures"])).sum();
    assert_eq!(stacked as usize, failing);
    let first = causes[0]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .position(|x| x.as_i64() > Some(0))
        .unwrap();
    assert_eq!(
        from + first as i64 * step,
        ws / step * step,
        "failures start in the window's first minute"
    );

    // Requests from the store's outermost gateway layer.
    let want = one(&s, &format!("SELECT count(*) AS n FROM gateway_requests WHERE layer = 0 AND time >= {} AND time < {}", ts(from), ts(to))).await;
    assert_eq!(t["requests_from"], "gateway_requests");
    assert_eq!(sum(&t["requests"]), want);
    assert!(sum(&t["gateway_504"]) >= 23);

    // The dominant call: weather_api's calls, P99 over P50 wherever both are.
    let d = &t["dominant"];
    assert_eq!(d["component"], "weather_api");
    let calls = one(&s, &format!("SELECT count(*) AS n FROM spans WHERE tool = 'weather_api' AND stage = 'tool' AND start_time >= {} AND start_time < {}", ts(from), ts(to))).await;
    assert_eq!(sum(&d["calls"]), calls);
    let (p50, p99) = (
        d["p50_ms"].as_array().unwrap(),
        d["p99_ms"].as_array().unwrap(),
    );
    assert_eq!((p50.len(), p99.len()), (n, n));
    let both: Vec<(f64, f64)> = p50
        .iter()
        .zip(p99)
        .filter_map(|(a, b)| Some((a.as_f64()?, b.as_f64()?)))
        .collect();
    assert!(
        !both.is_empty() && both.iter().all(|(a, b)| b >= a),
        "{both:?}"
    );
    assert!(
        both.iter().any(|(_, b)| *b > 5_000.0),
        "the slow DNS shows: {both:?}"
    );
}

#[tokio::test]
async fn the_overview_charts_the_hours_before_the_newest_data() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    feed(&s);
    let o = get(&s, "/api/overview?hours=2").await;
    let (from, to) = (o["from_ms"].as_i64().unwrap(), o["to_ms"].as_i64().unwrap());
    assert!((to - from - 7_200_000).abs() <= 60_000, "{from} {to}");
    let want = one(&s, &format!("SELECT count(*) AS n FROM gateway_requests WHERE layer = 0 AND time >= {} AND time < {}", ts(from), ts(to))).await;
    assert!(want > 0);
    assert_eq!(sum(&o["requests"]), want);
    let failed = one(&s, &format!("SELECT count(*) AS n FROM gateway_requests WHERE layer = 0 AND status >= 500 AND time >= {} AND time < {}", ts(from), ts(to))).await;
    assert_eq!(sum(&o["failed"]), failed);
    // Chain health from the SLO engine: its minutes in the range, C's tool timeouts below 1.
    let health = o["chain_health"].as_array().unwrap();
    assert!(!health.is_empty());
    assert!(
        health
            .iter()
            .all(|h| (from..to).contains(&h["t_ms"].as_i64().unwrap()))
    );
    assert!(
        health.iter().any(|h| h["value"].as_f64().unwrap() < 1.0),
        "{health:?}"
    );
    let (st, _) = call(&s, "GET", "/api/overview?hours=0", "", None).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}
