//! OpenTelemetry for the simulated services, as an instrumented service
//! sets it up: one `SdkTracerProvider` per service (Resource
//! `service.name`), parent-based sampling (a client's `traceparent` with
//! flags `00` drops the trace), a batch span processor, and two exports:
//!
//! - OTLP/HTTP protobuf with `opentelemetry-otlp` to `--otlp-endpoint`;
//! - `--spans-out`: one `ExportTraceServiceRequest` per line in the OTLP
//!   JSON mapping (hex ids), as the OpenTelemetry Collector's file
//!   exporter writes it — what `overtime diagnose --otlp-json` reads.
//!
//! Every span ended, written and exported is counted, and export failures
//! are kept with the last error: nothing is dropped silently.

use crate::error::SimulateError;
use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, SdkTracer, SdkTracerProvider, Span,
    SpanData, SpanExporter, SpanProcessor,
};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the spans go.
#[derive(Debug, Clone, Default)]
pub(crate) struct TelemetryConfig {
    /// OTLP/HTTP endpoint (`http://host:4318`; `/v1/traces` is added when
    /// no path is given). `None`: no OTLP export.
    pub(crate) otlp_endpoint: Option<String>,
    /// OTLP JSON lines file.
    pub(crate) spans_out: Option<PathBuf>,
    /// Seeds trace and span ids.
    pub(crate) seed: u64,
}

/// Counters of the span pipeline.
#[derive(Debug, Default)]
pub(crate) struct ExportStats {
    /// Sampled spans that ended.
    pub(crate) spans_ended: AtomicU64,
    /// Lines and spans written to `--spans-out`.
    pub(crate) file_lines: AtomicU64,
    pub(crate) file_spans: AtomicU64,
    /// Spans that could not be written to `--spans-out`.
    pub(crate) file_failed_spans: AtomicU64,
    /// Spans the OTLP endpoint accepted / that failed to export.
    pub(crate) otlp_spans: AtomicU64,
    pub(crate) otlp_failed_spans: AtomicU64,
    /// The last export or write error.
    pub(crate) last_error: Mutex<Option<String>>,
}

impl ExportStats {
    fn error(&self, e: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// The last export or write error, if any.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The full URL of the OTLP/HTTP traces endpoint.
pub(crate) fn traces_url(endpoint: &str) -> Result<String, String> {
    let uri: http::Uri = endpoint
        .trim()
        .parse()
        .map_err(|e| format!("--otlp-endpoint {endpoint:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        _ => {
            return Err(format!(
                "--otlp-endpoint {endpoint:?}: only http:// is supported"
            ));
        }
    }
    let base = endpoint.trim().trim_end_matches('/');
    Ok(match uri.path() {
        "" | "/" => format!("{base}/v1/traces"),
        _ => base.to_string(),
    })
}

/// The tracer providers of one simulation.
#[derive(Debug)]
pub(crate) struct Telemetry {
    cfg: TelemetryConfig,
    otlp_url: Option<String>,
    handle: tokio::runtime::Handle,
    file: Option<Arc<SpansFile>>,
    providers: Mutex<Vec<SdkTracerProvider>>,
    /// The counters.
    pub(crate) stats: Arc<ExportStats>,
}

impl Telemetry {
    /// Opens `--spans-out` (truncated) and checks the endpoint. The OTLP
    /// exporter's HTTP requests run on `handle`.
    pub(crate) fn new(
        cfg: TelemetryConfig,
        handle: tokio::runtime::Handle,
    ) -> Result<Self, SimulateError> {
        let otlp_url = match &cfg.otlp_endpoint {
            Some(e) => Some(traces_url(e).map_err(SimulateError::Usage)?),
            None => None,
        };
        let file = match &cfg.spans_out {
            Some(p) => Some(Arc::new(SpansFile::create(p)?)),
            None => None,
        };
        Ok(Telemetry {
            cfg,
            otlp_url,
            handle,
            file,
            providers: Mutex::new(Vec::new()),
            stats: Arc::new(ExportStats::default()),
        })
    }

    /// The OTLP traces URL, if exporting.
    pub(crate) fn otlp_url(&self) -> Option<&str> {
        self.otlp_url.as_deref()
    }

    /// A tracer for `service` (its own provider and Resource).
    pub(crate) fn tracer(&self, service: &'static str) -> Result<SdkTracer, SimulateError> {
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attributes([
                KeyValue::new("service.namespace", "agent-platform"),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("deployment.environment.name", "simulate"),
            ])
            .build();
        let salt = service.bytes().fold(0u64, |h, b| {
            h.wrapping_mul(0x100_0000_01b3).wrapping_add(b as u64)
        });
        let mut builder = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_id_generator(SeededIds::new(self.cfg.seed ^ salt))
            .with_span_processor(CountEnded(self.stats.clone()));
        if self.file.is_some() || self.otlp_url.is_some() {
            let otlp = match &self.otlp_url {
                Some(url) => Some(
                    opentelemetry_otlp::SpanExporter::builder()
                        .with_http()
                        .with_http_client(RuntimeClient {
                            handle: self.handle.clone(),
                            timeout: Duration::from_secs(10),
                        })
                        .with_protocol(Protocol::HttpBinary)
                        .with_endpoint(url.clone())
                        .with_timeout(Duration::from_secs(10))
                        .build()
                        .map_err(|e| SimulateError::Telemetry(format!("OTLP exporter: {e}")))?,
                ),
                None => None,
            };
            let exporter = SimExporter {
                file: self.file.clone(),
                otlp,
                resource: ResourceAttributesWithSchema::default(),
                stats: self.stats.clone(),
            };
            let batch = BatchConfigBuilder::default()
                .with_max_queue_size(1 << 16)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(Duration::from_millis(200))
                .build();
            builder = builder.with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch)
                    .build(),
            );
        }
        let provider = builder.build();
        let scope = InstrumentationScope::builder(format!("agent_platform.{service}"))
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        self.providers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(provider);
        Ok(tracer)
    }

    /// Flushes and shuts every provider down (blocking: call it outside
    /// the runtime, while the runtime still runs).
    pub(crate) fn shutdown(&self) {
        let providers =
            std::mem::take(&mut *self.providers.lock().unwrap_or_else(|p| p.into_inner()));
        for p in providers {
            if let Err(e) = p.shutdown() {
                self.stats.error(format!("span pipeline shutdown: {e}"));
            }
        }
        if let Some(f) = &self.file
            && let Err(e) = f.flush()
        {
            self.stats.error(format!("{}: {e}", f.path.display()));
        }
    }
}

/// `--spans-out`: one writer for every service's exporter.
#[derive(Debug)]
struct SpansFile {
    path: PathBuf,
    w: Mutex<BufWriter<File>>,
}

impl SpansFile {
    fn create(path: &Path) -> Result<Self, SimulateError> {
        let f = File::create(path).map_err(|source| SimulateError::File {
            what: "cannot create the spans file",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(SpansFile {
            path: path.to_path_buf(),
            w: Mutex::new(BufWriter::new(f)),
        })
    }

    fn write_line(&self, line: &str) -> std::io::Result<()> {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        w.flush()
    }

    fn flush(&self) -> std::io::Result<()> {
        self.w.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// Writes the batch to the file and exports it over OTLP.
#[derive(Debug)]
struct SimExporter {
    file: Option<Arc<SpansFile>>,
    otlp: Option<opentelemetry_otlp::SpanExporter>,
    resource: ResourceAttributesWithSchema,
    stats: Arc<ExportStats>,
}

impl SpanExporter for SimExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let (for_file, for_otlp) = match (&self.file, &self.otlp) {
            (Some(_), Some(_)) => (Some(batch.clone()), Some(batch)),
            (Some(_), None) => (Some(batch), None),
            (None, _) => (None, Some(batch)),
        };
        if let (Some(f), Some(spans)) = (&self.file, for_file) {
            let req = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(spans, &self.resource),
            };
            let written = serde_json::to_string(&req)
                .map_err(|e| e.to_string())
                .and_then(|line| f.write_line(&line).map_err(|e| e.to_string()));
            match written {
                Ok(()) => {
                    self.stats.file_lines.fetch_add(1, Relaxed);
                    self.stats.file_spans.fetch_add(n, Relaxed);
                }
                Err(e) => {
                    self.stats.file_failed_spans.fetch_add(n, Relaxed);
                    self.stats.error(format!("{}: {e}", f.path.display()));
                }
            }
        }
        if let (Some(o), Some(batch)) = (&self.otlp, for_otlp) {
            match o.export(batch).await {
                Ok(()) => {
                    self.stats.otlp_spans.fetch_add(n, Relaxed);
                }
                Err(e) => {
                    self.stats.otlp_failed_spans.fetch_add(n, Relaxed);
                    self.stats.error(format!("OTLP export: {e}"));
                }
            }
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        match &self.otlp {
            Some(o) => o.shutdown_with_timeout(timeout),
            None => Ok(()),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
        if let Some(o) = &mut self.otlp {
            o.set_resource(resource);
        }
    }
}

/// Counts the sampled spans that ended.
#[derive(Debug)]
struct CountEnded(Arc<ExportStats>);

impl SpanProcessor for CountEnded {
    fn on_start(&self, _: &mut Span, _: &Context) {}

    fn on_end(&self, _: SpanData) {
        self.0.spans_ended.fetch_add(1, Relaxed);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Trace and span ids from a seeded generator (`--seed`).
#[derive(Debug)]
struct SeededIds(Mutex<fastrand::Rng>);

impl SeededIds {
    fn new(seed: u64) -> Self {
        SeededIds(Mutex::new(fastrand::Rng::with_seed(seed)))
    }
}

impl IdGenerator for SeededIds {
    fn new_trace_id(&self) -> TraceId {
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        TraceId::from_bytes(r.u128(1..).to_be_bytes())
    }

    fn new_span_id(&self) -> SpanId {
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        SpanId::from_bytes(r.u64(1..).to_be_bytes())
    }
}

/// The OTLP exporter's HTTP client. The batch processor exports from its
/// own thread; the request itself runs as a task on the simulation's Tokio
/// runtime.
#[derive(Debug)]
struct RuntimeClient {
    handle: tokio::runtime::Handle,
    timeout: Duration,
}

#[async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let timeout = self.timeout;
        let task = self.handle.spawn(async move {
            match tokio::time::timeout(timeout, crate::http::send_bytes(request)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {timeout:?}").into()),
            }
        });
        match task.await {
            Ok(r) => r.map_err(|e| -> HttpError { e }),
            Err(e) => Err(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_url_example() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/custom").unwrap(),
            "http://c:4318/custom"
        );
        assert!(traces_url("https://c:4318").is_err());
    }
}
