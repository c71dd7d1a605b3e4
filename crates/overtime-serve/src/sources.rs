//! The sources of `overtime serve`, built from their own settings types:
//! tailed files (`[[file]]`) and Kafka consumers (`[[kafka]]`), and the
//! diagnosis over their gateway layers — which `overtime query` uses too,
//! to diagnose what a collector stored the way the collector did.
//!
//! Design rules:
//! - Wiring only: each section's `build()` (in the crate that owns it)
//!   reads its fields; nothing here copies one.
//! - nginx files and nginx topics are gateway layers, numbered by
//!   [`layer_index`] (the one function that orders layers, shared with
//!   `overtime diagnose`): outermost first, in config order, files before
//!   topics, a layer added on first sight.

use overtime_config::Config;
use overtime_diagnose::{DiagnoseConfig, layer_index};
use overtime_ingest::file_tail::{FileSettingsError, FileSourceConfig};
use overtime_kafka::{KafkaSourceConfig, KafkaSourceSettings};

/// A source of the config that cannot be built (an nginx.conf that cannot
/// be read, an unknown format, an `env:NAME` not set).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A `[[file]]` source: its nginx.conf or format could not be resolved.
    #[error(transparent)]
    File(#[from] FileSettingsError),
    /// A `[[kafka]]` source whose settings do not build; the message names
    /// it by brokers and consumer group, the cause says what is wrong.
    #[error("kafka source {brokers} (group {group_id})")]
    Kafka {
        /// The source's `brokers`, as written in the config.
        brokers: String,
        /// The source's consumer group id.
        group_id: String,
        /// What is wrong with its settings.
        #[source]
        source: overtime_kafka::ConfigError,
    },
}

/// The sources as resolved from the config, before anything starts.
pub(crate) struct Plan {
    pub files: Vec<FileSourceConfig>,
    pub kafka: Vec<KafkaSourceConfig>,
    pub diagnose: DiagnoseConfig,
}

/// Builds every source of `cfg` (reading nginx.conf files and the
/// environment's `env:NAME` values) and the diagnosis over their layers.
pub(crate) fn plan(cfg: &Config) -> Result<Plan, SourceError> {
    let mut layers = Vec::new();
    let mut files = Vec::with_capacity(cfg.files.len());
    for f in &cfg.files {
        files.push(
            f.clone()
                .build(&mut |name, timeout| layer_index(&mut layers, name, timeout))?,
        );
    }
    let env = |name: &str| std::env::var(name).ok();
    let mut kafka = Vec::with_capacity(cfg.kafka.len());
    for k in &cfg.kafka {
        let built = k
            .clone()
            .build(&env, &KafkaSourceSettings::builtin_or_body, &mut |name| {
                layer_index(&mut layers, name, None)
            })
            .map_err(|source| SourceError::Kafka {
                brokers: k.brokers.clone(),
                group_id: k.group_id.clone(),
                source,
            })?;
        kafka.push(built);
    }
    Ok(Plan {
        files,
        kafka,
        diagnose: cfg.diagnose.build(layers),
    })
}

/// The diagnosis configuration the collector runs with (gateway layers
/// from the file and Kafka sources, in config order).
pub fn diagnose_config(cfg: &Config) -> Result<DiagnoseConfig, SourceError> {
    Ok(plan(cfg)?.diagnose)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_numbered_across_files_and_topics_in_config_order() {
        let cfg = Config::from_toml_str(
            r#"
            [[file]]
            path = "/var/log/nginx/edge.log"
            kind = "nginx"
            format = "overtime"
            read_timeout_ms = 60000
            [[file]]
            path = "spans.jsonl"
            kind = "jsonl"
            [[kafka]]
            brokers = "127.0.0.1:9092"
            [[kafka.topics]]
            topic = "ingress-access"
            format = "nginx"
            [[kafka.topics]]
            topic = "edge-again"
            format = "nginx"
            layer = "edge"
            [[kafka.topics]]
            topic = "spans"
            format = "otlp-proto"
            "#,
        )
        .unwrap();
        let p = plan(&cfg).unwrap();
        let names: Vec<_> = p.diagnose.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["edge", "ingress-access"]);
        assert_eq!(p.diagnose.layer_timeout_ms("edge"), Some(60_000.0));
        let depth = |t: usize| match &p.kafka[0].topics[t].format {
            overtime_parse::record::RecordFormat::Nginx(n) => n.layer_index,
            other => panic!("{other:?}"),
        };
        assert_eq!((depth(0), depth(1)), (1, 0));
        assert_eq!(p.files.len(), 2);
    }
}
