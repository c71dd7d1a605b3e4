//! The sources of `overtime serve`, resolved from the config: tailed
//! files and Kafka topics. nginx files and nginx topics are gateway layers;
//! their order in the config is the layer order (outermost first).

use crate::conf_timeouts::read_timeout_ms;
use crate::diagnose_cmd::layer_name_of;
use anyhow::{Context, Result};
use overtime_diagnose::LayerConfig;
use overtime_ingest::file_tail::FileKind;
use overtime_kafka::{KafkaSourceConfig, KafkaSourceSettings, TopicSettings};
use overtime_parse::nginx::LogFormat;

/// The index of a gateway layer, added on first sight (outermost first,
/// in config order).
fn layer_index(layers: &mut Vec<LayerConfig>, layer: &str, timeout: Option<f64>) -> u32 {
    match layers.iter().position(|l| l.name == layer) {
        Some(i) => i as u32,
        None => {
            layers.push(LayerConfig {
                name: layer.to_string(),
                read_timeout_ms: timeout,
            });
            (layers.len() - 1) as u32
        }
    }
}

/// Resolves a `[[kafka]]` block into the consumer's configuration; nginx
/// topics are gateway layers like tailed files.
pub fn kafka_source(
    k: &overtime_config::KafkaSource,
    layers: &mut Vec<LayerConfig>,
) -> Result<KafkaSourceConfig> {
    let topics = k
        .topics
        .iter()
        .map(|t| {
            let nginx = matches!(t.format.as_str(), "nginx" | "nginx-line" | "nginx_line");
            let layer = nginx.then(|| t.layer.clone().unwrap_or_else(|| t.topic.clone()));
            TopicSettings {
                topic: t.topic.clone(),
                format: t.format.clone(),
                log_format: if nginx {
                    Some(
                        t.log_format
                            .clone()
                            .unwrap_or_else(|| overtime_kafka::DEFAULT_LOG_FORMAT.into()),
                    )
                } else {
                    None
                },
                layer_index: layer.as_deref().map(|l| layer_index(layers, l, None)),
                layer,
            }
        })
        .collect();
    let settings = KafkaSourceSettings {
        brokers: k.brokers.clone(),
        group_id: k.group_id.clone(),
        topics,
        batch_max_messages: k
            .batch_max_messages
            .unwrap_or(overtime_kafka::DEFAULT_BATCH_MAX_MESSAGES),
        batch_max_ms: k
            .batch_max_ms
            .unwrap_or(overtime_kafka::DEFAULT_BATCH_MAX_MS),
        max_prefetch_kbytes: k
            .max_prefetch_kbytes
            .unwrap_or(overtime_kafka::DEFAULT_PREFETCH_KBYTES),
        auto_offset_reset: k.auto_offset_reset.clone(),
        extra: librdkafka_options(&k.librdkafka_options, |n| std::env::var(n).ok())?,
    };
    settings
        .build(&KafkaSourceSettings::builtin_or_body)
        .with_context(|| format!("kafka source {} (group {})", k.brokers, k.group_id))
}

/// `[kafka.librdkafka_options]` with each `env:NAME` value read from the
/// environment (`env` looks a name up); a missing variable is an error
/// naming it, never the value.
pub fn librdkafka_options(
    options: &std::collections::BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<std::collections::BTreeMap<String, String>> {
    options
        .iter()
        .map(|(k, v)| match v.strip_prefix("env:") {
            Some(name) => env(name)
                .filter(|v| !v.is_empty())
                .map(|v| (k.clone(), v))
                .ok_or_else(|| {
                    anyhow::anyhow!("kafka option {k}: environment variable {name} is not set")
                }),
            None => Ok((k.clone(), v.clone())),
        })
        .collect()
}

/// Resolves a `[[file]]` block into what the tail needs.
pub fn file_kind(
    f: &overtime_config::FileSource,
    layers: &mut Vec<LayerConfig>,
) -> Result<FileKind> {
    Ok(match f.kind.as_str() {
        "jsonl" => FileKind::Jsonl,
        "otlp-json" => FileKind::OtlpJson,
        _ => {
            let conf = match &f.nginx_conf {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                ),
                None => None,
            };
            let format = match (&f.format, &conf, &f.format_name) {
                (Some(body), _, _) => LogFormat::builtin(body)
                    .map(Ok)
                    .unwrap_or_else(|| LogFormat::compile(body))?,
                (None, Some(text), Some(name)) => LogFormat::from_nginx_conf(text, name)?,
                _ => anyhow::bail!("file {}: no log format", f.path.display()),
            };
            let layer = f.layer.clone().unwrap_or_else(|| layer_name_of(&f.path));
            let timeout = f
                .read_timeout_ms
                .or_else(|| conf.as_deref().and_then(read_timeout_ms));
            let layer_index = layer_index(layers, &layer, timeout);
            FileKind::Nginx {
                format,
                layer,
                layer_index,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::librdkafka_options;

    #[test]
    fn env_values_are_read_from_the_environment_and_a_missing_one_is_named() {
        let opts = [
            ("sasl.username".to_string(), "overtime".to_string()),
            ("sasl.password".to_string(), "env:KAFKA_PW".to_string()),
        ]
        .into();
        let got =
            librdkafka_options(&opts, |n| (n == "KAFKA_PW").then(|| "s3cret".into())).unwrap();
        assert_eq!(got["sasl.password"], "s3cret");
        assert_eq!(got["sasl.username"], "overtime");
        let e = librdkafka_options(&opts, |_| None).unwrap_err().to_string();
        assert!(e.contains("KAFKA_PW") && e.contains("sasl.password"), "{e}");
    }
}
