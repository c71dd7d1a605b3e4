//! The API over a real store fed with incident C through the pipeline's
//! sink: traces, incidents, SQL (and its limits), auth, JSON errors.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use overtime_diagnose::DiagnoseConfig;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_model::{RecordSink, Table};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::SqlConfig;
use overtime_server::pipeline::DiagnosingSink;
use overtime_server::{AppState, router};
use overtime_store::{Store, StoreConfig};
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;

fn fixture(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents/c_dns_retry")
        .join(f)
}

pub(crate) fn state(dir: &std::path::Path, token: Option<&str>, sql: SqlConfig) -> Arc<AppState> {
    let store = Store::open(StoreConfig {
        data_dir: dir.to_path_buf(),
        // The fixtures are older than the default retention.
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap();
    Arc::new(AppState {
        sql,
        token: token.map(String::from),
        ..AppState::with_defaults(store)
    })
}

/// Incident C through the sink, then a tick.
pub(crate) fn feed(s: &Arc<AppState>) {
    let sink = DiagnosingSink { state: s.clone() };
    let body = std::fs::read_to_string(fixture("log_format.txt")).unwrap();
    let mut p = GatewayParser::new(LogFormat::compile(&body).unwrap(), "access", 0);
    p.push_bytes(&std::fs::read(fixture("access.log")).unwrap(), 1);
    let (g, _) = p.finish();
    sink.write(Table::GatewayRequests, g, None).unwrap();
    let spans = parse_span_bytes(
        SpanFormat::Jsonl,
        &std::fs::read(fixture("spans.jsonl")).unwrap(),
        "spans.jsonl",
    );
    let (sp, _) = spans.to_batches();
    sink.write(Table::Spans, sp, None).unwrap();
    overtime_server::pipeline::tick(s);
}

pub(crate) async fn call(
    s: &Arc<AppState>,
    method: &str,
    uri: &str,
    body: &str,
    token: Option<&str>,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = router(s.clone())
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

pub(crate) fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test]
async fn traces_incidents_and_sql_over_incident_c() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    feed(&s);

    let (st, body) = call(
        &s,
        "GET",
        "/api/traces?outcome=gateway_timeout&limit=500",
        "",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let list = json(&body);
    assert_eq!(list["total"], 23);
    let id = list["traces"][0]["trace_id"].as_str().unwrap().to_string();

    let (st, body) = call(&s, "GET", &format!("/api/traces/{id}"), "", None).await;
    assert_eq!(st, StatusCode::OK);
    let v = json(&body);
    assert_eq!(v["root_cause"]["kind"], "upstream_connect_slow");
    assert_eq!(v["root_cause"]["component"], "weather_api");

    let (st, body) = call(&s, "GET", "/api/incidents", "", None).await;
    assert_eq!(st, StatusCode::OK);
    let inc = json(&body);
    let inc_id = inc["incidents"][0]["id"].as_str().unwrap().to_string();
    assert!(
        inc["incidents"][0]["headline"]
            .as_str()
            .unwrap()
            .contains("upstream_connect_slow on weather_api")
    );
    let (st, md) = call(
        &s,
        "GET",
        &format!(
            "/api/incidents/{}?format=markdown",
            inc_id.replace(':', "%3A")
        ),
        "",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{md}");
    assert!(md.contains("LLM latency by input-token bucket"), "{md}");

    let (st, body) = call(&s, "POST", "/api/sql", r#"{"sql": "SELECT kind, component, count(*) AS n FROM verdicts GROUP BY kind, component"}"#, None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let r = json(&body);
    assert_eq!(r["rows"][0]["kind"], "upstream_connect_slow");
    assert_eq!(r["rows"][0]["n"], 23);
    // The verdict column is built only when read, and then whole: each
    // row's JSON is that trace's verdict, as GET /api/traces/{id} gives it.
    let (st, body) = call(
        &s,
        "POST",
        "/api/sql",
        "SELECT trace_id, kind, verdict FROM verdicts ORDER BY trace_id",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let rows = json(&body)["rows"].as_array().unwrap().clone();
    assert!(rows.len() >= 23, "{rows:?}");
    for row in rows {
        let v = json(row["verdict"].as_str().expect("the verdict's JSON"));
        assert_eq!(v["trace_id"], row["trace_id"]);
        assert_eq!(v["root_cause"]["kind"], row["kind"]);
    }

    let (st, body) = call(
        &s,
        "POST",
        "/api/sql",
        "SELECT count(*) AS n FROM gateway_requests WHERE status = 504",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["rows"][0]["n"], 23);

    let (st, body) = call(
        &s,
        "GET",
        "/api/traces/0000000000000000000000000000dead",
        "",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(json(&body)["reason"], "not_found");
    let (st, body) = call(&s, "GET", "/api/traces?outcome=bogus", "", None).await;
    assert_eq!(
        (st, json(&body)["reason"].as_str().unwrap().to_string()),
        (StatusCode::BAD_REQUEST, "bad_outcome".to_string())
    );
}

#[tokio::test]
async fn sql_is_read_only_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(
        dir.path(),
        None,
        SqlConfig {
            timeout_ms: 2_000,
            max_rows: 10,
            memory_bytes: 32 * 1024 * 1024,
            ..SqlConfig::default()
        },
    );
    feed(&s);
    for ddl in [
        "CREATE TABLE x AS SELECT 1",
        "DROP TABLE spans",
        "INSERT INTO verdicts SELECT * FROM verdicts",
        "SET datafusion.execution.batch_size = 1",
    ] {
        let (st, body) = call(&s, "POST", "/api/sql", ddl, None).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{ddl}: {body}");
    }
    let (st, body) = call(&s, "POST", "/api/sql", "SELECT * FROM spans", None).await;
    assert_eq!(st, StatusCode::OK);
    let r = json(&body);
    assert_eq!(
        (r["row_count"].as_u64(), r["truncated"].as_bool()),
        (Some(10), Some(true))
    );
    // An Arrow answer says the same in a header; a whole one does not.
    for (sql, cut) in [
        ("SELECT * FROM spans", Some("true")),
        ("SELECT * FROM spans LIMIT 3", None),
    ] {
        let body = serde_json::json!({"sql": sql, "format": "arrow"}).to_string();
        let req = Request::builder()
            .method("POST")
            .uri("/api/sql")
            .body(Body::from(body))
            .unwrap();
        let resp = router(s.clone()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let flag = resp.headers().get(overtime_server::TRUNCATED_HEADER);
        assert_eq!(flag.and_then(|v| v.to_str().ok()), cut, "{sql}");
    }
    // A cross join far beyond the limits ends with an error or a cut, never a hang.
    let (st, _) = call(
        &s,
        "POST",
        "/api/sql",
        "SELECT a.span_id, b.name, c.service FROM spans a, spans b, spans c ORDER BY 1, 2, 3",
        None,
    )
    .await;
    assert!(
        st == StatusCode::REQUEST_TIMEOUT || st == StatusCode::BAD_REQUEST,
        "{st}"
    );
    let long = format!("SELECT '{}'", "x".repeat(100_000));
    let (st, body) = call(&s, "POST", "/api/sql", &long, None).await;
    assert_eq!(
        (st, json(&body)["reason"].as_str().unwrap().to_string()),
        (StatusCode::BAD_REQUEST, "sql_refused".to_string())
    );
}

#[tokio::test]
async fn bearer_token_on_everything_but_health() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), Some("s3cret"), SqlConfig::default());
    assert_eq!(
        call(&s, "GET", "/healthz", "", None).await.0,
        StatusCode::OK
    );
    assert_eq!(call(&s, "GET", "/readyz", "", None).await.0, StatusCode::OK);
    for uri in ["/api/traces", "/api/incidents", "/api/kinds"] {
        let (st, body) = call(&s, "GET", uri, "", None).await;
        assert_eq!(
            (st, json(&body)["reason"].as_str().unwrap().to_string()),
            (StatusCode::UNAUTHORIZED, "no_token".to_string())
        );
        assert_eq!(
            call(&s, "GET", uri, "", Some("wrong")).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&s, "GET", uri, "", Some("s3cret")).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        call(&s, "POST", "/api/sql", "SELECT 1", None).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_trace_out_of_the_live_window_is_diagnosed_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    feed(&s);
    let id = {
        let live = s.live.lock().unwrap();

        live.verdicts().next().unwrap().1.trace_id.clone()
    };
    // A fresh live state (as after eviction): the store still has the records.
    *s.live.lock().unwrap() = LiveDiagnoser::new(DiagnoseConfig::default(), 0, 600_000, 100_000);
    let (st, body) = call(&s, "GET", &format!("/api/traces/{id}"), "", None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(json(&body)["root_cause"]["kind"], "upstream_connect_slow");
}

#[tokio::test]
async fn the_kinds_are_served_from_the_rules_with_the_switched_off_ones_marked() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    })
    .unwrap();
    let s = Arc::new(AppState {
        diagnose: DiagnoseConfig {
            disabled_rules: overtime_diagnose::DisabledRules::new(["tool_slow"]).unwrap(),
            ..Default::default()
        },
        ..AppState::with_defaults(store)
    });
    let (st, body) = call(&s, "GET", "/api/kinds", "", None).await;
    assert_eq!(st, StatusCode::OK);
    let kinds = json(&body)["kinds"].as_array().unwrap().clone();
    let names: Vec<&str> = kinds.iter().map(|k| k["name"].as_str().unwrap()).collect();
    // Every kind of the verdicts' vocabulary, in the order the rules are tried.
    let mut sorted = names.clone();
    sorted.sort_unstable();
    let mut all: Vec<&str> = overtime_model::RootCauseKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    all.sort_unstable();
    assert_eq!(sorted, all);
    assert_eq!(names[0], "stream_idle_gap");
    let tool = kinds
        .iter()
        .find(|k| k["name"] == "tool_no_timeout")
        .unwrap();
    assert_eq!(tool["label"], "tool call with no timeout");
    assert!(
        tool["description"].as_str().unwrap().contains("no timeout"),
        "{tool}"
    );
    assert!(tool["color"].as_str().unwrap().starts_with('#'), "{tool}");
    assert_eq!(tool["enabled"], true);
    let off = kinds.iter().find(|k| k["name"] == "tool_slow").unwrap();
    assert_eq!(off["enabled"], false);
}
