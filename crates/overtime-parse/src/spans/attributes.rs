//! Fields and attributes → `spans` columns, shared by JSONL and OTLP.
//!
//! A [`SpanBuilder`] starts from a span's required fields, takes JSONL
//! fields ([`SpanBuilder::field`]), OTLP attributes
//! ([`SpanBuilder::attribute`]) and events ([`SpanBuilder::event`]) in any
//! order, and [`SpanBuilder::finish`] settles what depends on several of
//! them: status, stage, peer, DNS/connect times. The attribute → column
//! table is in the README and in the module docs of [`super`].

use super::conventions::{self, Slot, clean_error_type};
use super::names::tool_in_name;
use super::stage::{StageHints, derive_stage, says_judge};
use super::status::{parse_status_word, refine_status};
use super::value::{
    any_bool, any_f64, any_i64, any_joined, any_str, any_to_string, plain_json_to_any,
};
use crate::duration::parse_duration_ms;
use crate::llm_reason::{parse_llm_duration, parse_llm_reason};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use overtime_model::{SpanEvent, SpanRecord, SpanStatus};
use std::collections::HashMap;

/// Builds one [`SpanRecord`] from fields, attributes and events.
#[derive(Debug)]
pub struct SpanBuilder {
    rec: SpanRecord,
    base_status: SpanStatus,
    explicit_stage: Option<String>,
    operation: Option<String>,
    /// OpenInference / Traceloop span kind, lowercase.
    convention_kind: Option<String>,
    /// `traceloop.entity.name`: the tool's name on a tool span.
    entity_name: Option<String>,
    /// Per slot group: the rank, key and value of the attribute that filled it.
    winners: HashMap<&'static str, (usize, String, String)>,
    db_system: bool,
    /// `rpc.system` is set: a client span of it is an outgoing call.
    rpc_system: bool,
    http_client: bool,
    /// An LLM gateway's timing of one provider request (LiteLLM's
    /// `call_type` `make_…_request`): one attempt on the wire.
    gateway_attempt: bool,
    judge: bool,
    server_address: Option<String>,
    server_port: Option<i64>,
    url_host: Option<String>,
    exception_type: Option<String>,
    exception_message: Option<String>,
    dns_event_ms: Option<f64>,
    connect_event_ms: Option<f64>,
    unreadable_events: usize,
}

/// A non-empty string value (numbers rendered), for names and ids.
fn text(v: &AnyValue) -> Option<String> {
    match any_str(v) {
        Some(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        None => any_f64(v).map(|_| any_to_string(v)),
    }
}

/// Keys whose value names what a span is (a model, an agent, a role):
/// a judge named there makes the span a judge. Message contents are not
/// among them (a prompt may well say "evaluate").
fn names_a_role(key: &str) -> bool {
    key.starts_with("agent.")
        || key.ends_with(".model")
        || key.ends_with(".model_name")
        || key == "gen_ai.agent.name"
        || key == "traceloop.entity.name"
        // The Vercel AI SDK names the function a call serves.
        || key == "ai.telemetry.functionId"
}

/// Sets `slot` to the value's text when it has one.
fn set_text(slot: &mut Option<String>, v: &AnyValue) -> bool {
    match text(v) {
        Some(t) => {
            *slot = Some(t);
            true
        }
        None => false,
    }
}

fn string_value(s: String) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    }
}

/// Normalises a span kind (`SPAN_KIND_CLIENT`, `Client`, 3…).
pub(crate) fn kind_name(s: &str) -> Option<&'static str> {
    let l = s.trim().to_ascii_lowercase();
    Some(match l.strip_prefix("span_kind_").unwrap_or(&l) {
        "internal" | "1" => "internal",
        "server" | "2" => "server",
        "client" | "3" => "client",
        "producer" | "4" => "producer",
        "consumer" | "5" => "consumer",
        _ => return None,
    })
}

/// The `host[:port]` of a URL (`https://u@api.x.com:8443/v1?q` → `api.x.com:8443`).
pub fn url_host(url: &str) -> Option<String> {
    let rest = url.trim().split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    (!host.is_empty()).then(|| host.to_string())
}

impl SpanBuilder {
    /// Starts from a span with its required fields set.
    pub fn new(rec: SpanRecord) -> Self {
        SpanBuilder {
            rec,
            base_status: SpanStatus::Unset,
            explicit_stage: None,
            operation: None,
            convention_kind: None,
            entity_name: None,
            winners: HashMap::new(),
            db_system: false,
            rpc_system: false,
            http_client: false,
            gateway_attempt: false,
            judge: false,
            server_address: None,
            server_port: None,
            url_host: None,
            exception_type: None,
            exception_message: None,
            dns_event_ms: None,
            connect_event_ms: None,
            unreadable_events: 0,
        }
    }

    /// The span's own status before refinement (JSONL `status`, OTLP
    /// `status.code`).
    pub fn set_status(&mut self, s: SpanStatus) {
        self.base_status = s;
    }

    /// Sets the span kind.
    pub fn set_kind(&mut self, kind: Option<&'static str>) {
        self.rec.kind = kind.map(str::to_string);
    }

    /// Sets the status message (ignored when empty).
    pub fn set_status_message(&mut self, m: &str) {
        if !m.trim().is_empty() {
            self.rec.status_message = Some(m.to_string());
        }
    }

    /// Keeps an attribute that maps to no column, as a string.
    pub fn keep(&mut self, key: &str, v: &AnyValue) {
        self.rec
            .attributes
            .push((key.to_string(), any_to_string(v)));
    }

    /// Counts an event that could not be read (no usable time).
    pub fn unreadable_event(&mut self) {
        self.unreadable_events += 1;
    }

    /// Applies one JSONL field (docs/inputs.md#spans table, plus the `spans` column
    /// names `kind`, `http_status`, `error_type`, `status_message`,
    /// `max_wait_ms`, `peer`, `llm_duration_ms` and `llm_duration`). OTLP
    /// `agent.<field>` attributes come here too. Returns `false` when the
    /// name is not a field or the value cannot be read as its type; the
    /// caller then keeps it in `attributes`.
    pub fn field(&mut self, name: &str, v: &AnyValue) -> bool {
        let r = &mut self.rec;
        let num = any_f64(v);
        let int = any_i64(v);
        // null, or an empty string: "not set", which is a valid reading.
        let is_null = v.value.is_none() || any_str(v).is_some_and(|s| s.trim().is_empty());
        macro_rules! set {
            ($slot:expr, $val:expr) => {{
                match $val {
                    Some(x) => {
                        $slot = Some(x);
                        true
                    }
                    None => is_null,
                }
            }};
        }
        match name {
            "stage" => set!(self.explicit_stage, any_str(v).map(str::to_string)),
            "status" => match any_str(v).and_then(parse_status_word) {
                Some(s) => {
                    self.base_status = s;
                    true
                }
                None => is_null,
            },
            // 0 or negative: "no timeout", as most HTTP clients read it.
            "timeout_ms" => match num {
                Some(t) => {
                    r.timeout_ms = (t > 0.0).then_some(t);
                    true
                }
                None => is_null,
            },
            "budget_ms" => set!(r.budget_ms, num),
            "remaining_budget_ms" => set!(r.remaining_budget_ms, num),
            "attempt" => set!(r.attempt, int.and_then(|i| u32::try_from(i).ok())),
            "request_id" => set!(r.request_id, text(v)),
            "model" => set!(r.model, text(v)),
            "input_tokens" => set!(r.input_tokens, int),
            "output_tokens" => set!(r.output_tokens, int),
            "max_tokens" => set!(r.max_tokens, int),
            "temperature" => set!(r.temperature, num),
            "ttft_ms" => set!(r.ttft_ms, num),
            "gpu_load" => set!(r.gpu_load, num),
            "judge_score" => set!(r.judge_score, num),
            "llm_reason" => match any_str(v) {
                Some(s) => {
                    r.phases = parse_llm_reason(s);
                    r.llm_reason = Some(s.to_string());
                    true
                }
                None => is_null,
            },
            "llm_duration" => set!(
                r.llm_duration_ms,
                any_str(v)
                    .and_then(parse_llm_duration)
                    .or(num.map(|s| s * 1000.0))
            ),
            "llm_duration_ms" => set!(r.llm_duration_ms, num),
            "tool" => set!(r.tool, text(v)),
            "fallback" => set!(r.fallback, text(v)),
            "fallback_accepted" => set!(r.fallback_accepted, any_bool(v)),
            "dns_ms" => set!(r.dns_ms, num),
            "connect_ms" => set!(r.connect_ms, num),
            "kind" => set!(r.kind, any_str(v).and_then(kind_name).map(str::to_string)),
            "http_status" => set!(r.http_status, int.and_then(http_code)),
            "error_type" => set!(r.error_type, text(v)),
            "status_message" => set!(r.status_message, text(v)),
            "max_wait_ms" => set!(r.max_wait_ms, num),
            "max_wait" => set!(r.max_wait_ms, max_wait(v)),
            "peer" => set!(r.peer, text(v)),
            _ => false,
        }
    }

    /// Applies one OTLP attribute (or a JSONL `attributes` entry): the
    /// names of [`conventions::ATTRIBUTE_MAPPINGS`] first (within a column
    /// the one listed first wins, whatever the arrival order; a value that
    /// loses and differs is kept in `attributes`), then `agent.<field>`;
    /// anything else is kept in `attributes` as a string.
    pub fn attribute(&mut self, key: &str, v: &AnyValue) {
        if names_a_role(key) && any_str(v).is_some_and(says_judge) {
            self.judge = true;
        }
        let rows = conventions::ranked(key);
        if rows.is_empty() {
            let mapped = match key {
                "dns_ms" | "connect_ms" => self.field(key, v),
                _ => match key.strip_prefix("agent.") {
                    Some(field) => self.field(field, v),
                    None => false,
                },
            };
            if !mapped {
                self.keep(key, v);
            }
            return;
        }
        let rendered = any_to_string(v);
        let mut keep = false;
        let mut used = false;
        for (rank, row) in rows {
            keep |= row.keep;
            let group = conventions::group(row.slot);
            match self.winners.get(group) {
                Some((r, _, _)) if *r <= rank => continue,
                _ => {}
            }
            if !self.apply(row.slot, v) {
                continue;
            }
            used = true;
            let old = self
                .winners
                .insert(group, (rank, key.to_string(), rendered.clone()));
            if let Some((_, old_key, old_value)) = old
                && old_value != rendered
                && old_key != key
                && !self.kept(&old_key)
            {
                self.rec.attributes.push((old_key, old_value));
            }
        }
        let differs = !used
            && !self
                .winners
                .values()
                .any(|(_, _, value)| *value == rendered);
        if keep || (!used && differs) {
            self.keep(key, v);
        }
    }

    /// Sets one phase the model server reported (a phase the span's
    /// `X-LLM-Reason` gives is not overwritten).
    fn phase(&mut self, p: conventions::Phase, ms: f64) -> bool {
        use conventions::Phase as P;
        let ph = &mut self.rec.phases;
        let slot = match p {
            P::Queue => &mut ph.queue_ms,
            P::Prefill => &mut ph.prefill_ms,
            P::Decode => &mut ph.decode_ms,
            P::Inference | P::Total => {
                let name = if p == P::Inference {
                    "inference"
                } else {
                    "total"
                };
                if !ph.other.iter().any(|(n, _)| n == name) {
                    ph.other.push((name.to_string(), ms));
                }
                return true;
            }
        };
        if slot.is_none() {
            *slot = Some(ms);
        }
        true
    }

    /// Nothing but its name can say this span is a tool call: not a
    /// server, no LLM or application convention, no model, and no other
    /// explicit stage.
    fn may_be_named_tool(&self) -> bool {
        let r = &self.rec;
        r.kind.as_deref() != Some("server")
            && r.model.is_none()
            && self
                .operation
                .as_deref()
                .is_none_or(|o| o.eq_ignore_ascii_case("execute_tool"))
            && self.convention_kind.as_deref().is_none_or(|k| k == "tool")
            && self.explicit_stage.as_deref().is_none_or(|s| {
                super::stage::parse_stage_lenient(s) == Some(overtime_model::Stage::Tool)
            })
    }

    fn kept(&self, key: &str) -> bool {
        self.rec.attributes.iter().any(|(k, _)| k == key)
    }

    /// Reads one attribute into its slot; `false` when the value cannot be
    /// read as the slot's type.
    fn apply(&mut self, slot: Slot, v: &AnyValue) -> bool {
        let param = |names: &[&str]| {
            let doc: serde_json::Value = serde_json::from_str(any_str(v)?).ok()?;
            let o = doc.as_object()?;
            names
                .iter()
                .find_map(|n| o.get(*n).filter(|x| !x.is_null()))
                .map(plain_json_to_any)
        };
        match slot {
            Slot::Operation => set_text(&mut self.operation, v),
            Slot::ConventionKind => {
                set_text(&mut self.convention_kind, v)
                    && self
                        .convention_kind
                        .as_mut()
                        .map(|k| k.make_ascii_lowercase())
                        .is_some()
            }
            Slot::EntityName => set_text(&mut self.entity_name, v),
            Slot::Model => self.field("model", v),
            Slot::InvocationModel => {
                param(&["model", "model_name"]).is_some_and(|m| self.field("model", &m))
            }
            Slot::InvocationMaxTokens => {
                param(&["max_tokens", "max_completion_tokens", "max_output_tokens"])
                    .is_some_and(|m| self.field("max_tokens", &m))
            }
            Slot::InvocationTemperature => {
                param(&["temperature"]).is_some_and(|t| self.field("temperature", &t))
            }
            Slot::InputTokens => self.field("input_tokens", v),
            Slot::OutputTokens => self.field("output_tokens", v),
            Slot::MaxTokens => self.field("max_tokens", v),
            Slot::Temperature => self.field("temperature", v),
            Slot::TtftSeconds => match any_f64(v) {
                Some(s) => {
                    self.rec.ttft_ms = Some(s * 1000.0);
                    true
                }
                None => false,
            },
            Slot::TtftMillis => self.field("ttft_ms", v),
            Slot::PhaseSeconds(p) => match any_f64(v) {
                Some(s) if s.is_finite() && s >= 0.0 => self.phase(p, s * 1000.0),
                _ => false,
            },
            Slot::PhaseMillis(p) => {
                match any_f64(v).or_else(|| any_joined(v).and_then(|s| s.trim().parse().ok())) {
                    Some(ms) if ms.is_finite() && ms >= 0.0 => self.phase(p, ms),
                    _ => false,
                }
            }
            Slot::Tool => self.field("tool", v),
            Slot::JudgeScore => self.field("judge_score", v),
            Slot::LlmReason => match any_joined(v) {
                Some(s) => self.field("llm_reason", &string_value(s)),
                None => false,
            },
            Slot::LlmDuration => self.field("llm_duration", v),
            Slot::MaxWait => self.field("max_wait", v),
            Slot::RequestId => self.field("request_id", v),
            Slot::HttpStatus => self.field("http_status", v),
            Slot::ErrorType => match any_str(v) {
                Some(s) => self.field("error_type", &string_value(clean_error_type(s).into())),
                None => self.field("error_type", v),
            },
            Slot::ServerAddress => set_text(&mut self.server_address, v),
            Slot::ServerPort => match any_i64(v) {
                Some(p) => {
                    self.server_port = Some(p);
                    true
                }
                None => false,
            },
            Slot::HttpMethod => {
                self.http_client = true;
                true
            }
            Slot::Url => {
                self.http_client = true;
                self.url_host = any_str(v).and_then(url_host).or(self.url_host.take());
                true
            }
            Slot::DbSystem => {
                self.db_system = true;
                true
            }
            Slot::RpcSystem => {
                self.rpc_system = true;
                true
            }
            Slot::GatewayCallType => {
                if let Some(t) = any_str(v) {
                    // `make_openai_chat_completion_request <- track_llm_api_timing`
                    let what = t.split("<-").next().unwrap_or(t).trim();
                    self.gateway_attempt |= what.starts_with("make_") && what.ends_with("_request");
                }
                true
            }
        }
    }

    /// Adds a span event. `chunk`, `heartbeat`, `dns`, `connect` and all
    /// others are kept by name and time; a duration comes from the
    /// attributes `duration_ms`, `dns_ms` or `connect_ms`. A `dns`/`connect`
    /// event's duration fills `dns_ms`/`connect_ms` when no field did;
    /// `gen_ai.evaluation.result` gives `judge_score`; `exception` gives the
    /// error type/message when the span has none.
    pub fn event(&mut self, name: &str, time_us: i64, attrs: &[KeyValue]) {
        let attr = |k: &str| {
            attrs
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.as_ref())
        };
        let duration_ms = ["duration_ms", "dns_ms", "connect_ms", "agent.duration_ms"]
            .iter()
            .find_map(|k| attr(k).and_then(any_f64));
        match name.to_ascii_lowercase().as_str() {
            "dns" => self.dns_event_ms = self.dns_event_ms.or(duration_ms),
            "connect" => self.connect_event_ms = self.connect_event_ms.or(duration_ms),
            // OpenInference marks the first streamed token with an event.
            "first token stream event" if self.rec.ttft_ms.is_none() => {
                self.rec.ttft_ms = Some((time_us - self.rec.start_us).max(0) as f64 / 1000.0);
            }
            "gen_ai.evaluation.result" => {
                if let Some(s) = attr("gen_ai.evaluation.score.value").and_then(any_f64) {
                    self.rec.judge_score = Some(s);
                }
            }
            "exception" => {
                let get = |k| attr(k).and_then(any_str).map(str::to_string);
                self.exception_type = self.exception_type.take().or(get("exception.type"));
                self.exception_message = self.exception_message.take().or(get("exception.message"));
            }
            _ => {}
        }
        self.rec.events.push(SpanEvent {
            name: name.to_string(),
            time_us,
            duration_ms,
        });
    }

    /// Settles status, stage, peer and DNS/connect and returns the span.
    pub fn finish(mut self) -> SpanRecord {
        let named_tool = self.may_be_named_tool();
        let r = &mut self.rec;
        if r.tool.is_none() && self.convention_kind.as_deref() == Some("tool") {
            r.tool = self.entity_name.take();
        }
        // A framework span named for a tool (`tool.carrier_rates`,
        // LangChain's `carrier_rates.tool`) names it when no attribute
        // does, unless something else says what the span is.
        if r.tool.is_none() && named_tool {
            r.tool = tool_in_name(&r.name).map(str::to_string);
        }
        let address = match (self.server_address, self.server_port) {
            (Some(a), Some(p)) => Some(format!("{a}:{p}")),
            (a, _) => a,
        };
        if r.kind.as_deref() == Some("server") {
            // On a server span `server.address` is the span's own host.
            if let Some(a) = address {
                r.attributes.push(("server.address".into(), a));
            }
        } else if r.peer.is_none() {
            r.peer = address.or(self.url_host);
        }
        r.dns_ms = r.dns_ms.or(self.dns_event_ms);
        r.connect_ms = r.connect_ms.or(self.connect_event_ms);
        r.error_type = r.error_type.take().or(self.exception_type);
        let message = r
            .status_message
            .as_deref()
            .or(self.exception_message.as_deref());
        r.status = refine_status(
            self.base_status,
            r.http_status,
            r.error_type.as_deref(),
            message,
        );
        let hints = StageHints {
            explicit: self.explicit_stage.as_deref(),
            name: &r.name,
            kind: r.kind.as_deref(),
            operation: self.operation.as_deref(),
            convention: self.convention_kind.as_deref(),
            model: r.model.is_some(),
            tool: r.tool.is_some(),
            db_system: self.db_system,
            http_client: self.http_client || self.rpc_system,
            gateway_attempt: self.gateway_attempt,
            judge: self.judge,
            is_root: r.parent_span_id.is_none(),
        };
        r.stage = derive_stage(&hints);
        if let Some(s) = self.explicit_stage
            && super::stage::parse_stage_lenient(&s).is_none()
        {
            r.attributes.push(("stage".into(), s));
        }
        if self.unreadable_events > 0 {
            r.attributes.push((
                "overtime.unreadable_events".into(),
                self.unreadable_events.to_string(),
            ));
        }
        self.rec
    }
}

fn http_code(i: i64) -> Option<u16> {
    u16::try_from(i).ok().filter(|c| (100..=999).contains(c))
}

/// `X-Max-Wait`: `60s`, `1500ms`, or a bare number of seconds.
fn max_wait(v: &AnyValue) -> Option<f64> {
    any_str(v)
        .and_then(|s| parse_duration_ms(s, 1000.0))
        .or(any_f64(v).map(|s| s * 1000.0))
}

#[cfg(test)]
#[path = "attributes_tests.rs"]
mod tests;

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn url_host_example() {
        use crate::spans::attributes::url_host;
        assert_eq!(
            url_host("https://user@api.weather.com:8443/v1?q=1").as_deref(),
            Some("api.weather.com:8443")
        );
        assert_eq!(url_host("/relative/path"), None);
    }
}
