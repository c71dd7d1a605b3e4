//! The healthy baseline: no failure, no incident.

use super::harness::doc;
use super::helpers::{incidents, s, verdicts};
use super::shape::check_shape;

#[test]
fn has_no_failure_and_no_incident() {
    let d = doc("healthy");
    let bad: Vec<String> = verdicts(d)
        .iter()
        .filter(|v| s(v, "outcome") != "ok")
        .map(|v| {
            format!(
                "{} {} {}",
                s(v, "trace_id"),
                v["outcome"],
                v["root_cause"]["kind"]
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "healthy traffic got failing verdicts: {bad:#?}"
    );
    assert!(
        incidents(d).is_empty(),
        "healthy traffic opened incidents: {:#?}",
        incidents(d)
    );
    check_shape("healthy");
}
