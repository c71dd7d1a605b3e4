//! Real OpenTelemetry exporters (`opentelemetry-otlp` with the SDK's
//! `SdkTracerProvider`) sending to the OTLP/HTTP router and the OTLP/gRPC
//! server on random 127.0.0.1 ports: spans arrive with their ids, names and
//! mapped attributes; a full sink is retried by the exporter and delivered
//! once it drains; with a bearer token configured, only exporters that
//! send it (as `OTEL_EXPORTER_OTLP_HEADERS` would) are stored. Plus a
//! hand-built gRPC client for partial success and gzip.

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span as ProtoSpan};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use overtime_ingest::otlp::{
    BearerToken, OtlpConfig, OtlpStats, otlp_http_router_with, serve_otlp_grpc_on,
};
use overtime_model::{SpanStatus, Stage};
use overtime_test_support::sink::RecordingSink;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic_types::StatusExt;

#[derive(Clone, Copy)]
enum Transport {
    Http,
    Grpc,
}

struct Collector {
    port: u16,
    sink: Arc<RecordingSink>,
    stats: Arc<OtlpStats>,
    rt: tokio::runtime::Runtime,
    stop: CancellationToken,
}

fn collector(transport: Transport) -> Collector {
    collector_with(transport, OtlpConfig::default())
}

fn collector_with(transport: Transport, cfg: OtlpConfig) -> Collector {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = Arc::new(RecordingSink::new());
    let stats = Arc::new(OtlpStats::default());
    let stop = CancellationToken::new();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    match transport {
        Transport::Http => {
            let router = otlp_http_router_with(sink.clone(), stats.clone(), cfg);
            let stop = stop.clone();
            rt.spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            });
        }
        Transport::Grpc => {
            let (sink, stats, stop) = (sink.clone(), stats.clone(), stop.clone());
            rt.spawn(serve_otlp_grpc_on(listener, sink, stats, cfg, stop));
        }
    }
    Collector {
        port,
        sink,
        stats,
        rt,
        stop,
    }
}

/// A provider exporting each span as it ends (simple processor), so the
/// export — and its retries — finish before `span.end()` returns. The
/// exporters need a Tokio runtime: the caller enters `c.rt`.
fn provider(c: &Collector, transport: Transport) -> SdkTracerProvider {
    provider_with_token(c, transport, None)
}

/// [`provider`] whose exporter sends `Authorization: Bearer <token>`.
fn provider_with_token(
    c: &Collector,
    transport: Transport,
    token: Option<&str>,
) -> SdkTracerProvider {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let exporter = match transport {
        Transport::Http => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("http://127.0.0.1:{}/v1/traces", c.port))
            .with_timeout(Duration::from_secs(10))
            .with_headers(
                bearer
                    .map(|b| [("Authorization".to_string(), b)].into())
                    .unwrap_or_default(),
            )
            .build()
            .unwrap(),
        Transport::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            if let Some(b) = bearer {
                metadata.insert("authorization", b.parse().unwrap());
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(format!("http://127.0.0.1:{}", c.port))
                .with_timeout(Duration::from_secs(10))
                .with_metadata(metadata)
                .build()
                .unwrap()
        }
    };
    SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("agent").build())
        .build()
}

/// An agent root span with an LLM call under it; returns (trace id, llm
/// span id) as hex.
fn emit(provider: &SdkTracerProvider) -> (String, String) {
    let tracer = provider.tracer("overtime-test");
    let root = tracer
        .span_builder("POST /v1/chat")
        .with_kind(SpanKind::Server)
        .with_attributes(vec![
            KeyValue::new("agent.budget_ms", 60000),
            KeyValue::new(
                "http.request.header.x-request-id",
                opentelemetry::Value::Array(vec![opentelemetry::StringValue::from("req-1")].into()),
            ),
        ])
        .start(&tracer);
    let cx = opentelemetry::Context::current_with_span(root);
    let mut llm = tracer
        .span_builder("chat deepseek-v4-pro")
        .with_kind(SpanKind::Client)
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.model", "deepseek-v4-pro"),
            KeyValue::new("gen_ai.usage.input_tokens", 412),
            KeyValue::new("gen_ai.usage.output_tokens", 37),
            KeyValue::new("agent.timeout_ms", 30000),
            KeyValue::new("agent.attempt", 1),
            KeyValue::new("error.type", "timeout"),
        ])
        .start_with_context(&tracer, &cx);
    llm.set_status(opentelemetry::trace::Status::error("deadline exceeded"));
    let ids = (
        llm.span_context().trace_id().to_string(),
        llm.span_context().span_id().to_string(),
    );
    llm.end();
    cx.span().end();
    ids
}

fn assert_mapped(c: &Collector, trace_id: &str, llm_id: &str, source: &str) {
    let spans = c.sink.spans();
    assert_eq!(spans.len(), 2, "{spans:?}");
    let llm = spans
        .iter()
        .find(|s| s.span_id == llm_id)
        .expect("llm span");
    let root = spans.iter().find(|s| s.span_id != llm_id).unwrap();
    assert_eq!(llm.trace_id, trace_id);
    assert_eq!(root.trace_id, trace_id);
    assert_eq!(llm.parent_span_id.as_deref(), Some(root.span_id.as_str()));
    assert_eq!(root.parent_span_id, None);
    assert_eq!(llm.name, "chat deepseek-v4-pro");
    assert_eq!(llm.service, "agent");
    assert_eq!(llm.stage, Stage::Llm);
    assert_eq!(llm.model.as_deref(), Some("deepseek-v4-pro"));
    assert_eq!((llm.input_tokens, llm.output_tokens), (Some(412), Some(37)));
    assert_eq!(llm.timeout_ms, Some(30000.0));
    assert_eq!(llm.attempt, Some(1));
    assert_eq!(llm.status, SpanStatus::Timeout);
    assert_eq!(llm.source, source);
    assert_eq!(root.name, "POST /v1/chat");
    assert_eq!(root.budget_ms, Some(60000.0));
    assert_eq!(root.request_id.as_deref(), Some("req-1"));
    assert!(c.sink.rejected().is_empty());
}

#[test]
fn http_exporter_spans_arrive_mapped() {
    let c = collector(Transport::Http);
    let _guard = c.rt.enter();
    let p = provider(&c, Transport::Http);
    let (trace_id, llm_id) = emit(&p);
    p.shutdown().unwrap();
    assert_mapped(&c, &trace_id, &llm_id, "otlp-http");
    assert_eq!(c.stats.http_requests.load(Relaxed), 2);
    c.stop.cancel();
}

#[test]
fn grpc_exporter_spans_arrive_mapped() {
    let c = collector(Transport::Grpc);
    let _guard = c.rt.enter();
    let p = provider(&c, Transport::Grpc);
    let (trace_id, llm_id) = emit(&p);
    p.shutdown().unwrap();
    assert_mapped(&c, &trace_id, &llm_id, "otlp-grpc");
    assert_eq!(c.stats.grpc_requests.load(Relaxed), 2);
    c.stop.cancel();
}

/// The sink is full for 300 ms: the exporter is answered 429 + Retry-After
/// (HTTP) or RESOURCE_EXHAUSTED + RetryInfo (gRPC), waits, retries, and
/// each span is stored exactly once.
fn full_then_drained(transport: Transport, grpc: bool) {
    let c = collector(if grpc {
        Transport::Grpc
    } else {
        Transport::Http
    });
    c.sink.retry_after_ms.store(1000, Relaxed);
    c.sink.set_full(true);
    let _guard = c.rt.enter();
    let p = provider(&c, transport);
    let sink = c.sink.clone();
    let drain = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        sink.set_full(false);
    });
    let (trace_id, llm_id) = emit(&p);
    drain.join().unwrap();
    p.shutdown().unwrap();
    assert!(c.stats.throttled.load(Relaxed) >= 1);
    assert!(c.sink.full_answers.load(Relaxed) >= 1);
    let source = if grpc { "otlp-grpc" } else { "otlp-http" };
    assert_mapped(&c, &trace_id, &llm_id, source);
    c.stop.cancel();
}

/// A bearer token on the receiver: an exporter without it (or with a
/// wrong one) is refused and nothing is stored; with it, stored as usual.
fn token_required(transport: Transport) {
    let cfg = OtlpConfig {
        token: Some(BearerToken::new("otlp-s3cret")),
        ..OtlpConfig::default()
    };
    let c = collector_with(transport, cfg);
    let _guard = c.rt.enter();
    for wrong in [None, Some("otlp-s3cre"), Some("otlp-s3cret2")] {
        let p = provider_with_token(&c, transport, wrong);
        emit(&p);
        p.shutdown().unwrap();
    }
    assert!(c.sink.spans().is_empty(), "stored without the token");
    assert!(c.stats.unauthorized.load(Relaxed) >= 3);
    let p = provider_with_token(&c, transport, Some("otlp-s3cret"));
    let (trace_id, llm_id) = emit(&p);
    p.shutdown().unwrap();
    let source = match transport {
        Transport::Http => "otlp-http",
        Transport::Grpc => "otlp-grpc",
    };
    assert_mapped(&c, &trace_id, &llm_id, source);
    c.stop.cancel();
}

#[test]
fn http_exporter_needs_the_token_when_one_is_set() {
    token_required(Transport::Http);
}

#[test]
fn grpc_exporter_needs_the_token_when_one_is_set() {
    token_required(Transport::Grpc);
}

#[test]
fn http_exporter_retries_after_429() {
    full_then_drained(Transport::Http, false);
}

#[test]
fn grpc_exporter_retries_after_resource_exhausted() {
    full_then_drained(Transport::Grpc, true);
}

fn proto_span(trace_id: Vec<u8>, span_id: u8) -> ProtoSpan {
    ProtoSpan {
        trace_id,
        span_id: vec![span_id; 8],
        name: "tool".into(),
        start_time_unix_nano: 1_714_561_200_000_000_000,
        end_time_unix_nano: 1_714_561_201_000_000_000,
        ..Default::default()
    }
}

#[test]
fn grpc_partial_success_gzip_and_full() {
    let c = collector(Transport::Grpc);
    let url = format!("http://127.0.0.1:{}", c.port);
    c.rt.block_on(async {
        let mut client = TraceServiceClient::connect(url)
            .await
            .unwrap()
            .send_compressed(tonic::codec::CompressionEncoding::Gzip);
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![proto_span(vec![7; 16], 1), proto_span(vec![], 2)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let resp = client.export(req.clone()).await.unwrap().into_inner();
        let partial = resp.partial_success.unwrap();
        assert_eq!(partial.rejected_spans, 1);
        assert!(partial.error_message.contains("1 of 2 spans rejected"));
        assert_eq!(c.sink.spans().len(), 1);
        assert_eq!(c.sink.rejected()[0].source, "otlp-grpc");

        c.sink.retry_after_ms.store(1500, Relaxed);
        c.sink.set_full(true);
        let status = client.export(req.clone()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        let retry = status.get_details_retry_info().expect("RetryInfo");
        assert_eq!(retry.retry_delay, Some(Duration::from_millis(1500)));
        assert_eq!(c.sink.spans().len(), 1, "nothing written when full");

        // Early backpressure: refused by the interceptor, before decoding.
        c.sink.set_full(false);
        c.sink.set_early_full(true);
        let full_before = c.sink.full_answers.load(Relaxed);
        let status = client.export(req.clone()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        let retry = status.get_details_retry_info().expect("RetryInfo");
        assert_eq!(retry.retry_delay, Some(Duration::from_millis(1500)));
        assert_eq!(
            c.sink.full_answers.load(Relaxed),
            full_before,
            "write not called"
        );
        c.sink.set_early_full(false);
        client.export(req).await.unwrap();
        assert_eq!(c.sink.spans().len(), 2);
    });
    c.stop.cancel();
}
