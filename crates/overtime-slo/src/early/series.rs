//! The per-bucket series the fast detector ([`super::cusum`]) reads: for
//! every signal, the count, sum and sum of squares of one value per
//! request, call or model-server sample in a 30 s bucket of data time.
//!
//! Design rules:
//! - One value per item, in the unit the alert speaks: the share of a
//!   timeout used (0–1), the natural log of a latency in seconds (so a
//!   20 % slower model moves it by ln 1.2 whatever its usual latency), a
//!   share of LLM time, a count of waiting requests.
//! - Each signal has a *minimum relevant shift* ([`Signal::min_shift`]):
//!   a rise smaller than that is not worth a page however significant.
//! - Model-server load comes in as plain data ([`ServerLoad`]): whoever
//!   scrapes the server maps its metric names (vLLM, TGI, SGLang) to it.
//! - Every item also feeds the series of its *keys* ([`Keyed`]): the
//!   request's route and its flow ([`flow_key`]: what it called), the
//!   call's `stage target` (`tool weather_lookup`), the LLM call's model,
//!   the model server. A ramp into one flow moves
//!   the mean over every request by a fraction of its own rise; its own
//!   route's, model's or server's series sees it whole. Bounded: at most
//!   [`MAX_KEYS`] keys a bucket, and the detector reads the
//!   [`super::cusum::TOP_KEYS`] busiest of each signal; the lifetime
//!   totals `/metrics` publishes per key (for the Prometheus rules' own
//!   per-key test) keep the first [`MAX_TOTAL_KEYS`] of each signal
//!   ([`KeyedTotals`]).

use super::classify::Signals;
use overtime_model::RequestObservation;
use serde::Serialize;
use std::collections::BTreeMap;

/// Keys (over every signal) one bucket holds a series for; items of
/// further keys feed only the signal's series over everything.
pub const MAX_KEYS: usize = 128;

/// Items a request or call signal's bucket needs to be tested
/// ([`Signal::min_items`]).
pub const MIN_BUCKET_ITEMS: f64 = 5.0;

/// Count, sum and sum of squares of one value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    /// Items.
    pub n: f64,
    /// Σ value.
    pub sum: f64,
    /// Σ value².
    pub sq: f64,
}

impl Moments {
    /// Adds one finite value (others are skipped).
    pub fn add(&mut self, x: f64) {
        if x.is_finite() {
            self.n += 1.0;
            self.sum += x;
            self.sq += x * x;
        }
    }

    /// Adds another set of moments.
    pub fn merge(&mut self, o: &Moments) {
        self.n += o.n;
        self.sum += o.sum;
        self.sq += o.sq;
    }

    /// The mean, `None` without items.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0.0).then(|| self.sum / self.n)
    }

    /// The sample variance of the items (0 with fewer than two).
    pub fn variance(&self) -> f64 {
        if self.n < 2.0 {
            return 0.0;
        }
        let m = self.sum / self.n;
        ((self.sq - self.n * m * m) / (self.n - 1.0)).max(0.0)
    }
}

/// One fast early-warning signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Requests' duration over their gateway's read timeout (or budget).
    RequestTimeoutUse,
    /// Calls' duration over their timeout: configured, or observed (the
    /// duration at which calls of the same target were cut).
    CallTimeoutUse,
    /// ln(LLM call duration in ms, at least 1 ms): never negative, so
    /// its sums are counters.
    LlmLatency,
    /// ln(time to first token in ms, at least 1 ms).
    Ttft,
    /// Queue + prefill share of each LLM call (phases from the model
    /// server's spans).
    LlmQueuePrefill,
    /// Requests waiting at the model server (its metrics).
    QueueDepth,
    /// Share of the model server's KV cache in use (its metrics).
    KvCacheUse,
    /// ln(request duration in ms, at least 1 ms), for the requests whose
    /// timeout is not known (no gateway read timeout configured, no 504
    /// seen to infer it from, no budget): their creep before the first 504.
    RequestLatency,
    /// LLM calls in flight per model, on average over a bucket: the call
    /// time of the requests that ended in it over its 30 s (Little's law:
    /// arrivals × time in the system). One value a bucket
    /// ([`Signal::per_bucket`]), compared with the most the model served
    /// in the baseline.
    LlmInFlight,
}

impl Signal {
    /// Every signal, in the order of the series arrays.
    pub const ALL: [Signal; 9] = [
        Signal::RequestTimeoutUse,
        Signal::CallTimeoutUse,
        Signal::LlmLatency,
        Signal::Ttft,
        Signal::LlmQueuePrefill,
        Signal::QueueDepth,
        Signal::KvCacheUse,
        Signal::LlmInFlight,
        Signal::RequestLatency,
    ];

    /// The `signal` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::RequestTimeoutUse => "request_timeout_use",
            Signal::CallTimeoutUse => "call_timeout_use",
            Signal::LlmLatency => "llm_latency",
            Signal::Ttft => "ttft",
            Signal::LlmQueuePrefill => "llm_queue_prefill_per_call",
            Signal::QueueDepth => "queue_depth",
            Signal::KvCacheUse => "kv_cache_use",
            Signal::LlmInFlight => "llm_in_flight",
            Signal::RequestLatency => "request_latency",
        }
    }

    /// Index in the series arrays.
    pub fn index(self) -> usize {
        Signal::ALL.iter().position(|s| *s == self).unwrap_or(0)
    }

    /// The smallest rise of the mean worth an alert, in the value's unit:
    /// 3 points of a timeout (the mean over every request, most of which a
    /// ramp into one flow leaves alone), 5 points of a share, 15 % of a
    /// latency (ln 1.15), 25 % of a time to first token, one more waiting
    /// request; for the calls in flight, half the most the model served
    /// in a bucket of the baseline (at least one call): load growing within
    /// what the model already served in the last hour is no warning, one
    /// past it by a half is ([`Signal::per_bucket`]).
    pub fn min_shift(self) -> f64 {
        match self {
            Signal::LlmInFlight => 0.5,
            Signal::RequestTimeoutUse | Signal::CallTimeoutUse => 0.03,
            Signal::LlmLatency => 1.15f64.ln(),
            Signal::RequestLatency => 1.2f64.ln(),
            Signal::Ttft => 1.25f64.ln(),
            Signal::LlmQueuePrefill | Signal::KvCacheUse => 0.05,
            Signal::QueueDepth => 1.0,
        }
    }

    /// Items a bucket needs before it is tested: a request's or call's
    /// value is often skewed (a retry doubles it), so the mean of one or
    /// two is no normal variate and a lone slow request would read as
    /// many standard errors; a sparse series' buckets are merged until
    /// they hold [`MIN_BUCKET_ITEMS`]. A model server's samples are read
    /// at their own pace (two a bucket at a 15 s scrape) and a count's
    /// noise is already bounded below (Poisson): one is enough.
    ///
    /// ```
    /// use overtime_slo::early::Signal;
    /// assert_eq!(Signal::RequestTimeoutUse.min_items(), 5.0);
    /// assert_eq!(Signal::QueueDepth.min_items(), 1.0);
    /// ```
    pub fn min_items(self) -> f64 {
        match self {
            Signal::QueueDepth | Signal::KvCacheUse | Signal::LlmInFlight => 1.0,
            _ => MIN_BUCKET_ITEMS,
        }
    }

    /// Are only the keys at risk tested: those whose values average at
    /// least the signal's over everything. For the requests' timeout use:
    /// the routes and flows that come closest to their timeout, the ones
    /// that fail first. A quick flow (a chat at 7 % of its timeout) that
    /// slows to 12 % is a real change but no creep toward a timeout, and
    /// on a busy machine short requests swing most; a quick flow slowing
    /// enough to matter moves its route's series and everything's.
    ///
    /// ```
    /// use overtime_slo::early::Signal;
    /// assert!(Signal::RequestTimeoutUse.at_risk_keys_only());
    /// assert!(!Signal::CallTimeoutUse.at_risk_keys_only());
    /// ```
    pub fn at_risk_keys_only(self) -> bool {
        matches!(self, Signal::RequestTimeoutUse | Signal::RequestLatency)
    }

    /// A bucket's value is its total, not a mean of items: the calls in
    /// flight are the call time of the bucket over its length. The
    /// detector reads such a series as one value a bucket (complete
    /// buckets only), its noise the spread of the baseline's buckets, and
    /// its minimum shift relative to the most the model served then.
    ///
    /// ```
    /// use overtime_slo::early::Signal;
    /// assert!(Signal::LlmInFlight.per_bucket() && !Signal::LlmLatency.per_bucket());
    /// ```
    pub fn per_bucket(self) -> bool {
        self == Signal::LlmInFlight
    }

    /// A mean in words.
    pub fn show(self, x: f64) -> String {
        match self {
            Signal::LlmLatency | Signal::Ttft | Signal::RequestLatency => {
                super::secs(x.exp() / 1000.0)
            }
            Signal::QueueDepth | Signal::LlmInFlight => format!("{x:.1}"),
            _ => super::pct(x),
        }
    }

    /// What the value is, for the alert's words.
    pub fn what(self) -> &'static str {
        match self {
            Signal::RequestTimeoutUse => "requests used of their gateway timeout, on average",
            Signal::RequestLatency => "request duration (geometric mean; no timeout known yet)",
            Signal::CallTimeoutUse => {
                "calls used of their timeout (configured, else the one seen firing), on average"
            }
            Signal::LlmLatency => "LLM call duration (geometric mean)",
            Signal::Ttft => "time to first token (geometric mean)",
            Signal::LlmQueuePrefill => "of each LLM call was queue + prefill, on average",
            Signal::QueueDepth => "requests waiting at the model server, on average",
            Signal::KvCacheUse => "of the model server's KV cache in use, on average",
            Signal::LlmInFlight => {
                "LLM calls in flight, on average (call time of the requests ending, per second)"
            }
        }
    }
}

/// Items per signal in one bucket.
pub type Series = [Moments; Signal::ALL.len()];

/// The series of one bucket per (signal, key).
#[derive(Debug, Clone, Default)]
pub struct Keyed(pub BTreeMap<(Signal, String), Moments>);

impl Keyed {
    fn add(&mut self, s: Signal, key: &str, x: f64) {
        if let Some(m) = self.0.get_mut(&(s, key.to_string())) {
            m.add(x);
        } else if self.0.len() < MAX_KEYS {
            self.0.entry((s, key.to_string())).or_default().add(x);
        }
    }
}

/// Keys per signal whose lifetime totals [`KeyedTotals`] keeps.
pub const MAX_TOTAL_KEYS: usize = 64;

/// Lifetime count, Σ and Σ² per (signal, key), for `/metrics` (the
/// Prometheus rules' per-key CUSUM). Unlike a bucket's [`Keyed`], these
/// live as long as the collector, so each signal keeps the first
/// [`MAX_TOTAL_KEYS`] keys it sees and no more: a counter, once
/// published, must keep its series (dropping a key to make room for a
/// busier one would read as a reset), and a label whose values come from
/// the traffic must not grow without bound.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyedTotals {
    /// The totals by (signal, key).
    pub totals: BTreeMap<(Signal, String), Moments>,
    kept: [usize; Signal::ALL.len()],
}

impl KeyedTotals {
    /// Adds the items' values to their keys' totals.
    ///
    /// ```
    /// use overtime_slo::early::series::{KeyedTotals, MAX_TOTAL_KEYS};
    /// use overtime_slo::early::Signal;
    /// let mut t = KeyedTotals::default();
    /// for i in 0..MAX_TOTAL_KEYS + 10 {
    ///     t.add(Signal::LlmLatency, &format!("model-{i}"), 1.0);
    /// }
    /// t.add(Signal::LlmLatency, "model-0", 2.0);
    /// t.add(Signal::Ttft, "model-99", 1.0);
    /// assert_eq!(t.totals.len(), MAX_TOTAL_KEYS + 1);
    /// assert_eq!(t.totals[&(Signal::LlmLatency, "model-0".into())].sum, 3.0);
    /// ```
    pub fn add(&mut self, s: Signal, key: &str, x: f64) {
        if let Some(m) = self.totals.get_mut(&(s, key.to_string())) {
            m.add(x);
        } else if self.kept[s.index()] < MAX_TOTAL_KEYS {
            self.kept[s.index()] += 1;
            self.totals.entry((s, key.to_string())).or_default().add(x);
        }
    }
}

/// One item: its signal, the keys whose series it also feeds, its value.
pub(crate) type Item = (Signal, Vec<String>, f64);

/// A request's *flow*: the distinct models, tools and stores it called,
/// sorted (`calls calc + deepseek-v4-pro + poi_search`), `None` when it
/// called nothing seen (network hops and queues are not part of it: they
/// name addresses). Requests of one flow are alike; a route usually serves several
/// flows of very different lengths, so its mean swings with the mix of
/// each bucket's few requests. A ramp into one flow (its inputs growing,
/// its tool slowing) moves that flow's series whole and early, against a
/// baseline as steady as the flow itself, where the route's and
/// everything's series wait until the mix can no longer hide it. The
/// route is not part of it: the same agent behind two routes (`/v1`,
/// `/v2`) is one flow, its timeout use already in each route's own unit.
///
/// ```
/// use overtime_slo::early::series::flow_key;
/// assert_eq!(flow_key(["poi_search", "calc", "", "poi_search"]).as_deref(), Some("calls calc + poi_search"));
/// assert_eq!(flow_key([]), None);
/// ```
pub fn flow_key<'a>(targets: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut t: Vec<&str> = targets.into_iter().filter(|t| !t.is_empty()).collect();
    t.sort_unstable();
    t.dedup();
    (!t.is_empty()).then(|| format!("calls {}", t.join(" + ")))
}

/// A classified request's items; `taken_until`: its provisional
/// observation's items were taken, so only those of the calls that ended
/// after it.
pub(crate) fn request_items(
    o: &RequestObservation,
    sig: &Signals,
    taken_until: Option<i64>,
) -> Vec<Item> {
    let mut v = Vec::new();
    let new = |c: &overtime_model::CallObservation| taken_until.is_none_or(|t| c.end_us > t);
    if taken_until.is_none() {
        let mut keys = vec![o.route.clone()];
        // What the agent chose to call: not the network hops or queues
        // under it, which name addresses (one flow would be a pod's).
        let chosen = o.calls.iter().filter(|c| {
            use overtime_model::Stage::*;
            matches!(c.stage, Llm | Judge | Tool | Memory)
        });
        keys.extend(flow_key(chosen.map(|c| c.target())));
        let ms = (o.end_us - o.start_us) as f64 / 1000.0;
        match o.timeout_used.filter(|u| u.is_finite() && *u >= 0.0) {
            Some(u) => v.push((Signal::RequestTimeoutUse, keys, u.min(1.0))),
            // No timeout known yet (none configured, no 504 seen): the
            // request's own time, so a creep is seen before its first 504.
            None if ms > 0.0 => v.push((Signal::RequestLatency, keys, ms.max(1.0).ln())),
            None => {}
        }
    }
    for (i, u) in &sig.call_use {
        let c = &o.calls[*i];
        if !new(c) {
            continue;
        }
        let key = format!("{} {}", c.stage.as_str(), c.target());
        v.push((Signal::CallTimeoutUse, vec![key], u.min(1.0)));
    }
    for c in o.calls.iter().filter(|c| c.is_llm() && new(c)) {
        if c.duration_ms > 0.0 {
            let x = c.duration_ms.max(1.0).ln();
            v.push((Signal::LlmLatency, vec![c.target().to_string()], x));
        }
        if c.duration_ms > 0.0 && c.duration_ms.is_finite() {
            let busy = c.duration_ms / 1000.0 / super::BUCKET_S;
            v.push((Signal::LlmInFlight, vec![c.target().to_string()], busy));
        }
        if let Some(t) = c.ttft_ms.filter(|t| t.is_finite() && *t > 0.0) {
            v.push((Signal::Ttft, vec![c.target().to_string()], t.max(1.0).ln()));
        }
    }
    for w in sig
        .llm
        .iter()
        .filter(|w| w.from_phases && w.total_ms > 0.0 && new(&o.calls[w.call]))
    {
        let key = o.calls[w.call].target().to_string();
        let x = w.wait_ms().min(w.total_ms) / w.total_ms;
        v.push((Signal::LlmQueuePrefill, vec![key], x));
    }
    v
}

/// Adds items to `s`, and to `keyed` by their keys.
pub(crate) fn add_items(s: &mut Series, mut keyed: Option<&mut Keyed>, items: &[Item]) {
    for (signal, keys, x) in items {
        s[signal.index()].add(*x);
        if let Some(k) = keyed.as_deref_mut() {
            for key in keys {
                k.add(*signal, key, *x);
            }
        }
    }
}

/// Adds items to the lifetime totals: `s`, and `keyed` by their keys.
pub(crate) fn add_totals(s: &mut Series, keyed: &mut KeyedTotals, items: &[Item]) {
    add_items(s, None, items);
    for (signal, keys, x) in items {
        for key in keys {
            keyed.add(*signal, key, *x);
        }
    }
}

/// A model server's load at one moment, from its own metrics: pure data,
/// mapped from whatever the server exposes (vLLM
/// `num_requests_waiting` and `kv_cache_usage_perc`, TGI `tgi_queue_size`,
/// SGLang `num_queue_reqs` and `token_usage`) by the caller.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerLoad {
    /// When it was sampled (data time, µs).
    pub at_us: i64,
    /// The server or model it describes.
    pub server: String,
    /// Requests waiting in its queue.
    pub queue_depth: Option<f64>,
    /// Share of its KV cache in use (0–1).
    pub kv_cache_use: Option<f64>,
}

/// A server sample's items.
pub(crate) fn server_items(l: &ServerLoad) -> Vec<Item> {
    let mut v = Vec::new();
    if let Some(q) = l.queue_depth.filter(|q| *q >= 0.0) {
        v.push((Signal::QueueDepth, vec![l.server.clone()], q));
    }
    if let Some(k) = l.kv_cache_use.filter(|k| (0.0..=1.5).contains(k)) {
        v.push((Signal::KvCacheUse, vec![l.server.clone()], k.min(1.0)));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_give_the_mean_and_the_sample_variance() {
        let mut m = Moments::default();
        for x in [1.0, 2.0, 3.0, f64::NAN] {
            m.add(x);
        }
        assert_eq!((m.n, m.mean()), (3.0, Some(2.0)));
        assert!((m.variance() - 1.0).abs() < 1e-12);
        assert_eq!(Moments::default().mean(), None);
    }
}
