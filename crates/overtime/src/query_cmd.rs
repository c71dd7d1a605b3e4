//! `overtime query`: SQL over the five tables (docs/interfaces.md), against a data
//! dir or a running server, with the same read-only limits as
//! `POST /api/sql`.
//!
//! - `--server URL`: the server runs the query (its live `verdicts` and
//!   `incidents`); rows come back as Arrow IPC and print like local ones.
//! - `--data-dir DIR` (or the config's): the store is opened here, which
//!   needs the directory free (a running `overtime serve` holds its lock:
//!   use `--server`). `verdicts` and `incidents` are then diagnosed from
//!   the stored records, only when the query names them.

use crate::UsageError;
use crate::cli::{QueryArgs, QueryOutput};
use anyhow::{Context, Result};
use arrow::record_batch::RecordBatch;
use overtime_config::Config;
use overtime_model::Table;
use overtime_server::Peers;
use overtime_server::sql;
use overtime_store::Store;
use std::io::Read;
use std::sync::Arc;

pub fn run(a: QueryArgs) -> Result<()> {
    let text = sql_text(&a)?;
    let cfg = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (batches, truncated) = match &a.server {
        Some(url) => rt.block_on(remote(url, &text, &cfg, a.token_env.as_deref()))?,
        None => rt.block_on(local(&a, &text, cfg))?,
    };
    print(&batches, a.output)?;
    if truncated {
        eprintln!("overtime: the result was cut at the row limit (sql.max_rows)");
    }
    Ok(())
}

fn sql_text(a: &QueryArgs) -> Result<String> {
    let text = match (&a.sql, &a.file) {
        (Some(_), Some(_)) => {
            return Err(UsageError("give the SQL or --file, not both".into()).into());
        }
        (Some(s), None) if s == "-" => read_stdin()?,
        (Some(s), None) => s.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => {
            return Err(UsageError(
                "no SQL: give it as an argument, with --file, or `-` for stdin".into(),
            )
            .into());
        }
    };
    if text.trim().is_empty() {
        return Err(UsageError("the SQL is empty".into()).into());
    }
    Ok(text)
}

fn read_stdin() -> Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("reading the SQL from stdin")?;
    Ok(s)
}

/// Whether the query names a table (a whole word, any case).
fn mentions(sql: &str, table: &str) -> bool {
    let l = sql.to_ascii_lowercase();
    l.match_indices(table).any(|(i, _)| {
        let before = l[..i].chars().next_back();
        let after = l[i + table.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

async fn local(a: &QueryArgs, text: &str, mut cfg: Config) -> Result<(Vec<RecordBatch>, bool)> {
    if let Some(d) = &a.data_dir {
        cfg.store.data_dir = d.clone();
    }
    if !cfg.store.data_dir.is_dir() {
        anyhow::bail!(
            "no data dir at {} (give --data-dir, or --server to ask a running collector)",
            cfg.store.data_dir.display()
        );
    }
    let mut store_cfg = cfg.store.clone();
    store_cfg.flush_interval_ms = 0; // read only: never flush from here
    let store = Store::open(store_cfg)
        .with_context(|| format!("opening the store in {}", cfg.store.data_dir.display()))?;
    let (verdicts, incidents) = if mentions(text, "verdicts") || mentions(text, "incidents") {
        let dcfg = overtime_serve::diagnose_config(&cfg)?;
        let gateway = store.scan(Table::GatewayRequests, None, None)?;
        let spans = store.scan(Table::Spans, None, None)?;
        let d = overtime_diagnose::diagnose_batches(&gateway, &spans, &dcfg)
            .context("diagnosing the stored records")?;
        (
            d.verdicts
                .into_iter()
                .map(|v| (0u32, v))
                .collect::<Vec<_>>(),
            d.incidents,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    // With [cluster] peers, their unflushed rows too (docs/deploy.md).
    let token = std::env::var(&cfg.server.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    let peers = Arc::new(Peers::new(&cfg.cluster, token, store.collector_id()));
    let asked = (!peers.is_empty()).then(|| peers.query());
    let source = asked
        .clone()
        .map(|p| p as Arc<dyn overtime_store::PeerSource>);
    let ctx = sql::session_with_peers(&store, &verdicts, &incidents, &cfg.sql, source)?;
    let r = sql::run(&ctx, text, &cfg.sql).await?;
    for u in asked.map(|p| p.report().unanswered).unwrap_or_default() {
        eprintln!(
            "warning: peer {} did not answer ({}): its unflushed rows are missing",
            u.peer, u.error
        );
    }
    Ok((r.batches, r.truncated))
}

async fn remote(
    url: &str,
    text: &str,
    cfg: &Config,
    token_env: Option<&str>,
) -> Result<(Vec<RecordBatch>, bool)> {
    let env = token_env.unwrap_or(&cfg.server.token_env);
    let token = std::env::var(env).ok().filter(|t| !t.is_empty());
    let endpoint = format!("{}/api/sql", url.trim_end_matches('/'));
    let mut req = reqwest::Client::new()
        .post(&endpoint)
        .json(&serde_json::json!({"sql": text, "format": "arrow"}));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("POST {endpoint}"))?;
    let status = resp.status();
    let truncated = resp
        .headers()
        .get(overtime_server::TRUNCATED_HEADER)
        .is_some_and(|v| v.as_bytes() == b"true");
    if let Some(report) = resp
        .headers()
        .get(overtime_server::PEERS_HEADER)
        .and_then(|v| serde_json::from_slice::<serde_json::Value>(v.as_bytes()).ok())
    {
        for u in report["unanswered"].as_array().into_iter().flatten() {
            eprintln!(
                "warning: peer {} did not answer ({}): its unflushed rows are missing",
                u["peer"].as_str().unwrap_or("?"),
                u["error"].as_str().unwrap_or("?")
            );
        }
    }
    let body = resp
        .bytes()
        .await
        .with_context(|| format!("reading the answer of {endpoint}"))?;
    if !status.is_success() {
        let reason = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        anyhow::bail!("the server answered {status}: {reason}");
    }
    if body.is_empty() {
        return Ok((Vec::new(), truncated));
    }
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
        .context("reading the Arrow answer")?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .context("reading the Arrow answer")?;
    Ok((batches, truncated))
}

fn print(batches: &[RecordBatch], output: QueryOutput) -> Result<()> {
    match output {
        QueryOutput::Table => {
            let t = datafusion_pretty(batches)?;
            println!("{t}");
        }
        QueryOutput::Json => {
            for row in sql::to_json_rows(batches)? {
                println!("{row}");
            }
        }
        QueryOutput::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(std::io::stdout());
            for b in batches {
                w.write(b).context("writing CSV")?;
            }
        }
    }
    Ok(())
}

fn datafusion_pretty(batches: &[RecordBatch]) -> Result<String> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok("(no rows)".into());
    }
    Ok(arrow::util::pretty::pretty_format_batches(batches)
        .context("formatting the rows")?
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn table_names_are_whole_words() {
        assert!(mentions("SELECT * FROM verdicts", "verdicts"));
        assert!(mentions("select count(*) from Verdicts v", "verdicts"));
        assert!(!mentions("select * from my_verdicts_copy", "verdicts"));
        assert!(!mentions("select * from spans", "incidents"));
    }
}
