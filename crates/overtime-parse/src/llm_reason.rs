//! `X-LLM-Reason` and `X-LLM-Duration` (docs/inputs.md#x-llm-reason): a model server's own
//! account of where an LLM call's time went.

use crate::duration::parse_duration_ms;
use overtime_model::LlmPhases;

/// Parses `kv_cache_build=3.2s,decode_loop=28.1s,io_wait=1.4s`.
///
/// Phase names map to `queue` (`queue`, `queue_wait`), `prefill`
/// (`kv_cache_build`, `prefill`), `decode` (`decode_loop`, `decode`) and
/// `io` (`io_wait`); other names are kept. A pair that cannot be read sets
/// `malformed` and is skipped; the rest is still used. Never fails.
///
/// ```
/// use overtime_parse::llm_reason::parse_llm_reason;
/// let p = parse_llm_reason("kv_cache_build=3.2s, decode_loop=28.1s,io_wait=1.4s");
/// assert_eq!(p.prefill_ms, Some(3200.0));
/// assert_eq!(p.decode_ms, Some(28100.0));
/// assert_eq!(p.io_ms, Some(1400.0));
/// assert!(!p.malformed);
/// ```
pub fn parse_llm_reason(raw: &str) -> LlmPhases {
    let mut p = LlmPhases::default();
    let raw = raw.trim();
    if raw.is_empty() || raw == "-" {
        return p;
    }
    for pair in raw.split([',', ';']) {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let Some((name, value)) = pair.split_once(['=', ':']) else {
            p.malformed = true;
            continue;
        };
        let Some(ms) = parse_duration_ms(value, 1000.0) else {
            p.malformed = true;
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let slot = match name.as_str() {
            "queue" | "queue_wait" | "queueing" | "queue_time" => &mut p.queue_ms,
            "kv_cache_build" | "prefill" | "prefill_time" => &mut p.prefill_ms,
            "decode_loop" | "decode" | "decode_time" => &mut p.decode_ms,
            "io_wait" | "io" => &mut p.io_ms,
            _ => {
                if name.is_empty() {
                    p.malformed = true;
                } else {
                    p.other.push((name, ms));
                }
                continue;
            }
        };
        *slot = Some(slot.unwrap_or(0.0) + ms);
    }
    p
}

/// Parses `X-LLM-Duration`: `47.2s` or a bare `47.2` (seconds), into ms.
///
/// ```
/// assert_eq!(overtime_parse::llm_reason::parse_llm_duration("47.2"), Some(47200.0));
/// ```
pub fn parse_llm_duration(raw: &str) -> Option<f64> {
    parse_duration_ms(raw, 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_units_and_garbage() {
        let p = parse_llm_reason("queue_wait=4700ms , prefill=900us,tokenize=12ms");
        assert_eq!(p.queue_ms, Some(4700.0));
        assert_eq!(p.prefill_ms, Some(0.9));
        assert_eq!(p.other, vec![("tokenize".to_string(), 12.0)]);
        assert!(!p.malformed);

        let bad = parse_llm_reason("kv_cache_build=3.2s,decode_loop=lots,=1s,garbage");
        assert_eq!(bad.prefill_ms, Some(3200.0));
        assert_eq!(bad.decode_ms, None);
        assert!(bad.malformed);

        assert!(parse_llm_reason("-").is_empty());
        assert_eq!(parse_llm_duration("47.2s"), Some(47200.0));
        assert_eq!(parse_llm_duration("n/a"), None);
    }
}
