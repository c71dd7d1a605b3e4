//! Every integration test of overtime-advise, in one test binary.

mod alignment;
mod proof;
mod whatif_replay;
mod whatif_retries;
