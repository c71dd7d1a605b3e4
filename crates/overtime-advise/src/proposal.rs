//! A proposal: the timeouts, budgets and retries to try in a what-if.
//!
//! Keys (`--set KEY=VALUE`, or the same keys as TOML tables):
//!
//! | key | value |
//! |---|---|
//! | `llm.<model>.timeout` | a duration or `none` |
//! | `llm.<model>.bucket.<lt50\|50-200\|200-500\|gt500>.timeout` | a duration or `none` |
//! | `llm.<model>.retries`, `tool.<name>.retries` | `on` / `off` |
//! | `tool.<name>.timeout` (`memory.<name>.timeout` alike) | a duration or `none` |
//! | `service.budget`, `service.<name>.budget` | a duration or `none` |
//! | `gateway.read_timeout`, `gateway.<layer>.read_timeout` | a duration |
//! | `retries` | `on` / `off`: every call |
//!
//! `<name>` may be `*` (every model, tool, service or layer); names with
//! dots are fine (`llm.qwen2.5-72b-instruct.timeout`). Durations: `45s`,
//! `1500ms`, `2m`, `1h`; a bare number is seconds.

use crate::AdviseError;
use overtime_model::DurationMs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A timeout value: `None` is "no timeout at all".
pub type Timeout = Option<f64>;

/// The proposed values; anything not set keeps what the traces show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// (model or `*`, bucket or `*`) → timeout.
    pub llm_timeout: BTreeMap<(String, String), Timeout>,
    /// Tool or memory store (or `*`) → timeout.
    pub tool_timeout: BTreeMap<String, Timeout>,
    /// Model, tool (or `*`) → retries on/off.
    pub retries: BTreeMap<String, bool>,
    /// Service (or `*`) → budget.
    pub budget: BTreeMap<String, Timeout>,
    /// Gateway layer (or `*`) → read timeout.
    pub gateway: BTreeMap<String, f64>,
    /// The settings as given, normalised (`key=value`), in order.
    pub keys: Vec<String>,
}

fn err(msg: impl Into<String>) -> AdviseError {
    AdviseError::Proposal(msg.into())
}

/// A duration as [`DurationMs`] reads it (`45s`, `1500ms`, `2m`, `1h`, a
/// bare number of seconds); `None` for `none`/`off`.
pub(crate) fn parse_timeout(v: &str) -> Result<Timeout, AdviseError> {
    let v = v.trim().trim_matches('"');
    if matches!(
        v.to_ascii_lowercase().as_str(),
        "none" | "off" | "unlimited"
    ) {
        return Ok(None);
    }
    let ms = v
        .parse::<DurationMs>()
        .map_err(|e| err(format!("{e} or none")))?
        .ms();
    if ms <= 0.0 {
        return Err(err(format!(
            "{v:?}: a timeout must be more than 0 (or `none`)"
        )));
    }
    Ok(Some(ms))
}

fn parse_bool(v: &str) -> Result<bool, AdviseError> {
    match v.trim().trim_matches('"').to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(err(format!("{v:?}: use on or off"))),
    }
}

/// `lt50`, `<50`, `50-200`, `200-500`, `gt500`, `>500`, `*` → the
/// report's bucket name.
pub(crate) fn parse_bucket(b: &str) -> Result<String, AdviseError> {
    Ok(match b.to_ascii_lowercase().replace('_', "-").as_str() {
        "lt50" | "<50" => "<50",
        "50-200" => "50-200",
        "200-500" => "200-500",
        "gt500" | ">500" => ">500",
        "*" => "*",
        _ => {
            return Err(err(format!(
                "bucket {b:?}: one of lt50, 50-200, 200-500, gt500"
            )));
        }
    }
    .into())
}

fn name(n: &str, key: &str) -> Result<String, AdviseError> {
    if n.is_empty() {
        return Err(err(format!("{key}: the name is missing")));
    }
    Ok(n.to_string())
}

impl Proposal {
    /// Applies one `KEY=VALUE`.
    ///
    /// ```
    /// use overtime_advise::Proposal;
    /// let mut p = Proposal::default();
    /// p.set("llm.qwen2.5-72b-instruct.bucket.gt500.timeout=90s").unwrap();
    /// p.set("gateway.edge.read_timeout=120s").unwrap();
    /// assert_eq!(p.llm_timeout_for("qwen2.5-72b-instruct", ">500"), Some(Some(90_000.0)));
    /// assert_eq!(p.gateway_for("edge"), Some(120_000.0));
    /// assert!(p.set("llm.x.speed=3").is_err());
    /// ```
    pub fn set(&mut self, kv: &str) -> Result<(), AdviseError> {
        let (key, value) = kv
            .split_once('=')
            .ok_or_else(|| err(format!("{kv:?}: expected KEY=VALUE")))?;
        let (key, value) = (key.trim(), value.trim());
        let (section, rest) = key.split_once('.').unwrap_or((key, ""));
        match section {
            "retries" if rest.is_empty() => {
                self.retries.insert("*".into(), parse_bool(value)?);
            }
            "llm" => {
                if let Some(m) = rest.strip_suffix(".retries") {
                    self.retries.insert(name(m, key)?, parse_bool(value)?);
                } else if let Some(mb) = rest.strip_suffix(".timeout") {
                    let (m, b) = match mb.rsplit_once(".bucket.") {
                        Some((m, b)) => (m, parse_bucket(b)?),
                        None => (mb, "*".to_string()),
                    };
                    self.llm_timeout
                        .insert((name(m, key)?, b), parse_timeout(value)?);
                } else {
                    return Err(err(format!(
                        "{key}: an llm key ends in .timeout, .bucket.<bucket>.timeout or .retries"
                    )));
                }
            }
            "tool" | "memory" => {
                if let Some(t) = rest.strip_suffix(".timeout") {
                    self.tool_timeout
                        .insert(name(t, key)?, parse_timeout(value)?);
                } else if let Some(t) = rest.strip_suffix(".retries") {
                    self.retries.insert(name(t, key)?, parse_bool(value)?);
                } else {
                    return Err(err(format!(
                        "{key}: a {section} key ends in .timeout or .retries"
                    )));
                }
            }
            "service" => {
                let s = if rest == "budget" {
                    "*"
                } else {
                    rest.strip_suffix(".budget").ok_or_else(|| {
                        err(format!(
                            "{key}: use service.budget or service.<name>.budget"
                        ))
                    })?
                };
                self.budget.insert(name(s, key)?, parse_timeout(value)?);
            }
            "gateway" => {
                let l = if rest == "read_timeout" {
                    "*"
                } else {
                    rest.strip_suffix(".read_timeout").ok_or_else(|| {
                        err(format!(
                            "{key}: use gateway.read_timeout or gateway.<layer>.read_timeout"
                        ))
                    })?
                };
                let ms = parse_timeout(value)?
                    .ok_or_else(|| err(format!("{key}: a gateway always has a read timeout")))?;
                self.gateway.insert(name(l, key)?, ms);
            }
            _ => {
                return Err(err(format!(
                    "{key}: unknown key (llm.<model>.timeout, llm.<model>.bucket.<b>.timeout, \
                     tool.<name>.timeout, service.budget, gateway.<layer>.read_timeout, retries)"
                )));
            }
        }
        self.keys.push(format!("{key}={value}"));
        Ok(())
    }

    /// A proposal from a TOML document: the same keys as tables, e.g.
    ///
    /// ```
    /// use overtime_advise::Proposal;
    /// let p = Proposal::from_toml(r#"
    /// retries = false
    /// [llm."deepseek-v4-pro"]
    /// timeout = "45s"
    /// [llm."deepseek-v4-pro".bucket.gt500]
    /// timeout = "90s"
    /// [tool.search_api]
    /// timeout = 15
    /// [gateway.edge]
    /// read_timeout = "120s"
    /// "#).unwrap();
    /// assert_eq!(p.llm_timeout_for("deepseek-v4-pro", ">500"), Some(Some(90_000.0)));
    /// assert_eq!(p.llm_timeout_for("deepseek-v4-pro", "<50"), Some(Some(45_000.0)));
    /// assert_eq!(p.tool_timeout_for("search_api"), Some(Some(15_000.0)));
    /// assert_eq!(p.retries_for("search_api"), Some(false));
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, AdviseError> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| err(format!("not TOML: {}", e.message())))?;
        let mut flat = Vec::new();
        flatten("", &toml::Value::Table(doc), &mut flat)?;
        let mut p = Proposal::default();
        for kv in flat {
            p.set(&kv)?;
        }
        Ok(p)
    }

    /// Whether nothing is proposed (no `key=value` given).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The proposed timeout of a model's calls in `bucket`, if any.
    pub fn llm_timeout_for(&self, model: &str, bucket: &str) -> Option<Timeout> {
        for m in [model, "*"] {
            for b in [bucket, "*"] {
                if let Some(t) = self.llm_timeout.get(&(m.to_string(), b.to_string())) {
                    return Some(*t);
                }
            }
        }
        None
    }

    /// The proposed timeout of a tool's or memory store's calls (its own
    /// or `*`); `None`: not proposed, `Some(None)`: no timeout.
    pub fn tool_timeout_for(&self, tool: &str) -> Option<Timeout> {
        self.tool_timeout
            .get(tool)
            .or_else(|| self.tool_timeout.get("*"))
            .copied()
    }

    /// Whether retries of `component` (a model or tool, or `*`) are
    /// proposed on or off; `None`: not proposed.
    pub fn retries_for(&self, component: &str) -> Option<bool> {
        self.retries
            .get(component)
            .or_else(|| self.retries.get("*"))
            .copied()
    }

    /// The proposed budget of `service` (or `*`); `None`: not proposed,
    /// `Some(None)`: no budget.
    pub fn budget_for(&self, service: &str) -> Option<Timeout> {
        self.budget
            .get(service)
            .or_else(|| self.budget.get("*"))
            .copied()
    }

    /// The proposed read timeout of a gateway layer (or `*`), in ms;
    /// `None`: not proposed.
    pub fn gateway_for(&self, layer: &str) -> Option<f64> {
        self.gateway
            .get(layer)
            .or_else(|| self.gateway.get("*"))
            .copied()
    }

    /// The proposal with gateway layers named as the docs name them
    /// resolved to the data's own names: `edge` is the outermost layer and
    /// `internal` the innermost of two or more, unless a layer of the data
    /// is called so (a layer is named by `--layer-name`, else after its log
    /// file: `access` for `access.log`). `layers`: outermost first.
    ///
    /// ```
    /// use overtime_advise::Proposal;
    /// let mut p = Proposal::default();
    /// p.set("gateway.edge.read_timeout=120s").unwrap();
    /// let p = p.with_layer_roles(&["access"]);
    /// assert_eq!(p.gateway_for("access"), Some(120_000.0));
    /// ```
    pub fn with_layer_roles(&self, layers: &[&str]) -> Proposal {
        let mut out = self.clone();
        out.gateway = self
            .gateway
            .iter()
            .map(|(l, ms)| (layer_role(l, layers).unwrap_or(l).to_string(), *ms))
            .collect();
        out
    }

    /// Names the proposal sets that the data never saw (a typo would
    /// otherwise change nothing, silently), each as a sentence naming
    /// what the data has. `layers`: outermost first.
    pub fn unknown_names(
        &self,
        models: &[&str],
        components: &[&str],
        services: &[&str],
        layers: &[&str],
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |what: &str, whats: &str, n: &str, names: &[&str], known: &[String]| {
            if n != "*" && !names.contains(&n) {
                out.push(format!(
                    "{what} {n:?} is not in the traces; {}",
                    match known.len() {
                        0 => format!("they have no {whats} at all"),
                        1 => format!("their only {what} is {}", known[0]),
                        _ => format!("their {whats} are {}", join_and(known)),
                    }
                ));
            }
        };
        let q = |v: &[&str]| v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>();
        for (m, _) in self.llm_timeout.keys() {
            check("model", "models", m, models, &q(models));
        }
        for t in self.tool_timeout.keys() {
            check(
                "tool or memory store",
                "tools and memory stores",
                t,
                components,
                &q(components),
            );
        }
        let both: Vec<&str> = models.iter().chain(components).copied().collect();
        for r in self.retries.keys() {
            check("model or tool", "models and tools", r, &both, &q(&both));
        }
        for s in self.budget.keys() {
            check("service", "services", s, services, &q(services));
        }
        let named: Vec<String> = layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let role = ["edge", "internal"].into_iter().find(|r| {
                    *r != *l && layer_role(r, layers) == Some(*l) && i == role_index(r, layers)
                });
                match role {
                    Some(r) => format!("{l:?} (also called {r:?})"),
                    None => format!("{l:?}"),
                }
            })
            .collect();
        for l in self.gateway.keys() {
            if layer_role(l, layers).is_none() {
                check("gateway layer", "gateway layers", l, layers, &named);
            }
        }
        out
    }
}

/// The data's layer a docs' role name (`edge`, `internal`) or a layer's
/// own name stands for; `None` when neither.
fn layer_role<'a>(name: &str, layers: &[&'a str]) -> Option<&'a str> {
    if let Some(l) = layers.iter().find(|l| **l == name) {
        return Some(l);
    }
    match name {
        "edge" => layers.first().copied(),
        "internal" if layers.len() >= 2 => layers.last().copied(),
        _ => None,
    }
}

fn role_index(role: &str, layers: &[&str]) -> usize {
    if role == "edge" {
        0
    } else {
        layers.len().saturating_sub(1)
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(v: &[String]) -> String {
    match v {
        [] => String::new(),
        [a] => a.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut Vec<String>) -> Result<(), AdviseError> {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten(&join(k), v, out)?;
            }
        }
        toml::Value::String(s) => out.push(format!("{prefix}={s}")),
        toml::Value::Integer(i) => out.push(format!("{prefix}={i}")),
        toml::Value::Float(f) => out.push(format!("{prefix}={f}")),
        toml::Value::Boolean(b) => out.push(format!("{prefix}={}", if *b { "on" } else { "off" })),
        other => {
            return Err(err(format!(
                "{prefix}: {} values are not proposals",
                other.type_str()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_with_units() {
        assert_eq!(parse_timeout("45s").unwrap(), Some(45_000.0));
        assert_eq!(parse_timeout("1500ms").unwrap(), Some(1_500.0));
        assert_eq!(parse_timeout("90").unwrap(), Some(90_000.0));
        assert_eq!(parse_timeout("none").unwrap(), None);
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn an_unknown_layer_is_a_sentence_naming_the_known_ones_and_edge_names_the_outermost() {
        let mut p = Proposal::default();
        p.set("gateway.edgy.read_timeout=5s").unwrap();
        p.set("gateway.edge.read_timeout=9s").unwrap();
        let bad = p.unknown_names(&[], &[], &[], &["access", "upstream"]);
        assert_eq!(
            bad,
            vec![
                "gateway layer \"edgy\" is not in the traces; their gateway layers are \"access\" (also called \"edge\") and \"upstream\" (also called \"internal\")"
            ]
        );
        let r = p.with_layer_roles(&["access", "upstream"]);
        assert_eq!(r.gateway_for("access"), Some(9_000.0));
        assert_eq!(r.gateway_for("upstream"), None);
    }
}
