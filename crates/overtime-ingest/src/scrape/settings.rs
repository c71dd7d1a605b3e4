//! `[[model_server]]`: one model server's Prometheus endpoint to scrape.

use serde::{Deserialize, Serialize};

/// One `[[model_server]]` block of the configuration: a vLLM, SGLang or
/// TGI `/metrics` endpoint `overtime serve` scrapes (docs/inputs.md,
/// "Model-server metrics").
///
/// ```toml
/// [[model_server]]
/// url = "http://vllm-0:8000/metrics"
/// # name = "vllm-0"           # default: the URL
/// # interval_ms = 15000
/// # timeout_ms = 5000
/// # model = "qwen2.5-7b"      # default: each series' model_name label
/// # token_env = "VLLM_METRICS_TOKEN"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelServerSettings {
    /// The endpoint, `http://` or `https://`, path included.
    pub url: String,
    /// The server's name in `/metrics` and in the `server` column of
    /// `model_server_metrics` (default: the URL).
    #[serde(default)]
    pub name: Option<String>,
    /// How often it is scraped, ms (default 15000, Prometheus' usual).
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// How long one scrape may take, ms (default 5000); past it the scrape
    /// failed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The model its series belong to, when their own `model_name` label
    /// does not say it as the callers name the model (it replaces the
    /// label).
    #[serde(default)]
    pub model: Option<String>,
    /// The environment variable holding a bearer token the endpoint wants
    /// (never the token itself); unset or empty: none sent.
    #[serde(default)]
    pub token_env: Option<String>,
}

fn default_interval_ms() -> u64 {
    15_000
}

fn default_timeout_ms() -> u64 {
    5_000
}

/// A `[[model_server]]` block that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ModelServerSettingsError {
    /// Not an `http://` or `https://` URL.
    #[error("model_server {url:?}: url must start with http:// or https://")]
    Url {
        /// The `url` given.
        url: String,
    },
    /// A zero interval or timeout.
    #[error("model_server {url}: interval_ms and timeout_ms must be above 0")]
    Zero {
        /// The block's `url`.
        url: String,
    },
}

impl ModelServerSettings {
    /// The settings of `url` with every default.
    pub fn new(url: impl Into<String>) -> Self {
        ModelServerSettings {
            url: url.into(),
            name: None,
            interval_ms: default_interval_ms(),
            timeout_ms: default_timeout_ms(),
            model: None,
            token_env: None,
        }
    }

    /// Checks what can be checked before start.
    ///
    /// ```
    /// use overtime_ingest::scrape::ModelServerSettings;
    /// assert!(ModelServerSettings::new("http://vllm:8000/metrics").validate().is_ok());
    /// assert!(ModelServerSettings::new("vllm:8000").validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ModelServerSettingsError> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(ModelServerSettingsError::Url {
                url: self.url.clone(),
            });
        }
        if self.interval_ms == 0 || self.timeout_ms == 0 {
            return Err(ModelServerSettingsError::Zero {
                url: self.url.clone(),
            });
        }
        Ok(())
    }

    /// Its name in `/metrics` and in the store.
    pub fn server_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.url)
    }

    /// The bearer token `token_env` names, read from the environment.
    pub fn token(&self) -> Option<String> {
        let var = self.token_env.as_deref().filter(|v| !v.is_empty())?;
        std::env::var(var).ok().filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_with_only_a_url_gets_the_defaults() {
        let s: ModelServerSettings =
            toml::from_str("url = \"http://vllm:8000/metrics\"\n").unwrap();
        assert_eq!(s, ModelServerSettings::new("http://vllm:8000/metrics"));
        assert_eq!(s.interval_ms, 15_000);
        assert_eq!(s.server_name(), "http://vllm:8000/metrics");
        let e = toml::from_str::<ModelServerSettings>("url = \"x\"\ninterval = 5\n").unwrap_err();
        assert!(e.to_string().contains("interval"), "{e}");
    }
}
