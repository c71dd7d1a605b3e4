//! The streams each gateway layer cut, as the live diagnoser has seen
//! them: with the layer's own 504s, what its read timeout is inferred from
//! (crate::timeouts). A trace diagnosed again replaces its cut (late spans
//! may show it, or show it was none); at most [`super::MAX_SAMPLES`] per
//! layer, the oldest dropped first, as the 504s are.

use super::LiveDiagnoser;
use crate::assemble::Key;
use crate::timeouts;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};

/// Per layer, the silence before each stream it cut: (trace id, ms),
/// oldest first.
#[derive(Debug, Default)]
pub(super) struct CutStreams {
    by_layer: FxHashMap<String, VecDeque<(String, f64)>>,
    /// The layer of each trace held.
    layer_of: FxHashMap<String, String>,
}

impl CutStreams {
    /// Records what the latest look at `trace_id` showed: the layer that
    /// cut its stream and the silence before the cut, or no cut.
    pub fn note(&mut self, trace_id: &str, cut: Option<(String, f64)>) {
        if let Some(layer) = self.layer_of.remove(trace_id)
            && let Some(q) = self.by_layer.get_mut(&layer)
        {
            q.retain(|(id, _)| id != trace_id);
        }
        let Some((layer, ms)) = cut else {
            return;
        };
        let q = self.by_layer.entry(layer.clone()).or_default();
        if q.len() == super::MAX_SAMPLES
            && let Some((old, _)) = q.pop_front()
        {
            self.layer_of.remove(&old);
        }
        q.push_back((trace_id.to_string(), ms));
        self.layer_of.insert(trace_id.to_string(), layer);
    }

    /// The silences by layer.
    #[cfg(test)]
    pub fn by_layer(&self) -> BTreeMap<String, Vec<f64>> {
        self.by_trace()
            .into_iter()
            .map(|(l, q)| (l, q.into_iter().map(|(_, ms)| ms).collect()))
            .collect()
    }

    /// The silences by layer, each with its trace: what peers are told,
    /// so a trace two collectors hold (a split one, completed by both)
    /// counts once.
    pub fn by_trace(&self) -> BTreeMap<String, Vec<(String, f64)>> {
        self.by_layer
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(l, q)| (l.clone(), q.iter().cloned().collect()))
            .collect()
    }
}

impl LiveDiagnoser {
    /// Looks at the traces `keys` for a stream their gateway cut
    /// ([`crate::outcome::cut_silence`]), with the timeouts known so far.
    pub(super) fn note_cuts<'k>(&mut self, keys: impl Iterator<Item = &'k Key>) {
        let timeouts = self.layer_timeouts();
        for k in keys {
            let Some(p) = self.pending.get_mut(k) else {
                continue;
            };
            let t = &mut p.trace;
            if t.gateway
                .iter()
                .all(|g| self.cfg.layer_timeout_ms(&g.source).is_some())
            {
                continue;
            }
            t.normalize();
            let end = crate::outcome::silent_end(t, &timeouts, self.cfg.clock_skew_ms);
            let cut = end.and_then(|e| e.cut_silence_ms.map(|ms| (e.layer, ms)));
            self.cuts.note(&t.id, cut);
        }
    }

    pub(super) fn layer_timeouts(&self) -> BTreeMap<String, timeouts::LayerTimeout> {
        // Each line's 504 once, whichever collectors read it.
        let mut lines: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        let own = self
            .samples
            .iter()
            .flat_map(|(src, v)| v.iter().map(move |s| (src, s)));
        let peers = self
            .peer_samples
            .iter()
            .flat_map(|(src, v)| v.iter().map(move |s| (src, s)));
        for (src, (id, rt)) in own.chain(peers) {
            lines.entry((src.as_str(), id.as_str())).or_insert(*rt);
        }
        let samples = lines
            .into_iter()
            .map(|((src, _), rt)| (src, Some(504u16), Some(rt)));
        // One silence per trace and layer, whoever holds the trace: the
        // longest, so every collector picks the same.
        let mut by_trace: BTreeMap<&str, BTreeMap<&str, f64>> = BTreeMap::new();
        let own = self.cuts.by_trace();
        let all = own.iter().chain(self.peer_cuts.iter());
        for (layer, v) in all {
            let l = by_trace.entry(layer.as_str()).or_default();
            for (id, ms) in v {
                let e = l.entry(id.as_str()).or_insert(*ms);
                *e = e.max(*ms);
            }
        }
        let cuts: BTreeMap<String, Vec<f64>> = by_trace
            .into_iter()
            .map(|(l, v)| (l.to_string(), v.into_values().collect()))
            .collect();
        timeouts::layer_timeouts_with_cuts(samples, &cuts, &self.cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_seen_again_replaces_its_cut() {
        let mut c = CutStreams::default();
        c.note("a", Some(("edge".into(), 3_001.0)));
        c.note("b", Some(("edge".into(), 3_002.0)));
        c.note("a", Some(("edge".into(), 3_004.0)));
        assert_eq!(c.by_layer()["edge"], vec![3_002.0, 3_004.0]);
        c.note("b", None);
        assert_eq!(c.by_layer()["edge"], vec![3_004.0]);
        c.note("a", None);
        assert!(c.by_layer().is_empty());
    }
}
