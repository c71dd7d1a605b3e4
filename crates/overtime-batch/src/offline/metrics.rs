//! `--metrics`: the model servers' metrics exports, read whole (they are
//! small beside the logs: a sample per series every scrape interval).

use super::{OfflineError, files, input};
use std::path::PathBuf;
use std::sync::Arc;

/// The model servers' metrics of every `--metrics` file, and one line per
/// file of what was read and refused (the first reasons named).
pub(super) fn read_metrics(
    files: &[PathBuf],
) -> Result<
    (
        overtime_diagnose::server_metrics::ServerMetrics,
        Vec<String>,
    ),
    OfflineError,
> {
    let mut samples = Vec::new();
    let mut lines = Vec::new();
    for f in files {
        let mut text = String::new();
        files::open(f, Arc::new(std::sync::atomic::AtomicU64::new(0)))
            .and_then(|mut r| std::io::Read::read_to_string(&mut r, &mut text))
            .map_err(|e| input(format!("--metrics {}: {e}", f.display())))?;
        let read = overtime_parse::metrics::read_metrics(&text);
        let mut line = format!(
            "{}: {} metric samples read, {} rejected",
            f.display(),
            read.samples.len(),
            read.rejected.len()
        );
        for r in read.rejected.iter().take(3) {
            line += &format!("; line {}: {}", r.line, r.reason);
        }
        lines.push(line);
        samples.extend(read.samples);
    }
    Ok((
        overtime_diagnose::server_metrics::ServerMetrics::new(&samples),
        lines,
    ))
}
