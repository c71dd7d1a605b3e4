//! How each convention family writes a call's operation span, and the
//! naming variants every OTLP family is written in.
//!
//! Design rules:
//! - A family writes only what its instrumentation writes (span names,
//!   kinds, attribute keys: docs/span-conventions.md); the budget fields
//!   no convention has (`agent.timeout_ms`, `agent.budget_ms`,
//!   `agent.remaining_budget_ms`, `agent.attempt`) are written in every
//!   family, as overtime's users add them.
//! - Each span says, beside its attributes, what it tells about its call
//!   (`Tells`): whether it names the call's target, says it is an LLM call,
//!   says it is a judge. The harness computes every expectation from these
//!   (an address is the component only when no span of the call names it),
//!   never from a table of exceptions.
//! - A judge is marked as each stack marks it: overtime's `stage`, the
//!   GenAI agent name on the chat span, or an application span around the
//!   call named for the judge (OpenInference chain, Traceloop/LangChain
//!   task, a bare framework span).

use super::model::{Call, Class};
use super::write::V;

/// A convention family: how a stack writes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// overtime's JSONL fields (the baseline).
    Ours,
    /// OpenTelemetry GenAI, current names.
    GenAi,
    /// OpenTelemetry GenAI, the deprecated names still emitted.
    GenAiDeprecated,
    /// Arize OpenInference.
    OpenInference,
    /// Traceloop OpenLLMetry (its OpenAI instrumentation and decorators).
    Traceloop,
    /// LangChain runs as OpenLLMetry's LangChain callback writes them.
    LangChain,
    /// A framework's own spans with no attributes (`tool.<name>`, `<name> call`).
    Bare,
    /// Only the HTTP client spans: nothing names the call.
    HttpOnly,
}

impl Family {
    pub const ALL: [Family; 8] = [
        Family::Ours,
        Family::GenAi,
        Family::GenAiDeprecated,
        Family::OpenInference,
        Family::Traceloop,
        Family::LangChain,
        Family::Bare,
        Family::HttpOnly,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Family::Ours => "ours",
            Family::GenAi => "genai",
            Family::GenAiDeprecated => "genai_deprecated",
            Family::OpenInference => "openinference",
            Family::Traceloop => "traceloop",
            Family::LangChain => "langchain",
            Family::Bare => "bare",
            Family::HttpOnly => "http_only",
        }
    }
    /// JSONL (overtime's fields) rather than OTLP JSON lines.
    pub fn jsonl(self) -> bool {
        self == Family::Ours
    }
    /// The naming variants that change what this family writes: JSONL
    /// fields have one spelling.
    pub fn namings(self) -> Vec<Naming> {
        if self.jsonl() {
            return vec![Naming::default()];
        }
        let mut v = Vec::new();
        for underscore in [false, true] {
            for array in [false, true] {
                for old_http in [false, true] {
                    v.push(Naming {
                        underscore,
                        array,
                        old_http,
                    });
                }
            }
        }
        v
    }
}

/// How a rewrite spells what has several spellings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Naming {
    /// Captured headers as Python writes them (`x_llm_reason`), else `x-llm-reason`.
    pub underscore: bool,
    /// Header values as string arrays (one element per comma item), else strings.
    pub array: bool,
    /// HTTP semantic conventions before 1.21 (`http.method`, `net.peer.name`…).
    pub old_http: bool,
}

impl Naming {
    pub fn label(self) -> String {
        format!(
            "{}/{}/{}",
            if self.underscore { "x_hdr" } else { "x-hdr" },
            if self.array { "array" } else { "string" },
            if self.old_http {
                "http-old"
            } else {
                "http-stable"
            }
        )
    }
    /// A captured header: `http.{request|response}.header.<name>`.
    pub fn header(self, dir: &str, name: &str, value: &str, split: bool) -> (String, V) {
        let name = if self.underscore {
            name.replace('-', "_")
        } else {
            name.to_string()
        };
        let key = format!("http.{dir}.header.{name}");
        let v = if !self.array {
            V::S(value.to_string())
        } else if split {
            V::A(value.split(',').map(|p| p.trim().to_string()).collect())
        } else {
            V::A(vec![value.to_string()])
        };
        (key, v)
    }
    pub fn method(self) -> &'static str {
        if self.old_http {
            "http.method"
        } else {
            "http.request.method"
        }
    }
    pub fn status_code(self) -> &'static str {
        if self.old_http {
            "http.status_code"
        } else {
            "http.response.status_code"
        }
    }
    pub fn host(self) -> &'static str {
        if self.old_http {
            "net.peer.name"
        } else {
            "server.address"
        }
    }
    pub fn port(self) -> &'static str {
        if self.old_http {
            "net.peer.port"
        } else {
            "server.port"
        }
    }
    pub fn url(self) -> &'static str {
        if self.old_http {
            "http.url"
        } else {
            "url.full"
        }
    }
}

/// What a span tells about its call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tells {
    /// It names the call's target (model, tool, store).
    pub names: bool,
    /// It says the call is an LLM call.
    pub llm: bool,
    /// It says the call is a judge.
    pub judge: bool,
}

impl Tells {
    pub fn or(self, o: Tells) -> Tells {
        Tells {
            names: self.names || o.names,
            llm: self.llm || o.llm,
            judge: self.judge || o.judge,
        }
    }
}

/// A span a family writes for a call, before ids, times and status.
pub struct Shape {
    pub name: String,
    pub kind: &'static str,
    pub fields: Vec<(String, V)>,
    pub tells: Tells,
}

/// The operation span (and the application span around it, for a judge
/// in families that mark judges so) a family writes for `c`; `None` when
/// the family writes no operation (HTTP-only, and plain HTTP calls).
pub struct OpShapes {
    pub op: Shape,
    pub wrapper: Option<Shape>,
}

pub fn says_judge(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.contains("judg") || l.contains("evaluat") || l.contains("grader")
}

/// The name a judge's application span (or agent name) is given.
fn judge_label(c: &Call) -> String {
    if says_judge(&c.op_name) {
        c.op_name.clone()
    } else {
        "answer_judge".into()
    }
}

fn push<T: Into<V>>(f: &mut Vec<(String, V)>, k: &str, v: Option<T>) {
    if let Some(v) = v {
        f.push((k.to_string(), v.into()));
    }
}

/// The facts of an LLM call every GenAI-like family writes, under the
/// keys it writes them.
struct LlmKeys {
    input: &'static str,
    output: &'static str,
}

fn llm_common(c: &Call, f: &mut Vec<(String, V)>, keys: LlmKeys, response_model: bool) {
    push(f, "gen_ai.request.model", c.target.clone());
    if response_model && c.status == overtime_model::SpanStatus::Ok {
        push(f, "gen_ai.response.model", c.target.clone());
    }
    push(f, keys.input, c.input_tokens);
    push(f, keys.output, c.output_tokens);
    push(f, "gen_ai.request.max_tokens", c.max_tokens);
    push(f, "gen_ai.request.temperature", c.temperature);
}

/// The operation of `c` as `family` writes it.
pub fn op(family: Family, c: &Call) -> Option<OpShapes> {
    if family == Family::HttpOnly || c.class == Class::Network {
        return None;
    }
    let label = c.label();
    let named = c.target.is_some() || c.class == Class::Memory;
    let is_llm = c.class.is_llm();
    let judge = c.class == Class::Judge;
    let mut f: Vec<(String, V)> = Vec::new();
    let tells = |names: bool, llm: bool, judge: bool| Tells { names, llm, judge };
    let mut wrapper = None;
    let jl = judge_label(c);
    let op = match family {
        Family::Ours => {
            f.push(("stage".into(), V::S(c.class.stage().into())));
            push(&mut f, "model", c.model.clone().filter(|_| is_llm));
            push(&mut f, "tool", c.tool.clone());
            push(&mut f, "input_tokens", c.input_tokens);
            push(&mut f, "output_tokens", c.output_tokens);
            push(&mut f, "max_tokens", c.max_tokens);
            push(&mut f, "temperature", c.temperature);
            push(&mut f, "ttft_ms", c.ttft_ms);
            push(&mut f, "gpu_load", c.gpu_load);
            let attrs: serde_json::Map<String, serde_json::Value> = c
                .leftovers
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            if !attrs.is_empty() {
                f.push(("attributes".into(), V::J(serde_json::Value::Object(attrs))));
            }
            Shape {
                name: c.op_name.clone(),
                kind: "internal",
                fields: f,
                tells: tells(named, is_llm, judge),
            }
        }
        Family::GenAi | Family::GenAiDeprecated => {
            let current = family == Family::GenAi;
            if !current {
                f.push(("gen_ai.system".into(), V::S("openai".into())));
            } else {
                f.push(("gen_ai.provider.name".into(), V::S("openai".into())));
            }
            let (name, kind) = match c.class {
                Class::Llm | Class::Judge => {
                    f.push(("gen_ai.operation.name".into(), V::S("chat".into())));
                    let keys = if current {
                        LlmKeys {
                            input: "gen_ai.usage.input_tokens",
                            output: "gen_ai.usage.output_tokens",
                        }
                    } else {
                        LlmKeys {
                            input: "gen_ai.usage.prompt_tokens",
                            output: "gen_ai.usage.completion_tokens",
                        }
                    };
                    llm_common(c, &mut f, keys, true);
                    push(
                        &mut f,
                        "gen_ai.response.time_to_first_chunk",
                        c.ttft_ms.map(|t| t / 1000.0),
                    );
                    // GenAI inference spans carry the server they called.
                    let a = c.address();
                    f.push(("server.address".into(), V::S(a.host.clone())));
                    push(&mut f, "server.port", a.port.map(|p| p as i64));
                    if judge {
                        f.push(("gen_ai.agent.name".into(), V::S(jl.clone())));
                    }
                    let n = match &c.target {
                        Some(m) => format!("chat {m}"),
                        None => "chat".into(),
                    };
                    (n, "client")
                }
                Class::Tool => {
                    f.push(("gen_ai.operation.name".into(), V::S("execute_tool".into())));
                    push(&mut f, "gen_ai.tool.name", c.target.clone());
                    (format!("execute_tool {label}"), "internal")
                }
                Class::Memory if current => {
                    f.push(("gen_ai.operation.name".into(), V::S("search_memory".into())));
                    f.push(("gen_ai.memory.store.name".into(), V::S(label.clone())));
                    (format!("search_memory {label}"), "client")
                }
                Class::Memory => {
                    // Before the memory operations: the store as a database.
                    f.push(("db.system".into(), V::S("redis".into())));
                    f.push(("db.namespace".into(), V::S(label.clone())));
                    (format!("search {label}"), "client")
                }
                Class::Network => unreachable!(),
            };
            Shape {
                name,
                kind,
                fields: f,
                tells: tells(named, is_llm, judge),
            }
        }
        Family::OpenInference => {
            let (name, kind) = match c.class {
                Class::Llm | Class::Judge => {
                    f.push(("openinference.span.kind".into(), V::S("LLM".into())));
                    f.push(("llm.system".into(), V::S("openai".into())));
                    // llm.model_name comes from the response only; a failed
                    // call is named by its invocation parameters.
                    if c.status == overtime_model::SpanStatus::Ok {
                        push(&mut f, "llm.model_name", c.target.clone());
                    }
                    let mut p = serde_json::Map::new();
                    if let Some(m) = &c.target {
                        p.insert("model".into(), m.clone().into());
                    }
                    if let Some(m) = c.max_tokens {
                        p.insert("max_tokens".into(), m.into());
                    }
                    if let Some(t) = c.temperature {
                        p.insert("temperature".into(), t.into());
                    }
                    f.push((
                        "llm.invocation_parameters".into(),
                        V::S(serde_json::Value::Object(p).to_string()),
                    ));
                    push(&mut f, "llm.token_count.prompt", c.input_tokens);
                    push(&mut f, "llm.token_count.completion", c.output_tokens);
                    ("ChatCompletion".to_string(), "internal")
                }
                Class::Tool => {
                    f.push(("openinference.span.kind".into(), V::S("TOOL".into())));
                    push(&mut f, "tool.name", c.target.clone());
                    (label.clone(), "internal")
                }
                Class::Memory => {
                    f.push(("openinference.span.kind".into(), V::S("RETRIEVER".into())));
                    (label.clone(), "internal")
                }
                Class::Network => unreachable!(),
            };
            if judge {
                wrapper = Some(Shape {
                    name: jl.clone(),
                    kind: "internal",
                    fields: vec![("openinference.span.kind".into(), V::S("CHAIN".into()))],
                    tells: tells(false, false, true),
                });
            }
            Shape {
                name,
                kind,
                fields: f,
                tells: tells(named, is_llm, false),
            }
        }
        Family::Traceloop | Family::LangChain => {
            let lc = family == Family::LangChain;
            if lc {
                f.push(("traceloop.workflow.name".into(), V::S("agent".into())));
            }
            let (name, kind) = match c.class {
                Class::Llm | Class::Judge => {
                    f.push(("llm.request.type".into(), V::S("chat".into())));
                    f.push(("gen_ai.system".into(), V::S("openai".into())));
                    let keys = if lc {
                        LlmKeys {
                            input: "gen_ai.usage.input_tokens",
                            output: "gen_ai.usage.output_tokens",
                        }
                    } else {
                        LlmKeys {
                            input: "gen_ai.usage.prompt_tokens",
                            output: "gen_ai.usage.completion_tokens",
                        }
                    };
                    llm_common(c, &mut f, keys, true);
                    if lc {
                        push(
                            &mut f,
                            "traceloop.association.properties.ls_model_name",
                            c.target.clone(),
                        );
                        ("ChatOpenAI.chat".to_string(), "client")
                    } else {
                        ("openai.chat".to_string(), "client")
                    }
                }
                Class::Tool => {
                    f.push(("traceloop.span.kind".into(), V::S("tool".into())));
                    f.push(("traceloop.entity.name".into(), V::S(label.clone())));
                    (format!("{label}.tool"), "internal")
                }
                Class::Memory => {
                    // A vector store's own instrumentation: a database span.
                    f.push(("db.system".into(), V::S("qdrant".into())));
                    f.push(("db.namespace".into(), V::S(label.clone())));
                    ("qdrant.search".to_string(), "client")
                }
                Class::Network => unreachable!(),
            };
            if judge {
                wrapper = Some(Shape {
                    name: format!("{jl}.task"),
                    kind: "internal",
                    fields: vec![
                        ("traceloop.span.kind".into(), V::S("task".into())),
                        ("traceloop.entity.name".into(), V::S(jl.clone())),
                    ],
                    tells: tells(false, false, true),
                });
            }
            Shape {
                name,
                kind,
                fields: f,
                tells: tells(named, is_llm, false),
            }
        }
        Family::Bare => {
            let name = match c.class {
                Class::Tool => format!("tool.{label}"),
                _ => format!("{label} call"),
            };
            if judge {
                wrapper = Some(Shape {
                    name: jl.clone(),
                    kind: "internal",
                    fields: vec![],
                    tells: tells(false, false, true),
                });
            }
            // The name names the target; nothing says it is an LLM call.
            Shape {
                name,
                kind: "internal",
                fields: f,
                tells: tells(named, false, false),
            }
        }
        Family::HttpOnly => unreachable!(),
    };
    Some(OpShapes { op, wrapper })
}
