//! # overtime-ingest
//!
//! overtime's sources, delivering into a [`RecordSink`](overtime_model::RecordSink):
//! - [`file_tail`]: nginx access logs and span logs tailed from disk,
//!   following rotation (rename and copytruncate) and resuming from the
//!   checkpoint the sink stores with the data;
//! - [`otlp`]: OTLP/HTTP (`POST /v1/traces`) and OTLP/gRPC
//!   (`TraceService/Export`) receivers with partial success and 429 /
//!   `RESOURCE_EXHAUSTED` backpressure;
//! - [`scrape`]: the model servers' Prometheus endpoints, scraped into
//!   the store's `model_server_metrics`.
//!
//! What `overtime diagnose` reads offline (files, rotated and compressed
//! logs) is `overtime-batch`'s, beside the engine it feeds.
//!
//! Design rules:
//! - Sources convert to Arrow once, with `overtime-parse`'s one
//!   `record::Decoder`; nothing here interprets a record.
//! - A source acknowledges only what the sink made durable (`write` is
//!   `Ok`), and treats `SinkError::Full` as backpressure: wait and retry
//!   the same data, never drop it. See `docs/ingest.md`.
//!
//! Each source is its module's curated surface (`overtime-config` embeds
//! [`file_tail::FileSourceSettings`] and [`otlp::OtlpSettings`] by these
//! paths); their internals (rotation, batching, decode gate, the reader
//! threads) are private.

#![warn(missing_docs)]

pub mod file_tail;
pub mod otlp;
pub mod scrape;
