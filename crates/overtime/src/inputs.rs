//! `diagnose`'s arguments → [`overtime_batch::offline::Inputs`]: the
//! reading itself (files, globs, rotated and compressed logs, formats,
//! layers, the progress bar) is `overtime_batch::offline`'s. Every
//! subcommand that reads the same inputs (`advise`, `whatif`) goes
//! through [`run`] or [`load`].

use crate::UsageError;
use crate::cli::DiagnoseArgs;
use anyhow::Result;
use overtime_batch::TraceHook;
use overtime_batch::offline::{self, Inputs, NginxLogInput, OfflineError};
use overtime_diagnose::DiagnoseConfig;
use overtime_model::DurationMs;
use overtime_parse::spans::SpanFormat;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use offline::{Loaded, ReadTotals, Run};

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Bad inputs are usage errors (exit 2); the rest stay as they are
/// (`BatchError::Interrupted` is recognised by `diagnose_cmd`).
fn from_offline(e: OfflineError) -> anyhow::Error {
    match e {
        OfflineError::Input(msg) => usage(msg),
        OfflineError::Batch(b) => b.into(),
        other => other.into(),
    }
}

fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
    match v.len() {
        0 => None,
        1 => Some(v[0].clone()),
        _ => v.get(i).cloned(),
    }
}

fn duration_arg(v: &str, flag: &str) -> Result<f64> {
    v.parse::<DurationMs>()
        .map(DurationMs::ms)
        .map_err(|e| usage(format!("{flag} {e}")))
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

/// The arguments as [`Inputs`]: per-log flags paired with their log (one
/// value applies to all), durations and sizes read.
fn inputs(a: &DiagnoseArgs) -> Result<Inputs> {
    if a.log_format.len() > 1 && a.log_format.len() != a.nginx_log.len() {
        return Err(usage(format!(
            "{} --nginx-log but {} --log-format: give one format for all logs or one per log, in the same order",
            a.nginx_log.len(),
            a.log_format.len()
        )));
    }
    let nginx_logs = a
        .nginx_log
        .iter()
        .enumerate()
        .map(|(i, path)| NginxLogInput {
            path: path.clone(),
            log_format: pick(&a.log_format, i),
            nginx_conf: pick(&a.nginx_conf, i),
            format_name: pick(&a.format_name, i),
            layer: pick(&a.layer_name, i),
        })
        .collect();
    let mut spans = Vec::new();
    for (paths, format) in [
        (&a.spans, SpanFormat::Jsonl),
        (&a.otlp_json, SpanFormat::OtlpJson),
        (&a.otlp_proto, SpanFormat::OtlpProto),
    ] {
        spans.extend(paths.iter().map(|p| (p.clone(), format)));
    }
    let memory_limit = match &a.memory_limit {
        Some(s) => Some(parse_size(s).ok_or_else(|| {
            usage(format!(
                "--memory-limit {s:?}: not a size (e.g. 512M, 2G, 1.5GiB)"
            ))
        })?),
        None => None,
    };
    let gateway_timeouts_ms = a
        .gateway_timeout
        .iter()
        .map(|t| duration_arg(t, "--gateway-timeout"))
        .collect::<Result<Vec<_>>>()?;
    let config = DiagnoseConfig {
        threshold_tokens: a.threshold_tokens,
        incident_quiet_ms: duration_arg(&a.incident_quiet, "--incident-quiet")? as i64,
        default_budget_ms: a
            .budget
            .as_deref()
            .map(|b| duration_arg(b, "--budget"))
            .transpose()?,
        all_verdicts: a.all,
        ..Default::default()
    };
    Ok(Inputs {
        nginx_logs,
        spans,
        gateway_timeouts_ms,
        config,
        threads: a.threads,
        memory_limit,
        temp_dir: a.temp_dir.clone(),
        progress: !a.quiet,
        allow_rejects: a.allow_rejects,
        // `OVERTIME_LEAN=off`: every gateway row routed whole, as before
        // lean rows (docs/diagnose-at-scale.md) — the tests compare both.
        lean_rows: std::env::var_os("OVERTIME_LEAN").is_none_or(|v| v != "off"),
        metrics: a.metrics.clone(),
    })
}

/// Stops the run on Ctrl-C: the first press sets the flag every reader
/// and worker checks; the run unwinds and removes its temp dir.
fn cancel_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // The handler is in place before the run starts: a Ctrl-C that came
        // before it would kill the run with its temp dir left behind.
        let (ready, is_ready) = std::sync::mpsc::channel::<()>();
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
                    use tokio::signal::unix::{SignalKind, signal};
                    let Ok(mut interrupts) = signal(SignalKind::interrupt()) else {
                        return;
                    };
                    let _ = ready.send(());
                    if interrupts.recv().await.is_some() {
                        f.store(true, Ordering::Relaxed);
                    }
                    // A second Ctrl-C: the default, at once.
                    let _ = interrupts.recv().await;
                    std::process::exit(130);
                });
            });
        // Dropped without a send when the handler could not be set up.
        let _ = is_ready.recv_timeout(std::time::Duration::from_secs(2));
        flag
    })
    .clone()
}

/// Reads every input of `a` into the batch engine and diagnoses it.
/// `on_trace` sees each request that needed a verdict (for `advise`).
pub fn run(a: &DiagnoseArgs, on_trace: Option<TraceHook>) -> Result<Run> {
    offline::run(&inputs(a)?, on_trace, cancel_flag()).map_err(from_offline)
}

/// Reads and parses every input of `a`, and nothing more.
pub fn parse_only(a: &DiagnoseArgs) -> Result<(Vec<String>, ReadTotals)> {
    offline::parse_only(&inputs(a)?, cancel_flag()).map_err(from_offline)
}

/// Reads every input of `a` into memory, checked as [`run`] checks them.
pub fn load(a: &DiagnoseArgs) -> Result<Loaded> {
    offline::load(&inputs(a)?, cancel_flag()).map_err(from_offline)
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
}
