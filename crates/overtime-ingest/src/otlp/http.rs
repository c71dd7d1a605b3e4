//! OTLP/HTTP: `POST /v1/traces`.
//!
//! Design rules (OTLP/HTTP specification):
//! - `Content-Type` `application/x-protobuf` or `application/json`; any
//!   other is 415. `Content-Encoding` `gzip` or none; any other is 415.
//! - The answer is in the request's encoding: an
//!   `ExportTraceServiceResponse` (with `partial_success` when spans were
//!   rejected) on success, a `google.rpc.Status` on error.
//! - 401 (`WWW-Authenticate: Bearer`) without the configured token.
//! - 400 for a body that does not decode, 413 above the size limit
//!   (compressed or not), 429 + `Retry-After` when the sink is full
//!   (asked before decoding, and again by the write), 503 when it failed;
//!   nothing is written in those cases.

use super::deliver::{Delivery, deliver, retry_after_secs};
use super::gate::{DecodeGate, QUEUE_FULL_RETRY_MS};
use super::{OtlpConfig, OtlpServeError, OtlpStats};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use overtime_model::RecordSink;
use overtime_parse::spans::{ParsedSpans, parse_otlp_json_line, spans_from_otlp_request};
use prost::Message;
use serde_json::Value;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tokio_util::sync::CancellationToken;

/// The `source` written in rows and rejections received over HTTP.
const HTTP_SOURCE: &str = "otlp-http";

/// A `google.rpc.Status` (code and message; no details).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Proto,
    Json,
}

struct Receiver {
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
    messages: AtomicU64,
    /// Permits to decode and write ([`OtlpConfig::max_concurrent_decodes`]).
    decodes: DecodeGate,
}

/// The OTLP/HTTP router (`POST /v1/traces`) with the settings given:
/// merge it into an API router, or serve it with [`serve_otlp_http_on`].
///
/// ```
/// use overtime_ingest::otlp::{otlp_http_router_with, OtlpConfig};
/// # struct Nowhere;
/// # impl overtime_model::RecordSink for Nowhere {
/// #     fn write(&self, _: overtime_model::Table, _: arrow::record_batch::RecordBatch,
/// #              _: Option<overtime_model::Checkpoint>) -> Result<(), overtime_model::SinkError> { Ok(()) }
/// #     fn checkpoint(&self, _: &str) -> Option<String> { None }
/// # }
/// let router: axum::Router =
///     otlp_http_router_with(std::sync::Arc::new(Nowhere), Default::default(), OtlpConfig::default());
/// ```
pub fn otlp_http_router_with(
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
) -> Router {
    let limit = cfg.max_body_bytes;
    let rx = Arc::new(Receiver {
        sink,
        stats,
        decodes: DecodeGate::new(cfg.max_concurrent_decodes),
        cfg,
        messages: AtomicU64::new(0),
    });
    Router::new()
        .route("/v1/traces", post(export))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(rx)
}

/// Serves the OTLP/HTTP router on a bound listener (4318 by convention)
/// until `shutdown`.
pub async fn serve_otlp_http_on(
    listener: tokio::net::TcpListener,
    sink: Arc<dyn RecordSink>,
    stats: Arc<OtlpStats>,
    cfg: OtlpConfig,
    shutdown: CancellationToken,
) -> Result<(), OtlpServeError> {
    let router = otlp_http_router_with(sink, stats, cfg);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(OtlpServeError::Http)
}

async fn export(
    State(rx): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    OtlpStats::add(&rx.stats.http_requests, 1);
    if let Some(token) = &rx.cfg.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if !token.admits(given) {
            OtlpStats::add(&rx.stats.unauthorized, 1);
            let encoding = content_type(&headers).unwrap_or(Encoding::Json);
            let mut r = status(
                encoding,
                StatusCode::UNAUTHORIZED,
                16,
                "missing or wrong bearer token",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                OtlpStats::add(&rx.stats.too_large, 1);
            }
            return e.into_response();
        }
    };
    let encoding = match content_type(&headers) {
        Some(e) => e,
        None => {
            OtlpStats::add(&rx.stats.unsupported, 1);
            return plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/x-protobuf or application/json",
            );
        }
    };
    // Refuse before decoding when the store is full, and decode only a
    // few requests at a time (the store may fill while one waits).
    if let Some(ms) = rx.sink.backpressure() {
        return throttled(&rx, encoding, ms);
    }
    let Some(_permit) = rx.decodes.enter().await else {
        return throttled(&rx, encoding, QUEUE_FULL_RETRY_MS);
    };
    if let Some(ms) = rx.sink.backpressure() {
        return throttled(&rx, encoding, ms);
    }
    let body = match decompress(&headers, &body, rx.cfg.max_body_bytes) {
        Ok(b) => b,
        Err(BodyError::Unsupported(e)) => {
            OtlpStats::add(&rx.stats.unsupported, 1);
            let msg = format!("unsupported Content-Encoding `{e}` (gzip or none)");
            return status(encoding, StatusCode::UNSUPPORTED_MEDIA_TYPE, 3, &msg);
        }
        Err(BodyError::TooLarge) => {
            OtlpStats::add(&rx.stats.too_large, 1);
            let msg = format!(
                "body over {} bytes once decompressed",
                rx.cfg.max_body_bytes
            );
            return status(encoding, StatusCode::PAYLOAD_TOO_LARGE, 8, &msg);
        }
        Err(BodyError::BadGzip(e)) => return bad_request(&rx, encoding, "bad_gzip", &e),
    };
    let position = rx.messages.fetch_add(1, Relaxed) + 1;
    let mut parsed = ParsedSpans::default();
    match encoding {
        Encoding::Proto => match ExportTraceServiceRequest::decode(&body[..]) {
            Ok(req) => {
                spans_from_otlp_request(&req, HTTP_SOURCE, position, &mut parsed);
            }
            Err(e) => return bad_request(&rx, encoding, "bad_proto", &e.to_string()),
        },
        Encoding::Json => match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(o)) => {
                if o.contains_key("resourceSpans") || o.contains_key("resource_spans") {
                    parse_otlp_json_line(&body, HTTP_SOURCE, position, &mut parsed);
                }
            }
            Ok(_) => {
                return bad_request(&rx, encoding, "bad_otlp", "expected a JSON object");
            }
            Err(e) => return bad_request(&rx, encoding, "bad_json", &e.to_string()),
        },
    }
    let cfg = rx.cfg.clone();
    match deliver(rx.sink.clone(), rx.stats.clone(), cfg, parsed).await {
        Delivery::Stored {
            rejected,
            error_message,
        } => {
            let partial_success = (rejected > 0).then_some(ExportTracePartialSuccess {
                rejected_spans: rejected as i64,
                error_message,
            });
            success(encoding, &ExportTraceServiceResponse { partial_success })
        }
        Delivery::Full { retry_after_ms } => throttled(&rx, encoding, retry_after_ms),
        Delivery::Failed(m) => {
            OtlpStats::add(&rx.stats.sink_failures, 1);
            status(
                encoding,
                StatusCode::SERVICE_UNAVAILABLE,
                14,
                &format!("store write failed: {m}"),
            )
        }
    }
}

/// 429 with `Retry-After` (whole seconds), counted.
fn throttled(rx: &Receiver, encoding: Encoding, retry_after_ms: u64) -> Response {
    OtlpStats::add(&rx.stats.throttled, 1);
    let secs = retry_after_secs(retry_after_ms);
    let mut r = status(
        encoding,
        StatusCode::TOO_MANY_REQUESTS,
        14,
        &format!("store is full, retry in {secs} s"),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

fn content_type(headers: &HeaderMap) -> Option<Encoding> {
    let v = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = v.split(';').next()?.trim().to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(Encoding::Proto),
        "application/json" => Some(Encoding::Json),
        _ => None,
    }
}

enum BodyError {
    Unsupported(String),
    TooLarge,
    BadGzip(String),
}

/// The body after `Content-Encoding`, at most `limit` bytes.
fn decompress(headers: &HeaderMap, body: &Bytes, limit: usize) -> Result<Bytes, BodyError> {
    let enc = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .unwrap_or_default();
    match enc.as_str() {
        "" | "identity" => Ok(body.clone()),
        "gzip" | "x-gzip" => {
            let mut out = Vec::with_capacity(body.len() * 4);
            let mut reader = flate2::read::MultiGzDecoder::new(&body[..]).take(limit as u64 + 1);
            reader
                .read_to_end(&mut out)
                .map_err(|e| BodyError::BadGzip(e.to_string()))?;
            if out.len() > limit {
                return Err(BodyError::TooLarge);
            }
            Ok(Bytes::from(out))
        }
        other => Err(BodyError::Unsupported(other.to_string())),
    }
}

fn bad_request(rx: &Receiver, encoding: Encoding, reason: &str, detail: &str) -> Response {
    OtlpStats::add(&rx.stats.bad_requests, 1);
    rx.stats.count_reason(reason, 1);
    status(
        encoding,
        StatusCode::BAD_REQUEST,
        3,
        &format!("{reason}: {detail}"),
    )
}

fn plain(code: StatusCode, msg: &str) -> Response {
    (code, msg.to_string()).into_response()
}

/// An error answer: a `google.rpc.Status` with gRPC code `grpc_code`.
fn status(encoding: Encoding, code: StatusCode, grpc_code: i32, msg: &str) -> Response {
    let body = match encoding {
        Encoding::Proto => RpcStatus {
            code: grpc_code,
            message: msg.to_string(),
        }
        .encode_to_vec(),
        Encoding::Json => serde_json::json!({"code": grpc_code, "message": msg})
            .to_string()
            .into_bytes(),
    };
    with_type(code, encoding, body)
}

fn success(encoding: Encoding, resp: &ExportTraceServiceResponse) -> Response {
    let body = match encoding {
        Encoding::Proto => resp.encode_to_vec(),
        // proto3 JSON: camelCase, int64 as a string, empty message `{}`.
        Encoding::Json => match &resp.partial_success {
            Some(p) => serde_json::json!({"partialSuccess": {
                "rejectedSpans": p.rejected_spans.to_string(),
                "errorMessage": p.error_message,
            }}),
            None => serde_json::json!({}),
        }
        .to_string()
        .into_bytes(),
    };
    with_type(StatusCode::OK, encoding, body)
}

fn with_type(code: StatusCode, encoding: Encoding, body: Vec<u8>) -> Response {
    let ct = match encoding {
        Encoding::Proto => "application/x-protobuf",
        Encoding::Json => "application/json",
    };
    (code, [(header::CONTENT_TYPE, ct)], body).into_response()
}
