//! Every integration test of this crate, in one test binary: each module
//! below was its own binary once, and linking each against the whole
//! dependency graph cost more than the tests themselves. Under
//! `cargo nextest` every test still runs in its own process.

mod common;
mod fuzz_bounded;
mod metrics_real_prometheus;
mod nginx_bad_input;
mod otlp_structure;
mod peers_nginx;
mod peers_otlp;
mod real_instrumentation;
mod real_nginx;
mod real_nginx_formats;
mod real_nginx_ingress;
mod span_conventions_doc;
mod spans_jsonl;
mod spans_otlp;
