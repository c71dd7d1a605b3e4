//! Provisional observations, for the fast early warning: a request is
//! observed as soon as it is over — its gateway line in, its trace quiet
//! for the failure grace (its last spans exported) — rather than a full
//! grace period later, when its verdict is final. Only the fast
//! early-warning series read them (overtime-slo's `early/cusum.rs`): a
//! warning that waits 30 s for stragglers gives up 30 s of lead. The final
//! observation still feeds every SLI, and tells the fast series which of
//! its calls they took already
//! ([`RequestObservation::provisional_calls_until_us`]).
//!
//! Design rules:
//! - At most one per trace, and none once its final observation is made.
//! - Without a gateway line nothing says the request is over: such a
//!   trace is observed only when final.

use super::{LiveDiagnoser, MAX_OBSERVATIONS};
use crate::assemble::Key;
use overtime_model::RequestObservation;

impl LiveDiagnoser {
    /// Observes, provisionally, every waiting trace whose request is over
    /// and whose records have been quiet for the failure grace.
    pub(super) fn observe_provisional(&mut self, now_us: i64) {
        let due: Vec<Key> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                let quiet = now_us - p.last_update_us;
                p.provisional_until.is_none()
                    && !p.observed
                    && !p.trace.gateway.is_empty()
                    && quiet >= self.failure_grace_us
                    && !self.held_back(p, quiet)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let timeouts = self.layer_timeouts();
        for key in due {
            let Some(p) = self.pending.get_mut(&key) else {
                continue;
            };
            p.trace.normalize();
            let summary = super::light_summary(&p.trace);
            let mut o = crate::observe::observe_with_timeouts(&p.trace, &summary, &timeouts);
            o.provisional = true;
            p.provisional_until = Some(o.calls.iter().map(|c| c.end_us).max().unwrap_or(i64::MIN));
            if self.provisional.len() == MAX_OBSERVATIONS {
                self.provisional.pop_front();
            }
            self.provisional.push_back(o);
        }
    }

    /// Takes the provisional observations made since the last call (one
    /// per trace at most, see the module docs), for the fast early
    /// warning: hand them to the SLOs with the final observations
    /// ([`LiveDiagnoser::drain_observations`]); they take only their fast
    /// series from them.
    pub fn drain_provisional(&mut self) -> Vec<RequestObservation> {
        self.provisional.drain(..).collect()
    }
}
