//! `overtime diagnose`: files in, verdicts and incident reports out. The
//! reading and the engine are `overtime_batch::offline`'s (its arguments
//! are turned into inputs by [`crate::inputs`]); this prints.

use crate::cli::DiagnoseArgs;
use anyhow::{Context, Result};
use overtime_batch::BatchError;
use overtime_diagnose::markdown;
use std::io::Write;

pub fn run(a: DiagnoseArgs) -> Result<()> {
    match diagnose(&a) {
        Err(e)
            if matches!(
                e.downcast_ref::<BatchError>(),
                Some(BatchError::Interrupted)
            ) =>
        {
            // Everything is dropped by now: the temp dir is gone.
            eprintln!("overtime: interrupted");
            std::process::exit(130);
        }
        r => r,
    }
}

fn profile_read(t: &crate::inputs::ReadTotals) {
    let secs = t.read_time.as_secs_f64().max(1e-9);
    eprintln!(
        "overtime: profile: read {} text bytes ({} bytes from disk) and parsed them in {:.2?}: {:.0} MB/s",
        t.text_bytes,
        t.bytes_read,
        t.read_time,
        t.text_bytes as f64 / 1e6 / secs
    );
}

fn diagnose(a: &DiagnoseArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let profile = std::env::var_os("OVERTIME_PROFILE").is_some();
    if a.parse_only {
        let (lines, totals) = crate::inputs::parse_only(a)?;
        for l in &lines {
            eprintln!("overtime: {l}");
        }
        if profile {
            profile_read(&totals);
        }
        return Ok(());
    }
    let run = crate::inputs::run(a, None)?;
    let d = run.output;
    if profile {
        profile_read(&run.totals);
        for (phase, t) in &d.timings {
            eprintln!("overtime: profile: {phase} {t:.2?}");
        }
        if d.spilled {
            eprintln!("overtime: profile: spilled to the temp dir (over --memory-limit)");
        }
    }
    let mut err = std::io::stderr().lock();
    for l in &run.report_lines {
        let _ = writeln!(err, "overtime: {l}");
    }
    let _ = writeln!(
        err,
        "overtime: {} traces ({} duplicate spans counted once), {} failed, {} incidents",
        d.summaries_len,
        d.stats.duplicate_spans,
        d.failed,
        d.incidents.len()
    );
    drop(err);

    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    if a.json {
        // As `serde_json::json!({"verdicts": …, "incidents": …})` prints
        // it (keys in sorted order), with the verdicts streamed.
        let incidents = serde_json::to_value(&d.incidents).context("writing JSON")?;
        out.write_all(b"{\"incidents\":")?;
        serde_json::to_writer(&mut out, &incidents).context("writing JSON")?;
        out.write_all(b",\"verdicts\":[")?;
        d.verdicts.write_json(&mut out)?;
        out.write_all(b"]}\n")?;
    } else {
        let unknown: Vec<(&str, &str)> = d
            .unknown
            .iter()
            .map(|(id, s)| (id.as_str(), s.as_str()))
            .collect();
        out.write_all(
            markdown::render_parts(&markdown::Parts {
                requests: d.summaries_len,
                failed: d.failed,
                incidents: &d.incidents,
                latency: &d.latency,
                unknown_count: d.unknown_count,
                unknown: &unknown,
            })
            .as_bytes(),
        )?;
    }
    out.flush()?;
    if profile {
        eprintln!("overtime: profile: total {:.2?}", started.elapsed());
    }
    Ok(())
}
