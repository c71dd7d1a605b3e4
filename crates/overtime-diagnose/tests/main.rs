//! Every integration test of this crate, in one test binary: each module
//! below was its own binary once, and linking each against the whole
//! dependency graph cost more than the tests themselves. Under
//! `cargo nextest` every test still runs in its own process.

mod adversarial;
mod agent_upstream;
mod batch_parity;
mod call_model;
mod common;
mod cuts_and_layers;
mod findings_and_incidents;
mod headlines;
mod invariance;
mod kinds_doc;
mod live_bounded;
mod live_early;
mod live_late_spans;
mod live_parity;
mod llm_gateway;
mod off_the_shelf_spans;
mod one_join;
mod real_nginx_verdicts;
mod real_world_shapes;
mod root_cause_kinds;
