//! End to end on the incident fixtures: the real `overtime diagnose` binary
//! on `tests/fixtures/incidents/*` (written by `tests/fixtures/gen_incidents.py`),
//! checked against each fixture's `truth.json` and docs/diagnosis.md.
//!
//! Every failing trace of every fixture must get the expected outcome, kind
//! and component; the tests collect every mismatch before failing so one
//! run shows the whole picture.
//!
//! Layout: [`harness`] runs the binary (once per fixture and test binary),
//! [`helpers`] reads the JSON document it prints, [`shape`] checks every
//! verdict and incident against docs/diagnosis.md and [`truth`] against a
//! fixture's truth.json; each fixture's tests are in its own module,
//! [`across_fixtures`] holds those that span fixtures.

mod a_prefill;
mod across_fixtures;
mod b_tool_no_timeout;
mod c_dns_retry;
pub(crate) mod harness;
mod healthy;
mod helpers;
mod shape;
mod truth;
