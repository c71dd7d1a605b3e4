//! Read-only SQL over every table, bounded in time, rows and memory. Used
//! by `POST /api/sql` and `overtime query`.
//!
//! Design rules:
//! - Only queries: DDL, DML and statements (SET, COPY…) are refused before
//!   planning (`SQLOptions`).
//! - Memory: a session-wide pool of `memory_bytes`; an operator that needs
//!   more fails the query with a clear error instead of growing.
//! - Time: the whole query is cancelled after `timeout_ms`.
//! - Rows: at most `max_rows` are returned; `truncated` says when more
//!   existed.

use crate::tables::{incidents_batch, verdicts_batch};
use arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use overtime_config::SqlConfig;
use overtime_diagnose::IncidentReport;
use overtime_model::Verdict;
use overtime_store::Store;
use std::sync::Arc;

/// Longest SQL text accepted.
pub const MAX_SQL_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("query refused: {0}")]
    Refused(String),
    #[error("query failed: {0}")]
    Failed(String),
    #[error("query took longer than {0} ms and was cancelled")]
    Timeout(u64),
}

impl SqlError {
    pub fn reason(&self) -> &'static str {
        match self {
            SqlError::Refused(_) => "sql_refused",
            SqlError::Failed(_) => "sql_failed",
            SqlError::Timeout(_) => "sql_timeout",
        }
    }
}

/// The result of a query.
pub struct SqlResult {
    pub batches: Vec<RecordBatch>,
    pub rows: usize,
    pub truncated: bool,
}

/// A session with every table registered and the limits applied.
pub fn session(
    store: &Store,
    verdicts: &[(u32, Verdict)],
    incidents: &[IncidentReport],
    limits: &SqlConfig,
) -> Result<SessionContext, SqlError> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(limits.memory_bytes, 1.0)
        .build_arc()
        .map_err(|e| SqlError::Failed(e.to_string()))?;
    let ctx = SessionContext::new_with_config_rt(
        SessionConfig::new().with_information_schema(true),
        runtime,
    );
    store
        .register(&ctx)
        .map_err(|e| SqlError::Failed(e.to_string()))?;
    let v = verdicts_batch(verdicts.iter().map(|(r, v)| (*r, v)));
    let i = incidents_batch(incidents);
    for (name, b) in [("verdicts", v), ("incidents", i)] {
        let t = MemTable::try_new(b.schema(), vec![vec![b]])
            .map_err(|e| SqlError::Failed(e.to_string()))?;
        ctx.register_table(name, Arc::new(t))
            .map_err(|e| SqlError::Failed(e.to_string()))?;
    }
    Ok(ctx)
}

/// Runs one read-only query within the limits.
pub async fn run(
    ctx: &SessionContext,
    sql: &str,
    limits: &SqlConfig,
) -> Result<SqlResult, SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::Refused(format!(
            "the query is {} bytes; at most {MAX_SQL_BYTES}",
            sql.len()
        )));
    }
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let work = async {
        let df = ctx
            .sql_with_options(sql, options)
            .await
            .map_err(|e| classify(e.to_string()))?;
        let mut stream = df
            .execute_stream()
            .await
            .map_err(|e| SqlError::Failed(e.to_string()))?;
        let mut batches = Vec::new();
        let mut rows = 0usize;
        let mut truncated = false;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| SqlError::Failed(e.to_string()))?;
            let room = limits.max_rows - rows;
            if b.num_rows() > room {
                batches.push(b.slice(0, room));
                rows += room;
                truncated = true;
                break;
            }
            rows += b.num_rows();
            batches.push(b);
        }
        Ok(SqlResult {
            batches,
            rows,
            truncated,
        })
    };
    match tokio::time::timeout(std::time::Duration::from_millis(limits.timeout_ms), work).await {
        Ok(r) => r,
        Err(_) => Err(SqlError::Timeout(limits.timeout_ms)),
    }
}

fn classify(msg: String) -> SqlError {
    let l = msg.to_ascii_lowercase();
    if l.contains("not supported")
        || l.contains("ddl")
        || l.contains("dml")
        || l.contains("statement")
    {
        SqlError::Refused(msg)
    } else {
        SqlError::Failed(msg)
    }
}

/// Rows as JSON objects.
pub fn to_json_rows(batches: &[RecordBatch]) -> Result<Vec<serde_json::Value>, SqlError> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::ArrayWriter::new(&mut buf);
        for b in batches {
            w.write(b).map_err(|e| SqlError::Failed(e.to_string()))?;
        }
        w.finish().map_err(|e| SqlError::Failed(e.to_string()))?;
    }
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&buf).map_err(|e| SqlError::Failed(e.to_string()))
}
