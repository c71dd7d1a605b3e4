//! What a span's *name* says about the call it stands for, when no
//! attribute says it.
//!
//! Instrumentation names spans for what they call: OpenTelemetry GenAI
//! writes `{operation} {target}` (`chat deepseek-v4-pro`,
//! `execute_tool carrier_rates`, `search_memory session-memory`);
//! frameworks write `tool.carrier_rates`, `tool:carrier_rates`,
//! `tool_call carrier_rates`, LangChain's `carrier_rates.tool`, or
//! `carrier_rates call`. These functions read the target back out of
//! such a name, and nothing else.
//!
//! Design rules:
//! - **Only shapes that name a target.** A bare verb (`tool`, `call`,
//!   `execute_tool`) or a generic word before `call` (`LLM call`,
//!   `HTTP call`, `api call`) names nothing: `None`.
//! - **The name as written.** The target keeps its case and spelling; only
//!   the surrounding shape is removed.
//! - **Pure and cheap.** No allocation; the diagnosis asks per call.
//!
//! ```
//! use overtime_parse::spans::names::{model_in_name, store_in_name, tool_in_name};
//! assert_eq!(tool_in_name("tool.carrier_rates"), Some("carrier_rates"));
//! assert_eq!(tool_in_name("execute_tool web_search"), Some("web_search"));
//! assert_eq!(tool_in_name("carrier_rates.tool"), Some("carrier_rates"));
//! assert_eq!(tool_in_name("carrier_rates call"), Some("carrier_rates"));
//! assert_eq!(tool_in_name("LLM call"), None);
//! assert_eq!(tool_in_name("POST /v1/rates"), None);
//! assert_eq!(model_in_name("chat deepseek-v4-pro"), Some("deepseek-v4-pro"));
//! assert_eq!(store_in_name("search_memory session-memory"), Some("session-memory"));
//! ```

/// Prefixes that put a tool's name after them.
const TOOL_PREFIXES: &[&str] = &[
    "execute_tool ",
    "execute_tool.",
    "tool_call ",
    "tool_call.",
    "tool-call ",
    "call_tool ",
    "tool.call ",
    "tools/call ",
    "tool ",
    "tool.",
    "tool:",
    "tool/",
    "tools.",
    "tools/",
    "tools:",
];

/// Suffixes that put a tool's name before them.
const TOOL_SUFFIXES: &[&str] = &[".tool", " tool", ".call", " call"];

/// Words that, before `call`/`tool`, name a kind of call rather than a
/// target (`LLM call`, `HTTP call`).
const GENERIC: &[&str] = &[
    "llm",
    "model",
    "chat",
    "completion",
    "http",
    "https",
    "api",
    "rpc",
    "grpc",
    "db",
    "sql",
    "database",
    "tool",
    "tools",
    "function",
    "service",
    "remote",
    "external",
    "network",
    "client",
    "server",
    "agent",
    "fetch",
    "request",
    "call",
    "execute",
    "execute_tool",
    "run",
    "invoke",
    "get",
    "post",
    "put",
    "patch",
    "delete",
];

/// GenAI operations written before a model in a span name.
const LLM_OPERATIONS: &[&str] = &[
    "chat ",
    "text_completion ",
    "generate_content ",
    "completion ",
    "completions ",
    "embeddings ",
];

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &s[..cut])
}

/// A target a person would recognise: one word-like token, not a generic
/// word, not a route or URL.
fn target(t: &str) -> Option<&str> {
    let t = t.trim();
    let plain = !t.is_empty()
        && t.len() <= 128
        && !t.contains(char::is_whitespace)
        && !t.starts_with('/')
        && !t.contains("://")
        && t.chars().any(|c| c.is_alphabetic());
    (plain && !GENERIC.iter().any(|g| g.eq_ignore_ascii_case(t))).then_some(t)
}

/// The tool a span's name names: `execute_tool <name>`, `tool.<name>`,
/// `tool:<name>`, `tool_call <name>`, `<name>.tool`, `<name> call` …
pub fn tool_in_name(name: &str) -> Option<&str> {
    let n = name.trim();
    TOOL_PREFIXES
        .iter()
        .find_map(|p| strip_prefix_ci(n, p))
        .or_else(|| TOOL_SUFFIXES.iter().find_map(|s| strip_suffix_ci(n, s)))
        .and_then(target)
}

/// The model a GenAI span's name names: `chat <model>`,
/// `text_completion <model>`, `generate_content <model>`.
pub fn model_in_name(name: &str) -> Option<&str> {
    let n = name.trim();
    LLM_OPERATIONS
        .iter()
        .find_map(|p| strip_prefix_ci(n, p))
        .and_then(target)
}

/// The memory store or data source a span's name names: GenAI's
/// `<operation>_memory <store>` (`search_memory session-memory`), or
/// `retrieval <source>`.
pub fn store_in_name(name: &str) -> Option<&str> {
    let (op, rest) = name.trim().split_once(' ')?;
    let op = op.to_ascii_lowercase();
    let memory_op = op.ends_with("_memory")
        || op.ends_with("_memory_store")
        || matches!(op.as_str(), "retrieval" | "retrieve" | "search");
    memory_op.then(|| target(rest)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_read_from_every_framework_shape() {
        for (name, tool) in [
            ("tool.carrier_rates", "carrier_rates"),
            ("Tool:carrier_rates", "carrier_rates"),
            ("tool_call carrier_rates", "carrier_rates"),
            ("tools/carrier-rates", "carrier-rates"),
            ("execute_tool carrier_rates", "carrier_rates"),
            ("carrier_rates.tool", "carrier_rates"),
            ("carrier_rates call", "carrier_rates"),
            ("carrier_rates tool", "carrier_rates"),
        ] {
            assert_eq!(tool_in_name(name), Some(tool), "{name}");
        }
    }

    #[test]
    fn generic_names_name_no_tool() {
        for name in [
            "tool",
            "execute_tool",
            "LLM call",
            "http call",
            "tool.call",
            "POST",
            "GET /v1/tool",
            "tool /v1/rates",
            "tool https://x/y",
            "tool 42",
            "render page",
            "",
        ] {
            assert_eq!(tool_in_name(name), None, "{name}");
        }
    }

    #[test]
    fn models_and_stores_are_read_from_genai_names() {
        assert_eq!(model_in_name("chat gpt-4o-mini"), Some("gpt-4o-mini"));
        assert_eq!(model_in_name("chat"), None);
        assert_eq!(model_in_name("chatter box"), None);
        assert_eq!(
            store_in_name("create_memory user-prefs"),
            Some("user-prefs")
        );
        assert_eq!(store_in_name("retrieval docs-index"), Some("docs-index"));
        assert_eq!(store_in_name("load_session now"), None);
        assert_eq!(store_in_name("search_memory"), None);
    }
}
