//! OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
//!
//! Design rules:
//! - `OK` only once the spans are durable, with `partial_success` when
//!   some were rejected.
//! - A full sink is `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo`
//!   detail (OTLP exporters retry it after that delay; without RetryInfo
//!   they would drop the data); a failed sink is `UNAVAILABLE` (retried
//!   with backoff). The sink's early backpressure is asked by an
//!   interceptor, before tonic decodes the message.
//! - gzip-compressed requests are accepted; messages above
//!   [`OtlpConfig::max_body_bytes`] are refused by tonic.

use super::auth::BearerToken;
use super::deliver::{Delivery, deliver};
use super::gate::{DecodeGate, QUEUE_FULL_RETRY_MS};
use super::{OtlpConfig, OtlpServeError, OtlpStats};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use overtime_model::RecordSink;
use overtime_parse::spans::{ParsedSpans, spans_from_otlp_request};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `source` written in rows and rejections received over gRPC.
const GRPC_SOURCE: &str = "otlp-grpc";

struct GrpcReceiver {
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
    messages: AtomicU64,
    /// Permits to map and write ([`OtlpConfig::max_concurrent_decodes`]).
    decodes: DecodeGate,
}

/// `RESOURCE_EXHAUSTED` with `RetryInfo`: the store is full.
fn resource_exhausted(stats: &OtlpStats, retry_after_ms: u64) -> Status {
    OtlpStats::add(&stats.throttled, 1);
    let delay = Duration::from_millis(retry_after_ms.max(1));
    Status::with_error_details(
        Code::ResourceExhausted,
        format!("store is full, retry in {retry_after_ms} ms"),
        ErrorDetails::with_retry_info(Some(delay)),
    )
}

/// Refuses an export before its message is decoded when it lacks the
/// configured bearer token or the sink pushes back early
/// ([`RecordSink::backpressure`]); counts the request.
#[derive(Clone)]
struct ExportGuard {
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    token: Option<BearerToken>,
}

impl tonic::service::Interceptor for ExportGuard {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(token) = &self.token {
            let given = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            if !token.admits(given) {
                OtlpStats::add(&self.stats.grpc_requests, 1);
                OtlpStats::add(&self.stats.unauthorized, 1);
                return Err(Status::unauthenticated("missing or wrong bearer token"));
            }
        }
        match self.sink.backpressure() {
            None => Ok(request),
            Some(ms) => {
                OtlpStats::add(&self.stats.grpc_requests, 1);
                Err(resource_exhausted(&self.stats, ms))
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        OtlpStats::add(&self.stats.grpc_requests, 1);
        let Some(_permit) = self.decodes.enter().await else {
            return Err(resource_exhausted(&self.stats, QUEUE_FULL_RETRY_MS));
        };
        if let Some(ms) = self.sink.backpressure() {
            return Err(resource_exhausted(&self.stats, ms));
        }
        let position = self.messages.fetch_add(1, Relaxed) + 1;
        let mut parsed = ParsedSpans::default();
        spans_from_otlp_request(request.get_ref(), GRPC_SOURCE, position, &mut parsed);
        let delivery = deliver(
            self.sink.clone(),
            self.stats.clone(),
            self.cfg.clone(),
            parsed,
        )
        .await;
        match delivery {
            Delivery::Stored {
                rejected,
                error_message,
            } => Ok(Response::new(ExportTraceServiceResponse {
                partial_success: (rejected > 0).then_some(ExportTracePartialSuccess {
                    rejected_spans: rejected as i64,
                    error_message,
                }),
            })),
            Delivery::Full { retry_after_ms } => {
                Err(resource_exhausted(&self.stats, retry_after_ms))
            }
            Delivery::Failed(m) => {
                OtlpStats::add(&self.stats.sink_failures, 1);
                Err(Status::unavailable(format!("store write failed: {m}")))
            }
        }
    }
}

/// The `TraceService` server behind its [`ExportGuard`]
/// interceptor, as [`serve_otlp_grpc_on`] serves it.
fn otlp_grpc_service(
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
) -> InterceptedService<TraceServiceServer<impl TraceService>, ExportGuard> {
    let limit = cfg.max_body_bytes;
    let early = ExportGuard {
        sink: sink.clone(),
        stats: stats.clone(),
        token: cfg.token.clone(),
    };
    let server = TraceServiceServer::new(GrpcReceiver {
        sink,
        stats,
        decodes: DecodeGate::new(cfg.max_concurrent_decodes),
        cfg,
        messages: AtomicU64::new(0),
    })
    .accept_compressed(CompressionEncoding::Gzip)
    .max_decoding_message_size(limit);
    InterceptedService::new(server, early)
}

/// Serves OTLP/gRPC on a bound listener (4317 by convention) until
/// `shutdown`.
pub async fn serve_otlp_grpc_on(
    listener: tokio::net::TcpListener,
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
    shutdown: CancellationToken,
) -> Result<(), OtlpServeError> {
    tonic::transport::Server::builder()
        .add_service(otlp_grpc_service(sink, stats, cfg))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown.cancelled_owned(),
        )
        .await?;
    Ok(())
}
