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
//! ```
//! let cfg = overtime_config::Config::from_toml_str("[server]\nlisten = \"127.0.0.1:9090\"\n").unwrap();
//! assert_eq!(cfg.server.listen, "127.0.0.1:9090");
//! assert_eq!(cfg.store.memtable_bytes, 256 * 1024 * 1024); // defaulted
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use overtime_server::SqlConfig;
pub use overtime_slo::{ChainWeights, EarlyWarningConfig, SloConfig};

/// The embedded default configuration, every option written out.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreSection,
    pub otlp: OtlpConfig,
    pub diagnose: DiagnoseSection,
    pub sql: SqlConfig,
    /// SLIs, SLOs, breakers and alert thresholds (docs/metrics.md).
    pub slo: SloConfig,
    /// Where the collector sends its own alerts (Alertmanager v2, webhook).
    pub alerts: overtime_alert::AlertConfig,
    /// Deduplicated Jira tickets for new incidents (docs/jira.md).
    pub jira: overtime_jira::JiraConfig,
    /// Files to tail.
    #[serde(rename = "file")]
    pub files: Vec<FileSource>,
    /// Kafka consumers.
    #[serde(rename = "kafka")]
    pub kafka: Vec<KafkaSource>,
}

impl Config {
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
        if self.store.memtable_bytes < 1024 * 1024 {
            return Err(ConfigError::Invalid(
                "store.memtable_bytes must be at least 1 MiB".into(),
            ));
        }
        for f in &self.files {
            if !matches!(f.kind.as_str(), "nginx" | "jsonl" | "otlp-json") {
                return Err(ConfigError::Invalid(format!(
                    "file {}: kind must be nginx, jsonl or otlp-json, not {:?}",
                    f.path.display(),
                    f.kind
                )));
            }
            if f.kind == "nginx" && f.format.is_none() && f.format_name.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "file {}: an nginx log needs `format` (built-in name or body) or `nginx_conf` + `format_name`",
                    f.path.display()
                )));
            }
        }
        for k in &self.kafka {
            for t in &k.topics {
                if !matches!(t.format.as_str(), "nginx" | "jsonl" | "otlp-proto") {
                    return Err(ConfigError::Invalid(format!(
                        "kafka topic {}: format must be nginx, jsonl or otlp-proto",
                        t.topic
                    )));
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// API, UI and /metrics.
    pub listen: String,
    /// Environment variable holding the bearer token; unset or empty: no auth.
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    pub data_dir: PathBuf,
    /// One global budget for everything not yet in Parquet.
    pub memtable_bytes: u64,
    pub segment_seconds: i64,
    pub flush_interval_ms: u64,
    pub retention_age_hours: Option<i64>,
    pub retention_bytes: Option<u64>,
    pub fsync: bool,
}

impl Default for StoreSection {
    fn default() -> Self {
        StoreSection {
            data_dir: "overtime-data".into(),
            memtable_bytes: 256 * 1024 * 1024,
            segment_seconds: 3600,
            flush_interval_ms: 60_000,
            retention_age_hours: Some(168),
            retention_bytes: Some(10 * 1024 * 1024 * 1024),
            fsync: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// OTLP/HTTP; empty disables.
    pub http_listen: String,
    /// OTLP/gRPC; empty disables.
    pub grpc_listen: String,
    pub max_body_bytes: usize,
    /// Requests decoded at once per receiver (twice as many wait, more
    /// are refused with 429); 0 means twice the CPUs.
    pub max_concurrent_decodes: usize,
    /// Environment variable holding a bearer token the receivers require.
    /// Unset or empty: no token (usual for collectors inside a cluster).
    pub token_env: String,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            http_listen: "127.0.0.1:4318".into(),
            grpc_listen: "127.0.0.1:4317".into(),
            max_body_bytes: 16 * 1024 * 1024,
            max_concurrent_decodes: 0,
            token_env: "OVERTIME_OTLP_TOKEN".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiagnoseSection {
    /// A trace is diagnosed after this long without new records.
    pub grace_ms: u64,
    /// A trace whose gateway answered 5xx gets a first verdict after this
    /// long without new records (at most `grace_ms`), so its incident can
    /// be paged seconds after the 504; the full grace still revises it.
    pub failure_grace_ms: u64,
    /// A diagnosed trace is revised if records arrive within this long.
    pub keep_ms: u64,
    pub threshold_tokens: u32,
    pub incident_quiet_ms: i64,
    pub clock_skew_ms: f64,
    pub default_budget_ms: Option<f64>,
    /// Traces kept for incident reports.
    pub max_traces: usize,
    /// Most records (spans and gateway lines) the live diagnosis holds in
    /// memory, waiting or kept for revision; past it, the oldest diagnosed
    /// traces are forgotten, then the quietest waiting ones diagnosed early.
    pub max_live_records: usize,
    /// The root-cause rules' thresholds (`[diagnose.rules]`), owned by the
    /// rules themselves.
    pub rules: overtime_diagnose::rules::RuleThresholds,
}

impl Default for DiagnoseSection {
    fn default() -> Self {
        DiagnoseSection {
            grace_ms: 30_000,
            failure_grace_ms: 2_000,
            keep_ms: 600_000,
            threshold_tokens: 300,
            incident_quiet_ms: 300_000,
            clock_skew_ms: 2_000.0,
            default_budget_ms: None,
            max_traces: 1_000_000,
            max_live_records: 1_000_000,
            rules: Default::default(),
        }
    }
}

/// A file to tail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSource {
    pub path: PathBuf,
    /// `nginx`, `jsonl` or `otlp-json`.
    pub kind: String,
    /// nginx: a built-in format name or the body.
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub nginx_conf: Option<PathBuf>,
    #[serde(default)]
    pub format_name: Option<String>,
    /// nginx: the gateway layer (default: the file name).
    #[serde(default)]
    pub layer: Option<String>,
    /// nginx: this layer's read timeout (default: from nginx_conf, else inferred).
    #[serde(default)]
    pub read_timeout_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSource {
    pub brokers: String,
    #[serde(default = "default_group")]
    pub group_id: String,
    /// librdkafka's prefetch cap per partition (KiB, default 16384).
    #[serde(default)]
    pub max_prefetch_kbytes: Option<u64>,
    /// A partition's batch is written at this many messages (default
    /// 4096)…
    #[serde(default)]
    pub batch_max_messages: Option<usize>,
    /// …or when its oldest message is this old (ms, default 200).
    #[serde(default)]
    pub batch_max_ms: Option<u64>,
    /// `earliest` (default) or `latest`, for partitions with no committed
    /// offset and no checkpoint.
    #[serde(default = "default_offset_reset")]
    pub auto_offset_reset: String,
    /// More librdkafka settings (`security.protocol`, `sasl.*`,
    /// `session.timeout.ms`…). A value `env:NAME` is read from the
    /// environment variable NAME at start, so passwords stay out of the
    /// file (and of `overtime config`).
    #[serde(default)]
    pub librdkafka_options: std::collections::BTreeMap<String, String>,
    pub topics: Vec<KafkaTopic>,
}

fn default_offset_reset() -> String {
    "earliest".into()
}

fn default_group() -> String {
    "overtime".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaTopic {
    pub topic: String,
    /// `nginx`, `jsonl` or `otlp-proto`.
    pub format: String,
    #[serde(default)]
    pub log_format: Option<String>,
    #[serde(default)]
    pub layer: Option<String>,
}

/// Secrets, read from the environment in this one place.
#[derive(Clone, Default)]
pub struct Secrets {
    pub api_token: Option<String>,
    /// The OTLP receivers' bearer token (`[otlp] token_env`).
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
        assert_eq!(c.store, StoreSection::default());
        assert_eq!(c.otlp, OtlpConfig::default());
        assert_eq!(c.diagnose, DiagnoseSection::default());
        assert_eq!(c.sql, SqlConfig::default());
        assert_eq!(c.slo, SloConfig::default());
        assert!(c.files.is_empty() && c.kafka.is_empty());
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
    fn secrets_are_redacted_in_debug() {
        let s = Secrets {
            api_token: Some("hunter2".into()),
            otlp_token: Some("otlp-hunter3".into()),
        };
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2") && !d.contains("hunter3"), "{d}");
    }
}
