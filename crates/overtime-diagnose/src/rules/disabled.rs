//! `[diagnose] disabled_rules`: root-cause rules switched off by name.
//!
//! Design rules:
//! - **Checked when read.** A name that is no rule's is refused while the
//!   TOML is read (serde's `try_from`), so `overtime serve` stops at start
//!   with the key's line and the list of the rules, instead of running with
//!   a rule on that was meant to be off.
//! - **`unknown` stays.** It is what a trace gets when no rule holds; it
//!   cannot be switched off.

use super::RULES;
use overtime_model::RootCauseKind;
use serde::{Deserialize, Serialize};

/// The rules switched off: a trace is judged as if they were not listed,
/// so the next rule that holds decides (`[]` by default).
///
/// ```
/// use overtime_diagnose::DisabledRules;
/// let d = DisabledRules::new(["retry_amplification"]).unwrap();
/// assert!(d.contains("retry_amplification"));
/// let e = DisabledRules::new(["retries"]).unwrap_err().to_string();
/// assert!(e.contains("no rule is named \"retries\""), "{e}");
/// assert!(e.contains("tool_no_timeout"), "the message lists the rules: {e}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct DisabledRules(Vec<String>);

/// A name `disabled_rules` cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleNameError {
    /// No rule has this name.
    #[error("no rule is named {name:?}; the rules are: {}", names())]
    Unknown {
        /// The name as written.
        name: String,
    },
    /// `unknown` is what no rule deciding leaves.
    #[error(
        "the rule \"unknown\" cannot be switched off: it is what a trace gets when no rule holds"
    )]
    Fallback,
}

/// Every rule's name, in order, comma-separated.
fn names() -> String {
    RULES
        .iter()
        .map(|r| r.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl DisabledRules {
    /// The rules named, each checked.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Result<Self, RuleNameError> {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        for n in &names {
            if n == RootCauseKind::Unknown.as_str() {
                return Err(RuleNameError::Fallback);
            }
            if !RULES.iter().any(|r| r.name() == n) {
                return Err(RuleNameError::Unknown { name: n.clone() });
            }
        }
        Ok(DisabledRules(names))
    }

    /// Is the rule named `name` switched off?
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|n| n == name)
    }

    /// The names, as configured.
    pub fn names(&self) -> &[String] {
        &self.0
    }
}

impl TryFrom<Vec<String>> for DisabledRules {
    type Error = RuleNameError;
    fn try_from(names: Vec<String>) -> Result<Self, Self::Error> {
        DisabledRules::new(names)
    }
}

impl From<DisabledRules> for Vec<String> {
    fn from(d: DisabledRules) -> Self {
        d.0
    }
}
