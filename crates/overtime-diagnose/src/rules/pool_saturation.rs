//! `pool_saturation`: the time went to waiting for a worker or connection
//! before work began.

use super::shared::{connect_heavy, upstream_wait};
use super::{Facts, Rule};
use crate::calls::{Call, CallKind};
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::dur;
use crate::report::med_dur;
use overtime_model::{RootCauseKind as K, Stage};

/// The dominant call is a wait before work began: a `queue` span, the gap
/// between a service span's start and its first call, or the gateway
/// waiting on a service that wrote spans but none for that time (and not
/// in DNS/connect, which is [`upstream_connect_slow`](super::upstream_connect_slow)).
/// The component is the service that waited (for the gateway's wait, the
/// service that owns the request).
///
/// ```text
/// edge answered 504 after 30.0 s
/// agent-api ├ (nothing for 24.0 s) ├ llm 5.0 s
/// → pool_saturation on agent-api: "agent-api waited 24.0 s of 30.0 s for a
///   worker or connection before work began"
/// ```
pub struct PoolSaturation;

impl Rule for PoolSaturation {
    fn kind(&self) -> K {
        K::PoolSaturation
    }
    fn label(&self) -> &'static str {
        "waiting for a worker or connection"
    }
    fn checks(&self) -> &'static str {
        "the time went to waiting for a worker or connection before work began (a `queue` span, the gap between a service span's start and its first child, or the gateway waiting on a service whose spans do not cover the time)"
    }
    fn color(&self) -> &'static str {
        "#a61e4d"
    }

    fn holds_for(&self, c: &Call, f: &Facts) -> bool {
        c.kind == CallKind::PoolWait
            || c.stage == Stage::Queue
            || (upstream_wait(c) && f.has_spans && !connect_heavy(c, f))
    }

    fn component(&self, c: &Call, f: &Facts) -> String {
        if c.kind == CallKind::Upstream {
            f.service.clone()
        } else {
            c.service.clone()
        }
    }

    fn summary(&self, c: &Call, f: &Facts, component: &str) -> String {
        format!(
            "{component} waited {} of {} for a worker or connection before work began",
            dur(c.critical_us as f64 / 1000.0),
            dur(f.elapsed_ms)
        )
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let wait = run.of_calls(|c| Some(c.critical_us as f64 / 1000.0));
        s.insert("wait_ms".into(), dist(&wait));
        Some(format!("median wait before work {}", med_dur(&wait)))
    }
}
