//! Verdicts judged against a gateway layer's timeout that has since moved
//! are judged again.
//!
//! A layer's read timeout, when not configured, is inferred from its own
//! 504s and the streams it cut ([`super::cuts`]): the first failing traces
//! of an incident are judged before there are enough 504s to infer it (or
//! against an early guess), and on a deployment of several collectors the
//! peers' 504s arrive with their next fetch. A batch run judges every
//! trace with the timeout of the whole run; so, to give the verdicts a
//! batch run (or one collector given all the traffic) would give, a
//! failing trace kept for revision is judged again when the timeout of a
//! layer its gateway lines passed through changes value (not when only
//! the count of 504s behind it grows).
//!
//! Design rules:
//! - Only failing verdicts, only of the moved layers, only traces still
//!   kept for revision (`keep_ms`); a revision bumps the revision number
//!   as any other, and is not a new request for the SLIs.
//! - A timeout "moves" when its value (to the ms) or whether it is
//!   inferred changes, or it appears or disappears.

use super::{LiveDiagnoser, LiveVerdict};
use crate::timeouts::LayerTimeout;
use overtime_model::Outcome;
use std::collections::{BTreeMap, BTreeSet};

/// What a verdict depends on of a layer's timeout.
fn value(t: &LayerTimeout) -> (i64, bool) {
    (t.ms.round() as i64, t.inferred)
}

/// The layers whose timeout moved from `before` to `now`.
fn moved<'a>(
    before: &'a BTreeMap<String, LayerTimeout>,
    now: &'a BTreeMap<String, LayerTimeout>,
) -> BTreeSet<&'a str> {
    let keys = before.keys().chain(now.keys()).map(String::as_str);
    keys.filter(|l| before.get(*l).map(value) != now.get(*l).map(value))
        .collect()
}

impl LiveDiagnoser {
    /// Judges again the kept failing traces of every layer whose timeout
    /// moved since the last judging; `timeouts` become the ones judged
    /// with.
    pub(super) fn revise_moved(
        &mut self,
        now_us: i64,
        timeouts: BTreeMap<String, LayerTimeout>,
        out: &mut Vec<LiveVerdict>,
    ) {
        let layers = moved(&self.judged_with, &timeouts);
        if !layers.is_empty() {
            let due: Vec<_> = self
                .done
                .iter()
                .filter(|(_, d)| {
                    matches!(&d.pending.given, Some((_, Some(v))) if v.outcome != Outcome::Ok)
                        && d.pending
                            .trace
                            .gateway
                            .iter()
                            .any(|g| layers.contains(g.source.as_str()))
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in due {
                let d = self.done.remove(&key).expect("listed from done");
                self.pending.insert(key.clone(), d.pending);
                out.extend(self.finish(key, now_us, &timeouts, true));
            }
        }
        self.judged_with = timeouts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: f64, inferred: bool) -> LayerTimeout {
        LayerTimeout {
            ms,
            inferred,
            cluster: 3,
            of: 3,
            cut_streams: 0,
        }
    }

    #[test]
    fn a_timeout_moves_when_its_value_changes_not_when_more_504s_back_it() {
        let before = BTreeMap::from([("edge".to_string(), t(60_000.0, true))]);
        let mut more = before.clone();
        more.get_mut("edge").unwrap().of = 40;
        assert!(moved(&before, &more).is_empty());
        let now = BTreeMap::from([("edge".to_string(), t(10_000.0, true))]);
        assert_eq!(moved(&before, &now), BTreeSet::from(["edge"]));
        let appeared = BTreeMap::from([
            ("edge".to_string(), t(60_000.0, true)),
            ("api".to_string(), t(30_000.0, true)),
        ]);
        assert_eq!(moved(&before, &appeared), BTreeSet::from(["api"]));
    }
}
