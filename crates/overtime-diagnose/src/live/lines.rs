//! Where a gateway line goes as it arrives: under the trace its
//! traceparent names, else where its request id resolves through the one
//! join ([`crate::join`], as in batch); and the lines that move when a
//! better claim on their request id arrives later.

use super::{LiveDiagnoser, requests};
use crate::assemble::{Key, hex128, key_name};
use overtime_model::GatewayRecord;

impl LiveDiagnoser {
    /// Files a gateway record under its trace (docs/inputs.md#identity-and-joining
    /// join order; the request id through [`crate::join`], as in batch).
    pub(super) fn attach_gateway(&mut self, g: GatewayRecord, now_us: i64) {
        let traceparent = g.trace_id.as_deref().and_then(hex128);
        let key = match (traceparent, &g.request_id) {
            (Some(t), _) => Key::Trace(t),
            (None, Some(r)) => self.request_ids.resolve(r, r).0,
            (None, None) => Key::Other(format!("line:{}:{}", g.source, g.line)),
        };
        if let (Some(t), Some(rid)) = (traceparent, &g.request_id) {
            let before = self.request_ids.bound(rid);
            if self.request_ids.bind_line(rid.clone(), g.time_us, t) {
                let before = before.unwrap_or_else(|| crate::join::unbound(rid).0);
                self.rebind(rid, before, now_us);
            }
        }
        let orphan = self.requests.enabled
            && traceparent.is_none()
            && g.request_id
                .as_ref()
                .is_some_and(|r| self.request_ids.bound(r).is_none());
        if orphan && let Some(rid) = &g.request_id {
            self.requests.orphans.insert(rid.clone(), key.clone());
        }
        let p = self.entry(key, now_us);
        if orphan && p.trace.spans.is_empty() && p.orphan.is_none() {
            p.orphan = Some(requests::Orphan::default());
        }
        p.trace.gateway.push(g);
    }

    /// A record just bound request id `rid` to another trace than
    /// `before`, where it resolved until now: the gateway lines filed by
    /// the request id alone move to where it resolves now. The trace they
    /// leave is forgotten when nothing is left of it (its verdict
    /// withdrawn) and judged again otherwise.
    pub(super) fn rebind(&mut self, rid: &str, before: Key, now_us: i64) {
        let after = self.request_ids.resolve(&rid.to_string(), rid).0;
        if after == before {
            return;
        }
        let by_rid_alone = |g: &GatewayRecord| {
            g.request_id.as_deref() == Some(rid) && g.trace_id.as_deref().and_then(hex128).is_none()
        };
        let reopen = !self.pending.contains_key(&before);
        let held = match self.pending.get_mut(&before) {
            Some(p) => p,
            None => match self.done.get_mut(&before) {
                Some(d) => &mut d.pending,
                None => return,
            },
        };
        let (moved, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut held.trace.gateway)
            .into_iter()
            .partition(by_rid_alone);
        held.trace.gateway = kept;
        if moved.is_empty() {
            return;
        }
        if held.trace.gateway.is_empty() && held.trace.spans.is_empty() {
            let given = held.given.is_some();
            self.pending.remove(&before);
            self.done.remove(&before);
            if given {
                self.withdraw(&before);
            }
        } else if reopen {
            self.entry(before, now_us);
        }
        for g in moved {
            self.attach_gateway(g, now_us);
        }
    }

    /// Withdraws what was said of `key`'s trace: its verdict and its
    /// summary (peers mirroring this diagnoser drop it too).
    pub(super) fn withdraw(&mut self, key: &Key) {
        let id = key_name(key);
        self.verdicts.remove(&id);
        if let Some(i) = self.summaries.iter().rposition(|x| x.trace_id == id) {
            self.summaries.remove(i);
            self.summary_seq.remove(i);
            self.tombstone(id);
        }
    }
}
