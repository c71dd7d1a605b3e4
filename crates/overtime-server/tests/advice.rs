//! `GET /api/advice` and `POST /api/whatif` over a real store fed with
//! incident A (seed 000) through the pipeline's sink.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use overtime_model::{RecordSink, Table};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::pipeline::DiagnosingSink;
use overtime_server::{AppState, router};
use overtime_store::{Store, StoreConfig};
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;

/// Incident A happened on 2026-11-25 (UTC 07:05–07:47).
const WINDOW: &str = "from=2026-11-25T00:00:00Z&to=2026-11-26T00:00:00Z";

fn fixture(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents/a_prefill")
        .join(f)
}

fn state(dir: &std::path::Path, token: Option<&str>) -> Arc<AppState> {
    let store = Store::open(StoreConfig {
        data_dir: dir.to_path_buf(),
        // The fixtures are older than the default retention.
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap();
    let s = Arc::new(AppState {
        token: token.map(String::from),
        ..AppState::with_defaults(store)
    });
    let sink = DiagnosingSink { state: s.clone() };
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "access", 0);
    p.push_bytes(&std::fs::read(fixture("access.log")).unwrap(), 1);
    sink.write(Table::GatewayRequests, p.finish().0, None)
        .unwrap();
    let spans = parse_span_bytes(
        SpanFormat::Jsonl,
        &std::fs::read(fixture("spans.jsonl")).unwrap(),
        "spans.jsonl",
    );
    sink.write(Table::Spans, spans.to_batches().0, None)
        .unwrap();
    s
}

async fn call(
    s: &Arc<AppState>,
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, String, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, String::from_utf8_lossy(&bytes).into_owned())
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test]
async fn the_advice_over_the_store_matches_what_the_files_say() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None);
    let (status, _, body) = call(&s, "GET", &format!("/api/advice?{WINDOW}"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let a = json(&body);
    assert_eq!(a["traces"], 334);
    let long = a["llm"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "deepseek-v4-pro" && g["bucket"] == ">500")
        .expect("a row for long prompts");
    assert_eq!(long["timeout"]["ms"], 30000.0);
    assert_eq!(long["change"], "raise", "{long}");
    assert_eq!(a["gateways"][0]["timeout"]["source"], "inferred");
    assert!(a["alignment"][0]["first"].is_string());

    let (status, ctype, md) = call(
        &s,
        "GET",
        &format!("/api/advice?{WINDOW}&format=markdown&target=0.95"),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("text/markdown"), "{ctype}");
    assert!(md.contains("cover 95.0 % of calls"), "{md}");

    // The default window is the last 24 hours: nothing stored then.
    let (status, _, body) = call(&s, "GET", "/api/advice", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["traces"], 0);
}

#[tokio::test]
async fn whatif_replays_the_stored_traces_and_names_the_ones_that_change() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None);
    let req = serde_json::json!({
        "set": ["llm.deepseek-v4-pro.timeout=130s", "service.budget=160s", "gateway.access.read_timeout=180s"],
        "from": "2026-11-25T00:00:00Z", "to": "2026-11-26T00:00:00Z", "seed": 3,
    });
    let (status, _, body) = call(&s, "POST", "/api/whatif", &req.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let w = json(&body);
    assert_eq!(w["before"]["gateway_timeout"], 30.0);
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() <= 5.0,
        "{}",
        w["after"]
    );
    assert_eq!(w["today_reproduced"], w["traces"]);
    let changed = w["changed"].as_array().unwrap();
    assert!(changed.len() >= 25);
    // Every changed trace is one the traces API knows.
    let id = changed[0]["trace_id"].as_str().unwrap();
    let (status, _, _) = call(&s, "GET", &format!("/api/traces/{id}"), "").await;
    assert_eq!(status, StatusCode::OK);

    // The same as an object of keys, and as Markdown.
    let req = serde_json::json!({"set": {"llm.deepseek-v4-pro.timeout": "20s"},
        "from": "2026-11-25T00:00:00Z", "to": "2026-11-26T00:00:00Z", "format": "markdown"});
    let (status, ctype, md) = call(&s, "POST", "/api/whatif", &req.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{md}");
    assert!(ctype.starts_with("text/markdown"));
    assert!(
        md.starts_with("# What if: llm.deepseek-v4-pro.timeout=20s"),
        "{md}"
    );
}

#[tokio::test]
async fn whatif_takes_a_toml_proposal_and_the_504s_go_as_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None);
    // The model calls may finish, with a budget and a gateway that outlive
    // them: the same change as `set` above, as the TOML a file would hold.
    let toml = r#"
[llm."deepseek-v4-pro"]
timeout = "130s"

[service]
budget = "160s"

[gateway.access]
read_timeout = "180s"
"#;
    let req = serde_json::json!({
        "proposal": toml,
        "from": "2026-11-25T00:00:00Z", "to": "2026-11-26T00:00:00Z", "seed": 3,
    });
    let (status, _, body) = call(&s, "POST", "/api/whatif", &req.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let w = json(&body);
    let mut keys: Vec<&str> = w["proposal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "gateway.access.read_timeout=180s",
            "llm.deepseek-v4-pro.timeout=130s",
            "service.budget=160s"
        ],
        "the report says what the proposal set"
    );
    assert_eq!(w["before"]["gateway_timeout"], 30.0);
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() <= 5.0,
        "the 504s go: {}",
        w["after"]
    );
    let changed = w["changed"].as_array().unwrap();
    assert!(changed.len() >= 25, "{changed:?}");
    assert!(
        changed.iter().all(|c| c["before"] == "gateway_timeout"),
        "{changed:?}"
    );

    // Only a shorter model timeout: the service's 503 still comes after
    // nginx's 504, so the 504s stay.
    let req = serde_json::json!({
        "proposal": "[llm.\"deepseek-v4-pro\"]\ntimeout = \"20s\"\n",
        "from": "2026-11-25T00:00:00Z", "to": "2026-11-26T00:00:00Z",
    });
    let (status, _, body) = call(&s, "POST", "/api/whatif", &req.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let w = json(&body);
    assert_eq!(w["proposal"][0], "llm.deepseek-v4-pro.timeout=20s");
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() >= 30.0,
        "{}",
        w["after"]
    );
}

#[tokio::test]
async fn a_bad_proposal_is_a_400_that_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None);
    for (body, says) in [
        (
            r#"{"set": ["llm.gpt-9.timeout=45s"], "from": "2026-11-25T00:00:00Z"}"#,
            "not in the traces",
        ),
        (
            r#"{"set": ["llm.deepseek-v4-pro.timeout=soon"]}"#,
            "not a duration",
        ),
        (r#"{"set": []}"#, "nothing proposed"),
        (r#"{"proposal": "[llm"}"#, "not TOML"),
        (r#"{"sets": ["retries=off"]}"#, "unknown field"),
        ("not json", "expected"),
    ] {
        let (status, _, resp) = call(&s, "POST", "/api/whatif", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {resp}");
        let e = json(&resp);
        assert!(
            e["error"].as_str().unwrap().contains(says),
            "{body}: {resp}"
        );
    }
    let (status, _, resp) = call(&s, "GET", "/api/advice?target=2", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json(&resp)["reason"], "bad_target");
}

#[tokio::test]
async fn advice_and_whatif_want_the_token_like_every_api() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), Some("s3cret"));
    assert_eq!(
        call(&s, "GET", "/api/advice", "").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&s, "POST", "/api/whatif", r#"{"set": ["retries=off"]}"#)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
}
