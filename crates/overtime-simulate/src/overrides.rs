//! `--set KEY=VALUE`: run the platform under other timeouts than the
//! routes' profiles — the keys `overtime whatif` takes, so a proposal can
//! be replayed and then run for real (values nominal, like every delay):
//!
//! - `llm.<model>.timeout` (or `llm.*.timeout`): the LLM call's timeout
//!   before any budget share; `none` for no timeout;
//! - `tool.<name>.timeout` (or `tool.*.timeout`): the orchestrator's
//!   timeout for that tool; `none` for none;
//! - `service.budget` (or `service.agent-api.budget`): every route's
//!   budget; `none` for no budget;
//! - `gateway.read_timeout` (or `gateway.<layer>.read_timeout`): the
//!   gateway's read timeout;
//! - `retries=off`: no tool retries.

use crate::clock::parse_duration;
use std::collections::HashMap;

/// Timeouts replacing the profiles' (nominal ms; `None` inside: no timeout).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Overrides {
    pub(crate) llm: HashMap<String, Option<f64>>,
    pub(crate) tool: HashMap<String, Option<f64>>,
    pub(crate) budget: Option<Option<f64>>,
    pub(crate) gateway_ms: Option<f64>,
    pub(crate) retries: Option<bool>,
}

fn value(v: &str) -> Result<Option<f64>, String> {
    if matches!(v.trim(), "none" | "off") {
        return Ok(None);
    }
    let d = parse_duration(v)?;
    if d.is_zero() {
        return Err(format!("{v:?}: a timeout must be more than 0 (or none)"));
    }
    Ok(Some(d.as_secs_f64() * 1000.0))
}

impl Overrides {
    /// Parses `--set` values.
    pub(crate) fn parse(sets: &[String]) -> Result<Overrides, String> {
        let mut o = Overrides::default();
        for kv in sets {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--set {kv:?}: expected KEY=VALUE"))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |e: String| format!("--set {k}: {e}");
            if let Some(m) = k
                .strip_prefix("llm.")
                .and_then(|r| r.strip_suffix(".timeout"))
            {
                o.llm.insert(m.to_string(), value(v).map_err(bad)?);
            } else if let Some(t) = k
                .strip_prefix("tool.")
                .and_then(|r| r.strip_suffix(".timeout"))
            {
                o.tool.insert(t.to_string(), value(v).map_err(bad)?);
            } else if k == "service.budget"
                || k.strip_prefix("service.")
                    .is_some_and(|r| r.ends_with(".budget"))
            {
                o.budget = Some(value(v).map_err(bad)?);
            } else if k == "gateway.read_timeout"
                || k.strip_prefix("gateway.")
                    .is_some_and(|r| r.ends_with(".read_timeout"))
            {
                o.gateway_ms =
                    Some(value(v).map_err(bad)?.ok_or_else(|| {
                        format!("--set {k}: a gateway always has a read timeout")
                    })?);
            } else if k == "retries" {
                o.retries = Some(match v {
                    "on" | "true" => true,
                    "off" | "false" => false,
                    _ => return Err(format!("--set retries={v}: on or off")),
                });
            } else {
                return Err(format!(
                    "--set {k}: unknown key (llm.<model>.timeout, tool.<name>.timeout, \
                     service.budget, gateway.read_timeout, retries)"
                ));
            }
        }
        Ok(o)
    }

    /// The LLM timeout for `model`, if overridden.
    pub(crate) fn llm_ms(&self, model: &str) -> Option<Option<f64>> {
        self.llm.get(model).or_else(|| self.llm.get("*")).copied()
    }

    /// The tool timeout for `tool`, if overridden.
    pub(crate) fn tool_ms(&self, tool: &str) -> Option<Option<f64>> {
        self.tool.get(tool).or_else(|| self.tool.get("*")).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_example() {
        let o = Overrides::parse(&[
            "llm.deepseek-v4-pro.timeout=30s".into(),
            "tool.search_api.timeout=20s".into(),
            "gateway.edge.read_timeout=130s".into(),
        ])
        .unwrap();
        assert_eq!(o.llm_ms("deepseek-v4-pro"), Some(Some(30_000.0)));
        assert_eq!(o.tool_ms("search_api"), Some(Some(20_000.0)));
        assert_eq!(o.gateway_ms, Some(130_000.0));
        assert!(Overrides::parse(&["llm.x.speed=3".into()]).is_err());
    }
}
