//! Durations as services write them: `47.2s`, `350ms`, `120us`, `2m`, or a
//! bare number in a caller-chosen unit.

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
    let s = s.trim();
    let split = s
        .find(|c: char| {
            !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')
        })
        .unwrap_or(s.len());
    // `e` inside a unit such as "sec" is not an exponent: only accept the
    // numeric prefix when it parses.
    let (num, unit) = s.split_at(split);
    let (num, unit) = match num.parse::<f64>() {
        Ok(_) => (num, unit),
        Err(_) => {
            let k = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(s.len());
            s.split_at(k)
        }
    };
    let v: f64 = num.parse().ok()?;
    let factor = match unit.trim() {
        "" => bare_unit_ms,
        "ms" => 1.0,
        "s" | "sec" | "secs" => 1000.0,
        "us" | "µs" | "μs" => 0.001,
        "ns" => 0.000_001,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    let ms = v * factor;
    (ms.is_finite() && ms >= 0.0).then_some(ms)
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
