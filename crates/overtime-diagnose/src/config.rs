//! The knobs of the diagnosis. One struct, passed down; every field has a
//! default that matches docs/diagnosis.md.

use serde::{Deserialize, Serialize};

/// One gateway layer (an nginx whose access log is an input), outermost first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerConfig {
    /// The layer's source name, as in `gateway_requests.source`.
    pub name: String,
    /// Its read timeout (`proxy_read_timeout`) in ms, when known; otherwise
    /// it is inferred from the 504s (finding `gateway_timeout_inferred`).
    pub read_timeout_ms: Option<f64>,
}

/// How the diagnosis reads traces and groups incidents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiagnoseConfig {
    /// Input-token threshold above which prefill is expected to hurt (docs/diagnosis.md#incidents-and-their-reports).
    pub threshold_tokens: u32,
    /// Clock skew between hosts tolerated when a child span starts before
    /// its parent: it is shifted inside the parent up to this much (ms).
    pub clock_skew_ms: f64,
    /// An incident closes after this long without a failure of its
    /// fingerprint (ms).
    pub incident_quiet_ms: i64,
    /// The gateway layers, outermost first.
    pub layers: Vec<LayerConfig>,
    /// The request budget when no header, span or gateway gives one (ms).
    pub default_budget_ms: Option<f64>,
    /// Give a verdict for every trace, not only the failed ones.
    pub all_verdicts: bool,
    /// Example trace ids kept per incident.
    pub max_examples: usize,
    /// The thresholds of the root-cause rules (`[diagnose.rules]`).
    pub rules: crate::rules::RuleThresholds,
    /// The root-cause rules switched off (`[diagnose] disabled_rules`).
    pub disabled_rules: crate::rules::DisabledRules,
}

impl Default for DiagnoseConfig {
    fn default() -> Self {
        DiagnoseConfig {
            threshold_tokens: 300,
            clock_skew_ms: 2_000.0,
            incident_quiet_ms: 5 * 60 * 1000,
            layers: Vec::new(),
            default_budget_ms: None,
            all_verdicts: false,
            max_examples: 5,
            rules: crate::rules::RuleThresholds::default(),
            disabled_rules: crate::rules::DisabledRules::default(),
        }
    }
}

/// The index of the gateway layer `name` in `layers`, adding it (with
/// `read_timeout_ms`) on first sight: layers are ordered outermost first,
/// in the order the inputs name them (the `[[file]]` and `[[kafka]]`
/// blocks of the config, or the `--nginx-log` arguments). A layer seen
/// again keeps its first timeout. The one place that order is decided.
///
/// ```
/// use overtime_diagnose::layer_index;
/// let mut layers = Vec::new();
/// assert_eq!(layer_index(&mut layers, "edge", Some(60_000.0)), 0);
/// assert_eq!(layer_index(&mut layers, "ingress", None), 1);
/// assert_eq!(layer_index(&mut layers, "edge", Some(5_000.0)), 0);
/// assert_eq!(layers[0].read_timeout_ms, Some(60_000.0));
/// ```
pub fn layer_index(layers: &mut Vec<LayerConfig>, name: &str, read_timeout_ms: Option<f64>) -> u32 {
    match layers.iter().position(|l| l.name == name) {
        Some(i) => i as u32,
        None => {
            layers.push(LayerConfig {
                name: name.to_string(),
                read_timeout_ms,
            });
            (layers.len() - 1) as u32
        }
    }
}

impl DiagnoseConfig {
    /// The configured read timeout of the layer named `source`.
    pub fn layer_timeout_ms(&self, source: &str) -> Option<f64> {
        self.layers
            .iter()
            .find(|l| l.name == source)
            .and_then(|l| l.read_timeout_ms)
    }
}
