//! Incident B (tests/fixtures/incidents/b_tool_no_timeout): a tool call with no timeout, streams cut by
//! `proxy_read_timeout`.

use super::shape::check_shape;
use super::truth::{check_failing, check_findings, check_incidents};

#[test]
fn every_failing_trace() {
    check_failing("b_tool_no_timeout");
}

#[test]
fn incidents() {
    check_incidents("b_tool_no_timeout");
}

#[test]
fn findings() {
    check_findings("b_tool_no_timeout");
}

#[test]
fn verdict_shape() {
    check_shape("b_tool_no_timeout");
}
