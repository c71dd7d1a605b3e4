//! The sources of the config as one tagged list: [`SourceSettings`], one
//! variant per kind of source, each holding its component's own settings
//! type, and [`Config::sources`](crate::Config::sources), every source of
//! the file in order.
//!
//! Design rules:
//! - The sections users write stay as they are: `[[file]]`, `[[kafka]]`,
//!   `[[model_server]]` and `[otlp]` are read as before and listed here in
//!   that order. A source may also be written as `[[source]]` with a
//!   `type` (`file`, `kafka`, `model_server`) and its settings beside it;
//!   those come after, in file order.
//! - A new kind of source is one variant here (its settings type is its
//!   crate's) and its arm where `overtime-serve` starts sources; nothing
//!   else changes, and `[[source]] type = "…"` reads it at once.
//!
//! ```
//! use overtime_config::{Config, SourceSettings};
//! let cfg = Config::from_toml_str(r#"
//!     [[file]]
//!     path = "spans.jsonl"
//!     kind = "jsonl"
//!     [[source]]
//!     type = "model_server"
//!     url = "http://vllm-0:8000/metrics"
//! "#).unwrap();
//! let kinds: Vec<&str> = cfg.sources().iter().map(SourceSettings::kind).collect();
//! assert_eq!(kinds, ["file", "otlp", "model_server"]);
//! ```

use crate::{FileSourceSettings, KafkaSourceSettings, ModelServerSettings, OtlpSettings};
use serde::{Deserialize, Serialize};

/// One source of the config, in its component's own settings type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SourceSettings {
    /// A file to tail (`[[file]]`).
    File(FileSourceSettings),
    /// A Kafka consumer (`[[kafka]]`).
    Kafka(KafkaSourceSettings),
    /// A model server's `/metrics` to scrape (`[[model_server]]`).
    ModelServer(ModelServerSettings),
    /// The OTLP/HTTP and OTLP/gRPC receivers (`[otlp]`: one per config,
    /// its token read with the other secrets).
    #[serde(skip)]
    Otlp(OtlpSettings),
}

impl SourceSettings {
    /// `file`, `kafka`, `model_server` or `otlp`: its `type`, and the
    /// `source` label of its writes in `/metrics` (the OTLP receivers
    /// split theirs into `otlp_http` and `otlp_grpc`).
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSettings::File(_) => "file",
            SourceSettings::Kafka(_) => "kafka",
            SourceSettings::ModelServer(_) => "model_server",
            SourceSettings::Otlp(_) => "otlp",
        }
    }

    /// What can be checked when the config is read, as each section's
    /// own `validate()` says it.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SourceSettings::File(f) => f.validate().map_err(|e| e.to_string()),
            SourceSettings::Kafka(k) => k.validate().map_err(|e| e.to_string()),
            SourceSettings::ModelServer(m) => m.validate().map_err(|e| e.to_string()),
            SourceSettings::Otlp(_) => Ok(()),
        }
    }
}

impl crate::Config {
    /// Every source of the config, in order: the `[[file]]` blocks, the
    /// `[[kafka]]` blocks, the `[[model_server]]` blocks, `[otlp]`, then
    /// the `[[source]]` blocks. Gateway layers are numbered in this order.
    pub fn sources(&self) -> Vec<SourceSettings> {
        let files = self.files.iter().cloned().map(SourceSettings::File);
        let kafka = self.kafka.iter().cloned().map(SourceSettings::Kafka);
        let scraped = self
            .model_servers
            .iter()
            .cloned()
            .map(SourceSettings::ModelServer);
        files
            .chain(kafka)
            .chain(scraped)
            .chain([SourceSettings::Otlp(self.otlp.clone())])
            .chain(self.source.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, SourceSettings};

    #[test]
    fn a_source_block_reads_as_its_section_would() {
        let sections = Config::from_toml_str(
            r#"
            [[file]]
            path = "/var/log/nginx/edge.log"
            kind = "nginx"
            format = "overtime"
            [[kafka]]
            brokers = "b:9092"
            [[kafka.topics]]
            topic = "spans"
            format = "otlp-proto"
            "#,
        )
        .unwrap();
        let tagged = Config::from_toml_str(
            r#"
            [[source]]
            type = "file"
            path = "/var/log/nginx/edge.log"
            kind = "nginx"
            format = "overtime"
            [[source]]
            type = "kafka"
            brokers = "b:9092"
            [[source.topics]]
            topic = "spans"
            format = "otlp-proto"
            "#,
        )
        .unwrap();
        let without_otlp = |c: &Config| {
            c.sources()
                .into_iter()
                .filter(|s| s.kind() != "otlp")
                .collect::<Vec<_>>()
        };
        assert_eq!(without_otlp(&sections), without_otlp(&tagged));
        assert!(matches!(&tagged.sources()[0], SourceSettings::Otlp(_)));
    }

    #[test]
    fn a_source_block_is_checked_like_its_section() {
        for (text, says) in [
            (
                "[[source]]\ntype = \"file\"\npath = \"a.log\"\nkind = \"nginx\"\n",
                "needs `format`",
            ),
            (
                "[[source]]\ntype = \"ftp\"\nurl = \"x\"\n",
                "unknown variant `ftp`",
            ),
            (
                "[[source]]\ntype = \"otlp\"\nhttp_listen = \"\"\n",
                "unknown variant `otlp`",
            ),
            (
                "[[source]]\ntype = \"model_server\"\nurl = \"http://m/metrics\"\nintervall_ms = 5\n",
                "intervall_ms",
            ),
        ] {
            let e = Config::from_toml_str(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
