//! `stream_idle_gap`: a stream went silent at its end for (about) the
//! gateway's read timeout, and the gateway cut it.

use super::{Decision, Facts, Rule};
use crate::cause_stats::{Run, Stats, dist};
use crate::fmt::{dur, dur_or_none};
use crate::report::med_dur;
use overtime_model::{Outcome, RootCause, RootCauseKind as K};

/// A streamed response went silent for at least
/// [`stream_gap_of_read_timeout`](super::RuleThresholds::stream_gap_of_read_timeout)
/// of the gateway's read timeout (of the request, when the timeout is
/// unknown) at its end, and the gateway cut it. The component is the call
/// whose stream stalled, else the streaming service. Tried first: a cut
/// stream explains the failure whatever held the time before it.
///
/// ```text
/// edge answered 200 after 62.0 s (read timeout 60.0 s), 512 bytes
/// agent-api  ├ chunk 0.9 s ├ chunk 1.4 s ├ chunk 2.0 s ······ cut at 62.0 s
/// → stream_idle_gap on agent-api: "agent-api's stream was silent for 60.0 s
///   > the gateway read timeout 60.0 s; send heartbeats"
/// ```
pub struct StreamIdleGap;

impl Rule for StreamIdleGap {
    fn kind(&self) -> K {
        K::StreamIdleGap
    }
    fn label(&self) -> &'static str {
        "stream went silent"
    }
    fn checks(&self) -> &'static str {
        "a streamed response went silent between chunks/heartbeats longer than the gateway's read timeout (at least 90 % of it, or half the request when the timeout is unknown), and the gateway cut it"
    }
    fn color(&self) -> &'static str {
        "#0b7285"
    }

    fn decide(&self, f: &Facts) -> Option<Decision> {
        if f.outcome != Outcome::GatewayTimeout || f.gateway_status.is_none() {
            return None;
        }
        let s = f.stream.as_ref()?;
        let th = f.thresholds;
        let limit = f
            .gateway_timeout_ms
            .map(|t| th.stream_gap_of_read_timeout * t)
            .unwrap_or(th.stream_gap_of_elapsed * f.elapsed_ms);
        if !s.at_end || s.gap_ms < limit {
            return None;
        }
        let comp = f
            .stream_component
            .clone()
            .unwrap_or_else(|| f.service.clone());
        let t = dur_or_none(f.gateway_timeout_ms);
        let silence = if s.events == 0 {
            format!(
                "the gateway held the stream of {comp} open {} after its headers (at {}) with no chunk traced, while {comp} was still answering",
                dur(s.gap_ms),
                dur(s.last_event_ms)
            )
        } else {
            format!(
                "the stream of {comp} went silent for {} (no chunk or heartbeat) after {} events, the last at {}",
                dur(s.gap_ms),
                s.events,
                dur(s.last_event_ms)
            )
        };
        let ev = f.with_gateway(vec![
            silence,
            format!("the gap from the last chunk to the cut exceeded the gateway read timeout {t}, and the gateway cut the stream"),
        ]);
        Some((
            RootCause {
                kind: K::StreamIdleGap,
                component: comp.clone(),
                share: (s.gap_ms / f.elapsed_ms.max(1.0)).min(1.0),
                summary: format!(
                    "{comp}'s stream was silent for {} > the gateway read timeout {t}; send heartbeats",
                    dur(s.gap_ms)
                ),
                evidence: ev,
            },
            vec![],
        ))
    }

    fn stats(&self, run: &Run, s: &mut Stats) -> Option<String> {
        let gaps: Vec<f64> = run
            .traces
            .iter()
            .filter_map(|(_, t)| t.stream_gap_ms)
            .collect();
        s.insert("gap_ms".into(), dist(&gaps));
        Some(format!("median idle gap {}", med_dur(&gaps)))
    }
}
