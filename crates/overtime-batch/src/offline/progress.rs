//! The progress bar of a long `diagnose`: bytes read of the total (as
//! stored: compressed bytes for `.gz`), lines and spans per second, the
//! time left; then the partitions diagnosed. Drawn on stderr only when it
//! is a terminal and `--quiet` is not given.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub struct Progress {
    bar: Option<ProgressBar>,
    /// Bytes read from disk so far.
    pub read: Arc<AtomicU64>,
    /// Bytes of text (decompressed) read so far.
    pub text: AtomicU64,
    pub lines: AtomicU64,
    pub spans: AtomicU64,
    started: Instant,
    last_ms: AtomicU64,
}

/// `1.2 M`, `350 k`, `12`.
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

impl Progress {
    /// A bar over `total` bytes, drawn when `show` and stderr is a terminal.
    pub fn new(total: u64, show: bool) -> Self {
        let bar = (show && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} reading [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}, ETA {eta} {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            b
        });
        Progress {
            bar,
            read: Arc::new(AtomicU64::new(0)),
            text: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            spans: AtomicU64::new(0),
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Redraws (at most every 200 ms).
    pub fn tick(&self) {
        let Some(bar) = &self.bar else { return };
        let ms = self.started.elapsed().as_millis() as u64;
        let last = self.last_ms.load(Ordering::Relaxed);
        if ms < last + 200
            || self
                .last_ms
                .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let secs = (ms as f64 / 1000.0).max(0.001);
        bar.set_position(self.read.load(Ordering::Relaxed));
        bar.set_message(format!(
            "{} lines/s, {} spans/s",
            si(self.lines.load(Ordering::Relaxed) as f64 / secs),
            si(self.spans.load(Ordering::Relaxed) as f64 / secs)
        ));
    }

    /// The step after reading: `done` of `total` partitions.
    pub fn step(&self, name: &str, done: u64, total: u64) {
        let Some(bar) = &self.bar else { return };
        if bar.length() != Some(total) {
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{spinner}} {name} [{{bar:30}}] {{pos}}/{{len}} partitions, ETA {{eta}}"
                ))
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_length(total);
            bar.reset_eta();
        }
        bar.set_position(done);
    }

    /// What was read, for the run's report.
    pub fn totals(&self, read_time: std::time::Duration) -> super::ReadTotals {
        super::ReadTotals {
            bytes_read: self.read.load(Ordering::Relaxed),
            text_bytes: self.text.load(Ordering::Relaxed),
            read_time,
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
