//! nginx access logs: the `log_format` compiler and the line parser
//! (docs/inputs.md#nginx-access-logs), from text to the `gateway_requests` and `rejected` tables.
//!
//! A format is compiled once ([`LogFormat::compile`],
//! [`LogFormat::from_nginx_conf`] or [`LogFormat::builtin`]) into literal and
//! variable segments; [`GatewayParser`] then cuts each line with byte
//! searches for those literals (no regex) and appends the values straight
//! into the Arrow builders.
//!
//! ```
//! use overtime_parse::nginx::{GatewayParser, LogFormat};
//! use overtime_model::gateway_records;
//!
//! let conf = r#"
//! http {
//!     log_format llm escape=json '{"t":$msec,"s":$status,"rt":$request_time,'
//!                                '"urt":"$upstream_response_time","tenant":"$http_x_tenant"}';
//! }"#;
//! let format = LogFormat::from_nginx_conf(conf, "llm").unwrap();
//! let mut parser = GatewayParser::new(format, "edge", 0);
//! parser.push_bytes(
//!     br#"{"t":1795946460.001,"s":504,"rt":60.001,"urt":"30.000, 30.001","tenant":"acme"}"#,
//!     1,
//! );
//! let (batch, _rejected) = parser.finish();
//! let r = &gateway_records(&batch).unwrap()[0];
//! assert_eq!(r.status, Some(504));
//! assert_eq!(r.time_precision_us, 1000);
//! assert_eq!(r.start_us(), 1_795_946_400_000_000);
//! assert_eq!(r.upstream_response_sum_ms(), Some(60001.0));
//! assert_eq!(r.extra("http_x_tenant"), Some("acme"));
//! ```
//!
//! Variables map to columns as docs/inputs.md#nginx-access-logs says. Where several variables can
//! feed one column the best present one does and the others are kept in
//! `extra`: `$body_bytes_sent` over `$bytes_sent`, `$request_id` over
//! `$http_x_request_id`, `$msec` over `$time_iso8601` over `$time_local`,
//! `$request_uri` over `$request` over `$uri` (and `$request_method` /
//! `$server_protocol` over the parts of `$request`). An `X-Max-Wait` or
//! `X-LLM-Duration` value that does not parse is a client's or model
//! server's mistake, not a bad line: the column is null and the raw value is
//! kept in `extra` under the variable's name.
//!
//! A value that can hold the literal after it (an unquoted `$upstream_*`
//! list before a space or `|`, free text before a space) and variables with
//! no literal between them (`$a$b`) are read every way nginx could have
//! written the line; only a line that still reads several ways is
//! rejected, as ambiguous, naming the variable (`search.rs`,
//! docs/nginx-formats.md). `include` is not followed in nginx.conf.

mod builtins;
mod bytes;
mod checks;
mod columns;
mod conf;
mod domain;
mod format;
mod format_error;
mod layer;
mod lists;
mod parser;
mod plan;
mod request;
mod search;
pub(crate) mod values;

#[cfg(test)]
mod parser_list_tests;
#[cfg(test)]
mod parser_tests;

pub use builtins::{
    BUILTIN_FORMATS, BuiltinFormat, COMBINED_BODY, COMBINED_LOG_FORMAT, INGRESS_NGINX_LOG_FORMAT,
    OVERTIME_LOG_FORMAT,
};
pub use format::{Escape, LogFormat, Segment};
pub use format_error::FormatError;
pub use layer::{NGINX_DEFAULT_READ_TIMEOUT_MS, layer_name_of, read_timeout_ms};
pub use parser::GatewayParser;
