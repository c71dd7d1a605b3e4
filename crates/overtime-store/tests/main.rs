//! Every integration test of this crate, in one test binary: each module
//! below was its own binary once, and linking each against the whole
//! dependency graph cost more than the tests themselves. Under
//! `cargo nextest` every test still runs in its own process.

mod budget;
mod common;
mod crash;
mod object_store;
mod parquet_sql;
mod peers;
mod published;
mod queries;
mod retention_checkpoints;
mod schema_upgrade;
mod wal_recovery;
