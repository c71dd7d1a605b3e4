//! Which stage (docs/inputs.md#words) a span belongs to, when it does not say.
//!
//! One pure function, [`derive_stage`], serves JSONL and OTLP alike: each
//! format fills a [`StageHints`] from what it read and the rules below pick
//! the stage.

use overtime_model::Stage;

/// What a span tells about its class. Every field is optional; an empty
/// hint set gives [`Stage::Other`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageHints<'a> {
    /// An explicit `stage` / `agent.stage` value, as written.
    pub explicit: Option<&'a str>,
    /// The span name.
    pub name: &'a str,
    /// Span kind: `server`, `client`, `internal`, `producer`, `consumer`.
    pub kind: Option<&'a str>,
    /// `gen_ai.operation.name` (or Traceloop's `llm.request.type`).
    pub operation: Option<&'a str>,
    /// The span kind of OpenInference (`openinference.span.kind`) or
    /// Traceloop (`traceloop.span.kind`), lowercase: `llm`, `tool`,
    /// `retriever`, `evaluator`, `chain`, `agent`, `workflow`, `task`…
    pub convention: Option<&'a str>,
    /// The span names a model although no operation says what it did
    /// (JSONL `model`, or OTLP `gen_ai.request.model` without
    /// `gen_ai.operation.name`).
    pub model: bool,
    /// A tool name is set (`tool`, `gen_ai.tool.name`).
    pub tool: bool,
    /// A database/vector store is named (`db.system`, `db.system.name`).
    pub db_system: bool,
    /// An outgoing HTTP or RPC request (`http.request.method`, `url.full`,
    /// or `rpc.system`).
    pub http_client: bool,
    /// An LLM gateway's own span timing one provider request (LiteLLM's
    /// `call_type` `make_openai_chat_completion_request`): an attempt on
    /// the wire, whatever its span kind.
    pub gateway_attempt: bool,
    /// An `agent.*` / `gen_ai.*` attribute says this is a judge/evaluation.
    pub judge: bool,
    /// The span has no parent.
    pub is_root: bool,
}

/// Reads an explicit stage leniently: the contract names in any case, plus
/// a few common synonyms (`model` → llm, `evaluation` → judge,
/// `retrieval`/`db` → memory, `http` → network, `pool` → queue).
pub fn parse_stage_lenient(s: &str) -> Option<Stage> {
    let l = s.trim().to_ascii_lowercase();
    Stage::parse(&l).or(match l.as_str() {
        "model" | "llm_call" | "inference" | "chat" | "completion" | "generation" => {
            Some(Stage::Llm)
        }
        "eval" | "evaluation" | "evaluator" | "grader" | "llm_judge" => Some(Stage::Judge),
        "tool_call" | "function" | "function_call" => Some(Stage::Tool),
        "db" | "database" | "retrieval" | "rag" | "vector" | "vector_store" | "cache" => {
            Some(Stage::Memory)
        }
        "http" | "net" | "upstream" => Some(Stage::Network),
        "pool" | "wait" | "queueing" | "queuing" => Some(Stage::Queue),
        "server" | "api" | "agent" | "app" => Some(Stage::Service),
        "proxy" | "ingress" | "nginx" => Some(Stage::Gateway),
        _ => None,
    })
}

/// Does this text name an LLM-as-judge / evaluation? `judg…` anywhere, or
/// a word such as `eval`, `evaluation`, `evaluator`, `grader` (whole
/// words, so `retrieval` does not count).
pub fn says_judge(text: &str) -> bool {
    let l = text.to_ascii_lowercase();
    l.contains("judg")
        || words(&l).any(|w| {
            matches!(
                w,
                "eval"
                    | "evals"
                    | "evaluate"
                    | "evaluation"
                    | "evaluations"
                    | "evaluator"
                    | "evaluating"
                    | "grader"
                    | "grading"
            )
        })
}

fn words(l: &str) -> impl Iterator<Item = &str> {
    l.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
}

fn is_llm_operation(op: &str) -> bool {
    matches!(
        op,
        "chat"
            | "text_completion"
            | "generate_content"
            | "completion"
            | "completions"
            // LiteLLM's call types (`llm.request.type` on `litellm_request`)
            | "acompletion"
            | "atext_completion"
            | "responses"
            | "aresponses"
            | "anthropic_messages"
    )
}

fn says_memory(l: &str) -> bool {
    l.ends_with("_memory")
        || l.ends_with(".memory")
        || words(l).any(|w| matches!(w, "memory" | "retrieval" | "retrieve" | "recall"))
}

fn says_queue(l: &str, kind: Option<&str>) -> bool {
    let messaging = matches!(kind, Some("producer" | "consumer"));
    let ws: Vec<&str> = words(l).collect();
    let has = |set: &[&str]| ws.iter().any(|w| set.contains(w));
    (!messaging && (l.contains("queue") || has(&["queuing", "enqueued"])))
        || has(&["acquire", "acquiring", "checkout", "semaphore"])
        || (has(&["wait", "waiting", "waited"])
            && has(&[
                "pool",
                "worker",
                "workers",
                "slot",
                "slots",
                "connection",
                "lock",
            ]))
}

/// Picks a span's stage. Rules, first match wins:
///
/// 1. an explicit `stage`/`agent.stage` that [`parse_stage_lenient`] reads;
/// 2. an OpenInference / Traceloop span kind: `llm` (judge when it says
///    so, as in 3), `evaluator` → judge, `tool`, `retriever`/`embedding`/
///    `reranker` → memory; `chain`/`agent`/`workflow`/`task` spans are the
///    application's own and skip rules 3 and 4;
/// 3. an LLM call — `gen_ai.operation.name` `chat`, `text_completion` or
///    `generate_content`, LiteLLM's `acompletion` and its kin (or a model
///    with no operation) — is `judge` when
///    its name or a name-like attribute says judge/evaluation
///    ([`says_judge`]), else `llm`;
/// 4. `execute_tool`, or a tool name → `tool`;
/// 5. an operation or name ending `_memory` or saying `retrieval`/`memory`,
///    or a `db.system` → `memory`;
/// 6. a name/operation saying queue, pool/worker wait or acquire → `queue`
///    (messaging producer/consumer spans excepted);
/// 7. a client-kind HTTP or RPC call (`http.request.method`, `url.full`,
///    `rpc.system`), or an LLM gateway's timing of one provider request
///    (LiteLLM's `call_type` `make_…_request`) → `network`;
/// 8. a server-kind span, or a root → `service`;
/// 9. else `other`.
pub fn derive_stage(h: &StageHints) -> Stage {
    if let Some(s) = h.explicit.and_then(parse_stage_lenient) {
        return s;
    }
    let name = h.name.to_ascii_lowercase();
    let op = h.operation.map(|o| o.trim().to_ascii_lowercase());
    let op = op.as_deref().unwrap_or("");
    // An application span of an LLM framework (a chain, an agent, a
    // workflow step) is not a call, whatever model it mentions.
    let app_span = matches!(
        h.convention,
        Some("chain" | "agent" | "workflow" | "task" | "guardrail" | "unknown")
    );
    match h.convention {
        Some("llm") => {
            return if says_judge(&name) || h.judge {
                Stage::Judge
            } else {
                Stage::Llm
            };
        }
        Some("evaluator") => return Stage::Judge,
        Some("tool") => return Stage::Tool,
        Some("retriever" | "embedding" | "reranker") => return Stage::Memory,
        _ => {}
    }
    let llm = !app_span && (is_llm_operation(op) || (op.is_empty() && h.model));
    if llm {
        return if says_judge(&name) || h.judge {
            Stage::Judge
        } else {
            Stage::Llm
        };
    }
    if !app_span && (op == "execute_tool" || h.tool) {
        return Stage::Tool;
    }
    if says_memory(op) || says_memory(&name) || h.db_system {
        return Stage::Memory;
    }
    if says_queue(op, h.kind) || says_queue(&name, h.kind) {
        return Stage::Queue;
    }
    if (h.kind == Some("client") && h.http_client) || h.gateway_attempt {
        return Stage::Network;
    }
    if h.kind == Some("server") || h.is_root {
        return Stage::Service;
    }
    Stage::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> StageHints<'_> {
        StageHints {
            name,
            ..Default::default()
        }
    }

    #[test]
    fn llm_and_judge() {
        let h = StageHints {
            operation: Some("generate_content"),
            ..named("gemini")
        };
        assert_eq!(derive_stage(&h), Stage::Llm);
        assert_eq!(derive_stage(&StageHints { judge: true, ..h }), Stage::Judge);
        let model_only = StageHints {
            model: true,
            ..named("Quality eval")
        };
        assert_eq!(derive_stage(&model_only), Stage::Judge);
        // A judge-sounding name without an LLM call is not a judge.
        assert_eq!(derive_stage(&named("judge_dispatch")), Stage::Other);
        // `invoke_agent` with a model is not an LLM call.
        let agent = StageHints {
            operation: Some("invoke_agent"),
            model: true,
            ..named("invoke_agent planner")
        };
        assert_eq!(derive_stage(&agent), Stage::Other);
        // LiteLLM's `litellm_request`: its call type is the operation.
        let litellm = StageHints {
            operation: Some("acompletion"),
            model: true,
            ..named("litellm_request")
        };
        assert_eq!(derive_stage(&litellm), Stage::Llm);
    }

    #[test]
    fn tool_memory_queue() {
        let tool = StageHints {
            operation: Some("execute_tool"),
            ..named("execute_tool weather")
        };
        assert_eq!(derive_stage(&tool), Stage::Tool);
        let mem = StageHints {
            operation: Some("search_memory"),
            ..named("x")
        };
        assert_eq!(derive_stage(&mem), Stage::Memory);
        assert_eq!(derive_stage(&named("vector retrieval")), Stage::Memory);
        assert_eq!(derive_stage(&named("load_memory")), Stage::Memory);
        let db = StageHints {
            db_system: true,
            kind: Some("client"),
            ..named("SELECT")
        };
        assert_eq!(derive_stage(&db), Stage::Memory);
        assert_eq!(derive_stage(&named("worker_queue_wait")), Stage::Queue);
        assert_eq!(derive_stage(&named("pool.acquire")), Stage::Queue);
        assert_eq!(derive_stage(&named("wait for worker slot")), Stage::Queue);
        let consumer = StageHints {
            kind: Some("consumer"),
            ..named("orders_queue process")
        };
        assert_eq!(derive_stage(&consumer), Stage::Other);
    }

    #[test]
    fn network_service_other() {
        let http = StageHints {
            kind: Some("client"),
            http_client: true,
            ..named("POST")
        };
        assert_eq!(derive_stage(&http), Stage::Network);
        // Server spans and roots are the service; a root HTTP client is
        // still a network call.
        let server = StageHints {
            kind: Some("server"),
            ..named("POST /v1/agent")
        };
        assert_eq!(derive_stage(&server), Stage::Service);
        let root = StageHints {
            is_root: true,
            ..named("handle")
        };
        assert_eq!(derive_stage(&root), Stage::Service);
        assert_eq!(
            derive_stage(&StageHints {
                is_root: true,
                ..http
            }),
            Stage::Network
        );
        assert_eq!(derive_stage(&named("render")), Stage::Other);
        // LiteLLM's timing of one provider request is an attempt on the
        // wire, though written as an internal span.
        let litellm_attempt = StageHints {
            gateway_attempt: true,
            kind: Some("internal"),
            ..named("self")
        };
        assert_eq!(derive_stage(&litellm_attempt), Stage::Network);
        // An explicit value that cannot be read falls back to the rules.
        let bad = StageHints {
            explicit: Some("warp"),
            ..server
        };
        assert_eq!(derive_stage(&bad), Stage::Service);
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn parse_stage_lenient_example() {
        use crate::spans::stage::parse_stage_lenient;
        use overtime_model::Stage;
        assert_eq!(parse_stage_lenient(" LLM "), Some(Stage::Llm));
        assert_eq!(parse_stage_lenient("evaluation"), Some(Stage::Judge));
        assert_eq!(parse_stage_lenient("frobnicate"), None);
    }

    #[test]
    fn says_judge_example() {
        use crate::spans::stage::says_judge;
        assert!(says_judge("answer_judge"));
        assert!(says_judge("LLM eval"));
        assert!(!says_judge("retrieval"));
    }

    #[test]
    fn derive_stage_example() {
        use crate::spans::stage::{StageHints, derive_stage};
        use overtime_model::Stage;
        let chat = StageHints {
            name: "chat deepseek",
            operation: Some("chat"),
            ..Default::default()
        };
        assert_eq!(derive_stage(&chat), Stage::Llm);
        let judge = StageHints {
            name: "answer_judge",
            ..chat
        };
        assert_eq!(derive_stage(&judge), Stage::Judge);
        let http = StageHints {
            name: "GET",
            kind: Some("client"),
            http_client: true,
            ..Default::default()
        };
        assert_eq!(derive_stage(&http), Stage::Network);
        let explicit = StageHints {
            explicit: Some("tool"),
            ..chat
        };
        assert_eq!(derive_stage(&explicit), Stage::Tool);
    }
}
