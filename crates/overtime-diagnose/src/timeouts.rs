//! Gateway read timeouts: configured per layer, or inferred from where the
//! requests that layer itself cut cluster (finding `gateway_timeout_inferred`).
//!
//! Design rules:
//! - A layer's timeout is inferred only from what that layer gave up on
//!   itself: its own 504s (no response header came from upstream:
//!   `$upstream_header_time` is `-` for the last try) and the streams it cut
//!   mid-response (logged `2xx`; the silence from the stream's last byte to
//!   the line is the read timeout). A 504 the layer received from its
//!   upstream (an inner gateway's, or the service's own) and passed on is
//!   not its timeout: [`crate::outcome::relayed`].
//! - Both kinds of cut are clustered together, and the layer's timeout says
//!   how many of each the cluster held.

use crate::config::DiagnoseConfig;
use std::collections::BTreeMap;

/// A layer's read timeout and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTimeout {
    /// The read timeout, ms.
    pub ms: f64,
    /// Inferred from the layer's cuts (`false`: configured).
    pub inferred: bool,
    /// For an inferred one: how many cuts clustered (0 when configured)…
    pub cluster: usize,
    /// …of how many cuts (504s and cut streams; for a configured one, the
    /// 504s seen).
    pub of: usize,
    /// Of `cluster`, how many were cut streams (the rest: 504s).
    pub cut_streams: usize,
}

/// Fewest cuts that can show a timeout.
const MIN_CLUSTER: usize = 3;

/// What a layer's own 504 says of its read timeout (ms): its request time,
/// or — when nginx tried several servers in turn (`proxy_next_upstream`)
/// — the last try's `$upstream_response_time`, since each try waited one
/// read timeout. `None` for a 504 the layer relayed
/// ([`crate::outcome::relayed`]), another status, or no time.
///
/// `tries`: how many upstream tries the row lists; `last_try_ms`: the
/// last one's response time.
pub(crate) fn own_504_ms(
    status: Option<u16>,
    relayed: bool,
    request_time_ms: Option<f64>,
    tries: usize,
    last_try_ms: Option<f64>,
) -> Option<f64> {
    if status != Some(504) || relayed {
        return None;
    }
    match (tries, last_try_ms) {
        (2.., Some(t)) => Some(t),
        _ => request_time_ms,
    }
}

/// The timeout of every layer seen: configured, else inferred from its own
/// 504s. `records` yields (layer source, status, request time ms) per
/// gateway row; leave relayed 504s out of it ([`crate::outcome::relayed`]).
pub fn layer_timeouts<'a>(
    records: impl Iterator<Item = (&'a str, Option<u16>, Option<f64>)>,
    cfg: &DiagnoseConfig,
) -> BTreeMap<String, LayerTimeout> {
    layer_timeouts_with_cuts(records, &BTreeMap::new(), cfg)
}

/// [`layer_timeouts`], also inferring from the silences (ms) before the
/// streams each layer cut (`cut_streams`, by layer).
pub fn layer_timeouts_with_cuts<'a>(
    records: impl Iterator<Item = (&'a str, Option<u16>, Option<f64>)>,
    cut_streams: &BTreeMap<String, Vec<f64>>,
    cfg: &DiagnoseConfig,
) -> BTreeMap<String, LayerTimeout> {
    let mut times: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (source, status, rt) in records {
        if !times.contains_key(source) {
            times.insert(source.to_string(), Vec::new());
        }
        if let (Some(504), Some(rt)) = (status, rt) {
            times.get_mut(source).expect("inserted above").push(rt);
        }
    }
    for source in cut_streams.keys() {
        times.entry(source.clone()).or_default();
    }
    let mut out = BTreeMap::new();
    for (source, rts) in times {
        let cuts = cut_streams.get(&source).map_or(&[][..], |v| &v[..]);
        if let Some(ms) = cfg.layer_timeout_ms(&source) {
            out.insert(source, configured(ms, rts.len()));
        } else if let Some(t) = infer_from(&rts, cuts) {
            out.insert(source, t);
        }
    }
    for l in &cfg.layers {
        if let (Some(ms), false) = (l.read_timeout_ms, out.contains_key(&l.name)) {
            out.insert(l.name.clone(), configured(ms, 0));
        }
    }
    out
}

fn configured(ms: f64, of: usize) -> LayerTimeout {
    LayerTimeout {
        ms,
        inferred: false,
        cluster: 0,
        of,
        cut_streams: 0,
    }
}

/// The densest cluster of a layer's cuts — its own 504s' request times and
/// the silences before the streams it cut — if most of them sit in it.
pub(crate) fn infer_from(rts: &[f64], silences: &[f64]) -> Option<LayerTimeout> {
    let mut v: Vec<(f64, bool)> = rts
        .iter()
        .map(|&t| (t, false))
        .chain(silences.iter().map(|&t| (t, true)))
        .filter(|(t, _)| t.is_finite())
        .collect();
    if v.len() < MIN_CLUSTER {
        return None;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best = (0usize, 0usize);
    let mut j = 0;
    for i in 0..v.len() {
        // Window of values within 2 % (at least 250 ms) above v[i].
        let tol = (v[i].0 * 0.02).max(250.0);
        if j < i {
            j = i;
        }
        while j + 1 < v.len() && v[j + 1].0 - v[i].0 <= tol {
            j += 1;
        }
        if j + 1 - i > best.1 - best.0 {
            best = (i, j + 1);
        }
    }
    let n = best.1 - best.0;
    if n < MIN_CLUSTER || (n as f64) < 0.5 * v.len() as f64 {
        return None;
    }
    // nginx timeouts are whole seconds or round ms; the low edge of the
    // cluster is the timeout plus a few ms of scheduling.
    let low = v[best.0].0;
    let secs = (low / 1000.0).round() * 1000.0;
    let ms = if (low - secs).abs() <= 250.0 {
        secs
    } else {
        (low / 100.0).floor() * 100.0
    };
    Some(LayerTimeout {
        ms,
        inferred: true,
        cluster: n,
        of: v.len(),
        cut_streams: v[best.0..best.1].iter().filter(|(_, cut)| *cut).count(),
    })
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn infer_finds_the_cluster_of_cut_requests() {
        let t = super::infer_from(&[60001.0, 60003.0, 60000.0, 12.0, 60010.0], &[]).unwrap();
        assert_eq!(t.ms, 60000.0);
        assert_eq!((t.cluster, t.of), (4, 5));
    }

    #[test]
    fn a_retried_504_says_one_tries_worth_of_timeout() {
        use super::own_504_ms;
        // Two servers tried, 1 s each: the read timeout is 1 s, not 2.
        assert_eq!(
            own_504_ms(Some(504), false, Some(2_004.0), 2, Some(1_001.0)),
            Some(1_001.0)
        );
        assert_eq!(
            own_504_ms(Some(504), false, Some(3_004.0), 1, Some(3_003.0)),
            Some(3_004.0)
        );
        assert_eq!(
            own_504_ms(Some(504), true, Some(3_004.0), 1, Some(3_003.0)),
            None
        );
        assert_eq!(own_504_ms(Some(502), false, Some(3_004.0), 1, None), None);
    }

    #[test]
    fn cut_streams_silences_and_504s_cluster_together() {
        use super::infer_from;
        // Two 504s are too few alone; two cut streams' silences at the
        // same ~3 s make the cluster.
        assert_eq!(infer_from(&[3004.0, 3002.0], &[]), None);
        let t = infer_from(&[3004.0, 3002.0], &[3001.0, 3003.5, 800.0]).unwrap();
        assert_eq!(t.ms, 3000.0);
        assert_eq!((t.cluster, t.of, t.cut_streams), (4, 5, 2));
        // Cut streams alone.
        let t = infer_from(&[], &[1502.0, 1500.5, 1503.0]).unwrap();
        assert_eq!((t.ms, t.cut_streams), (1500.0, 3));
    }
}
