//! The logical content of a trace, free of how its spans were written:
//! the *structure* (service, route, application spans: everything that is
//! not a call) kept as parsed, and the *calls*, each an operation with its
//! transport attempts and everything its spans said (`decompose` reads
//! them out of the original, `emit` writes them again).

use overtime_model::{SpanEvent, SpanRecord, SpanStatus, Stage};

/// What kind of call, as the original's spans say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Llm,
    Judge,
    Tool,
    Memory,
    Network,
}

impl Class {
    pub fn of(stage: Stage) -> Option<Class> {
        Some(match stage {
            Stage::Llm => Class::Llm,
            Stage::Judge => Class::Judge,
            Stage::Tool => Class::Tool,
            Stage::Memory => Class::Memory,
            Stage::Network => Class::Network,
            _ => return None,
        })
    }
    pub fn stage(self) -> &'static str {
        match self {
            Class::Llm => "llm",
            Class::Judge => "judge",
            Class::Tool => "tool",
            Class::Memory => "memory",
            Class::Network => "network",
        }
    }
    pub fn is_llm(self) -> bool {
        matches!(self, Class::Llm | Class::Judge)
    }
}

/// Where a call went: a host and, when known, a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub host: String,
    pub port: Option<u16>,
}

impl Address {
    /// The component a call named only by its address gets: `host:port`.
    pub fn component(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }
    pub fn parse(peer: &str) -> Address {
        match peer.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() && !h.is_empty() => Address {
                host: h.to_string(),
                port: p.parse().ok(),
            },
            _ => Address {
                host: peer.to_string(),
                port: None,
            },
        }
    }
    /// An address for a call whose spans gave none: a private IP drawn from
    /// the call's class and name, so one target has one address everywhere
    /// and nothing in it names the target.
    pub fn assigned(class: Class, name: &str) -> Address {
        let h = fnv(&format!("{}/{name}", class.stage()));
        Address {
            host: format!(
                "10.{}.{}.{}",
                1 + h % 250,
                1 + (h >> 8) % 250,
                1 + (h >> 16) % 250
            ),
            port: Some(if class.is_llm() { 8000 } else { 8080 }),
        }
    }
}

pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One transport attempt of a call.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The original span this attempt was read from.
    pub span_id: String,
    /// True when that span is not an operation span of the call (an HTTP
    /// client span, or an inner operation tried again under the call's),
    /// false when the operation was its own attempt.
    pub own_span: bool,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub status_message: Option<String>,
    pub error_type: Option<String>,
    pub http_status: Option<u16>,
    pub address: Address,
    /// The HTTP method, when the original said it (its span name).
    pub method: &'static str,
    pub llm_reason: Option<String>,
    pub llm_duration_ms: Option<f64>,
    pub dns_ms: Option<f64>,
    pub connect_ms: Option<f64>,
    /// DNS / connect / TLS events, as the original had them.
    pub net_events: Vec<SpanEvent>,
    pub attempt: Option<u32>,
}

/// One logical call.
#[derive(Debug, Clone)]
pub struct Call {
    pub class: Class,
    /// The model (LLM, judge), tool or store the original names it by.
    pub target: Option<String>,
    /// The original operation span's name (or the first one's).
    pub op_name: String,
    /// Every original span id of the call (operations and what is under them).
    pub span_ids: Vec<String>,
    /// Ids of the original operation spans (one, or one per repeated try).
    pub op_ids: Vec<String>,
    pub service: String,
    pub parent: Option<String>,
    pub start_us: i64,
    pub end_us: i64,
    pub status: SpanStatus,
    pub status_message: Option<String>,
    pub error_type: Option<String>,
    pub timeout_ms: Option<f64>,
    pub remaining_budget_ms: Option<f64>,
    pub model: Option<String>,
    /// The `tool` field or attribute, as the original gave it.
    pub tool: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub gpu_load: Option<f64>,
    pub fallback: Option<String>,
    pub fallback_accepted: Option<bool>,
    /// Events of the operation that are not DNS/connect (chunks, heartbeats…).
    pub events: Vec<SpanEvent>,
    /// Attributes no column took, from the operation spans.
    pub leftovers: Vec<(String, String)>,
    pub attempts: Vec<Attempt>,
    /// The original numbered its attempts (`attempt`): the rewrites carry
    /// the numbers (`agent.attempt`), and invent none.
    pub numbered: bool,
    /// How the original wrote it (`decompose::Shape`).
    pub original_shape: &'static str,
    /// The operation span that never arrived, when the call is the
    /// orphans of one lost parent: a rewrite that writes an operation
    /// gives it this id, `orphans` leaves it out again.
    pub lost_op: Option<String>,
    /// The attempts ran one after the other (retries), not side by side
    /// (only one operation ties those together: `repeated` and `orphans`
    /// cannot write them).
    pub sequential: bool,
}

impl Call {
    /// Every attempt goes to one address (siblings and repeated operations
    /// can only be told apart from other calls by that).
    pub fn one_endpoint(&self) -> bool {
        self.attempts
            .windows(2)
            .all(|w| w[0].address == w[1].address)
    }
    /// The address a call named by nothing else is blamed on.
    pub fn address(&self) -> &Address {
        &self.attempts[0].address
    }
    /// The names the original diagnosis may have given this call.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.target.iter().cloned().collect();
        v.extend(self.model.clone());
        v.extend(self.attempts.iter().map(|a| a.address.component()));
        v.push(self.op_name.clone());
        v
    }
    /// The name this call's store or tool is written under when it has no
    /// target of its own (a memory span named only by its span name).
    pub fn label(&self) -> String {
        self.target.clone().unwrap_or_else(|| self.op_name.clone())
    }
}

/// One trace, as calls and structure.
#[derive(Debug, Clone)]
pub struct Logical {
    /// Spans that are not calls, as parsed (the same in every rewrite).
    pub structure: Vec<SpanRecord>,
    pub calls: Vec<Call>,
}
