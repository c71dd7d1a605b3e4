//! The `[[kafka]]` block of overtime's TOML config: [`KafkaSourceSettings`]
//! and its [`TopicSettings`], read by serde as they are written, and
//! [`KafkaSourceSettings::build`], which makes the
//! [`KafkaSourceConfig`] the source runs with.
//!
//! Design rules:
//! - One TOML type, owned here: `overtime-config` embeds it as it is, so
//!   every key, its default and its documentation are written once, in
//!   this file. Unknown keys are refused (`deny_unknown_fields`): a
//!   misspelt option is an error at load, not a silent default.
//! - A topic's `format` is a [`FormatName`]: every spelling any reader
//!   takes, read by serde (one alias set, in `overtime-parse`); a message
//!   is one record, so every format is taken (OTLP JSON: one request per
//!   message).
//! - [`KafkaSourceSettings::validate`] is what can be checked when the file
//!   is read (no environment, no formats compiled); `build` does the rest
//!   at start and its result is validated
//!   ([`KafkaSourceConfig::validate`]).
//! - What `build` needs from outside comes in as functions, so it is
//!   tested without a process environment or a diagnosis: the environment
//!   lookup (`env:NAME` values of `librdkafka_options`), the `log_format`
//!   resolver, and the gateway-layer index of an nginx topic (layers are
//!   numbered across all sources, in config order, by the caller).
//! - Secrets stay out of errors: a missing `env:NAME` variable is reported
//!   by option and variable name, never with a value.

use crate::config::{
    ConfigError, DEFAULT_AUTO_OFFSET_RESET, DEFAULT_BATCH_MAX_MESSAGES, DEFAULT_BATCH_MAX_MS,
    DEFAULT_GROUP_ID, DEFAULT_LOG_FORMAT, DEFAULT_PREFETCH_KBYTES, KafkaSourceConfig, TopicConfig,
};
use overtime_parse::nginx::LogFormat;
use overtime_parse::record::{FormatName, RecordFormat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One `[[kafka]]` block: a consumer in a consumer group.
///
/// ```toml
/// [[kafka]]
/// brokers = "kafka-1:9092,kafka-2:9092"
/// group_id = "overtime"
/// max_prefetch_kbytes = 16384
/// batch_max_messages = 4096
/// batch_max_ms = 200
/// auto_offset_reset = "earliest"
/// librdkafka_options = { "sasl.password" = "env:OVERTIME_KAFKA_PASSWORD" }
/// [[kafka.topics]]
/// topic = "spans"
/// format = "otlp-proto"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSettings {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// The consumer group; collectors sharing it share the partitions.
    /// Default `overtime`.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// librdkafka's prefetch cap per partition (KiB, default 16384).
    #[serde(default = "default_prefetch")]
    pub max_prefetch_kbytes: u64,
    /// A partition's batch is written at this many messages (default
    /// 4096)…
    #[serde(default = "default_batch_max_messages")]
    pub batch_max_messages: usize,
    /// …or when its oldest message is this old (ms, default 200).
    #[serde(default = "default_batch_max_ms")]
    pub batch_max_ms: u64,
    /// `earliest` (default) or `latest`, for partitions with no committed
    /// offset and no checkpoint.
    #[serde(default = "default_auto_offset_reset")]
    pub auto_offset_reset: String,
    /// More librdkafka settings (`security.protocol`, `sasl.*`,
    /// `session.timeout.ms`…). A value `env:NAME` is read from the
    /// environment variable NAME at start, so passwords stay out of the
    /// file (and of `overtime config`). The settings the source owns
    /// (`group.id`, `enable.auto.commit`…) are refused.
    #[serde(default)]
    pub librdkafka_options: BTreeMap<String, String>,
    /// The topics, each with the format of its messages.
    pub topics: Vec<TopicSettings>,
}

/// One `[[kafka.topics]]` entry.
///
/// ```toml
/// [[kafka.topics]]
/// topic = "edge-access"
/// format = "nginx"
/// log_format = "overtime"   # a built-in name or a log_format body
/// layer = "edge"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// The topic's name, as the brokers know it.
    pub topic: String,
    /// `nginx`, `jsonl`, `otlp-json` or `otlp-proto` (or another
    /// spelling of them, [`FormatName::aliases`]).
    pub format: FormatName,
    /// nginx only: a built-in format name or a `log_format` body
    /// (default `overtime`).
    #[serde(default)]
    pub log_format: Option<String>,
    /// nginx only: the gateway layer's name, the `source` of its rows
    /// (default: the topic's name).
    #[serde(default)]
    pub layer: Option<String>,
}

fn default_group_id() -> String {
    DEFAULT_GROUP_ID.to_string()
}
fn default_prefetch() -> u64 {
    DEFAULT_PREFETCH_KBYTES
}
fn default_batch_max_messages() -> usize {
    DEFAULT_BATCH_MAX_MESSAGES
}
fn default_batch_max_ms() -> u64 {
    DEFAULT_BATCH_MAX_MS
}
fn default_auto_offset_reset() -> String {
    DEFAULT_AUTO_OFFSET_RESET.to_string()
}

impl KafkaSourceSettings {
    /// The default `log_format` resolver: a built-in name (`combined`,
    /// `overtime`), else the text compiled as a format body
    /// ([`LogFormat::named_or_body`], as for a tailed file and
    /// `--log-format`).
    pub fn builtin_or_body(text: &str) -> Result<LogFormat, String> {
        LogFormat::named_or_body(text).map_err(|e| e.to_string())
    }

    /// What is checked when the config is read (the format names were
    /// checked by serde): only nginx topics have `log_format` and `layer`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.topics.iter().find(|t| t.nginx_only_keys_misused()) {
            Some(t) => Err(ConfigError::NginxOnly(t.topic.clone())),
            None => Ok(()),
        }
    }

    /// The configuration the source runs with, validated.
    ///
    /// - `env` looks an environment variable up: each
    ///   `librdkafka_options` value `env:NAME` becomes NAME's value (unset
    ///   or empty: [`ConfigError::MissingEnv`]);
    /// - `resolve` compiles an nginx topic's `log_format`
    ///   (e.g. [`KafkaSourceSettings::builtin_or_body`]);
    /// - `layer_index` gives the gateway layer of an nginx topic its depth
    ///   (0 for the outermost), called once per nginx topic in order.
    ///
    /// ```
    /// use overtime_kafka::KafkaSourceSettings;
    /// use overtime_parse::{record::RecordFormat, spans::SpanFormat};
    /// let s: KafkaSourceSettings = toml::from_str(r#"
    ///     brokers = "kafka:9092"
    ///     librdkafka_options = { "sasl.password" = "env:KAFKA_PW", "session.timeout.ms" = "10000" }
    ///     [[topics]]
    ///     topic = "edge"
    ///     format = "nginx"
    ///     [[topics]]
    ///     topic = "spans"
    ///     format = "otlp-proto"
    /// "#).unwrap();
    /// let env = |name: &str| (name == "KAFKA_PW").then(|| "s3cret".to_string());
    /// let cfg = s
    ///     .build(&env, &KafkaSourceSettings::builtin_or_body, &mut |_layer| 0)
    ///     .unwrap();
    /// assert_eq!(cfg.group_id, "overtime");
    /// assert_eq!(cfg.max_prefetch_kbytes, 16384);
    /// assert_eq!(cfg.extra["sasl.password"], "s3cret");
    /// assert!(matches!(&cfg.topics[0].format, RecordFormat::Nginx(n) if n.layer == "edge"));
    /// assert_eq!(cfg.topics[1].format, RecordFormat::Spans(SpanFormat::OtlpProto));
    /// ```
    pub fn build(
        self,
        env: &dyn Fn(&str) -> Option<String>,
        resolve: &dyn Fn(&str) -> Result<LogFormat, String>,
        layer_index: &mut dyn FnMut(&str) -> u32,
    ) -> Result<KafkaSourceConfig, ConfigError> {
        let extra = expand_env(self.librdkafka_options, env)?;
        let mut topics = Vec::with_capacity(self.topics.len());
        for t in self.topics {
            topics.push(t.build(resolve, layer_index)?);
        }
        let cfg = KafkaSourceConfig {
            brokers: self.brokers,
            group_id: self.group_id,
            topics,
            batch_max_messages: self.batch_max_messages,
            batch_max_ms: self.batch_max_ms,
            max_prefetch_kbytes: self.max_prefetch_kbytes,
            auto_offset_reset: self.auto_offset_reset,
            extra,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl TopicSettings {
    fn nginx_only_keys_misused(&self) -> bool {
        self.format != FormatName::Nginx && (self.log_format.is_some() || self.layer.is_some())
    }

    fn build(
        self,
        resolve: &dyn Fn(&str) -> Result<LogFormat, String>,
        layer_index: &mut dyn FnMut(&str) -> u32,
    ) -> Result<TopicConfig, ConfigError> {
        let bad = |reason: String| ConfigError::Topic {
            topic: self.topic.clone(),
            reason,
        };
        if self.nginx_only_keys_misused() {
            return Err(ConfigError::NginxOnly(self.topic.clone()));
        }
        let format = match self.format.span_format() {
            Some(spans) => RecordFormat::Spans(spans),
            None => {
                let text = self.log_format.as_deref().unwrap_or(DEFAULT_LOG_FORMAT);
                let layer = self.layer.clone().unwrap_or_else(|| self.topic.clone());
                let format = resolve(text).map_err(bad)?;
                RecordFormat::nginx(format, &layer, layer_index(&layer))
            }
        };
        Ok(TopicConfig {
            topic: self.topic,
            format,
        })
    }
}

/// `librdkafka_options` with each `env:NAME` value read through `env`; a
/// missing or empty variable is an error naming the option and the
/// variable, never the value.
fn expand_env(
    options: BTreeMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    options
        .into_iter()
        .map(|(k, v)| match v.strip_prefix("env:") {
            Some(name) => match env(name).filter(|v| !v.is_empty()) {
                Some(value) => Ok((k, value)),
                None => Err(ConfigError::MissingEnv {
                    variable: name.to_string(),
                    option: k,
                }),
            },
            None => Ok((k, v)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use overtime_parse::spans::SpanFormat;

    fn settings(toml_text: &str) -> KafkaSourceSettings {
        toml::from_str(toml_text).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// Builds with no environment and layers numbered from `first`.
    fn build_from(s: KafkaSourceSettings, first: u32) -> Result<KafkaSourceConfig, ConfigError> {
        let mut next = first;
        s.build(&no_env, &KafkaSourceSettings::builtin_or_body, &mut |_| {
            next += 1;
            next - 1
        })
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
            [[topics]]
            topic = "spans"
            format = "jsonl"
            "#,
        );
        // One gateway layer (a tailed file, say) comes before this topic.
        let cfg = build_from(s, 1).unwrap();
        assert_eq!(cfg.batch_max_messages, DEFAULT_BATCH_MAX_MESSAGES);
        assert_eq!(cfg.batch_max_ms, DEFAULT_BATCH_MAX_MS);
        match &cfg.topics[0].format {
            RecordFormat::Nginx(n) => assert_eq!((n.layer.as_str(), n.layer_index), ("edge", 1)),
            other => panic!("{other:?}"),
        }
        assert_eq!(cfg.topics[1].format, RecordFormat::Spans(SpanFormat::Jsonl));
    }

    #[test]
    fn defaults_are_those_of_the_runtime_config() {
        let s = settings("brokers = \"b:9092\"\ntopics = []\n");
        assert_eq!(s.group_id, "overtime");
        let runtime = KafkaSourceConfig::new("b:9092", "overtime", Vec::new());
        assert_eq!(s.max_prefetch_kbytes, runtime.max_prefetch_kbytes);
        assert_eq!(s.batch_max_messages, runtime.batch_max_messages);
        assert_eq!(s.batch_max_ms, runtime.batch_max_ms);
        assert_eq!(s.auto_offset_reset, runtime.auto_offset_reset);
        assert!(s.librdkafka_options.is_empty());
        assert_eq!(
            (s.max_prefetch_kbytes, s.batch_max_messages, s.batch_max_ms),
            (16384, 4096, 200)
        );
        assert_eq!(s.auto_offset_reset, "earliest");
    }

    #[test]
    fn a_full_block_as_documented() {
        // docs/kafka.md's example, every key written.
        let s = settings(
            r#"
            brokers = "kafka-1:9092,kafka-2:9092"
            group_id = "collectors"
            batch_max_messages = 1000
            batch_max_ms = 50
            max_prefetch_kbytes = 4096
            auto_offset_reset = "latest"
            librdkafka_options = { "security.protocol" = "SASL_SSL", "sasl.username" = "overtime", "sasl.password" = "env:OVERTIME_KAFKA_PASSWORD" }
            [[topics]]
            topic = "edge-access"
            format = "nginx"
            log_format = "overtime"
            layer = "edge"
            [[topics]]
            topic = "ingress-access"
            format = "nginx"
            [[topics]]
            topic = "spans"
            format = "otlp-proto"
            "#,
        );
        s.validate().unwrap();
        let env = |n: &str| (n == "OVERTIME_KAFKA_PASSWORD").then(|| "pw".to_string());
        let mut layers = Vec::new();
        let cfg = s
            .build(&env, &KafkaSourceSettings::builtin_or_body, &mut |l| {
                layers.push(l.to_string());
                layers.len() as u32 - 1
            })
            .unwrap();
        assert_eq!(layers, ["edge", "ingress-access"]);
        assert_eq!(cfg.group_id, "collectors");
        assert_eq!(
            (
                cfg.batch_max_messages,
                cfg.batch_max_ms,
                cfg.max_prefetch_kbytes
            ),
            (1000, 50, 4096)
        );
        assert_eq!(cfg.auto_offset_reset, "latest");
        assert_eq!(cfg.extra["sasl.password"], "pw");
        assert_eq!(cfg.extra["security.protocol"], "SASL_SSL");
        match &cfg.topics[1].format {
            RecordFormat::Nginx(n) => {
                assert_eq!((n.layer.as_str(), n.layer_index), ("ingress-access", 1))
            }
            other => panic!("{other:?}"),
        }
        let c = cfg.client_config();
        assert_eq!(c.get("queued.max.messages.kbytes"), Some("4096"));
        assert_eq!(c.get("auto.offset.reset"), Some("latest"));
    }

    #[test]
    fn a_missing_env_variable_is_named_and_no_value_is_shown() {
        let s = settings(
            r#"
            brokers = "b:9092"
            librdkafka_options = { "sasl.username" = "overtime", "sasl.password" = "env:KAFKA_PW" }
            [[topics]]
            topic = "t"
            format = "jsonl"
            "#,
        );
        let e = build_from(s.clone(), 0).unwrap_err();
        assert_eq!(
            e,
            ConfigError::MissingEnv {
                option: "sasl.password".into(),
                variable: "KAFKA_PW".into()
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("KAFKA_PW") && msg.contains("sasl.password"),
            "{msg}"
        );
        // An empty variable is missing too; an error never holds a value.
        let empty = |_: &str| Some(String::new());
        assert!(matches!(
            s.clone()
                .build(&empty, &KafkaSourceSettings::builtin_or_body, &mut |_| 0),
            Err(ConfigError::MissingEnv { .. })
        ));
        // A value that makes the config invalid is not echoed either.
        let mut bad = s;
        bad.librdkafka_options
            .insert("group.id".into(), "env:GROUP".into());
        let env = |n: &str| Some(format!("secret-of-{n}"));
        let msg = bad
            .build(&env, &KafkaSourceSettings::builtin_or_body, &mut |_| 0)
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("secret-of"), "{msg}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        for (text, key) in [
            ("brokers = \"b\"\ntopics = []\nextra = {}\n", "extra"),
            (
                "brokers = \"b\"\ntopics = []\nmax_prefetch_kb = 1\n",
                "max_prefetch_kb",
            ),
            (
                "brokers = \"b\"\n[[topics]]\ntopic = \"t\"\nformat = \"nginx\"\nlayer_index = 1\n",
                "layer_index",
            ),
        ] {
            let e = toml::from_str::<KafkaSourceSettings>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{e}");
        }
        let e = toml::from_str::<KafkaSourceSettings>("topics = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("brokers"), "{e}");
    }

    #[test]
    fn formats_are_checked_at_load() {
        let e = toml::from_str::<KafkaSourceSettings>(
            "brokers = \"b\"\n[[topics]]\ntopic = \"t\"\nformat = \"xml\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown format `xml`: expected nginx, jsonl, otlp-json or otlp-proto"),
            "{e}"
        );
        let s = settings(
            "brokers = \"b\"\n[[topics]]\ntopic = \"t\"\nformat = \"jsonl\"\nlayer = \"edge\"\n",
        );
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "kafka topic t: `log_format` and `layer` apply to nginx topics only"
        );
    }

    #[test]
    fn every_spelling_of_every_format_is_a_topic_format() {
        for f in FormatName::ALL {
            for alias in f.aliases() {
                let s = settings(&format!(
                    "brokers = \"b\"\n[[topics]]\ntopic = \"t\"\nformat = \"{}\"\n",
                    alias.replace('-', "_")
                ));
                s.validate().unwrap();
                let cfg = build_from(s, 0).unwrap();
                assert_eq!(cfg.topics[0].format.format_name(), f, "{alias}");
            }
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = r#"
            brokers = "b:9092"
            group_id = "g"
        "#;
        let build = |extra: &str| build_from(settings(&format!("{base}{extra}")), 0);
        assert_eq!(build("topics = []"), Err(ConfigError::NoTopics));
        assert_eq!(
            build("[[topics]]\ntopic = \"t\"\nformat = \"jsonl\"\nlayer = \"edge\""),
            Err(ConfigError::NginxOnly("t".into()))
        );
        assert!(matches!(
            build("[[topics]]\ntopic = \"t\"\nformat = \"nginx\"\nlog_format = \"'$status\""),
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
                "librdkafka_options = { \"enable.auto.commit\" = \"true\" }\n[[topics]]\ntopic = \"t\"\nformat = \"jsonl\""
            ),
            Err(ConfigError::OwnedSetting("enable.auto.commit".into()))
        );
        let mut ok = build("[[topics]]\ntopic = \"t\"\nformat = \"otlp\"").unwrap();
        ok.batch_max_messages = 0;
        assert_eq!(ok.validate(), Err(ConfigError::ZeroBatch));
    }
}
