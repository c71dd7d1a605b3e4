//! OTLP/HTTP with hand-built requests: protobuf with partial success,
//! JSON + gzip, error answers (400, 413, 415) and 429 backpressure.

use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use overtime_ingest::otlp::{OtlpConfig, OtlpStats, otlp_http_router_with};
use overtime_model::{Stage, Table};
use overtime_test_support::net::post;
use overtime_test_support::sink::RecordingSink;
use prost::Message;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

const PROTO: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const GZIP: (&str, &str) = ("Content-Encoding", "gzip");

struct Server {
    port: u16,
    sink: Arc<RecordingSink>,
    stats: Arc<OtlpStats>,
    _rt: tokio::runtime::Runtime,
}

fn server(cfg: OtlpConfig) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = Arc::new(RecordingSink::new());
    let stats = Arc::new(OtlpStats::default());
    let router = otlp_http_router_with(sink.clone(), stats.clone(), cfg);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    rt.spawn(async move { axum::serve(listener, router).await });
    Server {
        port,
        sink,
        stats,
        _rt: rt,
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue("agent".into()),
                )],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn llm_span() -> Span {
    Span {
        trace_id: vec![0x0a; 16],
        span_id: vec![0xb7; 8],
        name: "chat deepseek".into(),
        start_time_unix_nano: 1_714_561_200_000_000_000,
        end_time_unix_nano: 1_714_561_231_000_000_000,
        attributes: vec![
            kv(
                "gen_ai.operation.name",
                any_value::Value::StringValue("chat".into()),
            ),
            kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(412)),
            kv("agent.timeout_ms", any_value::Value::IntValue(30000)),
        ],
        ..Default::default()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn protobuf_with_partial_success() {
    let s = server(OtlpConfig::default());
    let bad = Span {
        trace_id: vec![],
        span_id: vec![1; 8],
        ..llm_span()
    };
    let body = request(vec![llm_span(), bad]).encode_to_vec();
    let r = post(s.port, "/v1/traces", &[PROTO], &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    let resp = ExportTraceServiceResponse::decode(&r.body[..]).unwrap();
    let partial = resp.partial_success.unwrap();
    assert_eq!(partial.rejected_spans, 1);
    assert!(
        partial.error_message.contains("missing_field"),
        "{}",
        partial.error_message
    );
    let spans = s.sink.spans();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].trace_id, "0a".repeat(16));
    assert_eq!(spans[0].service, "agent");
    assert_eq!(spans[0].stage, Stage::Llm);
    assert_eq!(spans[0].input_tokens, Some(412));
    assert_eq!(spans[0].timeout_ms, Some(30000.0));
    let rejected = s.sink.rejected();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].source, "otlp-http");
    assert_eq!(rejected[0].position, "message 1, span 2");
    assert_eq!(s.stats.rejected_spans.load(Relaxed), 1);
    assert_eq!(s.stats.rejected_by_reason()["missing_field"], 1);

    // All good: no partial_success at all.
    let r = post(
        s.port,
        "/v1/traces",
        &[PROTO],
        &request(vec![llm_span()]).encode_to_vec(),
    );
    assert_eq!(r.status, 200);
    let resp = ExportTraceServiceResponse::decode(&r.body[..]).unwrap();
    assert_eq!(resp.partial_success, None);
    assert_eq!(s.stats.spans.load(Relaxed), 2);
}

#[test]
fn json_and_gzip() {
    let s = server(OtlpConfig::default());
    let json = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"tools"}}]},
      "scopeSpans":[{"spans":[
        {"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"weather",
         "startTimeUnixNano":"1714561200000000000","endTimeUnixNano":"1714561245000000000",
         "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},
                       {"key":"gen_ai.tool.name","value":{"stringValue":"weather_api"}},
                       {"key":"agent.attempt","value":{"intValue":"1"}}]},
        {"spanId":"b7ad6b7169203332","name":"no trace id",
         "startTimeUnixNano":"1714561200000000000","endTimeUnixNano":"1714561201000000000"}]}]}]}"#;
    let r = post(
        s.port,
        "/v1/traces",
        &[("Content-Type", "application/json; charset=utf-8"), GZIP],
        &gzip(json),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["partialSuccess"]["rejectedSpans"], "1");
    assert!(
        v["partialSuccess"]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("1 of 2 spans rejected")
    );
    let spans = s.sink.spans();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].service, "tools");
    assert_eq!(spans[0].stage, Stage::Tool);
    assert_eq!(spans[0].tool.as_deref(), Some("weather_api"));
    assert_eq!(spans[0].attempt, Some(1));
    assert_eq!(s.sink.rows(Table::Rejected), 1);

    // An empty request is valid.
    let r = post(s.port, "/v1/traces", &[JSON], b"{}");
    assert_eq!((r.status, &r.body[..]), (200, &b"{}"[..]));
}

#[test]
fn error_answers_are_counted_and_store_nothing() {
    let s = server(OtlpConfig {
        max_body_bytes: 4096,
        ..OtlpConfig::default()
    });
    let r = post(
        s.port,
        "/v1/traces",
        &[("Content-Type", "text/plain")],
        b"x",
    );
    assert_eq!(r.status, 415);
    let r = post(
        s.port,
        "/v1/traces",
        &[PROTO, ("Content-Encoding", "br")],
        b"x",
    );
    assert_eq!(r.status, 415);
    assert_eq!(s.stats.unsupported.load(Relaxed), 2);

    let r = post(s.port, "/v1/traces", &[PROTO], b"\xff\xff\xff\xff");
    assert_eq!(r.status, 400);
    let status = String::from_utf8_lossy(&r.body).into_owned();
    assert!(status.contains("bad_proto"), "{status}");
    let r = post(s.port, "/v1/traces", &[JSON], b"{not json");
    assert_eq!(r.status, 400);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["code"], 3);
    let r = post(s.port, "/v1/traces", &[PROTO, GZIP], b"not gzip");
    assert_eq!(r.status, 400);
    assert_eq!(s.stats.bad_requests.load(Relaxed), 3);

    // Over the limit, as sent and once decompressed (a gzip bomb).
    let r = post(s.port, "/v1/traces", &[PROTO], &[0u8; 8192]);
    assert_eq!(r.status, 413);
    let r = post(s.port, "/v1/traces", &[PROTO, GZIP], &gzip(&[0u8; 1 << 20]));
    assert_eq!(r.status, 413);
    assert_eq!(s.stats.too_large.load(Relaxed), 2);
    assert!(s.sink.writes().is_empty());
}

#[test]
fn full_sink_is_429_with_retry_after_and_no_write() {
    let s = server(OtlpConfig::default());
    s.sink.retry_after_ms.store(2500, Relaxed);
    s.sink.set_full(true);
    let body = request(vec![llm_span()]).encode_to_vec();
    let r = post(s.port, "/v1/traces", &[PROTO], &body);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert!(s.sink.writes().is_empty());
    assert_eq!(s.stats.throttled.load(Relaxed), 1);
    s.sink.set_full(false);
    let r = post(s.port, "/v1/traces", &[PROTO], &body);
    assert_eq!(r.status, 200);
    assert_eq!(s.sink.spans().len(), 1);
}

/// Early backpressure refuses before decoding: even a body that would not
/// decode is answered 429 (not 400), and the sink's `write` is never
/// called. A request of a bad content type is still 415 (checked first).
#[test]
fn early_backpressure_is_429_before_decoding() {
    let s = server(OtlpConfig::default());
    s.sink.retry_after_ms.store(250, Relaxed);
    s.sink.set_early_full(true);
    let r = post(s.port, "/v1/traces", &[PROTO], b"\xff\xff not protobuf");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    let r = post(
        s.port,
        "/v1/traces",
        &[("Content-Type", "text/plain")],
        b"x",
    );
    assert_eq!(r.status, 415);
    assert_eq!(s.stats.throttled.load(Relaxed), 1);
    assert_eq!(s.stats.bad_requests.load(Relaxed), 0, "nothing was decoded");
    assert_eq!(s.sink.full_answers.load(Relaxed), 0, "write never called");
    assert!(s.sink.writes().is_empty());
    s.sink.set_early_full(false);
    let body = request(vec![llm_span()]).encode_to_vec();
    let r = post(s.port, "/v1/traces", &[PROTO], &body);
    assert_eq!(r.status, 200);
    assert_eq!(s.sink.spans().len(), 1);
}

/// Concurrent requests from 8 senders, each write taking 20 ms: with 4
/// decode permits no more than 4 are decoded and written at once, and all
/// of them are stored.
#[test]
fn decode_permits_bound_concurrent_writes() {
    let permits = 4;
    let s = Arc::new(server(OtlpConfig {
        max_concurrent_decodes: permits,
        ..OtlpConfig::default()
    }));
    s.sink.write_delay_ms.store(20, Relaxed);
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let body = request(vec![llm_span()]).encode_to_vec();
                (0..5)
                    .map(|_| post(s.port, "/v1/traces", &[PROTO], &body).status)
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    for t in senders {
        assert_eq!(t.join().unwrap(), vec![200; 5]);
    }
    assert_eq!(s.sink.spans().len(), 40);
    let most = s.sink.max_in_write.load(Relaxed);
    assert!(
        (2..=permits as u64).contains(&most),
        "writes at once: {most} (permits {permits})"
    );
}

/// A bearer token set: 401 with `WWW-Authenticate: Bearer` (checked before
/// the body is looked at) for no token, a wrong one, another scheme; the
/// token itself never appears in an answer; the right one is stored.
#[test]
fn bearer_token_is_required_when_set() {
    let s = server(OtlpConfig {
        token: Some(overtime_ingest::otlp::BearerToken::new("tok-123")),
        ..OtlpConfig::default()
    });
    let body = request(vec![llm_span()]).encode_to_vec();
    let wrong: [&[(&str, &str)]; 4] = [
        &[PROTO],
        &[PROTO, ("Authorization", "Bearer tok-12")],
        &[PROTO, ("Authorization", "Basic tok-123")],
        &[JSON, ("Authorization", "tok-123")],
    ];
    for headers in wrong {
        let r = post(s.port, "/v1/traces", headers, &body);
        assert_eq!(r.status, 401, "{headers:?}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        assert!(!String::from_utf8_lossy(&r.body).contains("tok-"));
    }
    assert_eq!(s.stats.unauthorized.load(Relaxed), 4);
    assert_eq!(s.stats.bad_requests.load(Relaxed), 0);
    assert!(s.sink.writes().is_empty());
    let r = post(
        s.port,
        "/v1/traces",
        &[PROTO, ("Authorization", "Bearer tok-123")],
        &body,
    );
    assert_eq!(r.status, 200);
    assert_eq!(s.sink.spans().len(), 1);
}
