//! Every integration test of this crate, in one test binary: each module
//! below was its own binary once, and linking each against the whole
//! dependency graph cost more than the tests themselves. Under
//! `cargo nextest` every test still runs in its own process.

mod advice;
mod api;
mod charts;
mod cluster;
mod cluster_incidents;
mod jaeger;
mod metrics;
mod sinks;
