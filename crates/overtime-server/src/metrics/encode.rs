//! The few calls the server's families make into prometheus-client's
//! encoder: declare a family (`# HELP`, `# TYPE`, written by the crate),
//! then hand it samples as `ConstCounter`s, `ConstGauge`s and histograms.
//!
//! Design rules:
//! - Names are written as docs/metrics.md spells them, `_total` included;
//!   [`counter`] takes the suffix off because prometheus-client puts a
//!   counter's back itself.
//! - Integer values stay integers (`u64`): a count reads `3`, not `3.0`.

use overtime_slo::{CounterVec, HistogramVec};
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, MetricEncoder,
    NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

pub(super) type Result<T = ()> = std::result::Result<T, std::fmt::Error>;

/// Declares a counter family; `name` ends in `_total`.
pub(super) fn counter<'s>(
    e: &'s mut DescriptorEncoder,
    name: &'s str,
    help: &str,
) -> Result<MetricEncoder<'s>> {
    let base = name.strip_suffix("_total");
    debug_assert!(base.is_some(), "{name}: a counter's name ends in _total");
    e.encode_descriptor(base.unwrap_or(name), help, None, MetricType::Counter)
}

/// Declares a gauge family.
pub(super) fn gauge<'s>(
    e: &'s mut DescriptorEncoder,
    name: &'s str,
    help: &str,
) -> Result<MetricEncoder<'s>> {
    e.encode_descriptor(name, help, None, MetricType::Gauge)
}

/// One sample of a counter family.
pub(super) fn count(
    m: &mut MetricEncoder,
    labels: &[(&str, &str)],
    v: impl EncodeCounterValue,
) -> Result {
    ConstCounter::new(v).encode(m.encode_family(&labels)?)
}

/// One sample of a gauge family.
pub(super) fn set(
    m: &mut MetricEncoder,
    labels: &[(&str, &str)],
    v: impl EncodeGaugeValue,
) -> Result {
    ConstGauge::new(v).encode(m.encode_family(&labels)?)
}

/// A whole counter family of the SLO engine.
pub(super) fn counter_vec(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    cv: &CounterVec,
) -> Result {
    let mut m = counter(e, name, help)?;
    for (values, n) in &cv.series {
        count(&mut m, &zip(cv.labels, values), *n)?;
    }
    Ok(())
}

/// A whole histogram family of the SLO engine: per series, its buckets
/// (`le` the bounds, then `+Inf`), `_sum` and `_count`.
pub(super) fn histogram_vec(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    hv: &HistogramVec,
) -> Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    let bounds = hv.bounds.iter().copied().chain([f64::INFINITY]);
    for (values, h) in &hv.series {
        // Per-bucket counts, the last one above every bound; the encoder
        // makes them cumulative.
        let buckets: Vec<(f64, u64)> = bounds.clone().zip(h.counts.iter().copied()).collect();
        m.encode_family(&zip(hv.labels, values))?
            .encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets, None)?;
    }
    Ok(())
}

fn zip<'a>(names: &[&'a str], values: &'a [String]) -> Vec<(&'a str, &'a str)> {
    names
        .iter()
        .copied()
        .zip(values.iter().map(String::as_str))
        .collect()
}

#[cfg(test)]
mod module_example {
    use crate::Metrics;

    /// `_total` once, in the TYPE line as in the sample; a count in digits.
    #[test]
    fn a_counter_is_named_once_and_counts_in_digits() {
        let m = Metrics::default();
        let text = m.encode(&Default::default()).unwrap();
        assert!(text.contains(
            "# TYPE overtime_verdict_revisions_total counter\n\
             overtime_verdict_revisions_total 0\n"
        ));
    }
}
