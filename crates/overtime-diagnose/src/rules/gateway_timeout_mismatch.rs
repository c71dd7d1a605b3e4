//! `gateway_timeout_mismatch`: the gateway gave up while every call on the
//! critical path was within its timeout and the service still had budget.

use super::shared::critical_spans;
use super::{Decision, Facts, Rule, contributing};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::dur;
use crate::report::med_dur;
use overtime_model::{Outcome, RootCause, RootCauseKind as K};

/// The gateway answered 504 on its own timeout although every call on the
/// critical path had a timeout and none fired, and the service's budget
/// was longer than the gateway's timeout: the gateway's timeout is the one
/// out of line. A call with no timeout never counts as within its timeout.
///
/// ```text
/// edge answered 504 after 30.0 s (read timeout 30.0 s); agent-api budget 90.0 s
/// agent-api ├ llm 3.0 s (timeout 10.0 s) ├ llm deepseek-v4-pro 37.0 s… (timeout 60.0 s)
/// → gateway_timeout_mismatch on gateway: "the gateway gave up at 30.0 s while
///   the service still had budget (90.0 s) and no call had timed out"
/// ```
pub struct GatewayTimeoutMismatch;

impl Rule for GatewayTimeoutMismatch {
    fn kind(&self) -> K {
        K::GatewayTimeoutMismatch
    }
    fn label(&self) -> &'static str {
        "gateway timeout shorter than the budget"
    }
    fn checks(&self) -> &'static str {
        "the gateway gave up although every call on the critical path had a timeout and none fired, and the service's budget was longer than the gateway's timeout (a call with no timeout never counts as within its timeout)"
    }
    fn color(&self) -> &'static str {
        "#495057"
    }

    fn decide(&self, f: &Facts) -> Option<Decision> {
        if f.outcome != Outcome::GatewayTimeout {
            return None;
        }
        let dominant = f.calls.first()?;
        let critical: Vec<&Call> = critical_spans(f).collect();
        let gw_t = f.gateway_timeout_ms.unwrap_or(f.elapsed_ms);
        let all_within = !critical.is_empty()
            && critical.iter().all(|c| {
                c.timeout_ms.is_some_and(|t| {
                    !c.timed_out
                        && c.attempt_duration_us
                            .iter()
                            .all(|d| (*d as f64 / 1000.0) < t)
                })
            });
        let b = f.service_budget_ms?;
        if !all_within || b <= gw_t {
            return None;
        }
        let ev = f.with_gateway(vec![
            format!("service budget {} > gateway timeout {}", dur(b), dur(gw_t)),
            format!(
                "all {} calls on the critical path had a timeout and none fired",
                critical.len()
            ),
        ]);
        Some((
            RootCause {
                kind: K::GatewayTimeoutMismatch,
                component: "gateway".into(),
                share: 1.0,
                summary: format!(
                    "the gateway gave up at {} while the service still had budget ({}) and no call had timed out",
                    dur(gw_t),
                    dur(b)
                ),
                evidence: ev,
            },
            contributing(f, dominant, None),
        ))
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let gw: Vec<f64> = run
            .traces
            .iter()
            .filter_map(|(v, _)| {
                v.gateway
                    .as_ref()
                    .and_then(|g| g.timeout_ms.or(g.request_time_ms))
            })
            .collect();
        s.insert("gateway_timeout_ms".into(), dist(&gw));
        Some(format!("gateway gave up at {}", med_dur(&gw)))
    }
}
