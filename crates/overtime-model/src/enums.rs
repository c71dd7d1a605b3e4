//! The closed vocabularies of docs/inputs.md#words and docs/diagnosis.md: stages, span statuses,
//! outcomes, root-cause kinds and findings. Their `as_str` names are the
//! contract (JSON, SQL, metrics labels); changing one is a breaking change.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! named_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

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
        Gateway => "gateway",
        Service => "service",
        Llm => "llm",
        Tool => "tool",
        Memory => "memory",
        Judge => "judge",
        Queue => "queue",
        Network => "network",
        Other => "other",
    }
);

named_enum!(
    /// How a span ended (docs/inputs.md#spans `status`).
    SpanStatus {
        Unset => "unset",
        Ok => "ok",
        Error => "error",
        Timeout => "timeout",
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
        GatewayTimeout => "gateway_timeout",
        ServiceTimeout => "service_timeout",
        Error => "error",
        Ok => "ok",
    }
);

named_enum!(
    /// Root-cause kinds, in rule order (docs/diagnosis.md#root-cause-kinds): the first that matches wins.
    RootCauseKind {
        StreamIdleGap => "stream_idle_gap",
        GatewayTimeoutMismatch => "gateway_timeout_mismatch",
        SerialBudgetExhaustion => "serial_budget_exhaustion",
        PoolSaturation => "pool_saturation",
        JudgeSlow => "judge_slow",
        LlmQueueing => "llm_queueing",
        LlmPrefillSlow => "llm_prefill_slow",
        LlmDecodeSlow => "llm_decode_slow",
        LlmSlow => "llm_slow",
        UpstreamConnectSlow => "upstream_connect_slow",
        RetryAmplification => "retry_amplification",
        ToolNoTimeout => "tool_no_timeout",
        ToolSlow => "tool_slow",
        Unknown => "unknown",
    }
);

named_enum!(
    /// Configuration findings, not tied to one call (docs/diagnosis.md#findings-configuration-not-one-call).
    FindingKind {
        TimeoutMisaligned => "timeout_misaligned",
        SemanticMask => "semantic_mask",
        NoTimeout => "no_timeout",
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
