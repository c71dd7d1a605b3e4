//! The labels that make tickets findable again.
//!
//! Jira labels cannot contain spaces and are at most 255 characters. Every
//! character outside `[A-Za-z0-9_-]` becomes `-`; a label that would
//! still be too long is cut and ends with a 16-hex-digit FNV-1a hash of the
//! whole input, so two long fingerprints never share a label by accident.
//!
//! - fingerprint label `overtime-<fingerprint>`: every ticket of one
//!   fingerprint carries it; the dedup search looks for it;
//! - incident label `overtime-incident-<incident id>`: on the ticket
//!   created for that incident, so a retry after an ambiguous failure can
//!   tell the ticket already exists; a comment carries the same text in
//!   its body for the same reason;
//! - `overtime` on every ticket overtime opened.

/// The label on every ticket overtime opened.
pub(crate) const OVERTIME_LABEL: &str = "overtime";

const MAX_LABEL: usize = 255;

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn label(prefix: &str, value: &str) -> String {
    let clean: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let full = format!("{prefix}{clean}");
    if full.len() <= MAX_LABEL {
        return full;
    }
    let suffix = format!("-{:016x}", fnv1a(value));
    let mut cut = full;
    cut.truncate(MAX_LABEL - suffix.len());
    cut + &suffix
}

/// The label every ticket of a fingerprint carries.
///
/// ```
/// use overtime_jira::fingerprint_label;
/// assert_eq!(
///     fingerprint_label("llm_prefill_slow:deepseek v4/pro"),
///     "overtime-llm_prefill_slow-deepseek-v4-pro"
/// );
/// ```
pub fn fingerprint_label(fingerprint: &str) -> String {
    label("overtime-", fingerprint)
}

/// The label (and comment marker) of one incident.
///
/// ```
/// use overtime_jira::incident_label;
/// assert_eq!(
///     incident_label("tool_timeout:search@2026-01-02T03:04:05.000Z"),
///     "overtime-incident-tool_timeout-search-2026-01-02T03-04-05-000Z"
/// );
/// ```
pub fn incident_label(incident_id: &str) -> String {
    label("overtime-incident-", incident_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_with_a_distinguishing_hash() {
        let a = "x".repeat(400) + "a";
        let b = "x".repeat(400) + "b";
        let (la, lb) = (fingerprint_label(&a), fingerprint_label(&b));
        assert_eq!(la.len(), 255);
        assert_eq!(lb.len(), 255);
        assert_ne!(la, lb);
        assert!(la.starts_with("overtime-xxx"));
    }

    #[test]
    fn labels_have_no_spaces_or_punctuation() {
        let l = incident_label("a b\tc:d/e\"f'g\u{e9}");
        assert_eq!(l, "overtime-incident-a-b-c-d-e-f-g-");
        assert!(
            l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }
}
