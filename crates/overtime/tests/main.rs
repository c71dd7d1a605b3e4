//! Every integration test of this crate, in one test binary: each module
//! below was its own binary once, and linking each against the whole
//! dependency graph cost more than the tests themselves. Under
//! `cargo nextest` every test still runs in its own process.

mod advise_cli;
mod cli_bad_input;
mod cli_usage;
mod cluster_collectors;
mod demo;
mod diagnose_at_scale;
mod early_warning;
mod faults_auth;
mod faults_full_disk;
mod faults_kafka_restart;
mod faults_kill_loop;
mod faults_overload;
mod faults_overload_kafka;
mod faults_secrets;
mod faults_sql_abuse;
mod incidents;
mod model_server_scrape;
mod postgres;
mod prometheus_e2e;
mod serve;
mod serve_durability;
mod support;
mod ui_browser;
mod whatif_vs_reality;
