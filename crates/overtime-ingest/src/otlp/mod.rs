//! OTLP trace receivers: OTLP/HTTP (`POST /v1/traces`, protobuf or JSON,
//! gzip allowed) and OTLP/gRPC (`TraceService/Export`), delivering spans
//! and rejections into the sink with partial success.
//!
//! Design rules:
//! - The answer is the acknowledgement: 200 / `OK` only after the sink
//!   made the spans durable. A full sink is answered before anything is
//!   written (HTTP 429 with `Retry-After`, gRPC `RESOURCE_EXHAUSTED` with
//!   `RetryInfo`), so the exporter's retry brings the same spans again and
//!   nothing is stored twice.
//! - Decoding and mapping are the parsers' (`spans_from_otlp_request`,
//!   `parse_otlp_json_line`); a bad span is rejected alone and reported in
//!   `partial_success`, a body that does not decode is a 400 /
//!   `INVALID_ARGUMENT` and counted.
//! - With [`OtlpConfig::token`] set, a request without that bearer token
//!   is refused before anything else is looked at.
//! - The `[otlp]` section of overtime's TOML is this module's own
//!   [`OtlpSettings`] (embedded by `overtime-config`); its `build()` makes
//!   the [`OtlpConfig`] the receivers run with.
//! - Sink writes block (a WAL fsync), so they run on tokio's blocking pool.
//! - Overload is refused cheaply: before a body is decoded the receiver
//!   asks the sink for early [`backpressure`](overtime_model::RecordSink::backpressure)
//!   and answers 429 / `RESOURCE_EXHAUSTED` at once if it pushes back; at
//!   most [`OtlpConfig::max_concurrent_decodes`] requests are decoded and
//!   written at a time and twice as many wait (beyond that, 429 at once),
//!   so decoded requests cannot pile up in memory.
//!
//! ```no_run
//! use overtime_ingest::otlp::{serve_otlp_grpc_on, serve_otlp_http_on, OtlpConfig, OtlpStats};
//! # async fn run(sink: std::sync::Arc<dyn overtime_model::RecordSink>) {
//! let stats = std::sync::Arc::new(OtlpStats::default());
//! let stop = tokio_util::sync::CancellationToken::new();
//! let http = tokio::net::TcpListener::bind("0.0.0.0:4318").await.unwrap();
//! let grpc = tokio::net::TcpListener::bind("0.0.0.0:4317").await.unwrap();
//! let cfg = OtlpConfig::default();
//! tokio::spawn(serve_otlp_http_on(http, sink.clone(), stats.clone(), cfg.clone(), stop.clone()));
//! serve_otlp_grpc_on(grpc, sink, stats, cfg, stop).await.unwrap();
//! # }
//! ```

mod auth;
mod deliver;
mod gate;
mod grpc;
mod http;
mod settings;

pub use auth::BearerToken;
pub use grpc::serve_otlp_grpc_on;
pub use http::{otlp_http_router_with, serve_otlp_http_on};
pub use settings::OtlpSettings;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Default largest request body: 16 MiB.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Receiver settings, as the receivers run with them; the `[otlp]` section
/// of the TOML config is [`OtlpSettings`], whose `build()` makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Largest request body, compressed and after decompression (HTTP
    /// 413 / gRPC `RESOURCE_EXHAUSTED` above it). Default 16 MiB.
    pub max_body_bytes: usize,
    /// When the spans of a request are stored but the store is full for
    /// its rejections, how long to keep retrying those before answering
    /// anyway (the rejections are then counted in
    /// [`OtlpStats::rejections_not_stored`]). Default 5000 ms.
    pub max_rejected_wait_ms: u64,
    /// Requests decoded and written at once per receiver; twice as many
    /// may wait (bodies read, not decoded), more are refused (429 /
    /// `RESOURCE_EXHAUSTED`, retry after 1 s). Bounds the memory of
    /// decoded requests under overload. Default twice the CPUs (at least 2).
    pub max_concurrent_decodes: usize,
    /// When set, every export must carry this bearer token (HTTP 401 /
    /// gRPC `UNAUTHENTICATED` otherwise, counted in
    /// [`OtlpStats::unauthorized`]). Default none.
    pub token: Option<BearerToken>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_rejected_wait_ms: 5000,
            max_concurrent_decodes: std::thread::available_parallelism()
                .map_or(2, |n| n.get() * 2)
                .max(2),
            token: None,
        }
    }
}

/// Counters of the OTLP receivers (both transports), monotonic.
#[derive(Debug, Default)]
pub struct OtlpStats {
    /// Export requests received over HTTP, whatever their outcome.
    pub http_requests: AtomicU64,
    /// Export requests received over gRPC, whatever their outcome.
    pub grpc_requests: AtomicU64,
    /// Spans stored.
    pub spans: AtomicU64,
    /// Spans rejected (reported in partial success, stored in `rejected`).
    pub rejected_spans: AtomicU64,
    /// Bodies that did not decode (HTTP 400, gRPC `INVALID_ARGUMENT`).
    pub bad_requests: AtomicU64,
    /// HTTP requests with an unsupported content type or encoding (415).
    pub unsupported: AtomicU64,
    /// Requests over the size limit (413).
    pub too_large: AtomicU64,
    /// Requests without the configured bearer token (401 /
    /// `UNAUTHENTICATED`).
    pub unauthorized: AtomicU64,
    /// Requests refused because the sink was full (429 /
    /// `RESOURCE_EXHAUSTED`).
    pub throttled: AtomicU64,
    /// Requests refused because the sink failed (503 / `UNAVAILABLE`).
    pub sink_failures: AtomicU64,
    /// Rejections given up on after the spans were stored (see
    /// [`OtlpConfig::max_rejected_wait_ms`]).
    pub rejections_not_stored: AtomicU64,
    rejected_by_reason: Mutex<BTreeMap<String, u64>>,
}

impl OtlpStats {
    /// Rejected spans and bodies by reason code (`bad_id`, `bad_proto`…).
    ///
    /// ```
    /// let s = overtime_ingest::otlp::OtlpStats::default();
    /// assert!(s.rejected_by_reason().is_empty());
    /// ```
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        self.rejected_by_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn count_reason(&self, reason: &str, n: u64) {
        let mut m = self
            .rejected_by_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *m.entry(reason.to_string()).or_default() += n;
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }
}

/// Why a receiver could not serve.
#[derive(Debug, thiserror::Error)]
pub enum OtlpServeError {
    /// The HTTP server stopped on an I/O error.
    #[error("OTLP/HTTP server: {0}")]
    Http(#[source] std::io::Error),
    /// The gRPC server stopped on a transport error.
    #[error("OTLP/gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
}
