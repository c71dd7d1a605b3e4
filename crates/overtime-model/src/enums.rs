//! The closed vocabularies of docs/inputs.md#words and docs/diagnosis.md: stages, span statuses,
//! outcomes, root-cause kinds and findings. Their `as_str` names are the
//! contract (JSON, SQL, metrics labels); changing one is a breaking change.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The contract name (`snake_case`).
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the contract name (exact, lowercase).
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

named_enum!(
    /// The class of a span (docs/inputs.md#words).
    Stage {
        /// A reverse proxy or API gateway hop (nginx, Envoy).
        Gateway => "gateway",
        /// The agent service's own work (a request handler, an agent step).
        Service => "service",
        /// A call to a model server (chat, completion, embedding).
        Llm => "llm",
        /// A tool call (an HTTP API, a function the agent invokes).
        Tool => "tool",
        /// A memory or retrieval store (vector DB, cache, session store).
        Memory => "memory",
        /// An LLM-as-judge call grading another answer.
        Judge => "judge",
        /// Waiting for a worker or connection before work began.
        Queue => "queue",
        /// DNS, connect or TLS: the network before the request is sent.
        Network => "network",
        /// None of the above, or not said.
        Other => "other",
    }
);

named_enum!(
    /// How a span ended (docs/inputs.md#spans `status`).
    SpanStatus {
        /// The span did not say (OpenTelemetry `UNSET`).
        Unset => "unset",
        /// It completed successfully.
        Ok => "ok",
        /// It failed with an error.
        Error => "error",
        /// It gave up on a timeout (its own or a deadline).
        Timeout => "timeout",
        /// It was cancelled, typically because the caller went away.
        Cancelled => "cancelled",
    }
);

impl SpanStatus {
    /// Lenient reading of the status words services write
    /// (`OK`, `STATUS_CODE_ERROR`, `timed_out`, `canceled`…).
    pub fn parse_lenient(s: &str) -> Option<Self> {
        let l = s.trim().to_ascii_lowercase();
        let l = l.strip_prefix("status_code_").unwrap_or(&l);
        Some(match l {
            "ok" | "success" | "succeeded" => SpanStatus::Ok,
            "error" | "err" | "failed" | "failure" => SpanStatus::Error,
            "timeout" | "timed_out" | "timedout" | "deadline_exceeded" => SpanStatus::Timeout,
            "cancelled" | "canceled" | "client_reset" | "aborted" => SpanStatus::Cancelled,
            "unset" | "" => SpanStatus::Unset,
            _ => return None,
        })
    }
}

named_enum!(
    /// The outcome of a trace as the user saw it (docs/diagnosis.md).
    Outcome {
        /// A gateway answered 504: it gave up waiting.
        GatewayTimeout => "gateway_timeout",
        /// The service gave up on its own budget (a 503 or a timed-out root span) before any gateway did.
        ServiceTimeout => "service_timeout",
        /// The request failed with an error other than a timeout.
        Error => "error",
        /// The request succeeded.
        Ok => "ok",
    }
);

named_enum!(
    /// Root-cause kinds (docs/diagnosis.md#root-cause-kinds). Each is decided, worded and
    /// counted by its one rule in `overtime-diagnose/src/rules/` (a test there fails for a
    /// kind with no rule); the order the rules are tried is that registry's. The order here
    /// is the kinds' sort order (reports list causes by it): a new kind goes before `Unknown`.
    RootCauseKind {
        /// A streamed response went silent longer than the gateway's read timeout.
        StreamIdleGap => "stream_idle_gap",
        /// The gateway gave up although no call's timeout fired: its timeout is shorter than the service's budget.
        GatewayTimeoutMismatch => "gateway_timeout_mismatch",
        /// No single call dominated: the chain as a whole ran out of budget.
        SerialBudgetExhaustion => "serial_budget_exhaustion",
        /// The time went to waiting for a worker or connection before work began.
        PoolSaturation => "pool_saturation",
        /// The dominant call is an LLM-as-judge call.
        JudgeSlow => "judge_slow",
        /// The dominant LLM call spent most of its time queued at the model server.
        LlmQueueing => "llm_queueing",
        /// The dominant LLM call spent most of its time in prefill (reading the prompt).
        LlmPrefillSlow => "llm_prefill_slow",
        /// The dominant LLM call spent most of its time decoding (generating tokens).
        LlmDecodeSlow => "llm_decode_slow",
        /// The dominant call is an LLM call whose phases are unknown.
        LlmSlow => "llm_slow",
        /// The dominant call spent at least half its time in DNS and connect.
        UpstreamConnectSlow => "upstream_connect_slow",
        /// The dominant call was retried and no single attempt held the time.
        RetryAmplification => "retry_amplification",
        /// The dominant call is a tool, memory or network call with no timeout.
        ToolNoTimeout => "tool_no_timeout",
        /// The dominant call is a tool, memory or network call that had a timeout.
        ToolSlow => "tool_slow",
        /// Too little data to say; the summary says what is missing. Never an incident's cause.
        Unknown => "unknown",
    }
);

named_enum!(
    /// Configuration findings, not tied to one call (docs/diagnosis.md#findings-configuration-not-one-call).
    FindingKind {
        /// Downstream timeouts, the service budget and the gateway timeout are not nested as they should be.
        TimeoutMisaligned => "timeout_misaligned",
        /// The gateway's 504 hid the service's real status (or the reverse).
        SemanticMask => "semantic_mask",
        /// A downstream call ran with no timeout.
        NoTimeout => "no_timeout",
        /// The gateway's read timeout was inferred from where its 504s cluster, not configured.
        GatewayTimeoutInferred => "gateway_timeout_inferred",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serde_agrees() {
        for k in RootCauseKind::ALL {
            assert_eq!(RootCauseKind::parse(k.as_str()), Some(*k));
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        assert_eq!(Stage::parse("llm"), Some(Stage::Llm));
        assert_eq!(Stage::parse("LLM"), None);
    }

    #[test]
    fn lenient_status() {
        assert_eq!(
            SpanStatus::parse_lenient("STATUS_CODE_ERROR"),
            Some(SpanStatus::Error)
        );
        assert_eq!(
            SpanStatus::parse_lenient("canceled"),
            Some(SpanStatus::Cancelled)
        );
        assert_eq!(SpanStatus::parse_lenient("bogus"), None);
    }
}
