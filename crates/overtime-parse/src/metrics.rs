//! Model-server metrics as users export them (docs/inputs.md,
//! "Model-server metrics"): what vLLM, SGLang or TGI expose on `/metrics`,
//! saved with the time of each sample.
//!
//! Three shapes are read, told apart by their first non-blank byte:
//! - **the Prometheus HTTP API's answer** (`curl
//!   '…/api/v1/query_range?query=…'`): JSON, `resultType` `matrix` or
//!   `vector`, times in seconds;
//! - **`promtool tsdb dump`**: one sample a line, `{__name__="vllm:…",
//!   label="v"} value timestamp_ms`;
//! - **the text exposition format** (Prometheus or, ending in `# EOF`,
//!   OpenMetrics): one scrape or many scrapes written one after another,
//!   every sample with its timestamp (ms in Prometheus' format, seconds in
//!   OpenMetrics').
//!
//! Design rules:
//! - **A maintained parser reads the text format** (`openmetrics-parser`);
//!   this module only cuts concatenated scrapes apart (a series seen again
//!   starts the next scrape) and rewrites a dump line's `__name__` label
//!   into the name the format puts first.
//! - **Flat samples out.** A histogram or summary becomes its `_sum` and
//!   `_count` series, as Prometheus stores it, so every source gives the
//!   same names.
//! - **Nothing silently dropped.** A sample without a time, a scrape the
//!   parser refuses, a JSON series that is not numbers: each is a
//!   [`MetricRejected`] with its line and reason; the rest is kept.
//!
//! ```
//! use overtime_parse::metrics::read_metrics;
//! let text = "# TYPE vllm:num_requests_waiting gauge\n\
//!             vllm:num_requests_waiting{model_name=\"qwen\"} 7 1796628600000\n\
//!             vllm:num_requests_waiting{model_name=\"qwen\"} 9 1796628615000\n";
//! let read = read_metrics(text);
//! assert_eq!(read.samples.len(), 2);
//! assert_eq!(read.samples[1].value, 9.0);
//! assert_eq!(read.samples[1].time_us, 1_796_628_615_000_000);
//! assert_eq!(read.samples[0].label("model_name"), Some("qwen"));
//! assert!(read.rejected.is_empty());
//! ```

use openmetrics_parser::{
    MetricNumber, OpenMetricsValue, PrometheusValue, openmetrics, prometheus,
};
use overtime_model::MetricSample;
use std::collections::HashSet;

/// A part of the input that was not read, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRejected {
    /// Its first line, 1-based.
    pub line: u64,
    /// Why, in a sentence.
    pub reason: String,
}

/// What [`read_metrics`] read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsRead {
    /// Every sample read, in input order.
    pub samples: Vec<MetricSample>,
    /// What was refused.
    pub rejected: Vec<MetricRejected>,
}

/// Reads a metrics export in any of the module's three shapes.
pub fn read_metrics(text: &str) -> MetricsRead {
    match text.trim_start().as_bytes().first() {
        Some(b'{') if text.trim_start().starts_with("{\"") => read_api_json(text),
        Some(b'{') => read_text(&dump_to_text(text), None),
        _ => read_text(text, None),
    }
}

/// One answer of a live `GET /metrics` (the text exposition format,
/// Prometheus' or OpenMetrics'), scraped at `scraped_us`: a sample without
/// a timestamp of its own — what servers write — was sampled then.
///
/// ```
/// use overtime_parse::metrics::read_scrape;
/// let read = read_scrape("# TYPE vllm:num_requests_waiting gauge\n\
///                         vllm:num_requests_waiting{model_name=\"qwen\"} 7.0\n", 42);
/// assert_eq!((read.samples[0].value, read.samples[0].time_us), (7.0, 42));
/// ```
pub fn read_scrape(text: &str, scraped_us: i64) -> MetricsRead {
    read_text(text, Some(scraped_us))
}

/// The Prometheus HTTP API's answer to `query` / `query_range`.
fn read_api_json(text: &str) -> MetricsRead {
    let mut out = MetricsRead::default();
    let reject = |out: &mut MetricsRead, reason: String| {
        out.rejected.push(MetricRejected { line: 1, reason })
    };
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            reject(&mut out, format!("not JSON the Prometheus API writes: {e}"));
            return out;
        }
    };
    let Some(result) = v.pointer("/data/result").and_then(|r| r.as_array()) else {
        reject(
            &mut out,
            "no data.result: not an answer of the Prometheus HTTP API".into(),
        );
        return out;
    };
    for series in result {
        let mut labels: Vec<(String, String)> = series
            .get("metric")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let Some(pos) = labels.iter().position(|(k, _)| k == "__name__") else {
            reject(&mut out, "a series without __name__".into());
            continue;
        };
        let name = labels.remove(pos).1;
        labels.sort();
        let points: Vec<&serde_json::Value> = match (series.get("values"), series.get("value")) {
            (Some(vs), _) => vs
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default(),
            (None, Some(one)) => vec![one],
            _ => vec![],
        };
        for p in points {
            let t = p.get(0).and_then(|t| t.as_f64());
            let x = p
                .get(1)
                .and_then(|x| x.as_str())
                .and_then(|x| x.parse::<f64>().ok());
            match (t, x) {
                (Some(t), Some(x)) => out.samples.push(MetricSample {
                    name: name.clone(),
                    labels: labels.clone(),
                    value: x,
                    time_us: (t * 1e6).round() as i64,
                }),
                _ => reject(
                    &mut out,
                    format!("{name}: a point that is not [time, \"value\"]: {p}"),
                ),
            }
        }
    }
    out
}

/// `promtool tsdb dump` lines as the text format: `{__name__="n", a="b"} v t`
/// becomes `n{a="b"} v t`.
fn dump_to_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix('{')
            && let Some(at) = rest.find("__name__=\"")
        {
            let after = &rest[at + 10..];
            if let Some(end) = after.find('"') {
                let name = &after[..end];
                let mut labels = format!("{}{}", &rest[..at], &after[end + 1..]);
                // Tidy the comma the name leaves behind.
                labels = labels.trim_start_matches([',', ' ']).replace(", ,", ",");
                let labels = labels.replacen(",}", "}", 1).replacen(", }", "}", 1);
                out.push_str(name);
                if !labels.starts_with('}') {
                    out.push('{');
                }
                out.push_str(&labels);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The text exposition format, one scrape or many in a row; a sample
/// without a timestamp is dated `scraped_us` when given, else refused.
fn read_text(text: &str, scraped_us: Option<i64>) -> MetricsRead {
    let mut out = MetricsRead::default();
    for scrape in scrapes(text) {
        match parse_block(
            &scrape.text(None),
            scrape.open,
            scrape.first_line(),
            scraped_us,
            &mut out,
        ) {
            Ok(samples) => out.samples.extend(samples),
            // One bad line must not cost the scrape: each sample line is
            // read again alone, under its scrape's `# TYPE` lines.
            Err(_) => {
                for (no, line) in &scrape.lines {
                    if line.starts_with('#') {
                        continue;
                    }
                    match parse_block(
                        &scrape.text(Some(line)),
                        scrape.open,
                        *no,
                        scraped_us,
                        &mut out,
                    ) {
                        Ok(samples) => out.samples.extend(samples),
                        Err(e) => out.rejected.push(MetricRejected {
                            line: *no,
                            reason: format!(
                                "a sample the text format's parser refused: {}",
                                one_line(&e)
                            ),
                        }),
                    }
                }
            }
        }
    }
    out.samples.sort_by_key(|s| s.time_us);
    out
}

fn one_line(e: &str) -> String {
    e.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn parse_block(
    text: &str,
    open: bool,
    line: u64,
    scraped_us: Option<i64>,
    out: &mut MetricsRead,
) -> Result<Vec<MetricSample>, String> {
    if open {
        openmetrics::parse_openmetrics(text)
            .map(|e| flatten(e, om_series, 1e6, scraped_us, out, line))
            .map_err(|e| e.to_string())
    } else {
        prometheus::parse_prometheus(text)
            .map(|e| flatten(e, prom_series, 1e3, scraped_us, out, line))
            .map_err(|e| e.to_string())
    }
}

/// One scrape: the `# TYPE`/`# UNIT` lines in force (per family), and
/// its own lines.
struct Scrape {
    meta: Vec<(String, String)>,
    lines: Vec<(u64, String)>,
    open: bool,
}

/// The family a sample line belongs to among `families`: its name, or its
/// name less a histogram's, summary's or counter's suffix.
fn family_of<'a>(line: &str, families: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
    families.into_iter().find(|f| {
        name == *f
            || name.strip_prefix(*f).is_some_and(|rest| {
                [
                    "_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount",
                ]
                .contains(&rest)
            })
    })
}

impl Scrape {
    fn first_line(&self) -> u64 {
        self.lines.first().map_or(1, |l| l.0)
    }

    /// The scrape as the parser reads it (`only`: with just that sample
    /// line): a family's `# TYPE` in force goes right before its first
    /// sample when the scrape does not say it itself.
    fn text(&self, only: Option<&String>) -> String {
        let mut t = String::new();
        let mut declared: HashSet<&str> = HashSet::new();
        for (_, l) in &self.lines {
            if let Some(meta) = l.strip_prefix("# ") {
                if let Some(name) = meta.split_whitespace().nth(1) {
                    declared.insert(name);
                }
                if only.is_none() {
                    t += l;
                    t.push('\n');
                }
                continue;
            }
            if only.is_some_and(|o| o != l) {
                continue;
            }
            if let Some(f) = family_of(l, self.meta.iter().map(|(f, _)| f.as_str()))
                && declared.insert(f)
            {
                for (_, m) in self.meta.iter().filter(|(mf, _)| mf == f) {
                    t += m;
                    t.push('\n');
                }
            }
            t += l;
            t.push('\n');
        }
        if self.open {
            t += "# EOF\n";
        }
        t
    }
}

/// Cuts concatenated scrapes apart: a series (or a family's `# TYPE` /
/// `# HELP`) seen again, or `# EOF`, ends one. A scrape cut off because a
/// series came again keeps the `# TYPE` lines in force.
fn scrapes(text: &str) -> Vec<Scrape> {
    let open = text.lines().any(|l| l.trim_end() == "# EOF");
    let mut out = Vec::new();
    let mut cur = Scrape {
        meta: vec![],
        lines: vec![],
        open,
    };
    // `# TYPE` / `# UNIT` lines in force, per family.
    let mut types: Vec<(String, String)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let has_samples = |s: &Scrape| s.lines.iter().any(|(_, l)| !l.starts_with('#'));
    for (i, line) in text.lines().enumerate() {
        let no = i as u64 + 1;
        let l = line.trim_end();
        if l == "# EOF" {
            let meta = cur.meta.clone();
            if has_samples(&cur) {
                out.push(std::mem::replace(
                    &mut cur,
                    Scrape {
                        meta,
                        lines: vec![],
                        open,
                    },
                ));
            }
            seen.clear();
            types.clear();
            cur.meta.clear();
            continue;
        }
        let (key, meta_of) = if let Some(meta) = l.strip_prefix("# ") {
            let mut w = meta.split_whitespace();
            match (w.next(), w.next()) {
                (Some(k @ ("TYPE" | "HELP" | "UNIT")), Some(name)) => (
                    Some(format!("# {k} {name}")),
                    (k != "HELP").then(|| name.to_string()),
                ),
                _ => (None, None),
            }
        } else if l.is_empty() || l.starts_with('#') {
            (None, None)
        } else {
            let end = l
                .find('}')
                .map(|e| e + 1)
                .unwrap_or_else(|| l.find(' ').unwrap_or(l.len()));
            (Some(l[..end].to_string()), None)
        };
        if l.is_empty() {
            continue;
        }
        if let Some(k) = key
            && !seen.insert(k.clone())
        {
            // A scrape cut by a series seen again keeps the types in force;
            // one cut by its family's own `# TYPE` brings its own.
            let meta = if meta_of.is_some() || k.starts_with("# HELP") {
                types.clear();
                vec![]
            } else {
                types.clone()
            };
            if has_samples(&cur) {
                out.push(std::mem::replace(
                    &mut cur,
                    Scrape {
                        meta,
                        lines: vec![],
                        open,
                    },
                ));
            } else {
                cur.meta = meta;
                cur.lines.clear();
            }
            seen.clear();
            seen.insert(k);
        }
        if let Some(family) = meta_of {
            types.retain(|(f, m)| {
                !(f == &family && m.split_whitespace().nth(1) == l.split_whitespace().nth(1))
            });
            types.push((family, l.to_string()));
        }
        cur.lines.push((no, l.to_string()));
    }
    if has_samples(&cur) {
        out.push(cur);
    }
    out
}

fn number(n: &MetricNumber) -> f64 {
    n.as_f64()
}

/// One family's samples, flat, with its labels.
fn push(
    out: &mut Vec<MetricSample>,
    rejected: &mut MetricsRead,
    line: u64,
    name: &str,
    labels: &[(String, String)],
    time_us: Option<i64>,
    value: f64,
) {
    match time_us {
        Some(t) => out.push(MetricSample {
            name: name.to_string(),
            labels: labels.to_vec(),
            value,
            time_us: t,
        }),
        None => rejected.rejected.push(MetricRejected {
            line,
            reason: format!(
                "{name}: a sample without a timestamp (save scrapes with their times: the Prometheus API's query_range, promtool tsdb dump, or timestamps in the text)"
            ),
        }),
    }
}

fn labels_of<V: openmetrics_parser::RenderableMetricValue + Clone>(
    s: &openmetrics_parser::Sample<V>,
) -> Vec<(String, String)> {
    let mut l: Vec<(String, String)> = s
        .get_labelset()
        .map(|ls| ls.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    l.sort();
    l
}

/// One sample's series as Prometheus stores them: (name suffix, value).
type Series = Vec<(&'static str, f64)>;

fn sum_count(sum: Option<&MetricNumber>, count: Option<u64>) -> Series {
    let mut v = Vec::new();
    if let Some(sum) = sum {
        v.push(("_sum", number(sum)));
    }
    if let Some(c) = count {
        v.push(("_count", c as f64));
    }
    v
}

/// A Prometheus-format value's series.
fn prom_series(v: &PrometheusValue) -> Series {
    match v {
        PrometheusValue::Unknown(n) | PrometheusValue::Gauge(n) => vec![("", number(n))],
        PrometheusValue::Counter(c) => vec![("", number(&c.value))],
        PrometheusValue::Histogram(h) => sum_count(h.sum.as_ref(), h.count),
        PrometheusValue::Summary(h) => sum_count(h.sum.as_ref(), h.count),
    }
}

/// An OpenMetrics value's series (its counter family drops `_total`).
fn om_series(v: &OpenMetricsValue) -> Series {
    match v {
        OpenMetricsValue::Unknown(n)
        | OpenMetricsValue::Gauge(n)
        | OpenMetricsValue::StateSet(n) => {
            vec![("", number(n))]
        }
        OpenMetricsValue::Counter(c) => vec![("_total", number(&c.value))],
        OpenMetricsValue::Histogram(h) | OpenMetricsValue::GaugeHistogram(h) => {
            sum_count(h.sum.as_ref(), h.count)
        }
        OpenMetricsValue::Summary(h) => sum_count(h.sum.as_ref(), h.count),
        OpenMetricsValue::Info => vec![],
    }
}

/// Every sample of an exposition, flat: `series` gives a value's series,
/// `us_per_unit` the timestamps' unit (Prometheus' text format: ms;
/// OpenMetrics: s), `scraped_us` the time of a sample without one.
fn flatten<T: Clone, V: openmetrics_parser::RenderableMetricValue + Clone>(
    e: openmetrics_parser::MetricsExposition<T, V>,
    series: fn(&V) -> Series,
    us_per_unit: f64,
    scraped_us: Option<i64>,
    rejected: &mut MetricsRead,
    line: u64,
) -> Vec<MetricSample> {
    let mut out = Vec::new();
    for (name, family) in e.families {
        for s in family.iter_samples() {
            let labels = labels_of(s);
            let t = s
                .timestamp
                .map(|t| (t * us_per_unit).round() as i64)
                .or(scraped_us);
            for (suffix, value) in series(&s.value) {
                push(
                    &mut out,
                    rejected,
                    line,
                    &format!("{name}{suffix}"),
                    &labels,
                    t,
                    value,
                );
            }
        }
    }
    out
}
