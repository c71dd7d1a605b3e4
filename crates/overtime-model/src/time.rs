//! Durations and instants as people write them — one type each, read the
//! same way on the command line, in the config, in a proposal file and in
//! the API's query parameters: [`DurationMs`] and [`Timestamp`].
//!
//! Design rules:
//! - One grammar per type, here; every reader calls `parse` (or serde),
//!   none splits numbers from units itself.
//! - Accept what any reader accepted before: a duration is a number with
//!   an optional unit (`47.2s`, `350ms`, `900us`, `2m`, `1h`, `1e3ms`), a
//!   bare number taken in the reader's unit (seconds unless it says
//!   otherwise), or a compound form humantime reads (`1h 30m`, `2days`);
//!   an instant is RFC 3339 (any offset) or epoch milliseconds.
//! - Written back in one form: a duration by its largest whole unit
//!   (`90s`, `1500ms`), an instant as RFC 3339 in UTC with milliseconds —
//!   the form of a verdict's `started_at`.
//!
//! ```
//! use overtime_model::{DurationMs, Timestamp};
//! let d: DurationMs = "47.2s".parse().unwrap();
//! assert_eq!((d.ms(), d.to_string()), (47_200.0, "47200ms".to_string()));
//! assert_eq!("90".parse::<DurationMs>().unwrap().to_string(), "90s");
//! assert_eq!("1h 30m".parse::<DurationMs>().unwrap().ms(), 5_400_000.0);
//! let t: Timestamp = "2026-11-29T11:00:00.25+01:00".parse().unwrap();
//! assert_eq!(t.to_string(), "2026-11-29T10:00:00.250Z");
//! assert_eq!("1795946400250".parse::<Timestamp>().unwrap(), t);
//! ```

use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt;
use std::str::FromStr;

/// A duration in milliseconds: finite, never negative.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct DurationMs(f64);

/// Text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration (e.g. 60s, 1500ms, 2m, 1h 30m)")]
pub struct BadDuration(pub String);

impl DurationMs {
    /// `ms` milliseconds; `None` when negative or not finite.
    pub fn from_ms(ms: f64) -> Option<Self> {
        (ms.is_finite() && ms >= 0.0).then_some(DurationMs(ms))
    }

    /// The milliseconds.
    pub fn ms(self) -> f64 {
        self.0
    }

    /// As a `std::time::Duration`.
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0 / 1000.0)
    }

    /// Reads `47.2s`, `350ms`, `900us`/`900µs`, `20ns`, `2m`/`2min`,
    /// `1h`, `5sec`; a bare number is `bare_unit_ms` milliseconds per unit
    /// (1000.0 for seconds, 1.0 for a field that holds milliseconds).
    /// `None` for anything else, negative or non-finite values included.
    /// This is the fast form the parsers of records call; [`FromStr`] adds
    /// humantime's compound forms.
    ///
    /// ```
    /// use overtime_model::DurationMs;
    /// let ms = |s, unit| DurationMs::parse_with_bare_unit(s, unit).map(DurationMs::ms);
    /// assert_eq!(ms("47.2s", 1000.0), Some(47_200.0));
    /// assert_eq!(ms("120", 1000.0), Some(120_000.0));
    /// assert_eq!(ms("120", 1.0), Some(120.0));
    /// assert_eq!(ms("fast", 1000.0), None);
    /// ```
    pub fn parse_with_bare_unit(s: &str, bare_unit_ms: f64) -> Option<Self> {
        let s = s.trim();
        let split = s
            .find(|c: char| {
                !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')
            })
            .unwrap_or(s.len());
        // `e` inside a unit such as "sec" is not an exponent: only take
        // the longer numeric prefix when it parses.
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
        DurationMs::from_ms(v * factor)
    }
}

impl FromStr for DurationMs {
    type Err = BadDuration;

    /// [`DurationMs::parse_with_bare_unit`] with bare numbers in seconds,
    /// else a compound form (`1h 30m`, `2days 4h`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DurationMs::parse_with_bare_unit(s, 1000.0)
            .or_else(|| {
                humantime::parse_duration(s.trim())
                    .ok()
                    .and_then(|d| DurationMs::from_ms(d.as_secs_f64() * 1000.0))
            })
            .ok_or_else(|| BadDuration(s.to_string()))
    }
}

impl fmt::Display for DurationMs {
    /// By its largest whole unit: `2h`, `90s`, `1500ms`, `0.25ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        for (unit, size) in [("h", 3_600_000.0), ("m", 60_000.0), ("s", 1000.0)] {
            if ms >= size && (ms / size).fract() == 0.0 {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl serde::Serialize for DurationMs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DurationMs {
    /// A string as [`FromStr`] reads it, or a bare number of seconds.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Written {
            Seconds(f64),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Seconds(s) => DurationMs::from_ms(s * 1000.0)
                .ok_or_else(|| serde::de::Error::custom(BadDuration(s.to_string()))),
            Written::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// An instant: microseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

/// Text that is not an instant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a time: use RFC 3339 or epoch milliseconds")]
pub struct BadTime(pub String);

impl Timestamp {
    /// `us` microseconds after the epoch.
    pub fn from_us(us: i64) -> Self {
        Timestamp(us)
    }

    /// `ms` milliseconds after the epoch.
    pub fn from_ms(ms: i64) -> Self {
        Timestamp(ms.saturating_mul(1000))
    }

    /// Microseconds after the epoch.
    pub fn us(self) -> i64 {
        self.0
    }

    /// The same instant cut to its millisecond — what its text keeps, so
    /// two instants that read alike compare alike.
    pub fn floor_ms(self) -> Self {
        Timestamp(self.0.div_euclid(1000) * 1000)
    }
}

impl FromStr for Timestamp {
    type Err = BadTime;

    /// Epoch milliseconds (an integer), or RFC 3339 with any offset.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(ms) = t.parse::<i64>() {
            return Ok(Timestamp::from_ms(ms));
        }
        DateTime::parse_from_rfc3339(t)
            .map(|d| Timestamp(d.timestamp_micros()))
            .map_err(|_| BadTime(s.to_string()))
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with milliseconds: `2026-11-29T10:00:00.250Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = DateTime::<Utc>::from_timestamp_micros(self.0).unwrap_or_default();
        f.write_str(&d.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> Option<f64> {
        s.parse::<DurationMs>().ok().map(DurationMs::ms)
    }

    #[test]
    fn every_form_a_reader_took_before_is_read() {
        // The record parsers', the CLI's, the proposal file's and the
        // simulator's forms.
        assert_eq!(ms("2.1s"), Some(2100.0));
        assert_eq!(ms(" 900us "), Some(0.9));
        assert_eq!(ms("2m"), Some(120_000.0));
        assert_eq!(ms("1.5m"), Some(90_000.0));
        assert_eq!(ms("1e3ms"), Some(1000.0));
        assert_eq!(ms("5sec"), Some(5000.0));
        assert_eq!(ms("45s"), Some(45_000.0));
        assert_eq!(ms("1500ms"), Some(1500.0));
        assert_eq!(ms("90"), Some(90_000.0));
        assert_eq!(ms("1.5"), Some(1500.0));
        assert_eq!(ms("2h"), Some(7_200_000.0));
        assert_eq!(ms("3min"), Some(180_000.0));
        assert!((ms("20ns").unwrap() - 0.00002).abs() < 1e-12);
    }

    #[test]
    fn compound_forms_are_read_too() {
        assert_eq!(ms("1h 30m"), Some(5_400_000.0));
        assert_eq!(ms("1h30m"), Some(5_400_000.0));
        assert_eq!(ms("2days"), Some(172_800_000.0));
    }

    #[test]
    fn what_is_not_a_duration_is_refused_with_examples() {
        for bad in ["", "s", "-1s", "NaN", "soon", "12 parsecs"] {
            let e = bad.parse::<DurationMs>().unwrap_err().to_string();
            assert!(e.contains("is not a duration (e.g. 60s"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_duration_is_written_by_its_largest_whole_unit_and_read_back() {
        for (text, written) in [
            ("7200s", "2h"),
            ("90s", "90s"),
            ("1.5s", "1500ms"),
            ("0.25ms", "0.25ms"),
            ("0", "0ms"),
        ] {
            let d: DurationMs = text.parse().unwrap();
            assert_eq!(d.to_string(), written);
            assert_eq!(written.parse::<DurationMs>(), Ok(d));
        }
    }

    #[test]
    fn serde_reads_text_and_bare_seconds() {
        let d: Vec<DurationMs> = serde_json::from_str(r#"["1500ms", 90, 0.5]"#).unwrap();
        assert_eq!(
            d.iter().map(|d| d.ms()).collect::<Vec<_>>(),
            [1500.0, 90_000.0, 500.0]
        );
        assert_eq!(serde_json::to_string(&d[1]).unwrap(), r#""90s""#);
        assert!(serde_json::from_str::<DurationMs>("-3").is_err());
    }

    #[test]
    fn an_instant_reads_rfc3339_or_epoch_ms_and_writes_utc_millis() {
        let t: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
        assert_eq!(t.us(), 1_795_946_400_000_000);
        assert_eq!(" 1795946400000 ".parse::<Timestamp>(), Ok(t));
        assert_eq!(t.to_string(), "2026-11-29T10:00:00.000Z");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#""2026-11-29T10:00:00.000Z""#);
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        let e = "yesterday".parse::<Timestamp>().unwrap_err().to_string();
        assert_eq!(
            e,
            r#""yesterday" is not a time: use RFC 3339 or epoch milliseconds"#
        );
    }

    #[test]
    fn instants_that_read_alike_compare_alike_once_cut_to_the_millisecond() {
        let a = Timestamp::from_us(1_795_946_400_000_100).floor_ms();
        let b = Timestamp::from_us(1_795_946_400_000_900).floor_ms();
        assert_eq!((a, a.to_string()), (b, b.to_string()));
        assert_eq!(a.to_string().parse::<Timestamp>(), Ok(a));
        assert_eq!(Timestamp::from_us(-1).floor_ms().us(), -1000);
    }
}
