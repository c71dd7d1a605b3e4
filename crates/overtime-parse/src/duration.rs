//! Durations as services write them: `47.2s`, `350ms`, `120us`, `2m`, or a
//! bare number in a caller-chosen unit — the grammar of
//! [`overtime_model::DurationMs`], the one duration type, here as the
//! plain `f64` the record parsers fill their columns with.

use overtime_model::DurationMs;

/// Parses `47.2s`, `350ms`, `900us`/`900µs`, `2m`, `1h` into milliseconds.
/// A bare number is taken in `bare_unit_ms` milliseconds per unit
/// (1000.0 for seconds). Returns `None` for anything else, negative or
/// non-finite values included.
///
/// ```
/// use overtime_parse::duration::parse_duration_ms;
/// assert_eq!(parse_duration_ms("47.2s", 1000.0), Some(47200.0));
/// assert_eq!(parse_duration_ms("350ms", 1000.0), Some(350.0));
/// assert_eq!(parse_duration_ms("120", 1000.0), Some(120000.0));
/// assert_eq!(parse_duration_ms("fast", 1000.0), None);
/// ```
pub fn parse_duration_ms(s: &str, bare_unit_ms: f64) -> Option<f64> {
    DurationMs::parse_with_bare_unit(s, bare_unit_ms).map(DurationMs::ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn units() {
        assert_eq!(parse_duration_ms("2.1s", 1.0), Some(2100.0));
        assert_eq!(parse_duration_ms(" 900us ", 1.0), Some(0.9));
        assert_eq!(parse_duration_ms("2m", 1.0), Some(120000.0));
        assert_eq!(parse_duration_ms("1e3ms", 1.0), Some(1000.0));
        assert_eq!(parse_duration_ms("5sec", 1.0), Some(5000.0));
        assert_eq!(parse_duration_ms("-1s", 1.0), None);
        assert_eq!(parse_duration_ms("", 1.0), None);
        assert_eq!(parse_duration_ms("s", 1.0), None);
        assert_eq!(parse_duration_ms("NaN", 1.0), None);
    }
}
