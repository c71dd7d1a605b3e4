//! The Kafka sources' counters in the Prometheus text format, for the
//! collector's `/metrics` (families documented in `docs/metrics.md`).
//!
//! Design rules:
//! - Pure: a snapshot of the atomics becomes text; no client, no I/O.
//! - One call renders every running source, so each family has its
//!   `# HELP` / `# TYPE` exactly once however many `[[kafka]]` blocks run.
//! - A source is labelled by its consumer group and bootstrap list
//!   (`group`, `brokers`): what the operator wrote in the config, stable
//!   across restarts and reorderings. Two sources with the same pair (two
//!   consumers of one group on one cluster) are summed into one series.
//! - Lag stays where it was (`overtime_kafka_lag{topic,partition}`,
//!   rendered by the server's metrics).

use crate::stats::KafkaStats;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// A running source's counters with the labels `/metrics` gives them.
#[derive(Debug, Clone)]
pub struct LabeledStats {
    /// The consumer group (`group_id`), label `group`.
    pub group: String,
    /// The bootstrap list (`brokers`), label `brokers`.
    pub brokers: String,
    pub stats: Arc<KafkaStats>,
}

/// Name, type and help of the families, in rendering order.
const FAMILIES: [(&str, &str, &str); 14] = [
    (
        "overtime_kafka_messages_total",
        "counter",
        "Messages taken from the consumer (re-fetches below a partition's checkpoint excluded).",
    ),
    (
        "overtime_kafka_records_total",
        "counter",
        "Records (gateway rows and spans) made durable from Kafka messages.",
    ),
    (
        "overtime_kafka_rejected_total",
        "counter",
        "Rejected rows made durable from Kafka messages.",
    ),
    (
        "overtime_kafka_batches_total",
        "counter",
        "Partition batches made durable and committed.",
    ),
    (
        "overtime_kafka_commits_total",
        "counter",
        "Offset commits requested (each after a durable batch).",
    ),
    (
        "overtime_kafka_commit_errors_total",
        "counter",
        "Offset commits refused by the client or the broker.",
    ),
    (
        "overtime_kafka_partition_pauses_total",
        "counter",
        "Partitions paused because the store pushed back (full) or a write failed.",
    ),
    (
        "overtime_kafka_partition_resumes_total",
        "counter",
        "Paused partitions resumed once their batch became durable.",
    ),
    (
        "overtime_kafka_partitions_paused",
        "gauge",
        "Partitions paused now (pauses minus resumes).",
    ),
    (
        "overtime_kafka_sink_full_total",
        "counter",
        "Batch writes the store answered full (the batch is retried, the partition paused).",
    ),
    (
        "overtime_kafka_sink_failures_total",
        "counter",
        "Batch writes that failed (I/O, disk full); retried with backoff, never committed.",
    ),
    (
        "overtime_kafka_rebalances_total",
        "counter",
        "Consumer group rebalance events (assign or revoke).",
    ),
    (
        "overtime_kafka_consumer_errors_total",
        "counter",
        "Errors reported by the consumer (librdkafka retries them itself).",
    ),
    (
        "overtime_kafka_checkpoint_skips_total",
        "counter",
        "Messages dropped because the store already held them (below its checkpoint).",
    ),
];

/// The values of [`FAMILIES`], in the same order.
fn values(s: &KafkaStats) -> [u64; 14] {
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
    ]
}

/// A label value escaped for the text format (`\`, `"`, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `overtime_kafka_*` families of every source in `sources`; empty
/// when there is none (no `[[kafka]]` block).
///
/// ```
/// use overtime_kafka::{render_prometheus, LabeledStats};
/// let s = LabeledStats {
///     group: "overtime".into(),
///     brokers: "kafka-1:9092".into(),
///     stats: Default::default(),
/// };
/// let text = render_prometheus(&[s]);
/// assert!(text.contains(
///     "overtime_kafka_partition_pauses_total{group=\"overtime\",brokers=\"kafka-1:9092\"} 0\n"
/// ));
/// ```
pub fn render_prometheus(sources: &[LabeledStats]) -> String {
    let mut out = String::new();
    if sources.is_empty() {
        return out;
    }
    // Sum sources that share their labels (one series per label set).
    let mut by_labels: BTreeMap<(&str, &str), [u64; 14]> = BTreeMap::new();
    for s in sources {
        let v = values(&s.stats);
        let sum = by_labels
            .entry((s.group.as_str(), s.brokers.as_str()))
            .or_insert([0; 14]);
        for (a, b) in sum.iter_mut().zip(v) {
            *a += b;
        }
    }
    for (i, (name, kind, help)) in FAMILIES.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for ((group, brokers), v) in &by_labels {
            let _ = writeln!(
                out,
                "{name}{{group=\"{}\",brokers=\"{}\"}} {}",
                escape(group),
                escape(brokers),
                v[i]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::atomic::Ordering::Relaxed;

    /// The families rendered are exactly those of docs/metrics.md's
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
        let text = render_prometheus(&[source("g", "b:9092")]);
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

    /// Checks the text format the way a scraper would: every sample
    /// belongs to the family declared just before it, each family is
    /// declared (HELP then TYPE) once, values are numbers, no series twice.
    /// Returns the samples by `name{labels}`.
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
        let text = render_prometheus(&[a, b]);
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
        let samples = parse(&render_prometheus(&[a, b]));
        assert_eq!(samples.len(), FAMILIES.len());
        assert_eq!(
            samples[r#"overtime_kafka_messages_total{group="g\"1\\",brokers="k:1"}"#],
            5.0
        );
    }

    #[test]
    fn no_source_renders_nothing() {
        assert_eq!(render_prometheus(&[]), "");
    }
}
