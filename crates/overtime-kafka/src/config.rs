//! What the Kafka source runs with: brokers, the consumer group, topic →
//! format, batching and the prefetch cap, and how it becomes librdkafka
//! settings.
//!
//! Design rules:
//! - [`KafkaSourceConfig`] is what the source runs with; it holds compiled
//!   `LogFormat`s and environment values, so it is built, never read:
//!   its TOML form is [`KafkaSourceSettings`](crate::KafkaSourceSettings)
//!   (`crate::settings`), whose `build()` makes one.
//! - The settings that make delivery safe are not negotiable:
//!   `enable.auto.commit=false` and `enable.auto.offset.store=false` are
//!   always set, and an `extra` map that tries to change them (or
//!   `group.id`, `bootstrap.servers`) is an error, never silently applied.
//! - librdkafka's prefetch is capped (`queued.max.messages.kbytes`): an
//!   uncapped prefetch with a large lag is a known out-of-memory.
//! - Each default is a constant here, used by the TOML form's serde
//!   defaults and by [`KafkaSourceConfig::new`] alike.

use overtime_parse::record::RecordFormat;
use rdkafka::config::ClientConfig;
use std::collections::BTreeMap;

/// Default cap of librdkafka's prefetch queue, in KiB (16 MiB).
pub const DEFAULT_PREFETCH_KBYTES: u64 = 16 * 1024;
/// Default largest batch, in messages.
pub const DEFAULT_BATCH_MAX_MESSAGES: usize = 4096;
/// The `log_format` of an nginx topic that names none: overtime's own
/// format, as for a tailed file.
pub const DEFAULT_LOG_FORMAT: &str = "overtime";
/// Default longest time a message waits in a batch, in milliseconds.
pub const DEFAULT_BATCH_MAX_MS: u64 = 200;
/// Default consumer group.
pub const DEFAULT_GROUP_ID: &str = "overtime";
/// Default `auto.offset.reset`: a partition with no committed offset and
/// no checkpoint is read from its start.
pub const DEFAULT_AUTO_OFFSET_RESET: &str = "earliest";

/// librdkafka settings the source owns; `extra` may not set them.
const OWNED_KEYS: [&str; 6] = [
    "enable.auto.commit",
    "enable.auto.offset.store",
    "group.id",
    "bootstrap.servers",
    "auto.offset.reset",
    "queued.max.messages.kbytes",
];

/// One topic and the format of its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// The topic's name, as the brokers know it.
    pub topic: String,
    /// What each message holds, one record per message: an nginx line
    /// (of a gateway layer, the `source` of its rows), a JSONL span (an
    /// OTLP JSON request is read too) or one protobuf
    /// `ExportTraceServiceRequest`.
    pub format: RecordFormat,
}

/// Everything the Kafka source runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSourceConfig {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// The consumer group; collectors sharing it share the partitions.
    pub group_id: String,
    /// The topics read, each in its format; no topic twice.
    pub topics: Vec<TopicConfig>,
    /// A partition's batch is written when it holds this many messages…
    pub batch_max_messages: usize,
    /// …or when its oldest message has waited this long.
    pub batch_max_ms: u64,
    /// `queued.max.messages.kbytes`: the cap of librdkafka's prefetch.
    pub max_prefetch_kbytes: u64,
    /// `auto.offset.reset` for partitions with no committed offset and no
    /// checkpoint: `earliest` (the default) or `latest`.
    pub auto_offset_reset: String,
    /// More librdkafka settings (`session.timeout.ms`, security…); the
    /// settings above are owned by these fields and refused here.
    pub extra: BTreeMap<String, String>,
}

/// A configuration that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `brokers` is empty or blank.
    #[error("kafka: `brokers` is empty")]
    NoBrokers,
    /// `group_id` is empty or blank.
    #[error("kafka: `group_id` is empty")]
    NoGroup,
    /// No topic to read.
    #[error("kafka: no topics configured")]
    NoTopics,
    /// A topic listed twice (its name).
    #[error("kafka: topic `{0}` is configured twice")]
    DuplicateTopic(String),
    /// `batch_max_messages` is 0.
    #[error("kafka: `batch_max_messages` must be at least 1")]
    ZeroBatch,
    /// `max_prefetch_kbytes` is 0.
    #[error("kafka: `max_prefetch_kbytes` must be at least 1")]
    ZeroPrefetch,
    /// An `extra` (`librdkafka_options`) key the source sets itself (the
    /// key).
    #[error("kafka: `{0}` is set by overtime itself and cannot be changed in `extra`")]
    OwnedSetting(String),
    /// A topic's settings cannot be used (its `log_format` does not
    /// compile…).
    #[error("kafka: topic `{topic}`: {reason}")]
    Topic {
        /// The topic's name.
        topic: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A span topic with `log_format` or `layer`, which only an nginx
    /// topic has.
    #[error("kafka topic {0}: `log_format` and `layer` apply to nginx topics only")]
    NginxOnly(String),
    /// A `librdkafka_options` value `env:NAME` whose variable is unset or
    /// empty. Names the option and the variable, never a value.
    #[error("kafka option {option}: environment variable {variable} is not set")]
    MissingEnv {
        /// The `librdkafka_options` key whose value named the variable.
        option: String,
        /// The environment variable's name.
        variable: String,
    },
}

impl KafkaSourceConfig {
    /// A configuration with the defaults for batching and prefetch.
    pub fn new(brokers: &str, group_id: &str, topics: Vec<TopicConfig>) -> Self {
        KafkaSourceConfig {
            brokers: brokers.to_string(),
            group_id: group_id.to_string(),
            topics,
            batch_max_messages: DEFAULT_BATCH_MAX_MESSAGES,
            batch_max_ms: DEFAULT_BATCH_MAX_MS,
            max_prefetch_kbytes: DEFAULT_PREFETCH_KBYTES,
            auto_offset_reset: DEFAULT_AUTO_OFFSET_RESET.to_string(),
            extra: BTreeMap::new(),
        }
    }

    /// Checks the configuration without contacting a broker.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(ConfigError::NoBrokers);
        }
        if self.group_id.trim().is_empty() {
            return Err(ConfigError::NoGroup);
        }
        if self.topics.is_empty() {
            return Err(ConfigError::NoTopics);
        }
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.topics {
            if !seen.insert(t.topic.as_str()) {
                return Err(ConfigError::DuplicateTopic(t.topic.clone()));
            }
        }
        if self.batch_max_messages == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if self.max_prefetch_kbytes == 0 {
            return Err(ConfigError::ZeroPrefetch);
        }
        if let Some(k) = self.extra.keys().find(|k| OWNED_KEYS.contains(&k.as_str())) {
            return Err(ConfigError::OwnedSetting(k.clone()));
        }
        Ok(())
    }

    /// The librdkafka settings of the consumer: `extra` first, then the
    /// settings the source owns.
    ///
    /// ```
    /// use overtime_kafka::{KafkaSourceConfig, TopicConfig};
    /// use overtime_parse::{record::RecordFormat, spans::SpanFormat};
    /// let topics = vec![TopicConfig { topic: "spans".into(), format: RecordFormat::Spans(SpanFormat::Jsonl) }];
    /// let cfg = KafkaSourceConfig::new("127.0.0.1:9092", "overtime", topics);
    /// let c = cfg.client_config();
    /// assert_eq!(c.get("enable.auto.commit"), Some("false"));
    /// assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
    /// assert_eq!(c.get("queued.max.messages.kbytes"), Some("16384"));
    /// assert_eq!(c.get("partition.assignment.strategy"), Some("range"));
    /// ```
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("client.id", "overtime");
        // Range assignment gives partition i of every subscribed topic to
        // the same member when the topics have as many partitions: a
        // trace's gateway lines and spans, keyed alike, meet in one
        // collector. (`extra` may override it, at that cost.)
        c.set("partition.assignment.strategy", "range");
        for (k, v) in &self.extra {
            c.set(k, v);
        }
        c.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", &self.auto_offset_reset)
            .set(
                "queued.max.messages.kbytes",
                self.max_prefetch_kbytes.to_string(),
            );
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_settings_win_over_extra() {
        let topics = vec![TopicConfig {
            topic: "t".into(),
            format: RecordFormat::Spans(overtime_parse::spans::SpanFormat::Jsonl),
        }];
        let mut cfg = KafkaSourceConfig::new("b:1", "g", topics);
        cfg.extra.insert("group.id".into(), "other".into());
        cfg.extra.insert("session.timeout.ms".into(), "6000".into());
        cfg.max_prefetch_kbytes = 512;
        let c = cfg.client_config();
        assert_eq!(c.get("session.timeout.ms"), Some("6000"));
        assert_eq!(c.get("auto.offset.reset"), Some("earliest"));
        assert!(matches!(cfg.validate(), Err(ConfigError::OwnedSetting(_))));
        assert_eq!(c.get("queued.max.messages.kbytes"), Some("512"));
        assert_eq!(c.get("group.id"), Some("g"));
    }
}
