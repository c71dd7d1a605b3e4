//! The Kafka source's configuration: brokers, the consumer group, topic →
//! format, batching and the prefetch cap, and how it becomes librdkafka
//! settings.
//!
//! Design rules:
//! - [`KafkaSourceConfig`] is what the source runs with; it holds compiled
//!   [`LogFormat`]s, so it is built by the caller. [`KafkaSourceSettings`]
//!   is its TOML form (serde) and [`KafkaSourceSettings::build`] turns one
//!   into the other, resolving each nginx topic's `log_format` through a
//!   function the caller gives (built-in names, a format body, or a format
//!   looked up in nginx.conf).
//! - The settings that make delivery safe are not negotiable:
//!   `enable.auto.commit=false` and `enable.auto.offset.store=false` are
//!   always set, and an `extra` map that tries to change them (or
//!   `group.id`, `bootstrap.servers`) is an error, never silently applied.
//! - librdkafka's prefetch is capped (`queued.max.messages.kbytes`): an
//!   uncapped prefetch with a large lag is a known out-of-memory.

use overtime_parse::nginx::LogFormat;
use rdkafka::config::ClientConfig;
use serde::Deserialize;
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

/// librdkafka settings the source owns; `extra` may not set them.
const OWNED_KEYS: [&str; 6] = [
    "enable.auto.commit",
    "enable.auto.offset.store",
    "group.id",
    "bootstrap.servers",
    "auto.offset.reset",
    "queued.max.messages.kbytes",
];

/// What the messages of a topic hold: one record per message.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicFormat {
    /// One nginx access-log line per message, written by the gateway layer
    /// `layer` (its name, the `source` of every row) at depth `layer_index`
    /// (0 for the outermost gateway).
    NginxLine {
        format: LogFormat,
        layer: String,
        layer_index: u32,
    },
    /// One JSONL span per message (an OTLP JSON request is read too).
    JsonlSpan,
    /// One protobuf `ExportTraceServiceRequest` per message.
    OtlpProto,
}

impl TopicFormat {
    /// The short name used in logs and the TOML config.
    pub fn name(&self) -> &'static str {
        match self {
            TopicFormat::NginxLine { .. } => "nginx",
            TopicFormat::JsonlSpan => "jsonl",
            TopicFormat::OtlpProto => "otlp-proto",
        }
    }
}

/// One topic and the format of its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub topic: String,
    pub format: TopicFormat,
}

/// Everything the Kafka source runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSourceConfig {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// The consumer group; collectors sharing it share the partitions.
    pub group_id: String,
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
    #[error("kafka: `brokers` is empty")]
    NoBrokers,
    #[error("kafka: `group_id` is empty")]
    NoGroup,
    #[error("kafka: no topics configured")]
    NoTopics,
    #[error("kafka: topic `{0}` is configured twice")]
    DuplicateTopic(String),
    #[error("kafka: `batch_max_messages` must be at least 1")]
    ZeroBatch,
    #[error("kafka: `max_prefetch_kbytes` must be at least 1")]
    ZeroPrefetch,
    #[error("kafka: `{0}` is set by overtime itself and cannot be changed in `extra`")]
    OwnedSetting(String),
    #[error("kafka: topic `{topic}`: {reason}")]
    Topic { topic: String, reason: String },
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
            auto_offset_reset: "earliest".to_string(),
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
    /// use overtime_kafka::{KafkaSourceConfig, TopicConfig, TopicFormat};
    /// let topics = vec![TopicConfig { topic: "spans".into(), format: TopicFormat::JsonlSpan }];
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

/// The TOML form of one topic.
///
/// ```toml
/// [[kafka.topics]]
/// topic = "edge-access"
/// format = "nginx"
/// log_format = "overtime"   # a built-in name or a log_format body
/// layer = "edge"
/// layer_index = 0
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    pub topic: String,
    /// `nginx`, `jsonl` or `otlp-proto`.
    pub format: String,
    /// nginx only: a built-in format name or a `log_format` body.
    pub log_format: Option<String>,
    /// nginx only: the layer's name (default: the topic's name).
    pub layer: Option<String>,
    /// nginx only: the layer's depth, 0 for the outermost (default 0).
    pub layer_index: Option<u32>,
}

fn default_batch_max_messages() -> usize {
    DEFAULT_BATCH_MAX_MESSAGES
}
fn default_batch_max_ms() -> u64 {
    DEFAULT_BATCH_MAX_MS
}
fn default_prefetch() -> u64 {
    DEFAULT_PREFETCH_KBYTES
}
fn default_reset() -> String {
    "earliest".to_string()
}

/// The TOML form of [`KafkaSourceConfig`].
///
/// ```
/// use overtime_kafka::KafkaSourceSettings;
/// let s: KafkaSourceSettings = serde_json::from_value(serde_json::json!({
///     "brokers": "kafka:9092", "group_id": "overtime",
///     "topics": [
///         {"topic": "edge", "format": "nginx", "log_format": "overtime", "layer": "edge"},
///         {"topic": "spans", "format": "otlp-proto"}
///     ],
///     "extra": {"session.timeout.ms": "10000"}
/// })).unwrap();
/// let cfg = s.build(&KafkaSourceSettings::builtin_or_body).unwrap();
/// assert_eq!(cfg.topics[0].format.name(), "nginx");
/// assert_eq!(cfg.max_prefetch_kbytes, 16384);
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSettings {
    pub brokers: String,
    pub group_id: String,
    pub topics: Vec<TopicSettings>,
    #[serde(default = "default_batch_max_messages")]
    pub batch_max_messages: usize,
    #[serde(default = "default_batch_max_ms")]
    pub batch_max_ms: u64,
    #[serde(default = "default_prefetch")]
    pub max_prefetch_kbytes: u64,
    #[serde(default = "default_reset")]
    pub auto_offset_reset: String,
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

impl KafkaSourceSettings {
    /// The default `log_format` resolver: a built-in name (`combined`,
    /// `overtime`), else the text compiled as a format body.
    pub fn builtin_or_body(text: &str) -> Result<LogFormat, String> {
        match LogFormat::builtin(text.trim()) {
            Some(f) => Ok(f),
            None => LogFormat::compile(text).map_err(|e| e.to_string()),
        }
    }

    /// The runnable configuration; `resolve` turns an nginx topic's
    /// `log_format` into a compiled format. The result is validated.
    pub fn build(
        self,
        resolve: &dyn Fn(&str) -> Result<LogFormat, String>,
    ) -> Result<KafkaSourceConfig, ConfigError> {
        let mut topics = Vec::with_capacity(self.topics.len());
        for t in self.topics {
            let bad = |reason: String| ConfigError::Topic {
                topic: t.topic.clone(),
                reason,
            };
            let nginx_only = t.log_format.is_some() || t.layer.is_some() || t.layer_index.is_some();
            let format = match t.format.trim().to_ascii_lowercase().as_str() {
                "nginx" | "nginx-line" | "nginx_line" => {
                    let text = t.log_format.as_deref().unwrap_or(DEFAULT_LOG_FORMAT);
                    TopicFormat::NginxLine {
                        format: resolve(text).map_err(bad)?,
                        layer: t.layer.clone().unwrap_or_else(|| t.topic.clone()),
                        layer_index: t.layer_index.unwrap_or(0),
                    }
                }
                "jsonl" | "jsonl-span" | "jsonl_span" if !nginx_only => TopicFormat::JsonlSpan,
                "otlp-proto" | "otlp_proto" | "otlp" if !nginx_only => TopicFormat::OtlpProto,
                "jsonl" | "jsonl-span" | "jsonl_span" | "otlp-proto" | "otlp_proto" | "otlp" => {
                    return Err(bad(
                        "`log_format`, `layer` and `layer_index` apply to nginx topics only"
                            .to_string(),
                    ));
                }
                other => {
                    return Err(bad(format!(
                        "unknown format `{other}`: expected nginx, jsonl or otlp-proto"
                    )));
                }
            };
            topics.push(TopicConfig {
                topic: t.topic,
                format,
            });
        }
        let cfg = KafkaSourceConfig {
            brokers: self.brokers,
            group_id: self.group_id,
            topics,
            batch_max_messages: self.batch_max_messages,
            batch_max_ms: self.batch_max_ms,
            max_prefetch_kbytes: self.max_prefetch_kbytes,
            auto_offset_reset: self.auto_offset_reset,
            extra: self.extra,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(toml_text: &str) -> KafkaSourceSettings {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn toml_round_trip_with_defaults() {
        let s = settings(
            r#"
            brokers = "127.0.0.1:9092"
            group_id = "overtime"
            [[topics]]
            topic = "edge"
            format = "nginx"
            log_format = "'$status rt=$request_time'"
            layer_index = 1
            [[topics]]
            topic = "spans"
            format = "jsonl"
            "#,
        );
        let cfg = s.build(&KafkaSourceSettings::builtin_or_body).unwrap();
        assert_eq!(cfg.batch_max_messages, DEFAULT_BATCH_MAX_MESSAGES);
        assert_eq!(cfg.batch_max_ms, DEFAULT_BATCH_MAX_MS);
        match &cfg.topics[0].format {
            TopicFormat::NginxLine {
                layer, layer_index, ..
            } => assert_eq!((layer.as_str(), *layer_index), ("edge", 1)),
            other => panic!("{other:?}"),
        }
        assert_eq!(cfg.topics[1].format, TopicFormat::JsonlSpan);
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = r#"
            brokers = "b:9092"
            group_id = "g"
        "#;
        let build = |extra: &str| {
            settings(&format!("{base}{extra}")).build(&KafkaSourceSettings::builtin_or_body)
        };
        assert_eq!(build("topics = []"), Err(ConfigError::NoTopics));
        assert!(matches!(
            build("[[topics]]\ntopic = \"t\"\nformat = \"xml\""),
            Err(ConfigError::Topic { .. })
        ));
        assert!(matches!(
            build("[[topics]]\ntopic = \"t\"\nformat = \"jsonl\"\nlayer = \"edge\""),
            Err(ConfigError::Topic { .. })
        ));
        assert_eq!(
            build(
                "[[topics]]\ntopic = \"t\"\nformat = \"jsonl\"\n[[topics]]\ntopic = \"t\"\nformat = \"otlp-proto\""
            ),
            Err(ConfigError::DuplicateTopic("t".into()))
        );
        assert_eq!(
            build(
                "[[topics]]\ntopic = \"t\"\nformat = \"jsonl\"\n[extra]\n\"enable.auto.commit\" = \"true\""
            ),
            Err(ConfigError::OwnedSetting("enable.auto.commit".into()))
        );
        let mut ok = build("[[topics]]\ntopic = \"t\"\nformat = \"otlp\"").unwrap();
        ok.batch_max_messages = 0;
        assert_eq!(ok.validate(), Err(ConfigError::ZeroBatch));
    }

    #[test]
    fn owned_settings_win_over_extra() {
        let topics = vec![TopicConfig {
            topic: "t".into(),
            format: TopicFormat::JsonlSpan,
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
