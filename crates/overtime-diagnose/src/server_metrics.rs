//! What the model servers' own metrics say (docs/diagnosis.md, "Model
//! servers' metrics"): how deep their queues were and how full their
//! KV cache, over an incident's window; and, from vLLM's per-request
//! phase histograms, where the finished requests' time went minute by
//! minute — the neighbours a cut call's phase is inferred from when no
//! finished call's span arrived ([`crate::phasebook`]).
//!
//! Design rules:
//! - **Series by name, one table.** [`QUEUE_DEPTH`], [`KV_CACHE_USE`] and
//!   [`PHASE_HISTOGRAMS`] list the names each server exposes; nothing
//!   else is read.
//! - **The model is the series' `model_name` label** (vLLM's and SGLang's
//!   served model name, what the caller asks for); without one, the
//!   scraped `instance`.
//! - **A histogram is read as its increase.** Between two samples of one
//!   series, `_sum` and `_count` grew by what the requests finished in
//!   between spent; a value that fell is a restarted server, counted
//!   from zero.
//!
//! ```
//! use overtime_diagnose::server_metrics::ServerMetrics;
//! use overtime_model::MetricSample;
//! let s = |name: &str, v: f64, t: i64| MetricSample {
//!     name: name.into(), labels: vec![("model_name".into(), "qwen".into())], value: v, time_us: t };
//! let m = ServerMetrics::new(&[
//!     s("vllm:num_requests_waiting", 3.0, 0),
//!     s("vllm:num_requests_waiting", 9.0, 15_000_000),
//! ]);
//! let load = m.load("qwen", 0, 60_000_000).unwrap();
//! assert_eq!(load.queue_depth.unwrap().max, 9.0);
//! ```

use crate::phasebook::PhaseBook;
use overtime_model::MetricSample;
use std::collections::BTreeMap;

/// Requests waiting for the model server, by server.
pub const QUEUE_DEPTH: [&str; 3] = [
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "tgi_queue_size",
];

/// The share of the KV cache in use (0–1), by server.
pub const KV_CACHE_USE: [&str; 3] = [
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
];

/// vLLM's per-request phase histograms (seconds): queue, prefill, decode.
pub const PHASE_HISTOGRAMS: [&str; 3] = [
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
];

/// A gauge's samples over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gauge {
    /// Samples in the window.
    pub n: usize,
    /// Their largest value.
    pub max: f64,
    /// Their mean.
    pub mean: f64,
}

/// A model server's load over a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    /// Requests waiting.
    pub queue_depth: Option<Gauge>,
    /// KV-cache use, 0–1.
    pub kv_cache_use: Option<Gauge>,
}

type Series = Vec<(i64, f64)>;

/// The model servers' series overtime reads, per model.
#[derive(Debug, Clone, Default)]
pub struct ServerMetrics {
    queue: BTreeMap<String, Series>,
    kv: BTreeMap<String, Series>,
    /// (model, labels) → per histogram: `_sum` and `_count` series.
    phases: BTreeMap<(String, String), [[Series; 2]; 3]>,
}

/// The server a sample describes: its `model_name` (vLLM), `model`, or
/// `instance` label.
pub fn server_of(s: &MetricSample) -> String {
    s.label("model_name")
        .or_else(|| s.label("model"))
        .or_else(|| s.label("instance"))
        .unwrap_or("model server")
        .to_string()
}

/// The labels that tell one series of a model from another (a second
/// server of the same model), less the histogram's own.
fn series_key(s: &MetricSample) -> String {
    s.labels
        .iter()
        .filter(|(k, _)| k != "le" && k != "quantile")
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// How far back a live [`ServerMetrics`] keeps a series, from its newest
/// sample: a day, as the phase book keeps its minutes.
pub const MAX_AGE_US: i64 = 24 * 3600 * 1_000_000;

/// Sorted by time (stable: two servers' points of one time keep their order).
fn sort(v: &mut Series) {
    v.sort_by_key(|p| p.0);
}

/// Drops the points older than [`MAX_AGE_US`] before the newest.
fn prune(v: &mut Series) {
    if let Some(&(newest, _)) = v.last() {
        v.retain(|p| p.0 >= newest - MAX_AGE_US);
    }
}

/// How much a counter grew from `a` to `b`; a fall is a restart.
fn increase(a: f64, b: f64) -> f64 {
    if b >= a { b - a } else { b }
}

/// Whether this module reads the series `name` (what a scrape keeps).
///
/// ```
/// use overtime_diagnose::server_metrics::reads;
/// assert!(reads("vllm:num_requests_waiting"));
/// assert!(reads("vllm:request_queue_time_seconds_sum"));
/// assert!(!reads("vllm:request_queue_time_seconds_bucket"));
/// assert!(!reads("process_cpu_seconds_total"));
/// ```
pub fn reads(name: &str) -> bool {
    QUEUE_DEPTH.contains(&name)
        || KV_CACHE_USE.contains(&name)
        || PHASE_HISTOGRAMS.iter().any(|h| {
            name.strip_prefix(h)
                .is_some_and(|rest| rest == "_sum" || rest == "_count")
        })
}

impl ServerMetrics {
    /// The series of `samples` this module reads; the rest is ignored.
    pub fn new(samples: &[MetricSample]) -> Self {
        let mut m = ServerMetrics::default();
        m.insert(samples);
        m
    }

    /// Adds `samples` as they arrive (a live scrape, the store's rows
    /// after a restart) and returns what they add to the phase book: the
    /// finished requests counted between the last sample already held of
    /// each histogram and the new ones — so that a book fed every scrape
    /// holds what [`ServerMetrics::phase_book`] of all of them gives.
    /// Samples older than [`MAX_AGE_US`] before a series' newest are
    /// dropped.
    pub fn add(&mut self, samples: &[MetricSample]) -> PhaseBook {
        let before: BTreeMap<(String, String), i64> = self
            .phases
            .iter()
            .filter_map(|(k, hs)| Some((k.clone(), hs[0][1].last()?.0)))
            .collect();
        self.insert(samples);
        for v in self.queue.values_mut().chain(self.kv.values_mut()) {
            prune(v);
        }
        for hs in self.phases.values_mut() {
            for sc in hs.iter_mut().flatten() {
                prune(sc);
            }
        }
        self.phase_book_where(|key, t1| before.get(key).is_none_or(|last| t1 > *last))
    }

    fn insert(&mut self, samples: &[MetricSample]) {
        let m = self;
        for s in samples {
            if !s.value.is_finite() {
                continue;
            }
            let name = s.name.as_str();
            if QUEUE_DEPTH.contains(&name) {
                m.queue
                    .entry(server_of(s))
                    .or_default()
                    .push((s.time_us, s.value));
            } else if KV_CACHE_USE.contains(&name) {
                m.kv.entry(server_of(s))
                    .or_default()
                    .push((s.time_us, s.value));
            } else if let Some((h, part)) =
                PHASE_HISTOGRAMS.iter().enumerate().find_map(|(i, h)| {
                    let rest = name.strip_prefix(h)?;
                    match rest {
                        "_sum" => Some((i, 0)),
                        "_count" => Some((i, 1)),
                        _ => None,
                    }
                })
            {
                m.phases.entry((server_of(s), series_key(s))).or_default()[h][part]
                    .push((s.time_us, s.value));
            }
        }
        for v in m.queue.values_mut().chain(m.kv.values_mut()) {
            sort(v);
        }
        for hs in m.phases.values_mut() {
            for sc in hs.iter_mut().flatten() {
                sort(sc);
            }
        }
    }

    /// Nothing read.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.kv.is_empty() && self.phases.is_empty()
    }

    /// The models with a series.
    pub fn models(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self
            .queue
            .keys()
            .chain(self.kv.keys())
            .map(String::as_str)
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    /// `model`'s load over `[start_us, end_us]`.
    pub fn load(&self, model: &str, start_us: i64, end_us: i64) -> Option<Load> {
        let gauge = |series: Option<&Series>| {
            let pts: Vec<f64> = series?
                .iter()
                .filter(|(t, _)| (start_us..=end_us).contains(t))
                .map(|p| p.1)
                .collect();
            (!pts.is_empty()).then(|| Gauge {
                n: pts.len(),
                max: pts.iter().copied().fold(f64::MIN, f64::max),
                mean: pts.iter().sum::<f64>() / pts.len() as f64,
            })
        };
        let load = Load {
            queue_depth: gauge(self.queue.get(model)),
            kv_cache_use: gauge(self.kv.get(model)),
        };
        (load.queue_depth.is_some() || load.kv_cache_use.is_some()).then_some(load)
    }

    /// The requests that finished between two samples of vLLM's phase
    /// histograms, counted into a [`PhaseBook`] at the later sample's
    /// minute: `n` requests that spent the histograms' increases.
    pub fn phase_book(&self) -> PhaseBook {
        self.phase_book_where(|_, _| true)
    }

    /// [`ServerMetrics::phase_book`] of the steps ending at a time `keep`
    /// accepts for a series.
    fn phase_book_where(&self, keep: impl Fn(&(String, String), i64) -> bool) -> PhaseBook {
        let mut book = PhaseBook::default();
        for (key, [queue, prefill, decode]) in &self.phases {
            let model = &key.0;
            // Step along the queue histogram's count; the other sums are
            // read at the same times.
            let at = |s: &Series, t: i64| s.iter().find(|p| p.0 == t).map(|p| p.1);
            for w in queue[1].windows(2) {
                let ((t0, c0), (t1, c1)) = (w[0], w[1]);
                if !keep(key, t1) {
                    continue;
                }
                let n = increase(c0, c1);
                let sums = [queue, prefill, decode]
                    .map(|h| Some(increase(at(&h[0], t0)?, at(&h[0], t1)?) * 1000.0));
                if n < 1.0 {
                    continue;
                }
                if let [Some(q), Some(p), Some(d)] = sums {
                    book.add_many(model, t1, n as u32, q, p, d);
                }
            }
        }
        book
    }
}

impl ServerMetrics {
    /// Adds the model servers' load over each incident's window to its
    /// statistics (`model_server_queue_depth (model)`,
    /// `model_server_kv_cache_use (model)`: samples, max, mean): the
    /// incident's own model when it names one the metrics have, else every
    /// model they have.
    pub fn annotate(&self, incidents: &mut [crate::report::IncidentReport]) {
        let models = self.models();
        for r in incidents {
            let us = |t: &str| {
                chrono::DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.timestamp_micros())
            };
            let (Some(start), Some(end)) = (us(&r.window.start), us(&r.window.end)) else {
                continue;
            };
            let mine: Vec<&str> = match models.iter().find(|m| **m == r.component) {
                Some(m) => vec![m],
                None => models.clone(),
            };
            for m in mine {
                let Some(load) = self.load(m, start, end) else {
                    continue;
                };
                for (what, g) in [
                    ("queue_depth", load.queue_depth),
                    ("kv_cache_use", load.kv_cache_use),
                ] {
                    if let Some(g) = g {
                        r.cause_stats.insert(
                            format!("model_server_{what} ({m})"),
                            serde_json::json!({"n": g.n, "max": g.max, "mean": g.mean}),
                        );
                    }
                }
            }
        }
    }
}
