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
//! - Size: a text of more than 64 KiB, or of more than 2 000 operators,
//!   is refused before planning; each query is planned and run on a
//!   thread of its own with a large stack, so deep nesting cannot
//!   overflow a runtime worker's.

use crate::SqlConfig;
pub use crate::tables::VerdictRows;
use crate::tables::{VerdictsTable, incidents_batch};
use arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use overtime_diagnose::IncidentReport;
use overtime_model::Verdict;
use overtime_store::{PeerSource, Store};
use std::sync::Arc;

/// Longest SQL text accepted, in bytes.
pub(crate) const MAX_SQL_BYTES: usize = 64 * 1024;

/// Why a query gave no rows; `POST /api/sql` answers 400 for the first
/// two and 408 for a timeout, with [`SqlError::reason`] as the reason.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// Not run: too long, too many operators, or not a read-only query
    /// (DDL, DML, `SET`, `COPY`…). The text says which.
    #[error("query refused: {0}")]
    Refused(String),
    /// Planning or running failed: a syntax error, an unknown table or
    /// column, the memory limit reached, a guarded function's output over
    /// it. The text is DataFusion's or the guard's message.
    #[error("query failed: {0}")]
    Failed(String),
    /// Still running after this many ms (`timeout_ms`), and cancelled.
    #[error("query took longer than {0} ms and was cancelled")]
    Timeout(u64),
    /// Stopped because nobody waited for its answer any more (the client
    /// went away or asked to cancel it).
    #[error("query cancelled by the client")]
    Cancelled,
}

impl SqlError {
    /// The stable code a client matches on: `sql_refused`, `sql_failed`,
    /// `sql_timeout` or `sql_cancelled`.
    pub fn reason(&self) -> &'static str {
        match self {
            SqlError::Refused(_) => "sql_refused",
            SqlError::Failed(_) => "sql_failed",
            SqlError::Timeout(_) => "sql_timeout",
            SqlError::Cancelled => "sql_cancelled",
        }
    }
}

/// The result of a query.
pub struct SqlResult {
    /// The result's columns (also when it has no rows).
    pub schema: arrow::datatypes::SchemaRef,
    /// The rows, at most `max_rows` of them, in the batches DataFusion
    /// produced them in.
    pub batches: Vec<RecordBatch>,
    /// How many rows `batches` hold.
    pub rows: usize,
    /// The query had more rows than `max_rows`; the rest were not read.
    pub truncated: bool,
}

/// A session with every table registered and the limits applied: the
/// store's `gateway_requests`, `spans` and `rejected`, and `verdicts` and
/// `incidents` from `verdicts` (revision, verdict) and `incidents`. With
/// `peers`, the store's tables also read their unflushed rows
/// ([`crate::Peers`]); `None`: this collector's rows only.
pub fn session_with_peers(
    store: &Store,
    verdicts: &[(u32, Verdict)],
    incidents: &[IncidentReport],
    limits: &SqlConfig,
    peers: Option<Arc<dyn PeerSource>>,
) -> Result<SessionContext, SqlError> {
    session_over(
        store,
        VerdictRows::Copied(verdicts.into()),
        incidents,
        limits,
        peers,
    )
}

/// [`session_with_peers`] with the `verdicts` table's rows from `verdicts`:
/// with [`VerdictRows::Live`], a running collector's verdicts read when a
/// query scans them, never copied ([`VerdictsTable`]).
pub fn session_over(
    store: &Store,
    verdicts: VerdictRows,
    incidents: &[IncidentReport],
    limits: &SqlConfig,
    peers: Option<Arc<dyn PeerSource>>,
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
        .register_with_peers(&ctx, peers)
        .map_err(|e| SqlError::Failed(e.to_string()))?;
    crate::sql_guard::install(&ctx, limits.memory_bytes);
    let failed = |e: datafusion::error::DataFusionError| SqlError::Failed(e.to_string());
    ctx.register_table("verdicts", Arc::new(VerdictsTable { rows: verdicts }))
        .map_err(failed)?;
    let i = incidents_batch(incidents);
    let t = MemTable::try_new(i.schema(), vec![vec![i]]).map_err(failed)?;
    ctx.register_table("incidents", Arc::new(t))
        .map_err(failed)?;
    Ok(ctx)
}

/// The session one query of a running collector runs in, over its live
/// verdicts and incidents and its store (and, with `peers`, the peers'
/// unflushed rows): what `POST /api/sql` and the PostgreSQL front door
/// ([`crate::pg`]) both query.
pub(crate) fn session_of(
    state: &Arc<crate::AppState>,
    peers: Option<Arc<dyn PeerSource>>,
) -> Result<SessionContext, SqlError> {
    let incidents = state.incidents();
    // The verdicts are read when a query scans them, none copied before.
    let verdicts = VerdictRows::Live(state.clone());
    session_over(&state.store, verdicts, &incidents, &state.sql, peers)
}

/// Stack of the thread a query is planned and run on. Planning and the
/// optimizer recurse once per level of expression nesting, and a query of
/// `MAX_SQL_BYTES` can nest `1+1+…` some 30 000 deep: on a runtime
/// worker's 2 MiB stack that overflowed and aborted the whole collector.
/// Only the pages a query touches are ever resident.
pub(crate) const SQL_STACK_BYTES: usize = 1 << 30;

/// Refuses, before any parsing, a text too long or with too many
/// operators to plan safely ([`MAX_SQL_BYTES`], [`MAX_OPERATORS`]).
pub(crate) fn check_size(sql: &str) -> Result<(), SqlError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(SqlError::Refused(format!(
            "the query is {} bytes; at most {MAX_SQL_BYTES}",
            sql.len()
        )));
    }
    let ops = operator_count(sql);
    if ops > MAX_OPERATORS {
        return Err(SqlError::Refused(format!(
            "the query has {ops} operators (AND, OR, +, ||, =, CASE…); at most {MAX_OPERATORS}"
        )));
    }
    Ok(())
}

/// Runs one read-only query within the limits, on a thread of its own
/// (with a stack deep enough for the most nested query accepted; it also
/// keeps a heavy query off the runtime's workers, so health checks and
/// ingestion keep their threads).
/// The answer comes within the time limit even when the query is stuck
/// in a long computation; the thread then ends as soon as it can. When
/// the caller stops waiting (the returned future is dropped: an HTTP
/// client that hung up, a PostgreSQL `CancelRequest`), the query is
/// cancelled too.
pub async fn run(
    ctx: &SessionContext,
    sql: &str,
    limits: &SqlConfig,
) -> Result<SqlResult, SqlError> {
    run_with_params(ctx, sql, None, limits).await
}

/// [`run`] for a query with placeholders (`$1`, `$2`…), given their
/// values: the same checks, bounds and cancellation.
pub async fn run_with_params(
    ctx: &SessionContext,
    sql: &str,
    params: Option<ParamValues>,
    limits: &SqlConfig,
) -> Result<SqlResult, SqlError> {
    check_size(sql)?;
    let sql = sql.to_string();
    on_sql_thread(ctx, limits, move |ctx, lim| async move {
        run_here(&ctx, &sql, params, &lim).await
    })
    .await
}

/// Plans `sql` without running it, within the same checks and bounds as
/// [`run`]: the plan tells a client the result's columns and the types of
/// its placeholders (the PostgreSQL extended protocol's `Describe`).
pub async fn plan(
    ctx: &SessionContext,
    sql: &str,
    limits: &SqlConfig,
) -> Result<LogicalPlan, SqlError> {
    check_size(sql)?;
    let sql = sql.to_string();
    on_sql_thread(ctx, limits, move |ctx, lim| async move {
        let work = async {
            ctx.state()
                .create_logical_plan(&sql)
                .await
                .map_err(|e| classify(e.to_string()))
                .and_then(|p| {
                    read_only()
                        .verify_plan(&p)
                        .map_err(|e| classify(e.to_string()))?;
                    Ok(p)
                })
        };
        match tokio::time::timeout(std::time::Duration::from_millis(lim.timeout_ms), work).await {
            Ok(r) => r,
            Err(_) => Err(SqlError::Timeout(lim.timeout_ms)),
        }
    })
    .await
}

/// Runs `work` on a thread of its own with [`SQL_STACK_BYTES`] of stack
/// and a runtime of its own; answers within `timeout_ms` (and a second of
/// grace), and stops the work when the caller drops the returned future.
async fn on_sql_thread<T, F, Fut>(
    ctx: &SessionContext,
    limits: &SqlConfig,
    work: F,
) -> Result<T, SqlError>
where
    T: Send + 'static,
    F: FnOnce(SessionContext, SqlConfig) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, SqlError>>,
{
    let (ctx, lim) = (ctx.clone(), limits.clone());
    let timeout_ms = lim.timeout_ms;
    let (mut tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("overtime-sql".into())
        .stack_size(SQL_STACK_BYTES)
        .spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let r = rt.block_on(async {
                        tokio::select! {
                            r = work(ctx, lim) => r,
                            // Nobody waits for the answer any more: drop
                            // the plan and its streams now.
                            _ = tx.closed() => Err(SqlError::Cancelled),
                        }
                    });
                    rt.shutdown_background();
                    r
                }
                Err(e) => Err(SqlError::Failed(format!("starting the query: {e}"))),
            };
            // The plan and the session are dropped here too (deep trees
            // drop recursively).
            let _ = tx.send(result);
        })
        .map_err(|e| SqlError::Failed(format!("starting the query thread: {e}")))?;
    let grace = std::time::Duration::from_millis(timeout_ms + 1_000);
    match tokio::time::timeout(grace, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(SqlError::Failed("the query thread stopped".into())),
        Err(_) => Err(SqlError::Timeout(timeout_ms)),
    }
}

/// Most operators in one query. Planning cost grows faster than the
/// nesting a chain of operators builds: a 6 000-term `AND` took more than
/// 4 s and 600 MB to plan, on after the answer had timed out.
pub(crate) const MAX_OPERATORS: usize = 2_000;

/// Binary and boolean operators and `CASE` arms in `sql` (by tokens, so a
/// string literal holding `+` counts nothing); a query that does not
/// tokenize counts 0 and gets the parser's error instead.
pub(crate) fn operator_count(sql: &str) -> usize {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return 0;
    };
    tokens
        .iter()
        .filter(|t| match t {
            Token::Word(w) => matches!(
                w.keyword,
                Keyword::AND | Keyword::OR | Keyword::XOR | Keyword::WHEN
            ),
            Token::Whitespace(_) | Token::Number(..) | Token::Comma | Token::Period => false,
            Token::LParen | Token::RParen | Token::SemiColon | Token::EOF => false,
            Token::SingleQuotedString(_) | Token::DoubleQuotedString(_) => false,
            Token::Plus | Token::Minus | Token::Mul | Token::Div | Token::Mod => true,
            Token::StringConcat | Token::Eq | Token::DoubleEq | Token::Neq => true,
            Token::Lt | Token::Gt | Token::LtEq | Token::GtEq | Token::Spaceship => true,
            Token::Ampersand | Token::Pipe | Token::Caret => true,
            _ => false,
        })
        .count()
}

/// Only queries: no DDL, DML or statements (`SET`, `COPY`…).
fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

async fn run_here(
    ctx: &SessionContext,
    sql: &str,
    params: Option<ParamValues>,
    limits: &SqlConfig,
) -> Result<SqlResult, SqlError> {
    let work = async {
        let mut df = ctx
            .sql_with_options(sql, read_only())
            .await
            .map_err(|e| classify(e.to_string()))?;
        if let Some(p) = params {
            df = df
                .with_param_values(p)
                .map_err(|e| SqlError::Failed(e.to_string()))?;
        }
        let mut stream = df
            .execute_stream()
            .await
            .map_err(|e| SqlError::Failed(e.to_string()))?;
        let schema = stream.schema();
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
            schema,
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

/// Rows as JSON objects, one per row, keyed by column name (as `POST
/// /api/sql` answers and `overtime query --output json` prints them).
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

#[cfg(test)]
mod tests {
    use super::operator_count;

    #[test]
    fn operators_are_counted_by_token_not_inside_strings() {
        assert_eq!(
            operator_count("SELECT a + 1 FROM t WHERE b = 'x+y' AND c OR d"),
            4
        );
    }
}
