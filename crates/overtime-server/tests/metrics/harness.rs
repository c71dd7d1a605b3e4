//! The server's state over a temporary store, a fixture fed through the
//! pipeline's labelled sinks, and one request through the router.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use overtime_model::{RecordSink, Table, gateway_records};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::pipeline::{self, SourceSink};
use overtime_server::{AppState, router};
use overtime_store::{Store, StoreConfig};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/incidents").join(name)
}

pub fn state(dir: &Path, token: Option<&str>, memtable_bytes: u64) -> Arc<AppState> {
    let store = Store::open(StoreConfig {
        data_dir: dir.to_path_buf(),
        memtable_bytes,
        flush_interval_ms: 3_600_000,
        // A flush enforces retention, and the fixtures are older than the default.
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap();
    Arc::new(AppState {
        token: token.map(String::from),
        ..AppState::with_defaults(store)
    })
}

pub struct Fed {
    pub truth: Value,
    pub gateway_statuses: BTreeMap<String, u64>,
    pub gateway_lines: u64,
    pub spans: u64,
}

/// Feeds a fixture through labelled sinks (the nginx log as a tailed file,
/// the spans as OTLP/HTTP), then one tick.
pub fn feed(s: &Arc<AppState>, name: &str) -> Fed {
    let dir = fixture(name);
    let truth: Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let format = match name {
        "b_tool_no_timeout" => LogFormat::from_nginx_conf(
            &std::fs::read_to_string(dir.join("nginx.conf")).unwrap(),
            "agent_json",
        )
        .unwrap(),
        "c_dns_retry" => {
            LogFormat::compile(&std::fs::read_to_string(dir.join("log_format.txt")).unwrap())
                .unwrap()
        }
        _ => LogFormat::builtin("overtime").unwrap(),
    };
    let mut p = GatewayParser::new(format, "edge", 0);
    p.push_bytes(&std::fs::read(dir.join("access.log")).unwrap(), 1);
    let (g, rejected) = p.finish();
    assert_eq!(rejected.num_rows(), 0, "{name}: the fixture parses");
    let mut gateway_statuses = BTreeMap::new();
    for r in gateway_records(&g).unwrap() {
        let st = r.status.map_or("unknown".to_string(), |s| s.to_string());
        *gateway_statuses.entry(st).or_default() += 1;
    }
    let gateway_lines = g.num_rows() as u64;
    let file = SourceSink {
        state: s.clone(),
        source: "file",
    };
    file.write(Table::GatewayRequests, g, None).unwrap();
    let (file_name, format) = if name == "b_tool_no_timeout" {
        ("traces.otlp.jsonl", SpanFormat::OtlpJson)
    } else {
        ("spans.jsonl", SpanFormat::Jsonl)
    };
    let parsed = parse_span_bytes(
        format,
        &std::fs::read(dir.join(file_name)).unwrap(),
        file_name,
    );
    let (sp, _) = parsed.to_batches();
    let spans = sp.num_rows() as u64;
    SourceSink {
        state: s.clone(),
        source: "otlp_http",
    }
    .write(Table::Spans, sp, None)
    .unwrap();
    pipeline::tick(s);
    Fed {
        truth,
        gateway_statuses,
        gateway_lines,
        spans,
    }
}

pub async fn call(
    s: &Arc<AppState>,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, String, String) {
    let mut req = Request::builder().uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = router(s.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
}
