//! Every integration test of this crate, in one test binary (one link,
//! not one per file). Under `cargo nextest` every test still runs in its
//! own process.

mod docs;
mod pagerduty;
mod slack;
mod standins;
mod support;
