//! Gateway read timeouts: configured per layer, or inferred from where the
//! 504s' `$request_time` values cluster (finding `gateway_timeout_inferred`).

use crate::config::DiagnoseConfig;
use std::collections::BTreeMap;

/// A layer's read timeout and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTimeout {
    /// The read timeout, ms.
    pub ms: f64,
    /// Inferred from the 504s' request times (`false`: configured).
    pub inferred: bool,
    /// For an inferred one: how many 504s clustered (0 when configured)…
    pub cluster: usize,
    /// …of how many 504s (0 when configured).
    pub of: usize,
}

/// Fewest 504s that can show a timeout.
const MIN_CLUSTER: usize = 3;

/// The timeout of every layer seen: configured, else inferred.
/// `records` yields (layer source, status, request time ms) per gateway row.
pub fn layer_timeouts<'a>(
    records: impl Iterator<Item = (&'a str, Option<u16>, Option<f64>)>,
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
    let mut out = BTreeMap::new();
    for (source, rts) in times {
        if let Some(ms) = cfg.layer_timeout_ms(&source) {
            out.insert(
                source,
                LayerTimeout {
                    ms,
                    inferred: false,
                    cluster: 0,
                    of: rts.len(),
                },
            );
        } else if let Some(t) = infer(&rts) {
            out.insert(source, t);
        }
    }
    for l in &cfg.layers {
        if let (Some(ms), false) = (l.read_timeout_ms, out.contains_key(&l.name)) {
            out.insert(
                l.name.clone(),
                LayerTimeout {
                    ms,
                    inferred: false,
                    cluster: 0,
                    of: 0,
                },
            );
        }
    }
    out
}

/// The densest cluster of 504 request times, if most 504s sit in it.
///
pub fn infer(rts: &[f64]) -> Option<LayerTimeout> {
    if rts.len() < MIN_CLUSTER {
        return None;
    }
    let mut v: Vec<f64> = rts.to_vec();
    v.sort_by(f64::total_cmp);
    let mut best = (0usize, 0usize);
    let mut j = 0;
    for i in 0..v.len() {
        // Window of values within 2 % (at least 250 ms) above v[i].
        let tol = (v[i] * 0.02).max(250.0);
        if j < i {
            j = i;
        }
        while j + 1 < v.len() && v[j + 1] - v[i] <= tol {
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
    let low = v[best.0];
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
    })
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn infer_finds_the_cluster_of_cut_requests() {
        use super::infer;
        let t = infer(&[60001.0, 60003.0, 60000.0, 12.0, 60010.0]).unwrap();
        assert_eq!(t.ms, 60000.0);
        assert_eq!((t.cluster, t.of), (4, 5));
    }
}
