//! `upstream_connect_slow`: DNS and connect took most of the call.

use super::shared::connect_heavy;
use super::{Facts, Rule};
use crate::calls::Call;
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::{dur, median};
use crate::report::med_dur;
use overtime_model::RootCauseKind as K;

/// The dominant call, unless it is a model call (judged by its phases),
/// spent at least [`connect_share`](super::RuleThresholds::connect_share)
/// of its running time in DNS and connect: span events or fields, or the
/// gateway's `$upstream_connect_time` when it waited on an upstream.
///
/// ```text
/// edge answered 504 after 10.0 s
/// agent-api ├ weather_api attempt 1: DNS 4.5 s ├ attempt 2: DNS 4.5 s
/// → upstream_connect_slow on weather_api: "weather_api spent 9.0 s of its
///   time in DNS/connect and held 9.8 s of 10.0 s"
/// ```
pub struct UpstreamConnectSlow;

impl Rule for UpstreamConnectSlow {
    fn kind(&self) -> K {
        K::UpstreamConnectSlow
    }
    fn label(&self) -> &'static str {
        "slow DNS or connect"
    }
    fn checks(&self) -> &'static str {
        "the dominant call (not a model call) spent ≥ 50 % of its time in DNS and connect (span events, fields, or the gateway's `$upstream_connect_time`)"
    }
    fn color(&self) -> &'static str {
        "#4d6a8f"
    }

    fn holds_for(&self, c: &Call, f: &Facts) -> bool {
        !c.is_llm() && connect_heavy(c, f)
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        format!(
            "{component} spent {} of its time in DNS/connect and held {} of {}",
            dur(c.dns_connect_ms.unwrap_or(0.0)),
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let latency = run.latency();
        let connect = run.of_calls(|c| c.dns_connect_ms);
        let dns = run.of_calls(|c| c.dns_ms.map(|d| d / c.attempts() as f64));
        s.insert("connect_ms".into(), dist(&connect));
        s.insert("dns_per_attempt_ms".into(), dist(&dns));
        s.insert("call_ms".into(), dist(&latency));
        Some(match median(&dns) {
            Some(d) => format!(
                "median DNS {} per attempt, DNS/connect {} of {}",
                dur(d),
                med_dur(&connect),
                med_dur(&latency)
            ),
            None => format!(
                "median DNS/connect {} of {}",
                med_dur(&connect),
                med_dur(&latency)
            ),
        })
    }
}
