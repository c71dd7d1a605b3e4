//! # overtime-config
//!
//! The one configuration of `overtime serve`, read from one TOML file and
//! passed down. Every option has a default: `overtime serve` with no file
//! runs the embedded default ([`DEFAULT_TOML`], printed by
//! `overtime config`), a local data dir and no external service. Secrets
//! (the API token, Jira credentials) are never in the file: the file names
//! the environment variable that holds them, and [`Secrets::from_env`]
//! reads them in one place.
//!
//! Design rules:
//! - Each section is the type of the component it configures, embedded as
//!   it is (as Vector's components own theirs): `[store]` is
//!   [`StoreConfig`], `[otlp]` [`OtlpSettings`], `[[file]]`
//!   [`FileSourceSettings`], `[[kafka]]` [`KafkaSourceSettings`],
//!   `[[model_server]]` [`ModelServerSettings`],
//!   `[diagnose]` [`DiagnoseSettings`], `[cluster]` [`ClusterConfig`], and `[sql]`, `[slo]`, `[alerts]`,
//!   `[jira]` and `[[channels]]` likewise; the sources are also one tagged
//!   list, [`Config::sources`] ([`SourceSettings`]), over those sections and
//!   any `[[source]]` blocks. Each key, its default and its documentation are
//!   written once, in the owning crate; the binary calls the sections'
//!   `build()` and never copies a field from one struct to another.
//! - Loading checks what can be checked without the environment or the
//!   disk (each section's `validate()`); `build()` does the rest at start.
//!
//! ```
//! let cfg = overtime_config::Config::from_toml_str("[server]\nlisten = \"127.0.0.1:9090\"\n").unwrap();
//! assert_eq!(cfg.server.listen, "127.0.0.1:9090");
//! assert_eq!(cfg.store.memtable_bytes, 256 * 1024 * 1024); // defaulted
//! ```

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use overtime_diagnose::DiagnoseSettings;
pub use overtime_ingest::file_tail::FileSourceSettings;
pub use overtime_ingest::otlp::OtlpSettings;
pub use overtime_ingest::scrape::ModelServerSettings;
pub use overtime_kafka::KafkaSourceSettings;
pub use overtime_parse::record::FormatName;
pub use overtime_server::ClusterConfig;
pub use overtime_server::SqlConfig;
pub use overtime_slo::SloConfig;
pub use overtime_store::StoreConfig;
pub use sources::SourceSettings;

mod sources;

/// The embedded default configuration, every option written out.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

/// Why a configuration was refused; `overtime serve` prints it and exits
/// before starting anything.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable).
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file as given.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The text is not TOML of this shape: a syntax error, an unknown key
    /// (every section refuses keys it does not know), a wrong type.
    #[error("config {path}: {message}")]
    Parse {
        /// The file, or `<string>` for [`Config::from_toml_str`].
        path: String,
        /// The TOML reader's message, naming the key and line.
        message: String,
    },
    /// Well-formed, but a section's `validate()` refused a value (the
    /// message names the section and the key).
    #[error("config: {0}")]
    Invalid(String),
}

/// The whole configuration of `overtime serve`: one field per TOML
/// section, each the owning component's own type, every one defaulted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: where the API, UI and `/metrics` listen, and the token.
    pub server: ServerConfig,
    /// The store's own config type (docs/store.md).
    pub store: StoreConfig,
    /// The OTLP receivers' settings (docs/ingest.md).
    pub otlp: OtlpSettings,
    /// When live traces get their verdicts, and the engine's knobs.
    pub diagnose: DiagnoseSettings,
    /// Bounds of `POST /api/sql` and `overtime query` (timeout, rows, memory).
    pub sql: SqlConfig,
    /// The other collectors sharing the bucket, asked for their unflushed
    /// rows and live verdicts (docs/deploy.md).
    pub cluster: ClusterConfig,
    /// SLIs, SLOs, breakers and alert thresholds (docs/metrics.md).
    pub slo: SloConfig,
    /// Where the collector sends its own alerts (Alertmanager v2, webhook).
    pub alerts: overtime_alert::AlertConfig,
    /// Deduplicated Jira tickets for new incidents (docs/jira.md).
    pub jira: overtime_jira::JiraConfig,
    /// The alert channels (Slack, PagerDuty), each entry its channel's own
    /// config type (docs/channels.md).
    pub channels: Vec<overtime_notify::ChannelConfig>,
    /// Files to tail: the file tail's own settings type.
    #[serde(rename = "file")]
    pub files: Vec<FileSourceSettings>,
    /// Kafka consumers: the Kafka source's own settings type (docs/kafka.md).
    #[serde(rename = "kafka")]
    pub kafka: Vec<KafkaSourceSettings>,
    /// Model servers' Prometheus endpoints to scrape: the scraper's own
    /// settings type (docs/inputs.md, "Model-server metrics").
    #[serde(rename = "model_server")]
    pub model_servers: Vec<ModelServerSettings>,
    /// More sources, each `[[source]]` with its `type` (`file`, `kafka`,
    /// `model_server`) and its settings; [`Config::sources`] lists them
    /// after the sections above.
    pub source: Vec<SourceSettings>,
}

impl Config {
    /// Parses and validates TOML text (a test, or a config built in
    /// memory); errors name the file as `<string>`.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Self::parse_named(text, "<string>")
    }

    fn parse_named(text: &str, path: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads `path`; relative `store.data_dir` and file paths stay relative
    /// to the working directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            source: e,
        })?;
        Self::parse_named(&text, &path.display().to_string())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.slo.validate().map_err(ConfigError::Invalid)?;
        self.alerts
            .validate()
            .map_err(|e| ConfigError::Invalid(format!("[alerts] {e}")))?;
        if self.jira.enabled {
            self.jira
                .validate()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        overtime_notify::validate_channels(&self.channels).map_err(ConfigError::Invalid)?;
        self.store.validate().map_err(ConfigError::Invalid)?;
        self.sql.postgres.validate().map_err(ConfigError::Invalid)?;
        for s in self.sources() {
            s.validate().map_err(ConfigError::Invalid)?;
        }
        Ok(())
    }
}

/// `[server]`: the HTTP listener of the API, the UI and `/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The `host:port` the API, UI and `/metrics` listen on (default
    /// `127.0.0.1:8080`).
    pub listen: String,
    /// The name of the environment variable holding the bearer token (not
    /// the token itself); the variable unset or empty: no auth.
    /// `/healthz` and `/readyz` never need it.
    pub token_env: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            token_env: "OVERTIME_TOKEN".into(),
        }
    }
}

/// Secrets, read from the environment in this one place.
#[derive(Clone, Default)]
pub struct Secrets {
    /// The API and UI bearer token (`[server] token_env`); `None`: the
    /// variable is unset or empty, and the API needs no token.
    pub api_token: Option<String>,
    /// The OTLP receivers' bearer token (`[otlp] token_env`); `None`: the
    /// receivers need no token.
    pub otlp_token: Option<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("api_token", &self.api_token.as_ref().map(|_| "<redacted>"))
            .field(
                "otlp_token",
                &self.otlp_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Secrets {
    /// Reads the variables `cfg` names; an empty name or an empty value
    /// is `None`.
    pub fn from_env(cfg: &Config) -> Secrets {
        let var = |name: &str| {
            (!name.is_empty())
                .then(|| std::env::var(name).ok())
                .flatten()
                .filter(|t| !t.is_empty())
        };
        Secrets {
            api_token: var(&cfg.server.token_env),
            otlp_token: var(&cfg.otlp.token_env),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_toml_matches_default_structs() {
        // The documented file and the code agree on every default.
        let c = Config::from_toml_str(DEFAULT_TOML).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.server, ServerConfig::default());
        assert_eq!(c.store, StoreConfig::default());
        assert_eq!(c.otlp, OtlpSettings::default());
        assert_eq!(c.diagnose, DiagnoseSettings::default());
        assert_eq!(c.sql, SqlConfig::default());
        assert_eq!(c.slo, SloConfig::default());
        assert!(c.files.is_empty() && c.kafka.is_empty() && c.model_servers.is_empty());
    }

    #[test]
    fn sources_and_errors() {
        let c = Config::from_toml_str(
            r#"
            [[file]]
            path = "/var/log/nginx/edge.log"
            kind = "nginx"
            format = "overtime"
            layer = "edge"
            [[kafka]]
            brokers = "127.0.0.1:9092"
            [[kafka.topics]]
            topic = "spans"
            format = "jsonl"
            "#,
        )
        .unwrap();
        assert_eq!(c.files[0].layer.as_deref(), Some("edge"));
        assert_eq!(c.kafka[0].group_id, "overtime");
        let e = Config::from_toml_str("[store]\nmemtabel_bytes = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memtabel_bytes"), "{e}");
        let e = Config::from_toml_str("[[file]]\npath = \"x\"\nkind = \"nginx\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs `format`"), "{e}");
    }

    #[test]
    fn every_format_name_is_read_by_the_file_and_kafka_blocks_of_the_config() {
        for f in FormatName::ALL {
            for alias in f.aliases() {
                let text = format!(
                    "[[file]]\npath = \"a.log\"\nkind = \"{alias}\"\nformat = \"overtime\"\n\
                     [[kafka]]\nbrokers = \"b:9092\"\n[[kafka.topics]]\ntopic = \"t\"\nformat = \"{alias}\"\n"
                );
                match Config::from_toml_str(&text) {
                    Ok(c) => {
                        assert_eq!((c.files[0].kind, c.kafka[0].topics[0].format), (f, f));
                        assert!(f.is_line_based(), "{alias}");
                    }
                    // A tailed file holds lines: only OTLP protobuf is refused, by name.
                    Err(e) => {
                        assert_eq!(f, FormatName::OtlpProto, "{alias}: {e}");
                        assert!(e.to_string().contains("not otlp-proto"), "{e}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_model_server_block_reads_with_its_defaults_and_a_bad_url_is_refused() {
        let c = Config::from_toml_str(
            "[[model_server]]\nurl = \"http://vllm-0:8000/metrics\"\nmodel = \"qwen\"\n",
        )
        .unwrap();
        assert_eq!(c.model_servers[0].interval_ms, 15_000);
        assert_eq!(c.model_servers[0].model.as_deref(), Some("qwen"));
        let e = Config::from_toml_str("[[model_server]]\nurl = \"vllm-0:8000\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://"), "{e}");
    }

    #[test]
    fn the_alert_channels_are_a_tagged_list_refusing_what_cannot_work() {
        let c = Config::from_toml_str(
            "[[channels]]\ntype = \"slack\"\nchannel = \"C0123456789\"\n[channels.retry]\nmax_attempts = 3\n[[channels]]\ntype = \"pagerduty\"\nseverity = \"warning\"\n",
        )
        .unwrap();
        let names: Vec<&str> = c.channels.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["slack", "pagerduty"]);
        match &c.channels[0] {
            overtime_notify::ChannelConfig::Slack(s) => assert_eq!(s.retry.max_attempts, 3),
            other => panic!("{other:?}"),
        }
        let e = Config::from_toml_str("[[channels]]\ntype = \"slack\"\nchannel = \"#ops\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("channel ID"), "{e}");
        let e = Config::from_toml_str("[[channels]]\ntype = \"pagerduty\"\nseverity = \"high\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("high"), "{e}");
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let s = Secrets {
            api_token: Some("hunter2".into()),
            otlp_token: Some("otlp-hunter3".into()),
        };
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2") && !d.contains("hunter3"), "{d}");
    }
}
