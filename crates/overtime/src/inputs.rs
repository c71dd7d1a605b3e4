//! Everything `diagnose` reads, from its arguments to the batch engine's
//! result: gateway logs and span files (files, globs, directories of
//! rotated logs; plain, `.gz` or `.zst`), read on every core into the
//! engine, which keeps to `--memory-limit` and spills beyond it.
//!
//! [`run`] takes the same arguments as `diagnose`, so every subcommand
//! that reads the same inputs (`advise`, `whatif`) goes through it.

mod files;
mod progress;
mod read;

use crate::UsageError;
use crate::cli::DiagnoseArgs;
use anyhow::Result;
use overtime_diagnose::batch::{BatchOptions, BatchOutput, Engine, TraceHook};
use overtime_diagnose::{DiagnoseConfig, LayerConfig, layer_index};
use overtime_parse::duration::parse_duration_ms;
use overtime_parse::nginx::{FormatError, LogFormat, layer_name_of, read_timeout_ms};
use overtime_parse::record::RecordFormat;
use overtime_parse::spans::SpanFormat;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use files::expand;
pub use read::FileStats;
use read::Job;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// One `--nginx-log` argument, resolved: its files, format and layer.
struct LogInput {
    files: Vec<PathBuf>,
    format: LogFormat,
    /// The format as given: a built-in name, a body, or `NAME in FILE`.
    format_label: String,
    layer: String,
    conf_timeout_ms: Option<f64>,
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
        let files = expand(path).map_err(|e| usage(format!("--nginx-log {e}")))?;
        let conf_path = pick(&a.nginx_conf, i);
        let conf_text = match &conf_path {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| usage(format!("--nginx-conf {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let given = pick(&a.log_format, i);
        let name = pick(&a.format_name, i);
        let format_label = given.clone().or(name.clone()).unwrap_or_default();
        let format = LogFormat::resolve(given.as_deref(), conf_text.as_deref(), name.as_deref())
            .map_err(|e| match (&given, &e) {
                (Some(_), FormatError::NoVariables { .. }) => usage(format!("--log-format {e}")),
                (Some(f), _) => usage(format!("--log-format {f:?}: {e}")),
                (None, _) => usage(format!("--nginx-conf with --format-name {format_label}: {e}")),
            })?
            .ok_or_else(|| {
                usage(format!(
                    "--nginx-log {} needs its format: --log-format <name|body>, or --nginx-conf <file> with --format-name <name>",
                    path.display()
                ))
            })?;
        out.push(LogInput {
            layer: pick(&a.layer_name, i).unwrap_or_else(|| layer_name_of(&files[0])),
            files,
            format,
            format_label,
            conf_timeout_ms: conf_text.as_deref().and_then(read_timeout_ms),
        });
    }
    Ok(out)
}

fn duration_arg(v: &str, flag: &str) -> Result<f64> {
    parse_duration_ms(v, 1000.0).ok_or_else(|| {
        usage(format!(
            "{flag} {v:?}: not a duration (e.g. 60s, 1500ms, 5m)"
        ))
    })
}

/// `512M`, `2G`, `1.5GiB`, `800000000` → bytes (K, M, G, T are powers of 1024).
pub fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let mult = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 1.0).then_some(v as usize)
}

/// The machine's memory: RAM, or the cgroup's limit when lower.
fn machine_memory() -> Option<u64> {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })?;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    Some(cgroup.map_or(ram, |c| c.min(ram)))
}

/// The default `--memory-limit`: a quarter of the machine's memory, at
/// most 512 MiB (the engine's own needs come on top, see
/// docs/diagnose-at-scale.md), at least 256 MiB. More buys no speed: the
/// work is parsing and verdicts, not the spill files (measured there).
pub fn default_memory_limit() -> usize {
    let quarter = machine_memory().map_or(512 << 20, |m| m / 4);
    quarter.clamp(256 << 20, 512 << 20) as usize
}

/// Stops the run on Ctrl-C: the first press sets the flag every reader
/// and worker checks; the run unwinds and removes its temp dir.
fn cancel_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // tokio's signal handling (already in the binary for `serve`) on a
        // thread of its own; failing to set it up only loses the clean stop.
        let _ = std::thread::Builder::new()
            .name("ctrl-c".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        f.store(true, Ordering::Relaxed);
                    }
                    // A second Ctrl-C: the default, at once.
                    let _ = tokio::signal::ctrl_c().await;
                    std::process::exit(130);
                });
            });
        flag
    })
    .clone()
}

/// What `diagnose` read and found.
pub struct Run {
    pub output: BatchOutput,
    /// One line per input file: records read and rejected, by reason.
    pub report_lines: Vec<String>,
    pub totals: ReadTotals,
}

/// The inputs of a run, resolved: files in input order and how to read
/// them, the diagnosis config, and the machine's share.
struct Plan {
    logs: Vec<LogInput>,
    jobs: Vec<Job>,
    config: DiagnoseConfig,
    threads: usize,
    memory_limit: usize,
    /// Bytes of the files as stored, and a guess of their text's size.
    on_disk: u64,
    text_hint: u64,
}

fn plan(a: &DiagnoseArgs) -> Result<Plan> {
    let logs = resolve_logs(a)?;
    let mut span_files: Vec<(PathBuf, SpanFormat)> = Vec::new();
    for (paths, format, flag) in [
        (&a.spans, SpanFormat::Jsonl, "--spans"),
        (&a.otlp_json, SpanFormat::OtlpJson, "--otlp-json"),
        (&a.otlp_proto, SpanFormat::OtlpProto, "--otlp-proto"),
    ] {
        for p in paths {
            for f in expand(p).map_err(|e| usage(format!("{flag} {e}")))? {
                span_files.push((f, format));
            }
        }
    }
    if logs.is_empty() && span_files.is_empty() {
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
    let memory_limit = match &a.memory_limit {
        Some(s) => parse_size(s).ok_or_else(|| {
            usage(format!(
                "--memory-limit {s:?}: not a size (e.g. 512M, 2G, 1.5GiB)"
            ))
        })?,
        None => default_memory_limit(),
    };

    // Layers in order of first appearance, outermost first.
    let mut layers: Vec<LayerConfig> = Vec::new();
    let layer_idx: Vec<u32> = logs
        .iter()
        .map(|l| layer_index(&mut layers, &l.layer, l.conf_timeout_ms))
        .collect();
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
    let config = DiagnoseConfig {
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

    // Files in input order: gateway logs (each in rotation order), then
    // span files.
    let mut jobs = Vec::new();
    for (l, &layer_idx) in logs.iter().zip(&layer_idx) {
        for f in &l.files {
            jobs.push(Job {
                path: f.clone(),
                file: jobs.len() as u32,
                format: RecordFormat::nginx(l.format.clone(), &l.layer, layer_idx),
            });
        }
    }
    for (p, format) in span_files {
        jobs.push(Job {
            path: p,
            file: jobs.len() as u32,
            format: RecordFormat::Spans(format),
        });
    }
    let mut on_disk = 0u64;
    let mut text_hint = 0u64;
    for j in &jobs {
        let size = std::fs::metadata(&j.path).map(|m| m.len()).unwrap_or(0);
        let c = files::Compression::sniff(&j.path).unwrap_or(files::Compression::None);
        on_disk += size;
        text_hint += size * c.ratio();
    }
    Ok(Plan {
        logs,
        jobs,
        config,
        threads,
        memory_limit,
        on_disk,
        text_hint,
    })
}

/// How much was read, and how long it took.
pub struct ReadTotals {
    /// Bytes read from disk (compressed as stored).
    pub bytes_read: u64,
    /// Bytes of text (decompressed).
    pub text_bytes: u64,
    pub read_time: std::time::Duration,
}

/// Reads every input of `a` into the batch engine and diagnoses it.
/// `on_trace` sees each request that needed a verdict (for `advise`).
pub fn run(a: &DiagnoseArgs, on_trace: Option<TraceHook>) -> Result<Run> {
    let plan = plan(a)?;
    let cancel = cancel_flag();
    let progress = Arc::new(progress::Progress::new(plan.on_disk, !a.quiet));
    let p2 = progress.clone();
    let opts = BatchOptions {
        memory_limit: plan.memory_limit,
        threads: plan.threads,
        spill_dir: a.temp_dir.clone(),
        input_bytes_hint: plan.text_hint,
        cancel: cancel.clone(),
        progress: Some(Arc::new(move |step, done, total| {
            p2.step(step, done, total)
        })),
        on_trace,
    };
    let engine = Engine::new(plan.config.clone(), opts);
    let started = std::time::Instant::now();
    let stats = read::read_all(
        &plan.jobs,
        read::Destination::Engine(&engine),
        plan.threads,
        &progress,
        &cancel,
    );
    let totals = progress.totals(started.elapsed());
    let stats = match stats {
        Ok(s) => s,
        Err(e) => {
            progress.finish();
            return Err(e);
        }
    };
    let report_lines = report_lines(&plan, &stats);
    if !a.allow_rejects
        && let Err(e) = check_formats(&plan, &stats)
    {
        progress.finish();
        return Err(e);
    }
    let output = engine.finish();
    progress.finish();
    Ok(Run {
        output: output?,
        report_lines,
        totals,
    })
}

/// Reads and parses every input of `a` on every core, and nothing more
/// (the raw parse speed a diagnosis is measured against).
pub fn parse_only(a: &DiagnoseArgs) -> Result<(Vec<String>, ReadTotals)> {
    let plan = plan(a)?;
    let cancel = cancel_flag();
    let progress = progress::Progress::new(plan.on_disk, !a.quiet);
    let started = std::time::Instant::now();
    let stats = read::read_all(
        &plan.jobs,
        read::Destination::Nothing,
        plan.threads,
        &progress,
        &cancel,
    );
    progress.finish();
    let stats = stats?;
    Ok((
        report_lines(&plan, &stats),
        progress.totals(started.elapsed()),
    ))
}

/// Every record of a run's inputs, in input order, held in memory.
pub struct Loaded {
    pub gateway: Vec<arrow::record_batch::RecordBatch>,
    pub spans: Vec<overtime_model::SpanRecord>,
    pub config: DiagnoseConfig,
    /// One line per input file: records read and rejected, by reason.
    pub report_lines: Vec<String>,
}

/// Reads every input of `a` on every core into memory, checked as [`run`]
/// checks them. For `advise` and `whatif`, whose fits see every request at
/// once (docs/diagnose-at-scale.md says what that costs).
pub fn load(a: &DiagnoseArgs) -> Result<Loaded> {
    let plan = plan(a)?;
    let cancel = cancel_flag();
    let progress = progress::Progress::new(plan.on_disk, !a.quiet);
    let held = read::Collector::default();
    let stats = read::read_all(
        &plan.jobs,
        read::Destination::Memory(&held),
        plan.threads,
        &progress,
        &cancel,
    );
    progress.finish();
    let stats = stats?;
    if !a.allow_rejects {
        check_formats(&plan, &stats)?;
    }
    let (gateway, spans) = held.into_input_order();
    Ok(Loaded {
        gateway,
        spans,
        report_lines: report_lines(&plan, &stats),
        config: plan.config,
    })
}

fn report_lines(plan: &Plan, stats: &[FileStats]) -> Vec<String> {
    plan.jobs
        .iter()
        .zip(stats)
        .map(|(job, s)| {
            let what = match job.format {
                RecordFormat::Nginx(_) => "gateway lines",
                RecordFormat::Spans(_) => "spans",
            };
            rejected_line(&job.path, what, s)
        })
        .collect()
}

/// Does each gateway log's format fit it? (See [`crate::format_check`].)
fn check_formats(plan: &Plan, stats: &[FileStats]) -> Result<()> {
    for l in &plan.logs {
        for f in &l.files {
            let (_, s) = plan
                .jobs
                .iter()
                .zip(stats)
                .find(|(j, _)| &j.path == f)
                .expect("a job per file");
            let p = crate::format_check::Parsed {
                path: f,
                format_label: &l.format_label,
                format_has_status_or_time: l
                    .format
                    .variables()
                    .any(|v| v == "status" || v == "request_time"),
                rows: s.records,
                rejected_rows: s.rejected,
                gives_status_or_time: s.status_or_time,
                first_rejected: s.first_rejected.clone(),
            };
            crate::format_check::check(&p, &s.head).map_err(usage)?;
        }
    }
    Ok(())
}

fn rejected_line(path: &Path, what: &str, s: &FileStats) -> String {
    let mut line = format!(
        "{}: {} {what} read, {} rejected",
        path.display(),
        s.records,
        s.rejected
    );
    if s.rejected > 0 {
        let r: Vec<String> = s.reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
        line.push_str(&format!(" ({})", r.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_binary_units() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("64kb"), Some(64 << 10));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("3X"), None);
    }

    #[test]
    fn the_default_memory_limit_is_bounded() {
        let m = default_memory_limit();
        assert!((256 << 20..=512 << 20).contains(&m), "{m}");
    }
}
