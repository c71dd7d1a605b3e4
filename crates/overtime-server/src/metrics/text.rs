//! The Prometheus text format (0.0.4) writer: `# HELP` / `# TYPE` lines,
//! samples with escaped label values, histograms as cumulative `_bucket`
//! series with `le`, then `_sum` and `_count`.

use overtime_slo::{CounterVec, HistogramVec};
use std::fmt::Write;

/// The text being written.
#[derive(Default)]
pub(crate) struct Out {
    pub s: String,
}

/// A label value with `\`, `"` and newlines escaped.
///
/// ```
/// assert_eq!(overtime_server::metrics::escape_label("a\"b\\c\n"), "a\\\"b\\\\c\\n");
/// ```
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value as Prometheus reads it (`+Inf`, `-Inf`, `NaN`).
///
/// ```
/// assert_eq!(overtime_server::metrics::fmt_value(f64::INFINITY), "+Inf");
/// assert_eq!(overtime_server::metrics::fmt_value(0.25), "0.25");
/// ```
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

impl Out {
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = write!(self.s, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.s.push_str(name);
        if !labels.is_empty() {
            self.s.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.s.push(',');
                }
                let _ = write!(self.s, "{k}=\"{}\"", escape_label(val));
            }
            self.s.push('}');
        }
        let _ = writeln!(self.s, " {}", fmt_value(v));
    }

    pub fn counter_vec(&mut self, name: &str, cv: &CounterVec) {
        for (values, n) in &cv.series {
            let labels: Vec<(&str, &str)> = cv
                .labels
                .iter()
                .copied()
                .zip(values.iter().map(String::as_str))
                .collect();
            self.sample(name, &labels, *n as f64);
        }
    }

    pub fn histogram_vec(&mut self, name: &str, hv: &HistogramVec) {
        let bucket = format!("{name}_bucket");
        let les: Vec<String> = hv
            .bounds
            .iter()
            .map(|b| fmt_value(*b))
            .chain(["+Inf".to_string()])
            .collect();
        for (values, h) in &hv.series {
            let mut labels: Vec<(&str, &str)> = hv
                .labels
                .iter()
                .copied()
                .zip(values.iter().map(String::as_str))
                .collect();
            for (le, c) in les.iter().zip(h.cumulative()) {
                labels.push(("le", le));
                self.sample(&bucket, &labels, c as f64);
                labels.pop();
            }
            self.sample(&format!("{name}_sum"), &labels, h.sum);
            self.sample(&format!("{name}_count"), &labels, h.count as f64);
        }
    }
}
