//! Offline inputs: everything `overtime diagnose` (and `advise`, `whatif`)
//! reads, from the inputs as given to the batch engine's result: gateway
//! logs and span files (files, globs, directories of rotated logs; plain,
//! `.gz` or `.zst`), read on every core into the engine, which keeps to
//! its memory limit and spills beyond it.
//!
//! Design rules:
//! - The binary only parses arguments into [`Inputs`]; finding the files,
//!   resolving each log's format (`LogFormat::resolve`, as for `serve`'s
//!   sources), numbering the gateway layers (`overtime_diagnose::layer_index`)
//!   and reading are here.
//! - Records are decoded by `overtime_parse::record::Decoder`, as the file
//!   tail and the Kafka consumer do; line numbers stay those of the file,
//!   so the result does not depend on which thread parsed a chunk.
//! - Nothing is dropped silently: every rejected record is counted by
//!   reason per file (the report lines), a file that stops decoding is
//!   counted as `decode_error` and said on stderr.
//! - Messages of [`OfflineError::Input`] name `diagnose`'s flags
//!   (`--nginx-log`, `--log-format`…): they are what the user typed.

mod files;
mod format_check;
mod metrics;
mod progress;
mod read;
mod refetch;

use files::{Compression, expand};
use read::FileStats;

use crate::{BatchError, BatchOptions, BatchOutput, Engine, TraceHook};
use overtime_diagnose::{DiagnoseConfig, LayerConfig, layer_index};
use overtime_parse::nginx::{FormatError, LogFormat, layer_name_of, read_timeout_ms};
use overtime_parse::record::RecordFormat;
use overtime_parse::spans::SpanFormat;
use read::Job;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Why a run could not read its inputs or diagnose them.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The inputs as given cannot be used (a missing file, a format that
    /// does not fit its log…): the user's to fix, one line.
    #[error("{0}")]
    Input(String),
    /// A file could not be opened.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file, as found from the inputs given.
        path: PathBuf,
        /// The open's error.
        #[source]
        source: std::io::Error,
    },
    /// The batch engine failed, or the run was interrupted
    /// (`BatchError::Interrupted`).
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The parser threads stopped before the reader was done.
    #[error("the parsers stopped")]
    Stopped,
}

fn input(msg: impl Into<String>) -> OfflineError {
    OfflineError::Input(msg.into())
}

/// One gateway log as given: a file, a glob or a directory, with where its
/// format comes from and its layer's name.
#[derive(Debug, Clone, Default)]
pub struct NginxLogInput {
    /// A file, a glob (`access.log*`) or a directory of rotated logs;
    /// plain, `.gz` or `.zst`.
    pub path: PathBuf,
    /// A built-in format name or a `log_format` body; wins over
    /// `nginx_conf` + `format_name`.
    pub log_format: Option<String>,
    /// nginx.conf for `format_name` and the layer's read timeout.
    pub nginx_conf: Option<PathBuf>,
    /// The `log_format` to take from `nginx_conf` (`None`: the format
    /// must be given as `log_format`).
    pub format_name: Option<String>,
    /// The gateway layer (default: the first file's name).
    pub layer: Option<String>,
}

/// Everything a run reads, and how.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Gateway logs, outermost layer first.
    pub nginx_logs: Vec<NginxLogInput>,
    /// Span files (file, glob or directory each) and their format.
    pub spans: Vec<(PathBuf, SpanFormat)>,
    /// The read timeout of each gateway layer in order, in ms.
    pub gateway_timeouts_ms: Vec<f64>,
    /// The diagnosis; its `layers` are filled in from the logs.
    pub config: DiagnoseConfig,
    /// Parser and engine threads (default: all cores).
    pub threads: Option<usize>,
    /// Bytes the engine keeps in memory (default: a quarter of the
    /// machine's memory, between 256 and 512 MiB).
    pub memory_limit: Option<usize>,
    /// Where spill files go (default: `$TMPDIR`).
    pub temp_dir: Option<PathBuf>,
    /// Draw the progress bar (on a terminal only).
    pub progress: bool,
    /// Diagnose even when a log's format does not fit it.
    pub allow_rejects: bool,
    /// Route healthy gateway rows as their head alone and read back the
    /// few a verdict needs (`diagnose`; docs/diagnose-at-scale.md, *Lean
    /// rows*); off: every row whole. The output is the same.
    pub lean_rows: bool,
    /// Model-server metrics exports (docs/inputs.md, "Model-server
    /// metrics"), plain, .gz or .zst.
    pub metrics: Vec<PathBuf>,
}

/// One gateway log, resolved: its files, format and layer.
struct LogInput {
    files: Vec<PathBuf>,
    format: LogFormat,
    /// The format as given: a built-in name, a body, or the name in nginx.conf.
    format_label: String,
    layer: String,
    conf_timeout_ms: Option<f64>,
}

fn resolve_log(l: &NginxLogInput) -> Result<LogInput, OfflineError> {
    let files = expand(&l.path).map_err(|e| input(format!("--nginx-log {e}")))?;
    let conf_text = match &l.nginx_conf {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| input(format!("--nginx-conf {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let given = l.log_format.as_deref();
    let name = l.format_name.as_deref();
    let format_label = given.or(name).unwrap_or_default().to_string();
    let format = LogFormat::resolve(given, conf_text.as_deref(), name)
        .map_err(|e| match (given, &e) {
            (Some(_), FormatError::NoVariables { .. }) => input(format!("--log-format {e}")),
            (Some(f), _) => input(format!("--log-format {f:?}: {e}")),
            (None, _) => input(format!(
                "--nginx-conf with --format-name {format_label}: {e}"
            )),
        })?
        .ok_or_else(|| {
            input(format!(
                "--nginx-log {} needs its format: --log-format <name|body>, or --nginx-conf <file> with --format-name <name>",
                l.path.display()
            ))
        })?;
    Ok(LogInput {
        layer: l.layer.clone().unwrap_or_else(|| layer_name_of(&files[0])),
        files,
        format,
        format_label,
        conf_timeout_ms: conf_text.as_deref().and_then(read_timeout_ms),
    })
}

/// The flag a span format is given with.
fn span_flag(f: SpanFormat) -> &'static str {
    match f {
        SpanFormat::Jsonl => "--spans",
        SpanFormat::OtlpJson => "--otlp-json",
        SpanFormat::OtlpProto => "--otlp-proto",
    }
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

/// The default memory limit: a quarter of the machine's memory, at most
/// 512 MiB (the engine's own needs come on top, see
/// docs/diagnose-at-scale.md), at least 256 MiB. More buys no speed: the
/// work is parsing and verdicts, not the spill files (measured there).
pub(crate) fn default_memory_limit() -> usize {
    let quarter = machine_memory().map_or(512 << 20, |m| m / 4);
    quarter.clamp(256 << 20, 512 << 20) as usize
}

/// Whether the run's spill files are compressed: when the input as stored
/// and its spill (about 0.8x its text) would take more than three
/// quarters of the machine's memory, they would not stay in the page
/// cache beside the run, and writing half the bytes to disk pays for the
/// CPU it costs (docs/diagnose-at-scale.md).
fn compress_spill(on_disk: u64, text_hint: u64) -> bool {
    machine_memory().is_some_and(|m| on_disk + text_hint / 5 * 4 > m / 4 * 3)
}

/// What a run read and found.
pub struct Run {
    /// The batch engine's result: verdicts, incidents, latency table and
    /// counts.
    pub output: BatchOutput,
    /// One line per input file: records read and rejected, by reason.
    pub report_lines: Vec<String>,
    /// How much was read, and how long it took.
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
    /// Of `text_hint`, the span files'.
    span_hint: u64,
}

fn plan(a: &Inputs) -> Result<Plan, OfflineError> {
    let logs = a
        .nginx_logs
        .iter()
        .map(resolve_log)
        .collect::<Result<Vec<_>, _>>()?;
    let mut span_files: Vec<(PathBuf, SpanFormat)> = Vec::new();
    for (p, format) in &a.spans {
        for f in expand(p).map_err(|e| input(format!("{} {e}", span_flag(*format))))? {
            span_files.push((f, *format));
        }
    }
    if logs.is_empty() && span_files.is_empty() {
        return Err(input(
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
    let memory_limit = a.memory_limit.unwrap_or_else(default_memory_limit);

    // Layers in order of first appearance, outermost first.
    let mut layers: Vec<LayerConfig> = Vec::new();
    let layer_idx: Vec<u32> = logs
        .iter()
        .map(|l| layer_index(&mut layers, &l.layer, l.conf_timeout_ms))
        .collect();
    if a.gateway_timeouts_ms.len() > layers.len() {
        return Err(input(format!(
            "{} --gateway-timeout for {} gateway layers",
            a.gateway_timeouts_ms.len(),
            layers.len()
        )));
    }
    for (i, t) in a.gateway_timeouts_ms.iter().enumerate() {
        layers[i].read_timeout_ms = Some(*t);
    }
    let config = DiagnoseConfig {
        layers,
        ..a.config.clone()
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
    let mut span_hint = 0u64;
    for j in &jobs {
        let size = std::fs::metadata(&j.path).map(|m| m.len()).unwrap_or(0);
        let c = Compression::sniff(&j.path).unwrap_or(Compression::None);
        on_disk += size;
        text_hint += size * c.ratio();
        if j.format.nginx_log().is_none() {
            span_hint += size * c.ratio();
        }
    }
    Ok(Plan {
        logs,
        jobs,
        config,
        threads,
        memory_limit,
        on_disk,
        text_hint,
        span_hint,
    })
}

/// How much was read, and how long it took.
pub struct ReadTotals {
    /// Bytes read from disk (compressed as stored).
    pub bytes_read: u64,
    /// Bytes of text (decompressed).
    pub text_bytes: u64,
    /// Wall time from the first read to the last record parsed.
    pub read_time: std::time::Duration,
}

/// Reads every input into the batch engine and diagnoses it. `on_trace`
/// sees each request that needed a verdict (for `advise`); `cancel`
/// stops the run (`BatchError::Interrupted`) when set.
pub fn run(
    a: &Inputs,
    on_trace: Option<TraceHook>,
    cancel: Arc<AtomicBool>,
) -> Result<Run, OfflineError> {
    let plan = plan(a)?;
    let progress = Arc::new(progress::Progress::new(plan.on_disk, a.progress));
    let p2 = progress.clone();
    let opts = BatchOptions {
        memory_limit: plan.memory_limit,
        threads: plan.threads,
        spill_dir: a.temp_dir.clone(),
        compress_spill: compress_spill(plan.on_disk, plan.text_hint),
        input_bytes_hint: plan.text_hint,
        cancel: cancel.clone(),
        progress: Some(Arc::new(move |step, done, total| {
            p2.step(step, done, total)
        })),
        on_trace,
        refetch: a.lean_rows.then(|| refetch::hook(&plan.jobs)),
        span_bytes_hint: plan.span_hint,
    };
    let (metrics, metric_lines) = metrics::read_metrics(&a.metrics)?;
    let mut engine = Engine::new(plan.config.clone(), opts);
    if !metrics.is_empty() {
        engine = engine.with_server_metrics(metrics);
    }
    let started = std::time::Instant::now();
    // Spans first: a healthy gateway row whose trace has no span can then
    // be routed as its head alone (lean rows). File numbers, and with them
    // every record's place, stay those of the command line.
    let logs = plan
        .jobs
        .iter()
        .take_while(|j| j.format.nginx_log().is_some())
        .count();
    let read = |jobs| {
        read::read_all(
            jobs,
            read::Destination::Engine(&engine),
            plan.threads,
            &progress,
            &cancel,
        )
    };
    let stats = read(&plan.jobs[logs..]).and_then(|spans| {
        engine.spans_read();
        let mut stats = read(&plan.jobs[..logs])?;
        stats.extend(spans);
        Ok(stats)
    });
    let totals = progress.totals(started.elapsed());
    let stats = match stats {
        Ok(s) => s,
        Err(e) => {
            progress.finish();
            return Err(e);
        }
    };
    let mut report_lines = report_lines(&plan, &stats);
    report_lines.extend(metric_lines);
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

/// Reads and parses every input on every core, and nothing more (the raw
/// parse speed a diagnosis is measured against).
pub fn parse_only(
    a: &Inputs,
    cancel: Arc<AtomicBool>,
) -> Result<(Vec<String>, ReadTotals), OfflineError> {
    let plan = plan(a)?;
    let progress = progress::Progress::new(plan.on_disk, a.progress);
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
    /// Every gateway log's records as `gateway_requests` batches, in
    /// input order (layer by layer, file by file, line by line).
    pub gateway: Vec<arrow::record_batch::RecordBatch>,
    /// Every span read, in input order (not deduplicated).
    pub spans: Vec<overtime_model::SpanRecord>,
    /// The diagnosis config with its `layers` filled in from the logs.
    pub config: DiagnoseConfig,
    /// One line per input file: records read and rejected, by reason.
    pub report_lines: Vec<String>,
}

/// Reads every input on every core into memory, checked as [`run`]
/// checks them. For `advise` and `whatif`, whose fits see every request
/// at once (docs/diagnose-at-scale.md says what that costs).
pub fn load(a: &Inputs, cancel: Arc<AtomicBool>) -> Result<Loaded, OfflineError> {
    let plan = plan(a)?;
    let progress = progress::Progress::new(plan.on_disk, a.progress);
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

/// Does each gateway log's format fit it, and is each span file mostly
/// read? (See [`format_check`].)
fn check_formats(plan: &Plan, stats: &[FileStats]) -> Result<(), OfflineError> {
    for l in &plan.logs {
        for f in &l.files {
            let (_, s) = plan
                .jobs
                .iter()
                .zip(stats)
                .find(|(j, _)| &j.path == f)
                .expect("a job per file");
            let p = format_check::Parsed {
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
            format_check::check(&p, &s.head).map_err(OfflineError::Input)?;
        }
    }
    for (job, s) in plan.jobs.iter().zip(stats) {
        let RecordFormat::Spans(format) = job.format else {
            continue;
        };
        let p = format_check::SpansParsed {
            path: &job.path,
            flag: span_flag(format),
            records: s.records,
            rejected: s.rejected,
            reasons: &s.reasons,
            first_rejected: s
                .first_rejected_why
                .clone()
                .zip(s.first_rejected.as_ref().map(|(_, raw)| raw.as_str())),
        };
        format_check::check_spans(&p).map_err(OfflineError::Input)?;
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
    fn the_default_memory_limit_is_bounded() {
        let m = default_memory_limit();
        assert!((256 << 20..=512 << 20).contains(&m), "{m}");
    }

    #[test]
    fn nothing_to_read_is_an_input_error() {
        let e = run(&Inputs::default(), None, Arc::default()).err().unwrap();
        assert!(
            matches!(e, OfflineError::Input(ref m) if m.contains("nothing to diagnose")),
            "{e}"
        );
    }
}
