//! `overtime advise` and `overtime whatif`: the inputs of `diagnose`, read
//! the same way, into timeout advice or a what-if replay.

use crate::UsageError;
use crate::cli::{AdviseArgs, WhatIfArgs};
use crate::inputs::{Loaded, load};
use anyhow::{Context, Result};
use overtime_advise::render::{self, Style};
use overtime_advise::{AdviseOptions, Dataset, Proposal, WhatIfOptions, advise, dataset, whatif};
use std::io::Write;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Reads the inputs and builds the dataset, reporting each file's counts.
fn read(a: &crate::cli::DiagnoseArgs) -> Result<Dataset> {
    let Loaded {
        gateway,
        spans,
        config,
        report_lines,
    } = load(a)?;
    let ds = dataset(&gateway, spans, &config).context("reading back gateway_requests")?;
    let mut err = std::io::stderr().lock();
    for l in &report_lines {
        let _ = writeln!(err, "overtime: {l}");
    }
    let calls: usize = ds.traces.iter().map(|t| t.calls.len()).sum();
    let _ = writeln!(
        err,
        "overtime: {} requests, {} calls ({} duplicate spans counted once)",
        ds.traces.len(),
        calls,
        ds.duplicate_spans
    );
    Ok(ds)
}

fn style(markdown: bool) -> Style {
    if markdown {
        Style::Markdown
    } else {
        Style::Text
    }
}

fn print(json: Option<serde_json::Value>, text: impl FnOnce() -> String) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match json {
        Some(doc) => {
            serde_json::to_writer(&mut out, &doc).context("writing JSON")?;
            writeln!(out)?;
        }
        None => out.write_all(text().as_bytes())?,
    }
    out.flush()?;
    Ok(())
}

pub fn run_advise(a: AdviseArgs) -> Result<()> {
    if !(0.5..=0.9999).contains(&a.target) {
        return Err(usage(format!(
            "--target {}: a share between 0.5 and 0.9999 (0.99 covers 99 % of calls)",
            a.target
        )));
    }
    let ds = read(&a.inputs)?;
    let adv = advise(&ds, &AdviseOptions { target: a.target });
    let json = a
        .inputs
        .json
        .then(|| serde_json::to_value(&adv))
        .transpose()?;
    print(json, || render::advice(&adv, style(a.inputs.markdown)))
}

/// The proposal of `--proposal FILE` then every `--set`.
pub fn proposal(file: Option<&std::path::Path>, set: &[String]) -> Result<Proposal> {
    let mut p = match file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| usage(format!("--proposal {}: {e}", f.display())))?;
            Proposal::from_toml(&text)
                .map_err(|e| usage(format!("--proposal {}: {e}", f.display())))?
        }
        None => Proposal::default(),
    };
    for kv in set {
        p.set(kv).map_err(|e| usage(format!("--set {kv}: {e}")))?;
    }
    if p.is_empty() {
        return Err(usage(
            "nothing proposed: give --set KEY=VALUE (e.g. llm.<model>.timeout=45s) or --proposal FILE.toml",
        ));
    }
    Ok(p)
}

pub fn run_whatif(a: WhatIfArgs) -> Result<()> {
    let p = proposal(a.proposal.as_deref(), &a.set)?;
    if a.draws == 0 || a.draws > 1_000 {
        return Err(usage(format!("--draws {}: between 1 and 1000", a.draws)));
    }
    let ds = read(&a.inputs)?;
    overtime_advise::check_proposal(&p, &ds).map_err(|e| usage(e.to_string()))?;
    let w = whatif(
        &ds,
        &p,
        &WhatIfOptions {
            seed: a.seed,
            draws: a.draws,
            ..Default::default()
        },
    );
    let json = a
        .inputs
        .json
        .then(|| serde_json::to_value(&w))
        .transpose()?;
    print(json, || render::whatif(&w, style(a.inputs.markdown)))
}
