//! The Jaeger query API under `/jaeger`, asked what Grafana's Jaeger data
//! source asks (its client joins these paths to the data source's URL),
//! over a real store fed through the pipeline's sink: incident C, and the
//! trace of Jaeger's own test data whose answer Jaeger's query service
//! recorded (`tests/fixtures/peers/jaeger/`).

use crate::api::{call, feed, json, state};
use axum::http::StatusCode;
use overtime_model::{RecordSink, Table};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::SqlConfig;
use overtime_server::pipeline::DiagnosingSink;
use serde_json::Value;
use std::path::PathBuf;

/// A range around incident C, in µs (Grafana sends its time picker's
/// range as `start`/`end`): 2020 to 2100.
const DAY_START_US: i64 = 1_577_836_800_000_000;
const DAY_END_US: i64 = 4_102_444_800_000_000;

async fn get(s: &std::sync::Arc<overtime_server::AppState>, uri: &str) -> (StatusCode, Value) {
    let (st, body) = call(s, "GET", uri, "", None).await;
    (
        st,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

async fn sql(s: &std::sync::Arc<overtime_server::AppState>, q: &str) -> Vec<Value> {
    let (st, body) = call(s, "POST", "/api/sql", q, None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    json(&body)["rows"].as_array().unwrap().clone()
}

fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

#[tokio::test]
async fn grafanas_requests_list_search_and_open_incident_c_with_its_verdict_on_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    feed(&s);

    // The connection test and the service picker.
    let (st, services) = get(&s, "/jaeger/api/services").await;
    assert_eq!(st, StatusCode::OK);
    let want: Vec<Value> = sql(&s, "SELECT DISTINCT service FROM spans ORDER BY service")
        .await
        .into_iter()
        .map(|r| r["service"].clone())
        .collect();
    assert_eq!(services["data"], Value::Array(want.clone()));
    assert_eq!(services["total"], want.len());
    assert_eq!(
        (&services["limit"], &services["offset"], &services["errors"]),
        (&Value::from(0), &Value::from(0), &Value::Null)
    );
    let service = want[0].as_str().unwrap().to_string();

    // The operation picker: Grafana escapes the service into the path.
    let (st, ops) = get(&s, &format!("/jaeger/api/services/{service}/operations")).await;
    assert_eq!(st, StatusCode::OK);
    let names: Vec<Value> = sql(
        &s,
        &format!("SELECT DISTINCT name FROM spans WHERE service = '{service}' ORDER BY name"),
    )
    .await
    .into_iter()
    .map(|r| r["name"].clone())
    .collect();
    assert_eq!(ops["data"], Value::Array(names));

    // A search as Grafana sends it: the newest 20 traces with a span of the service.
    let base =
        format!("/jaeger/api/traces?service={service}&start={DAY_START_US}&end={DAY_END_US}");
    let (st, found) = get(&s, &format!("{base}&limit=20")).await;
    assert_eq!(st, StatusCode::OK, "{found}");
    let traces = found["data"].as_array().unwrap();
    assert_eq!(traces.len(), 20);
    for t in traces {
        let p: Vec<&str> = t["processes"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p["serviceName"].as_str().unwrap())
            .collect();
        assert!(p.contains(&service.as_str()), "{p:?}");
    }

    // By the verdict's tag, as a Grafana user types it (logfmt, sent as JSON).
    let tags = "%7B%22overtime.root_cause%22%3A%22upstream_connect_slow%22%7D";
    let (_, by_cause) = get(
        &s,
        &format!("/jaeger/api/traces?start={DAY_START_US}&end={DAY_END_US}&limit=100&tags={tags}"),
    )
    .await;
    let by_cause = by_cause["data"].as_array().unwrap();
    assert_eq!(by_cause.len(), 23, "incident C's 23 traces");
    // By duration: the traces with a span of the service of 5 s or more.
    let (_, slow) = get(&s, &format!("{base}&limit=1000&minDuration=5s")).await;
    let n = sql(&s, &format!("SELECT count(DISTINCT trace_id) AS n FROM spans WHERE service = '{service}' AND duration_ms >= 5000")).await;
    assert_eq!(
        slow["data"].as_array().unwrap().len() as u64,
        n[0]["n"].as_u64().unwrap()
    );

    // One trace, as the trace view opens it.
    let (_, list) = get(&s, "/api/traces?kind=upstream_connect_slow&limit=1").await;
    let id = list["traces"][0]["trace_id"].as_str().unwrap().to_string();
    let (_, verdict) = get(&s, &format!("/api/traces/{id}")).await;
    let (st, one) = get(&s, &format!("/jaeger/api/traces/{id}")).await;
    assert_eq!(st, StatusCode::OK, "{one}");
    let trace = &one["data"][0];
    assert_eq!(trace["traceID"], id);
    let spans = trace["spans"].as_array().unwrap();
    let n = sql(
        &s,
        &format!("SELECT count(DISTINCT span_id) AS n FROM spans WHERE trace_id = '{id}'"),
    )
    .await;
    assert_eq!(spans.len() as u64, n[0]["n"].as_u64().unwrap());
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|sp| sp["references"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(roots.len(), 1);
    let root = roots[0];
    assert_eq!(
        tag(root, "overtime.root_cause").unwrap(),
        "upstream_connect_slow"
    );
    assert_eq!(tag(root, "overtime.component").unwrap(), "weather_api");
    assert_eq!(
        tag(root, "overtime.share").unwrap(),
        &verdict["root_cause"]["share"]
    );
    assert_eq!(
        tag(root, "overtime.summary").unwrap(),
        &verdict["root_cause"]["summary"]
    );
    for sp in spans.iter().filter(|sp| sp["spanID"] != root["spanID"]) {
        assert!(
            tag(sp, "overtime.root_cause").is_none(),
            "the verdict is on the root only"
        );
        assert_eq!(sp["references"][0]["refType"], "CHILD_OF");
        assert!(
            sp["startTime"].as_i64().unwrap() > 1_700_000_000_000_000,
            "µs since the epoch"
        );
    }
    // The weather call's DNS and connect, written as span events, are logs.
    let events: Vec<&str> = spans
        .iter()
        .flat_map(|sp| sp["logs"].as_array().unwrap())
        .map(|l| l["fields"][0]["value"].as_str().unwrap())
        .collect();
    assert!(
        events.contains(&"dns") && events.contains(&"connect"),
        "{events:?}"
    );

    // Errors in Jaeger's envelope.
    let (st, missing) = get(&s, &format!("/jaeger/api/traces/{}", "ab".repeat(16))).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(missing["errors"][0]["msg"], "trace not found");
    assert_eq!(missing["errors"][0]["code"], 404);
    assert_eq!(missing["data"], Value::Null);
    let (st, bad) = get(&s, "/jaeger/api/traces/not-a-trace").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(
        bad["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("traceID"),
        "{bad}"
    );
    let (st, bad) = get(&s, &format!("{base}&minDuration=fast")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(
        bad["errors"][0]["msg"]
            .as_str()
            .unwrap()
            .starts_with("unable to parse param 'minDuration'")
    );
    // Asked by id among others, a missing one is an error entry of a 200.
    let (st, both) = get(
        &s,
        &format!(
            "/jaeger/api/traces?traceID={id}&traceID={}",
            "ab".repeat(16)
        ),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(both["data"].as_array().unwrap().len(), 1);
    assert_eq!(both["errors"][0]["traceID"], "ab".repeat(16));
}

#[tokio::test]
async fn the_jaeger_api_needs_the_token_like_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), Some("t0ken"), SqlConfig::default());
    let (st, _) = call(&s, "GET", "/jaeger/api/services", "", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _) = call(&s, "GET", "/jaeger/api/services", "", Some("t0ken")).await;
    assert_eq!(st, StatusCode::OK);
}

fn fixture(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/peers/jaeger")
        .join(f)
}

#[tokio::test]
async fn jaegers_recorded_answer_for_its_own_test_trace_is_what_overtime_serves() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, SqlConfig::default());
    // Jaeger's OTLP JSON input, one export request per line as overtime reads it.
    let input: Value =
        serde_json::from_slice(&std::fs::read(fixture("otlp2jaeger-in.json")).unwrap()).unwrap();
    let line = format!("{}\n", serde_json::to_string(&input).unwrap());
    let spans = parse_span_bytes(SpanFormat::OtlpJson, line.as_bytes(), "otlp2jaeger-in.json");
    let sink = DiagnosingSink { state: s.clone() };
    sink.write(Table::Spans, spans.to_batches().0, None)
        .unwrap();
    overtime_server::pipeline::tick(&s);

    let mut want: Value =
        serde_json::from_slice(&std::fs::read(fixture("otlp2jaeger-out.json")).unwrap()).unwrap();
    // The recorded answer is of Jaeger's /api/transform, which applies no
    // adjuster; GET /api/traces/{id} applies DeduplicateSpans, and the
    // input holds the same span twice.
    let spans = want["data"][0]["spans"].as_array_mut().unwrap();
    assert_eq!(spans[0], spans[1]);
    spans.pop();

    let (st, mut got) = get(&s, "/jaeger/api/traces/83a9efd15c1c98a977e0711cc93ee28b").await;
    assert_eq!(st, StatusCode::OK, "{got}");
    // overtime's own tags (its stage; the verdict on the root) are extra.
    let tags = got["data"][0]["spans"][0]["tags"].as_array_mut().unwrap();
    let ours: Vec<String> = tags
        .iter()
        .filter_map(|t| {
            t["key"]
                .as_str()
                .filter(|k| k.starts_with("overtime."))
                .map(String::from)
        })
        .collect();
    assert!(ours.contains(&"overtime.stage".to_string()), "{ours:?}");
    tags.retain(|t| !t["key"].as_str().unwrap().starts_with("overtime."));
    assert_eq!(got, want);
}
