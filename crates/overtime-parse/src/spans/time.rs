//! Timestamps as span producers write them: RFC 3339 strings, epoch numbers
//! in s/ms/µs/ns (told apart by magnitude), and OTLP `*UnixNano` values
//! (a JSON string or number of nanoseconds).
//!
//! Everything comes out as microseconds since the Unix epoch, UTC, the unit
//! of the `spans` table.

use chrono::{DateTime, NaiveDateTime};
use serde_json::Value;

/// Epoch numbers below this are seconds (1e11 s is the year 5138).
const SECONDS_BELOW: f64 = 1e11;
/// ... below this milliseconds (docs/inputs.md#spans's unit), ...
const MILLIS_BELOW: f64 = 1e14;
/// ... below this microseconds, above it nanoseconds.
const MICROS_BELOW: f64 = 1e17;

/// Reads a JSONL timestamp: an RFC 3339 string (a naive date-time is taken
/// as UTC), or an epoch number — milliseconds per docs/inputs.md#spans, but seconds,
/// microseconds and nanoseconds are recognised by magnitude. Numeric
/// strings are read as numbers. Returns µs since the epoch.
pub fn parse_timestamp_us(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                epoch_int_to_us(i)
            } else if let Some(u) = n.as_u64() {
                epoch_int_to_us(i64::try_from(u).ok()?)
            } else {
                epoch_to_us(n.as_f64()?)
            }
        }
        Value::String(s) => parse_timestamp_str_us(s),
        _ => None,
    }
}

/// [`parse_timestamp_us`] for a string.
pub fn parse_timestamp_str_us(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return epoch_int_to_us(s.parse().ok()?);
    }
    if let Ok(f) = s.parse::<f64>() {
        return epoch_to_us(f);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    // A space instead of `T`, or no offset at all (taken as UTC).
    let t = s.replacen(' ', "T", 1);
    if let Ok(t) = DateTime::parse_from_rfc3339(&t) {
        return Some(t.timestamp_micros());
    }
    let naive = t.trim_end_matches(['Z', 'z']);
    NaiveDateTime::parse_from_str(naive, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc().timestamp_micros())
}

/// An integer epoch value in s, ms, µs or ns (by magnitude) to µs. Exact for
/// integers, unlike going through `f64`.
fn epoch_int_to_us(i: i64) -> Option<i64> {
    if i < 0 {
        return None;
    }
    let f = i as f64;
    Some(if f < SECONDS_BELOW {
        i.checked_mul(1_000_000)?
    } else if f < MILLIS_BELOW {
        i * 1000
    } else if f < MICROS_BELOW {
        i
    } else {
        i / 1000
    })
}

/// A fractional epoch value in s, ms, µs or ns (by magnitude) to µs.
fn epoch_to_us(f: f64) -> Option<i64> {
    if !f.is_finite() || f < 0.0 {
        return None;
    }
    let us = if f < SECONDS_BELOW {
        f * 1e6
    } else if f < MILLIS_BELOW {
        f * 1e3
    } else if f < MICROS_BELOW {
        f
    } else {
        f / 1e3
    };
    (us < i64::MAX as f64).then(|| us.round() as i64)
}

/// Reads an OTLP `*UnixNano` value: nanoseconds as a JSON string or number
/// (the OTLP/JSON encoding writes 64-bit integers as strings). An RFC 3339
/// string is tolerated too. `Ok(0)` for absent/null (OTLP's "unset"),
/// `Err(())` for a value that is not a time.
#[allow(clippy::result_unit_err)]
pub fn parse_unix_nano(v: Option<&Value>) -> Result<u64, ()> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(u) => Ok(u),
            None => {
                let f = n.as_f64().ok_or(())?;
                if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 {
                    Ok(f as u64)
                } else {
                    Err(())
                }
            }
        },
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() {
                return Ok(0);
            }
            if let Ok(u) = s.parse::<u64>() {
                return Ok(u);
            }
            let us = parse_timestamp_str_us(s).ok_or(())?;
            u64::try_from(us)
                .ok()
                .and_then(|u| u.checked_mul(1000))
                .ok_or(())
        }
        Some(_) => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: i64 = 1_714_561_200_000_000; // 2024-05-01T11:00:00Z in µs

    #[test]
    fn epoch_units_by_magnitude() {
        assert_eq!(parse_timestamp_us(&json!(1_714_561_200)), Some(T));
        assert_eq!(parse_timestamp_us(&json!(1_714_561_200_000_i64)), Some(T));
        assert_eq!(
            parse_timestamp_us(&json!(1_714_561_200_000_000_i64)),
            Some(T)
        );
        assert_eq!(
            parse_timestamp_us(&json!(1_714_561_200_000_000_000_i64)),
            Some(T)
        );
        assert_eq!(
            parse_timestamp_us(&json!(1_714_561_200_123.5)),
            Some(T + 123_500)
        );
        assert_eq!(parse_timestamp_us(&json!("1714561200000")), Some(T));
        assert_eq!(parse_timestamp_us(&json!(-5)), None);
        assert_eq!(parse_timestamp_us(&json!(true)), None);
    }

    #[test]
    fn rfc3339_and_naive_forms() {
        assert_eq!(parse_timestamp_us(&json!("2024-05-01T11:00:00Z")), Some(T));
        assert_eq!(parse_timestamp_us(&json!("2024-05-01 11:00:00Z")), Some(T));
        assert_eq!(parse_timestamp_us(&json!("2024-05-01T11:00:00")), Some(T));
        assert_eq!(
            parse_timestamp_us(&json!("2024-05-01 11:00:00.000250")),
            Some(T + 250)
        );
        assert_eq!(
            parse_timestamp_us(&json!("2024-05-01T07:00:00-04:00")),
            Some(T)
        );
        assert_eq!(parse_timestamp_us(&json!("2024-13-01T11:00:00Z")), None);
        assert_eq!(parse_timestamp_us(&json!("")), None);
    }

    #[test]
    fn unix_nano_forms() {
        assert_eq!(parse_unix_nano(Some(&json!(""))), Ok(0));
        assert_eq!(parse_unix_nano(Some(&Value::Null)), Ok(0));
        assert_eq!(
            parse_unix_nano(Some(&json!(1.5e18))),
            Ok(1_500_000_000_000_000_000)
        );
        assert_eq!(
            parse_unix_nano(Some(&json!("2024-05-01T11:00:00Z"))),
            Ok(T as u64 * 1000)
        );
        assert!(parse_unix_nano(Some(&json!(-1))).is_err());
        assert!(parse_unix_nano(Some(&json!([1]))).is_err());
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn parse_timestamp_us_example() {
        use crate::spans::time::parse_timestamp_us;
        use serde_json::json;
        let want = Some(1_714_561_200_250_000);
        assert_eq!(parse_timestamp_us(&json!("2024-05-01T11:00:00.25Z")), want);
        assert_eq!(
            parse_timestamp_us(&json!("2024-05-01T13:00:00.25+02:00")),
            want
        );
        assert_eq!(parse_timestamp_us(&json!(1_714_561_200_250_i64)), want); // ms
        assert_eq!(parse_timestamp_us(&json!(1_714_561_200.25)), want); // s
        assert_eq!(parse_timestamp_us(&json!("1714561200250000000")), want); // ns
        assert_eq!(parse_timestamp_us(&json!("yesterday")), None);
    }

    #[test]
    fn parse_unix_nano_example() {
        use crate::spans::time::parse_unix_nano;
        use serde_json::json;
        assert_eq!(
            parse_unix_nano(Some(&json!("1714561200250000123"))),
            Ok(1_714_561_200_250_000_123)
        );
        assert_eq!(
            parse_unix_nano(Some(&json!(1_714_561_200_250_000_123_u64))),
            Ok(1_714_561_200_250_000_123)
        );
        assert_eq!(parse_unix_nano(None), Ok(0));
        assert!(parse_unix_nano(Some(&json!("soon"))).is_err());
    }
}
