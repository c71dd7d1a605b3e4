//! The `[diagnose]` section of overtime's TOML config: [`DiagnoseSettings`],
//! read by serde as it is written, which makes the [`DiagnoseConfig`] of the
//! engine ([`DiagnoseSettings::build`]) and the collector's
//! [`LiveDiagnoser`] ([`DiagnoseSettings::live`]).
//!
//! Design rules:
//! - One TOML type, owned here: `overtime-config` embeds it as it is. A
//!   default the engine has too (`threshold_tokens`, `clock_skew_ms`,
//!   `incident_quiet_ms`, the rules' thresholds) is taken from
//!   [`DiagnoseConfig::default`], so it is written once.
//! - The gateway layers are not in this section: they are the sources'
//!   (`[[file]]`, `[[kafka]]`), numbered by [`layer_index`](crate::layer_index)
//!   in config order, and handed to `build`.
//! - Unknown keys are refused (`deny_unknown_fields`), and so is a rule
//!   name in `disabled_rules` that is no rule's ([`DisabledRules`]): the
//!   error names the key's line and lists the rules.

use crate::config::{DiagnoseConfig, LayerConfig};
use crate::live::LiveDiagnoser;
use crate::rules::{DisabledRules, RuleThresholds};
use serde::{Deserialize, Serialize};

/// The `[diagnose]` section: when a live trace gets its verdict, how much
/// the collector keeps, and the engine's knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiagnoseSettings {
    /// A trace is diagnosed after this long without new records (ms,
    /// default 30 000).
    pub grace_ms: u64,
    /// A trace whose gateway answered 5xx gets a first verdict after this
    /// long without new records (at most `grace_ms`), so its incident can
    /// be paged seconds after the 504; the full grace still revises it.
    /// Default 2000 ms.
    pub failure_grace_ms: u64,
    /// A diagnosed trace is revised if records arrive within this long
    /// (ms, default 600 000).
    pub keep_ms: u64,
    /// Input tokens above which prefill is expected to hurt.
    pub threshold_tokens: u32,
    /// An incident closes after this long without a failure of its cause
    /// (ms).
    pub incident_quiet_ms: i64,
    /// Clock skew tolerated between hosts (ms).
    pub clock_skew_ms: f64,
    /// The budget when no header or span gives one (ms). Default none.
    pub default_budget_ms: Option<f64>,
    /// Traces kept for incident reports (default 1 000 000).
    pub max_traces: usize,
    /// Most records (spans and gateway lines) the live diagnosis holds in
    /// memory, waiting or kept for revision; past it, the oldest diagnosed
    /// traces are forgotten, then the quietest waiting ones diagnosed early.
    /// Default 1 000 000.
    pub max_live_records: usize,
    /// The root-cause rules switched off, by name (docs/diagnosis.md,
    /// "Root-cause kinds"): a trace is judged as if they were not listed.
    /// Default none.
    pub disabled_rules: DisabledRules,
    /// The root-cause rules' thresholds (`[diagnose.rules]`), owned by the
    /// rules themselves.
    pub rules: RuleThresholds,
}

impl Default for DiagnoseSettings {
    fn default() -> Self {
        let engine = DiagnoseConfig::default();
        DiagnoseSettings {
            grace_ms: 30_000,
            failure_grace_ms: 2_000,
            keep_ms: 600_000,
            threshold_tokens: engine.threshold_tokens,
            incident_quiet_ms: engine.incident_quiet_ms,
            clock_skew_ms: engine.clock_skew_ms,
            default_budget_ms: engine.default_budget_ms,
            max_traces: 1_000_000,
            max_live_records: 1_000_000,
            disabled_rules: engine.disabled_rules,
            rules: engine.rules,
        }
    }
}

impl DiagnoseSettings {
    /// The engine's configuration, with the gateway layers of the sources
    /// (outermost first).
    ///
    /// ```
    /// use overtime_diagnose::{DiagnoseConfig, DiagnoseSettings, LayerConfig};
    /// let s: DiagnoseSettings = toml::from_str("threshold_tokens = 500").unwrap();
    /// let layers = vec![LayerConfig { name: "edge".into(), read_timeout_ms: Some(60_000.0) }];
    /// let cfg = s.build(layers);
    /// assert_eq!(cfg.threshold_tokens, 500);
    /// assert_eq!(cfg.layer_timeout_ms("edge"), Some(60_000.0));
    /// assert_eq!(cfg.clock_skew_ms, DiagnoseConfig::default().clock_skew_ms);
    /// let live = s.live(cfg);
    /// assert_eq!(live.pending_len(), 0);
    /// ```
    pub fn build(&self, layers: Vec<LayerConfig>) -> DiagnoseConfig {
        DiagnoseConfig {
            threshold_tokens: self.threshold_tokens,
            clock_skew_ms: self.clock_skew_ms,
            incident_quiet_ms: self.incident_quiet_ms,
            layers,
            default_budget_ms: self.default_budget_ms,
            rules: self.rules.clone(),
            disabled_rules: self.disabled_rules.clone(),
            ..Default::default()
        }
    }

    /// The collector's live diagnosis over `cfg` (from
    /// [`DiagnoseSettings::build`]): its grace periods, how long verdicts
    /// stay revisable, and its bounds.
    pub fn live(&self, cfg: DiagnoseConfig) -> LiveDiagnoser {
        LiveDiagnoser::new(cfg, self.grace_ms, self.keep_ms, self.max_traces)
            .with_failure_grace(self.failure_grace_ms)
            .with_max_records(self.max_live_records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_engines() {
        let s: DiagnoseSettings = toml::from_str("").unwrap();
        assert_eq!(s, DiagnoseSettings::default());
        assert_eq!(s.build(Vec::new()), DiagnoseConfig::default());
        assert_eq!(
            (s.grace_ms, s.failure_grace_ms, s.keep_ms),
            (30_000, 2_000, 600_000)
        );
        assert_eq!((s.max_traces, s.max_live_records), (1_000_000, 1_000_000));
        assert_eq!(s.default_budget_ms, None);
    }

    #[test]
    fn a_full_section() {
        let s: DiagnoseSettings = toml::from_str(
            r#"
            grace_ms = 1000
            failure_grace_ms = 500
            keep_ms = 2000
            threshold_tokens = 100
            incident_quiet_ms = 60000
            clock_skew_ms = 10.0
            default_budget_ms = 90000.0
            max_traces = 10
            max_live_records = 20
            disabled_rules = ["retry_amplification", "tool_slow"]
            [rules]
            dominant_share = 0.5
            "#,
        )
        .unwrap();
        let layers = vec![LayerConfig {
            name: "edge".into(),
            read_timeout_ms: None,
        }];
        let cfg = s.build(layers.clone());
        assert_eq!(
            (
                cfg.threshold_tokens,
                cfg.incident_quiet_ms,
                cfg.clock_skew_ms
            ),
            (100, 60_000, 10.0)
        );
        assert_eq!(cfg.default_budget_ms, Some(90_000.0));
        assert_eq!(cfg.rules.dominant_share, 0.5);
        assert!(cfg.disabled_rules.contains("tool_slow"));
        assert!(!cfg.disabled_rules.contains("tool_no_timeout"));
        assert_eq!(cfg.layers, layers);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<DiagnoseSettings>("grace = 5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("grace"), "{e}");
        let e = toml::from_str::<DiagnoseSettings>(
            "[rules]
dominant = 0.5",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("dominant"), "{e}");
    }

    #[test]
    fn a_rule_name_that_is_no_rules_is_refused_with_the_list_of_rules() {
        let e =
            toml::from_str::<DiagnoseSettings>("disabled_rules = [\"tool_slow\", \"slow_tool\"]")
                .unwrap_err()
                .to_string();
        assert!(e.contains("disabled_rules"), "the error names the key: {e}");
        assert!(e.contains("no rule is named \"slow_tool\""), "{e}");
        for r in crate::rules::RULES {
            assert!(e.contains(r.name()), "the error lists {}: {e}", r.name());
        }
        let e = toml::from_str::<DiagnoseSettings>("disabled_rules = [\"unknown\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be switched off"), "{e}");
    }
}
