//! The sources of `overtime serve`, built from the config's one list of
//! them ([`Config::sources`]): tailed files, Kafka consumers, model-server
//! scrapes and the OTLP receivers, and the diagnosis over their gateway
//! layers — which `overtime query` uses too, to diagnose what a collector
//! stored the way the collector did.
//!
//! Design rules:
//! - One list, one loop: [`plan`] turns each
//!   [`SourceSettings`] into a [`Source`] with its section's own
//!   `build()`, and `serve` binds then starts them in order
//!   ([`crate::start`]); nothing here copies a field.
//! - A new kind of source is a variant of `SourceSettings` (its settings
//!   type owned by its crate), of [`Source`] here, and its arms in
//!   [`plan`] and `start.rs`.
//! - nginx files and nginx topics are gateway layers, numbered by
//!   [`layer_index`] (the one function that orders layers, shared with
//!   `overtime diagnose`): outermost first, in the order of the list, a
//!   layer added on first sight.

use overtime_config::{Config, SourceSettings};
use overtime_diagnose::{DiagnoseConfig, layer_index};
use overtime_ingest::file_tail::{FileSettingsError, FileSourceConfig};
use overtime_ingest::otlp::OtlpSettings;
use overtime_ingest::scrape::ModelServerSettings;
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

/// A source built from its settings, ready to be started.
pub(crate) enum Source {
    /// A file to tail.
    File(FileSourceConfig),
    /// A Kafka consumer.
    Kafka(KafkaSourceConfig),
    /// A model server to scrape.
    ModelServer(ModelServerSettings),
    /// The OTLP receivers (their token comes from the secrets at start).
    Otlp(OtlpSettings),
}

/// The sources as resolved from the config, before anything starts.
pub(crate) struct Plan {
    pub sources: Vec<Source>,
    pub diagnose: DiagnoseConfig,
}

/// Builds every source of `cfg` (reading nginx.conf files and the
/// environment's `env:NAME` values) and the diagnosis over their layers.
pub(crate) fn plan(cfg: &Config) -> Result<Plan, SourceError> {
    let mut layers = Vec::new();
    let env = |name: &str| std::env::var(name).ok();
    let mut sources = Vec::new();
    for s in cfg.sources() {
        sources.push(match s {
            SourceSettings::File(f) => {
                Source::File(f.build(&mut |name, timeout| layer_index(&mut layers, name, timeout))?)
            }
            SourceSettings::Kafka(k) => {
                let (brokers, group_id) = (k.brokers.clone(), k.group_id.clone());
                let built = k
                    .build(&env, &KafkaSourceSettings::builtin_or_body, &mut |name| {
                        layer_index(&mut layers, name, None)
                    })
                    .map_err(|source| SourceError::Kafka {
                        brokers,
                        group_id,
                        source,
                    })?;
                Source::Kafka(built)
            }
            SourceSettings::ModelServer(m) => Source::ModelServer(m),
            SourceSettings::Otlp(o) => Source::Otlp(o),
        });
    }
    Ok(Plan {
        sources,
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
            [[source]]
            type = "file"
            path = "/var/log/nginx/mesh.log"
            kind = "nginx"
            format = "overtime"
            "#,
        )
        .unwrap();
        let p = plan(&cfg).unwrap();
        let names: Vec<_> = p.diagnose.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["edge", "ingress-access", "mesh"]);
        assert_eq!(p.diagnose.layer_timeout_ms("edge"), Some(60_000.0));
        let kafka = p
            .sources
            .iter()
            .find_map(|s| match s {
                Source::Kafka(k) => Some(k),
                _ => None,
            })
            .unwrap();
        let depth = |t: usize| match &kafka.topics[t].format {
            overtime_parse::record::RecordFormat::Nginx(n) => n.layer_index,
            other => panic!("{other:?}"),
        };
        assert_eq!((depth(0), depth(1)), (1, 0));
        let kinds: Vec<&str> = p
            .sources
            .iter()
            .map(|s| match s {
                Source::File(_) => "file",
                Source::Kafka(_) => "kafka",
                Source::ModelServer(_) => "model_server",
                Source::Otlp(_) => "otlp",
            })
            .collect();
        assert_eq!(kinds, ["file", "file", "kafka", "otlp", "file"]);
    }
}
