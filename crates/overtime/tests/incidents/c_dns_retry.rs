//! Incident C (tests/fixtures/incidents/c_dns_retry): a 2.8 s DNS lookup, a 5 s tool timeout and
//! one retry under a 10 s gateway timeout.

use super::shape::check_shape;
use super::truth::{check_failing, check_findings, check_incidents};

#[test]
fn every_failing_trace() {
    check_failing("c_dns_retry");
}

#[test]
fn incidents() {
    check_incidents("c_dns_retry");
}

#[test]
fn findings() {
    check_findings("c_dns_retry");
}

#[test]
fn verdict_shape() {
    check_shape("c_dns_retry");
}
