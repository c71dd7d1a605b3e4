//! `overtime diagnose`: files in, verdicts and incident reports out.

use crate::cli::DiagnoseArgs;
use crate::conf_timeouts::read_timeout_ms;
use crate::inputs::{parse_nginx, parse_spans, read_file, SpanInputs};
use crate::UsageError;
use anyhow::{Context, Result};
use overtime_diagnose::{diagnose_tables, markdown, DiagnoseConfig, LayerConfig};
use overtime_parse::duration::parse_duration_ms;
use overtime_parse::nginx::LogFormat;
use overtime_parse::spans::SpanFormat;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One nginx log with its format and layer, resolved from the arguments.
struct LogInput {
    path: PathBuf,
    format: LogFormat,
    /// The format as given: a built-in name, a body, or `NAME in FILE`.
    format_label: String,
    layer: String,
    conf_timeout_ms: Option<f64>,
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// `edge.log`, `edge.log.1`, `edge.log.2.gz`, `edge-access.log` → the layer name.
pub fn layer_name_of(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts: Vec<&str> = name.split('.').collect();
    while parts.len() > 1 {
        let last = parts[parts.len() - 1];
        if last == "gz" || last == "log" || last.chars().all(|c| c.is_ascii_digit()) {
            parts.pop();
        } else {
            break;
        }
    }
    parts.join(".")
}

fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
    match v.len() {
        0 => None,
        1 => Some(v[0].clone()),
        _ => v.get(i).cloned(),
    }
}

fn resolve_logs(a: &DiagnoseArgs) -> Result<Vec<LogInput>> {
    let mut out = Vec::new();
    if a.log_format.len() > 1 && a.log_format.len() != a.nginx_log.len() {
        return Err(usage(format!(
            "{} --nginx-log but {} --log-format: give one format for all logs or one per log, in the same order",
            a.nginx_log.len(),
            a.log_format.len()
        )));
    }
    for (i, path) in a.nginx_log.iter().enumerate() {
        if !path.is_file() {
            return Err(usage(format!(
                "--nginx-log {}: no such file",
                path.display()
            )));
        }
        let conf_path = pick(&a.nginx_conf, i);
        let conf_text = match &conf_path {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| usage(format!("--nginx-conf {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let format_label;
        let format = if let Some(f) = pick(&a.log_format, i) {
            format_label = f.clone();
            match LogFormat::builtin(&f) {
                Some(b) => b,
                None => {
                    let compiled = LogFormat::compile(&f)
                        .map_err(|e| usage(format!("--log-format {f:?}: {e}")))?;
                    if compiled.variables().next().is_none() {
                        return Err(usage(format!(
                            "--log-format {f:?} is neither a built-in format (overtime, combined) \
                             nor a format body with $variables"
                        )));
                    }
                    compiled
                }
            }
        } else if let (Some(text), Some(name)) = (&conf_text, pick(&a.format_name, i)) {
            format_label = name.clone();
            LogFormat::from_nginx_conf(text, &name)
                .map_err(|e| usage(format!("--nginx-conf with --format-name {name}: {e}")))?
        } else {
            return Err(usage(format!(
                "--nginx-log {} needs its format: --log-format <name|body>, or --nginx-conf <file> with --format-name <name>",
                path.display()
            )));
        };
        out.push(LogInput {
            path: path.clone(),
            format,
            format_label,
            layer: pick(&a.layer_name, i).unwrap_or_else(|| layer_name_of(path)),
            conf_timeout_ms: conf_text.as_deref().and_then(read_timeout_ms),
        });
    }
    Ok(out)
}

fn check_files(paths: &[PathBuf], flag: &str) -> Result<()> {
    for p in paths {
        if !p.is_file() {
            return Err(usage(format!("{flag} {}: no such file", p.display())));
        }
    }
    Ok(())
}

fn duration_arg(v: &str, flag: &str) -> Result<f64> {
    parse_duration_ms(v, 1000.0).ok_or_else(|| {
        usage(format!(
            "{flag} {v:?}: not a duration (e.g. 60s, 1500ms, 5m)"
        ))
    })
}

/// The inputs of `diagnose` read and parsed: what `advise` and `whatif`
/// read too.
pub struct Inputs {
    pub gateway: Vec<arrow::record_batch::RecordBatch>,
    pub spans: Vec<overtime_model::SpanRecord>,
    pub cfg: DiagnoseConfig,
    /// One line per input file: rows read and rejected.
    pub report_lines: Vec<String>,
    pub started: std::time::Instant,
    pub profile: bool,
}

/// Reads and parses every input the arguments name.
pub fn load_inputs(a: &DiagnoseArgs) -> Result<Inputs> {
    let logs = resolve_logs(a)?;
    check_files(&a.spans, "--spans")?;
    check_files(&a.otlp_json, "--otlp-json")?;
    check_files(&a.otlp_proto, "--otlp-proto")?;
    if logs.is_empty() && a.spans.is_empty() && a.otlp_json.is_empty() && a.otlp_proto.is_empty() {
        return Err(usage(
            "nothing to diagnose: give --nginx-log, --spans, --otlp-json or --otlp-proto",
        ));
    }
    let threads = a
        .threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);

    // Layers in order of first appearance, outermost first.
    let mut layers: Vec<LayerConfig> = Vec::new();
    for l in &logs {
        if !layers.iter().any(|x| x.name == l.layer) {
            layers.push(LayerConfig {
                name: l.layer.clone(),
                read_timeout_ms: l.conf_timeout_ms,
            });
        }
    }
    if a.gateway_timeout.len() > layers.len() {
        return Err(usage(format!(
            "{} --gateway-timeout for {} gateway layers",
            a.gateway_timeout.len(),
            layers.len()
        )));
    }
    for (i, t) in a.gateway_timeout.iter().enumerate() {
        layers[i].read_timeout_ms = Some(duration_arg(t, "--gateway-timeout")?);
    }
    let cfg = DiagnoseConfig {
        threshold_tokens: a.threshold_tokens,
        incident_quiet_ms: duration_arg(&a.incident_quiet, "--incident-quiet")? as i64,
        default_budget_ms: a
            .budget
            .as_deref()
            .map(|b| duration_arg(b, "--budget"))
            .transpose()?,
        all_verdicts: a.all,
        layers: layers.clone(),
        ..Default::default()
    };

    let started = std::time::Instant::now();
    let mut gateway: Vec<arrow::record_batch::RecordBatch> = Vec::new();
    let mut report_lines: Vec<String> = Vec::new();
    for l in &logs {
        let layer_idx = layers.iter().position(|x| x.name == l.layer).unwrap_or(0) as u32;
        let data = read_file(&l.path)?;
        let parsed = parse_nginx(&data, &l.format, &l.layer, layer_idx, threads);
        if !a.allow_rejects {
            let p = crate::format_check::Parsed {
                path: &l.path,
                format_label: &l.format_label,
                format_has_status_or_time: l
                    .format
                    .variables()
                    .any(|v| v == "status" || v == "request_time"),
                rows: parsed.rows,
                rejected_rows: parsed.rejected_rows,
                gateway: &parsed.gateway,
                rejected: &parsed.rejected,
            };
            crate::format_check::check(&p, &data).map_err(usage)?;
        }
        drop(data);
        gateway.extend(parsed.gateway);
        report_lines.push(rejected_line(
            &l.path,
            "gateway lines",
            parsed.rows,
            parsed.rejected_rows,
            &parsed.rejected_by_reason,
        ));
    }
    let mut spans = SpanInputs::default();
    for (paths, format) in [
        (&a.spans, SpanFormat::Jsonl),
        (&a.otlp_json, SpanFormat::OtlpJson),
        (&a.otlp_proto, SpanFormat::OtlpProto),
    ] {
        for p in paths {
            let data = read_file(p)?;
            let parsed = parse_spans(&data, format, &p.display().to_string(), threads);
            let mut reasons = std::collections::BTreeMap::new();
            for r in &parsed.rejected {
                *reasons.entry(r.reason.clone()).or_insert(0u64) += 1;
            }
            report_lines.push(rejected_line(
                p,
                "spans",
                parsed.spans.len(),
                parsed.rejected.len(),
                &reasons,
            ));
            spans.spans.extend(parsed.spans);
            spans.rejected.extend(parsed.rejected);
        }
    }
    let profile = std::env::var_os("OVERTIME_PROFILE").is_some();
    if profile {
        eprintln!(
            "overtime: profile: read and parsed inputs in {:.2?}",
            started.elapsed()
        );
    }
    Ok(Inputs {
        gateway,
        spans: spans.spans,
        cfg,
        report_lines,
        started,
        profile,
    })
}

pub fn run(a: DiagnoseArgs) -> Result<()> {
    let Inputs {
        gateway,
        spans,
        cfg,
        report_lines,
        started,
        profile,
    } = load_inputs(&a)?;
    let d = diagnose_tables(&gateway, spans, &cfg).context("reading back gateway_requests")?;
    drop(gateway);
    if profile {
        for (phase, t) in &d.timings {
            eprintln!("overtime: profile: {phase} {t:.2?}");
        }
    }
    let failed = d
        .verdicts
        .iter()
        .filter(|v| v.outcome != overtime_model::Outcome::Ok)
        .count();
    let mut err = std::io::stderr().lock();
    for l in &report_lines {
        let _ = writeln!(err, "overtime: {l}");
    }
    let _ = writeln!(
        err,
        "overtime: {} traces ({} duplicate spans counted once), {} failed, {} incidents",
        d.summaries_len,
        d.assembly.duplicate_spans,
        failed,
        d.incidents.len()
    );
    drop(err);

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.json {
        let doc = serde_json::json!({ "verdicts": d.verdicts, "incidents": d.incidents });
        serde_json::to_writer(&mut out, &doc).context("writing JSON")?;
        writeln!(out)?;
    } else {
        out.write_all(markdown::render(&d).as_bytes())?;
    }
    out.flush()?;
    if profile {
        eprintln!("overtime: profile: total {:.2?}", started.elapsed());
    }
    Ok(())
}

fn rejected_line(
    path: &Path,
    what: &str,
    ok: usize,
    bad: usize,
    reasons: &std::collections::BTreeMap<String, u64>,
) -> String {
    let mut s = format!("{}: {ok} {what} read, {bad} rejected", path.display());
    if bad > 0 {
        let r: Vec<String> = reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!(" ({})", r.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn layer_names() {
        assert_eq!(layer_name_of(Path::new("/var/log/nginx/edge.log")), "edge");
        assert_eq!(layer_name_of(Path::new("edge.log.1")), "edge");
        assert_eq!(layer_name_of(Path::new("edge.log.2.gz")), "edge");
        assert_eq!(layer_name_of(Path::new("access")), "access");
        assert_eq!(
            layer_name_of(Path::new("internal.access.log")),
            "internal.access"
        );
    }
}
