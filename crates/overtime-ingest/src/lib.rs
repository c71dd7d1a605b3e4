//! # overtime-ingest
//!
//! overtime's sources, delivering into a [`RecordSink`](overtime_model::RecordSink):
//! - [`file_tail`]: nginx access logs and span logs tailed from disk,
//!   following rotation (rename and copytruncate) and resuming from the
//!   checkpoint the sink stores with the data;
//! - [`otlp`]: OTLP/HTTP (`POST /v1/traces`) and OTLP/gRPC
//!   (`TraceService/Export`) receivers with partial success and 429 /
//!   `RESOURCE_EXHAUSTED` backpressure.
//!
//! Design rules:
//! - Sources convert to Arrow once, with the pure parsers of
//!   `overtime-parse`; nothing here interprets a record.
//! - A source acknowledges only what the sink made durable (`write` is
//!   `Ok`), and treats `SinkError::Full` as backpressure: wait and retry
//!   the same data, never drop it. See `docs/ingest.md`.

pub mod file_tail;
pub mod otlp;
