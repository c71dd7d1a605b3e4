//! Simulated time: every delay, timeout and budget of the platform is
//! written in *nominal* milliseconds (production numbers: a 60 s gateway,
//! a 2.1 s prefill) and slept for `nominal / scale` real time. Ratios are
//! kept, so the diagnosis of a scenario does not depend on the scale; what
//! the spans and the gateway record are the real (scaled) times.

use std::time::Duration;

/// The `--time-scale` factor: nominal time divided by it is real time.
///
/// ```
/// use overtime_simulate::TimeScale;
/// let s = TimeScale::new(100.0).unwrap();
/// assert_eq!(s.real(60_000.0), std::time::Duration::from_millis(600));
/// assert_eq!(s.real_ms(60_000.0), 600.0);
/// assert!(TimeScale::new(0.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeScale(f64);

/// The largest `--time-scale`: beyond it the platform's own overheads (a
/// millisecond per HTTP hop) stop being small against the scaled delays.
pub const MAX_TIME_SCALE: f64 = 200.0;

impl TimeScale {
    /// Real time.
    pub const ONE: TimeScale = TimeScale(1.0);

    /// A scale in (0, [`MAX_TIME_SCALE`]].
    pub fn new(factor: f64) -> Result<Self, String> {
        if factor.is_finite() && factor > 0.0 && factor <= MAX_TIME_SCALE {
            Ok(TimeScale(factor))
        } else {
            Err(format!(
                "--time-scale must be > 0 and <= {MAX_TIME_SCALE}, got {factor}"
            ))
        }
    }

    /// The factor.
    pub fn factor(self) -> f64 {
        self.0
    }

    /// Real duration of a nominal delay in milliseconds.
    pub fn real(self, nominal_ms: f64) -> Duration {
        Duration::from_secs_f64((nominal_ms.max(0.0) / 1000.0) / self.0)
    }

    /// Real milliseconds of a nominal delay.
    pub fn real_ms(self, nominal_ms: f64) -> f64 {
        nominal_ms / self.0
    }

    /// Nominal milliseconds of a real duration.
    pub fn nominal_ms(self, real: Duration) -> f64 {
        real.as_secs_f64() * 1000.0 * self.0
    }

    /// Sleeps a nominal delay.
    pub async fn sleep(self, nominal_ms: f64) {
        if nominal_ms > 0.0 {
            tokio::time::sleep(self.real(nominal_ms)).await;
        }
    }
}

/// Parses `60s`, `1.5m`, `500ms`, `2h` or a bare number of seconds (the
/// one duration grammar, [`overtime_model::DurationMs`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    text.parse::<overtime_model::DurationMs>()
        .map(overtime_model::DurationMs::as_std)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_duration_example() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn scale_keeps_ratios() {
        let s = TimeScale::new(20.0).unwrap();
        let gateway = s.real_ms(60_000.0);
        let prefill = s.real_ms(52_650.0);
        assert_eq!(gateway, 3000.0);
        assert!((prefill / gateway - 52_650.0 / 60_000.0).abs() < 1e-12);
        assert_eq!(s.nominal_ms(Duration::from_millis(3000)), 60_000.0);
    }

    #[test]
    fn bad_scales_are_refused() {
        for f in [0.0, -1.0, f64::NAN, f64::INFINITY, 1000.0] {
            assert!(TimeScale::new(f).is_err(), "{f}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration(" 3 s").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("3 fortnights").is_err());
    }
}
