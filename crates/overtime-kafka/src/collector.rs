//! The Kafka sources' families (docs/metrics.md, "Kafka source") as one
//! [`Collector`] of the collector's `/metrics` registry: the sources'
//! atomics are read at each scrape, and prometheus-client writes the
//! exposition.
//!
//! Design rules:
//! - Pure: a snapshot of the atomics becomes samples; no client, no I/O,
//!   no text written here.
//! - One collector for every running source, so each family is declared
//!   once however many `[[kafka]]` blocks run; with no source it declares
//!   nothing (the families are documented as present only with Kafka).
//! - A source is labelled by its consumer group and bootstrap list
//!   (`group`, `brokers`): what the operator wrote in the config, stable
//!   across restarts and reorderings. Two sources with the same pair (two
//!   consumers of one group on one cluster) are summed into one series.
//! - Lag stays where it was (`overtime_kafka_lag{topic,partition}`,
//!   declared by the server's metrics with or without Kafka).
//!
//! ```
//! use overtime_kafka::{KafkaCollector, LabeledStats};
//! use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};
//! let s = LabeledStats {
//!     group: "overtime".into(),
//!     brokers: "kafka-1:9092".into(),
//!     stats: Default::default(),
//! };
//! let mut registry = Registry::default();
//! registry.register_collector(Box::new(KafkaCollector::new(vec![s])));
//! let mut text = String::new();
//! encode(&mut text, &registry).unwrap();
//! assert!(text.contains(
//!     "overtime_kafka_partition_pauses_total{group=\"overtime\",brokers=\"kafka-1:9092\"} 0\n"
//! ));
//! ```

use crate::stats::KafkaStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType::{self, Counter, Gauge};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A running source's counters with the labels `/metrics` gives them.
#[derive(Debug, Clone)]
pub struct LabeledStats {
    /// The consumer group (`group_id`), label `group`.
    pub group: String,
    /// The bootstrap list (`brokers`), label `brokers`.
    pub brokers: String,
    /// The source's counters ([`KafkaSource::stats`](crate::KafkaSource::stats)).
    pub stats: Arc<KafkaStats>,
}

/// Every running Kafka source's families, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct KafkaCollector {
    sources: Vec<LabeledStats>,
}

impl KafkaCollector {
    /// A collector of `sources` (none: it declares no family).
    pub fn new(sources: Vec<LabeledStats>) -> Self {
        KafkaCollector { sources }
    }
}

/// Name (as exposed), type and help of the families, in encoding order.
const FAMILIES: [(&str, MetricType, &str); 16] = [
    (
        "overtime_kafka_messages_total",
        Counter,
        "Messages taken from the consumer (re-fetches below a partition's checkpoint excluded).",
    ),
    (
        "overtime_kafka_records_total",
        Counter,
        "Records (gateway rows and spans) made durable from Kafka messages.",
    ),
    (
        "overtime_kafka_rejected_total",
        Counter,
        "Rejected rows made durable from Kafka messages.",
    ),
    (
        "overtime_kafka_batches_total",
        Counter,
        "Partition batches made durable and committed.",
    ),
    (
        "overtime_kafka_commits_total",
        Counter,
        "Offset commits requested (each after a durable batch).",
    ),
    (
        "overtime_kafka_commit_errors_total",
        Counter,
        "Offset commits refused by the client or the broker.",
    ),
    (
        "overtime_kafka_partition_pauses_total",
        Counter,
        "Partitions paused because the store pushed back (full) or a write failed.",
    ),
    (
        "overtime_kafka_partition_resumes_total",
        Counter,
        "Paused partitions resumed once their batch became durable.",
    ),
    (
        "overtime_kafka_partitions_paused",
        Gauge,
        "Partitions paused now (pauses minus resumes).",
    ),
    (
        "overtime_kafka_sink_full_total",
        Counter,
        "Batch writes the store answered full (the batch is retried, the partition paused).",
    ),
    (
        "overtime_kafka_sink_failures_total",
        Counter,
        "Batch writes that failed (I/O, disk full); retried with backoff, never committed.",
    ),
    (
        "overtime_kafka_rebalances_total",
        Counter,
        "Consumer group rebalance events (assign or revoke).",
    ),
    (
        "overtime_kafka_consumer_errors_total",
        Counter,
        "Errors reported by the consumer (librdkafka retries them itself).",
    ),
    (
        "overtime_kafka_checkpoint_skips_total",
        Counter,
        "Messages dropped because the store already held them (below its checkpoint).",
    ),
    (
        "overtime_kafka_checkpoint_seeks_total",
        Counter,
        "Partitions assigned at a position past the group's committed offset (the store's or a collector's published checkpoint).",
    ),
    (
        "overtime_kafka_replayed_messages_total",
        Counter,
        "Messages a newly assigned partition read again from before its start, for the live diagnosis only (what a dead owner had stored but not judged).",
    ),
];

/// The values of [`FAMILIES`], in the same order.
fn values(s: &KafkaStats) -> [u64; 16] {
    let (commits, commit_errors) = s.commits();
    [
        s.messages(),
        s.records(),
        s.rejected(),
        s.batches(),
        commits,
        commit_errors,
        s.pauses(),
        s.resumes(),
        s.pauses().saturating_sub(s.resumes()),
        s.sink_full(),
        s.sink_failures(),
        s.rebalances(),
        s.consumer_errors(),
        s.skipped_below_checkpoint(),
        s.checkpoint_seeks(),
        s.replayed(),
    ]
}

impl Collector for KafkaCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Sum sources that share their labels (one series per label set).
        let mut by_labels: BTreeMap<(&str, &str), [u64; 16]> = BTreeMap::new();
        for s in &self.sources {
            let sum = by_labels
                .entry((s.group.as_str(), s.brokers.as_str()))
                .or_insert([0; 16]);
            for (a, b) in sum.iter_mut().zip(values(&s.stats)) {
                *a += b;
            }
        }
        if by_labels.is_empty() {
            return Ok(());
        }
        for (i, (name, kind, help)) in FAMILIES.into_iter().enumerate() {
            // prometheus-client appends a counter's `_total` itself.
            let name = match kind {
                Counter => name.strip_suffix("_total").unwrap_or(name),
                _ => name,
            };
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for ((group, brokers), v) in &by_labels {
                let labels = [("group", *group), ("brokers", *brokers)];
                let sample = family.encode_family(&labels)?;
                match kind {
                    Counter => ConstCounter::new(v[i]).encode(sample)?,
                    _ => ConstGauge::new(v[i]).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::prometheus_text::encode;
    use prometheus_client::registry::Registry;
    use std::collections::BTreeSet;
    use std::sync::atomic::Ordering::Relaxed;

    /// The exposition of one registry holding a collector of `sources`.
    fn render(sources: Vec<LabeledStats>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(KafkaCollector::new(sources)));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    /// The families encoded are exactly those of docs/metrics.md's
    /// "Kafka source" section.
    #[test]
    fn families_are_those_documented() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md"),
        )
        .unwrap();
        let mut in_section = false;
        let mut documented = BTreeSet::new();
        for l in doc.lines() {
            if l.starts_with("## ") {
                in_section = l.starts_with("## Kafka source");
            }
            if let Some(rest) = l.strip_prefix("| `overtime_").filter(|_| in_section) {
                documented.insert(format!("overtime_{}", &rest[..rest.find('`').unwrap()]));
            }
        }
        let text = render(vec![source("g", "b:9092")]);
        let rendered: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(rendered, documented);
    }

    fn source(group: &str, brokers: &str) -> LabeledStats {
        LabeledStats {
            group: group.into(),
            brokers: brokers.into(),
            stats: Arc::new(KafkaStats::default()),
        }
    }

    /// Checks the text the way a scraper would: every sample belongs to
    /// the family declared just before it, each family is declared (HELP
    /// then TYPE) once, values are numbers, no series twice. Returns the
    /// samples by `name{labels}`.
    fn parse(text: &str) -> BTreeMap<String, f64> {
        let mut declared = BTreeSet::new();
        let mut current: Option<String> = None;
        let mut samples = BTreeMap::new();
        let mut lines = text.lines().peekable();
        while let Some(l) = lines.next() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(declared.insert(name.clone()), "{name} declared twice");
                let ty = lines.next().expect("TYPE after HELP");
                let want = format!("# TYPE {name} ");
                assert!(ty.starts_with(&want), "{ty:?} after HELP {name}");
                let kind = &ty[want.len()..];
                assert!(kind == "counter" || kind == "gauge", "{ty}");
                assert_eq!(kind == "counter", name.ends_with("_total"), "{name}");
                current = Some(name);
                continue;
            }
            assert!(!l.starts_with('#'), "stray comment {l:?}");
            let (series, value) = l.rsplit_once(' ').expect("series value");
            let name = series.split('{').next().unwrap();
            assert_eq!(Some(name), current.as_deref(), "sample outside its family");
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("{l}"));
            assert!(
                samples.insert(series.to_string(), v).is_none(),
                "{series} twice"
            );
        }
        samples
    }

    #[test]
    fn one_help_and_type_per_family_with_two_sources() {
        let a = source("overtime", "k1:9092");
        let b = source("overtime", "k2:9092,k3:9092");
        a.stats.pauses.store(5, Relaxed);
        a.stats.resumes.store(3, Relaxed);
        a.stats.sink_full.store(7, Relaxed);
        b.stats.records.store(42, Relaxed);
        b.stats.commits.store(9, Relaxed);
        b.stats.commit_errors.store(1, Relaxed);
        let text = render(vec![a, b]);
        let samples = parse(&text);
        assert_eq!(text.matches("# HELP ").count(), FAMILIES.len());
        assert_eq!(text.matches("# TYPE ").count(), FAMILIES.len());
        assert_eq!(samples.len(), 2 * FAMILIES.len());
        let get = |name: &str, brokers: &str| {
            samples[&format!("{name}{{group=\"overtime\",brokers=\"{brokers}\"}}")]
        };
        assert_eq!(get("overtime_kafka_partition_pauses_total", "k1:9092"), 5.0);
        assert_eq!(
            get("overtime_kafka_partition_resumes_total", "k1:9092"),
            3.0
        );
        assert_eq!(get("overtime_kafka_partitions_paused", "k1:9092"), 2.0);
        assert_eq!(get("overtime_kafka_sink_full_total", "k1:9092"), 7.0);
        let b = "k2:9092,k3:9092";
        assert_eq!(get("overtime_kafka_records_total", b), 42.0);
        assert_eq!(get("overtime_kafka_commits_total", b), 9.0);
        assert_eq!(get("overtime_kafka_commit_errors_total", b), 1.0);
        assert_eq!(get("overtime_kafka_partitions_paused", b), 0.0);
    }

    #[test]
    fn same_labels_are_summed_and_values_escaped() {
        let (a, b) = (source("g\"1\\", "k:1"), source("g\"1\\", "k:1"));
        a.stats.messages.store(2, Relaxed);
        b.stats.messages.store(3, Relaxed);
        let samples = parse(&render(vec![a, b]));
        assert_eq!(samples.len(), FAMILIES.len());
        assert_eq!(
            samples[r#"overtime_kafka_messages_total{group="g\"1\\",brokers="k:1"}"#],
            5.0
        );
    }

    #[test]
    fn no_source_declares_nothing() {
        assert_eq!(render(vec![]), "");
    }
}
