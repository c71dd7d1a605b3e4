//! # overtime-parse
//!
//! Pure parsers from bytes to overtime's Arrow tables (no I/O):
//! - [`nginx`]: the `log_format` compiler and access-log line parser
//!   (docs/inputs.md#nginx-access-logs) into `gateway_requests`;
//! - [`spans`]: JSONL span logs, OTLP JSON lines and OTLP protobuf (docs/inputs.md#spans)
//!   into `spans`;
//! - [`record`]: the one [`record::RecordFormat`] every source names (by
//!   its [`record::FormatName`]) and
//!   the one [`record::Decoder`] that turns its bytes into those tables;
//! - [`llm_reason`]: `X-LLM-Reason` / `X-LLM-Duration` (docs/inputs.md#x-llm-reason);
//! - [`duration`]: `47.2s`-style durations;
//! - `fuzz` (feature `fuzz`): the fuzz targets' property checks
//!   (docs/fuzzing.md).
//!
//! Bad input never fails a whole file: each bad record becomes a
//! [`overtime_model::RejectedRecord`] and the rest is kept.
//!
//! What other crates use most is re-exported here: a source names its
//! bytes with a [`RecordFormat`] and turns them into rows with a
//! [`Decoder`]; an nginx format is a [`LogFormat`] read by a
//! [`GatewayParser`]; spans are read with [`parse_span_bytes`] in a
//! [`SpanFormat`] into [`ParsedSpans`].

#![warn(missing_docs)]

pub mod duration;
mod format_name;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod llm_reason;
pub mod metrics;
pub mod nginx;
pub mod record;
pub mod spans;

pub use duration::parse_duration_ms;
pub use llm_reason::parse_llm_reason;
pub use nginx::{GatewayParser, LogFormat};
pub use record::{Decoder, FormatName, RecordFormat};
pub use spans::{ParsedSpans, SpanFormat, parse_span_bytes};
