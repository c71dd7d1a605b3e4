//! A strict parser of the Prometheus text format (0.0.4), the look-ups the
//! tests make in what it parsed, and `promtool check metrics`.

use overtime_server::Metrics;
use overtime_test_support::program::find_program;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct Family {
    pub kind: String,
    pub help: bool,
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

pub type Exposition = BTreeMap<String, Family>;

fn is_name(s: &str, colon: bool) -> bool {
    let mut c = s.chars();
    let ok_first = |ch: char| ch.is_ascii_alphabetic() || ch == '_' || (colon && ch == ':');
    c.next().is_some_and(ok_first)
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || (colon && ch == ':'))
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|e| format!("value {v:?}: {e}")),
    }
}

/// `{a="x",b="y\"z"}` → labels; rejects anything the format does not allow.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or(format!("label without '=': {rest}"))?;
        let name = &rest[..eq];
        if !is_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err("raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        if out.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return Err(format!("expected ',' before {rest:?}")),
        };
    }
    Ok(out)
}

fn family_of(sample: &str, families: &Exposition) -> Option<String> {
    if families.contains_key(sample) {
        return Some(sample.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = sample.strip_suffix(suffix)
            && families.get(base).is_some_and(|f| f.kind == "histogram")
        {
            return Some(base.to_string());
        }
    }
    None
}

pub fn parse_exposition(text: &str) -> Result<Exposition, String> {
    let mut fams: Exposition = BTreeMap::new();
    let mut seen_series = BTreeSet::new();
    let mut finished = BTreeSet::new();
    let mut current: Option<String> = None;
    if !text.ends_with('\n') {
        return Err("the text must end with a newline".into());
    }
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let (kw, rest) = rest
                .split_once(' ')
                .ok_or_else(|| err("bad comment".into()))?;
            let (name, arg) = rest
                .split_once(' ')
                .ok_or_else(|| err("no argument".into()))?;
            if !is_name(name, true) {
                return Err(err("bad metric name".into()));
            }
            if current.as_deref() != Some(name) {
                if let Some(c) = current.take() {
                    finished.insert(c);
                }
                if finished.contains(name) {
                    return Err(err("family split in two groups".into()));
                }
                current = Some(name.to_string());
            }
            let f = fams.entry(name.to_string()).or_default();
            match kw {
                "HELP" => {
                    if f.help {
                        return Err(err("HELP twice".into()));
                    }
                    f.help = true;
                }
                "TYPE" => {
                    if !f.kind.is_empty() || !f.samples.is_empty() {
                        return Err(err("TYPE twice or after samples".into()));
                    }
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(err("unknown type".into()));
                    }
                    f.kind = arg.to_string();
                }
                _ => return Err(err("unknown keyword".into())),
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(err("empty line or bare comment".into()));
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| err("no value".into()))?;
        let value = parse_value(value).map_err(err)?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(l.strip_suffix('}').ok_or_else(|| err("no '}'".into()))?)
                    .map_err(err)?,
            ),
            None => (series, BTreeMap::new()),
        };
        if !is_name(name, true) {
            return Err(err("bad metric name".into()));
        }
        let fam = family_of(name, &fams).ok_or_else(|| err("sample before its TYPE".into()))?;
        if current.as_deref() != Some(fam.as_str()) {
            return Err(err("sample outside its family's group".into()));
        }
        if !seen_series.insert(format!("{name}{labels:?}")) {
            return Err(err("duplicate series".into()));
        }
        fams.get_mut(&fam)
            .unwrap()
            .samples
            .push((name.to_string(), labels, value));
    }
    // Histograms: per series, le ascending, cumulative, +Inf = _count, a _sum.
    for (name, f) in fams.iter().filter(|(_, f)| f.kind == "histogram") {
        let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut counts = BTreeMap::new();
        let mut sums = BTreeSet::new();
        for (s, labels, v) in &f.samples {
            let mut key = labels.clone();
            let le = key.remove("le");
            let key = format!("{key:?}");
            match s.strip_prefix(name.as_str()) {
                Some("_bucket") => {
                    let le = parse_value(&le.ok_or(format!("{s}: bucket without le"))?)?;
                    groups.entry(key).or_default().push((le, *v));
                }
                Some("_count") => {
                    counts.insert(key, *v);
                }
                Some("_sum") => {
                    sums.insert(key);
                }
                _ => return Err(format!("{s}: not a histogram series of {name}")),
            }
        }
        for (key, buckets) in &groups {
            for w in buckets.windows(2) {
                if !(w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
                    return Err(format!(
                        "{name}{key}: buckets not ascending/cumulative: {buckets:?}"
                    ));
                }
            }
            let last = buckets.last().unwrap();
            if last.0 != f64::INFINITY || Some(&last.1) != counts.get(key) || !sums.contains(key) {
                return Err(format!(
                    "{name}{key}: +Inf bucket {last:?} vs count {:?}",
                    counts.get(key)
                ));
            }
        }
    }
    for (name, f) in &fams {
        if f.kind.is_empty() || !f.help {
            return Err(format!("{name}: HELP and TYPE required"));
        }
        if f.kind == "counter" && !name.ends_with("_total") {
            return Err(format!("{name}: a counter's name ends in _total"));
        }
    }
    Ok(fams)
}

pub fn sum_by(fams: &Exposition, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (_, labels, v) in &fams[name].samples {
        *out.entry(labels.get(label).cloned().unwrap_or_default())
            .or_default() += v;
    }
    out
}

pub fn value(fams: &Exposition, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    fams.get(name)?.samples.iter().find_map(|(s, labels, v)| {
        (s == name
            && want
                .iter()
                .all(|(k, val)| labels.get(*k).map(String::as_str) == Some(*val)))
        .then_some(*v)
    })
}

/// `promtool check metrics` (Debian package `prometheus`) agrees.
pub fn promtool_check(text: &str) {
    use std::io::Write;
    let promtool = find_program(&["promtool"], "prometheus");
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The sum of every sample of a family.
pub fn total(fams: &Exposition, name: &str) -> f64 {
    fams[name].samples.iter().map(|x| x.2).sum()
}

/// The sum of a histogram's `_count` samples: its observations.
pub fn histogram_count(fams: &Exposition, name: &str) -> f64 {
    let count = format!("{name}_count");
    fams[name]
        .samples
        .iter()
        .filter(|x| x.0 == count)
        .map(|x| x.2)
        .sum()
}

#[test]
fn the_strict_parser_refuses_what_prometheus_refuses() {
    let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"q\\\"\\n\\\\\"} 1\n";
    let f = parse_exposition(ok).unwrap();
    assert_eq!(f["a_total"].samples[0].1["l"], "q\"\n\\");
    for bad in [
        "a_total 1\n",                                                      // no TYPE
        "# HELP a_total x\n# TYPE a_total counter\na_total{l=\"x} 1\n",     // unterminated
        "# HELP a_total x\n# TYPE a_total counter\na_total 1\na_total 2\n", // duplicate
        "# HELP a x\n# TYPE a counter\na 1\n", // counter without _total
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", // not cumulative
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 2\n", // +Inf != count
        "# HELP g x\n# TYPE g gauge\ng 1",     // no final newline
        "# HELP g x\n# TYPE g gauge\ng one\n", // bad value
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad:?}");
    }
    // Label values are escaped on the way out.
    let m = Metrics::new(Default::default());
    m.register_kafka_lag(|| [("we\"ird\\topic\n/0".to_string(), 1u64)].into());
    let text = m.encode(&Default::default()).unwrap();
    let fams = parse_exposition(&text).unwrap();
    assert_eq!(
        fams["overtime_kafka_lag"].samples[0].1["topic"],
        "we\"ird\\topic\n"
    );
}
