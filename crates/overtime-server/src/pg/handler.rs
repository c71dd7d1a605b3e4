//! The queries of a PostgreSQL client, simple and extended protocol, run
//! by the SQL engine of `POST /api/sql` ([`crate::sql`]).
//!
//! Design rules:
//! - **One engine.** A query is rewritten from PostgreSQL's dialect by
//!   `datafusion-pg-catalog`'s compatibility parser (what psql, pgjdbc and
//!   Grafana send that DataFusion does not take as is), then run by
//!   [`sql::run_with_params`] in a session built as `POST /api/sql`
//!   builds its own ([`sql::session_of`]) plus `pg_catalog`: the same
//!   tables, read-only rule and time, row and memory bounds.
//! - **Client settings stay with the client.** `SET`, `SHOW`, `BEGIN`,
//!   `COMMIT` and `ROLLBACK` are answered by `datafusion-postgres`' hooks
//!   from the connection's own state (a throwaway session, never a query's
//!   or the shared template); nothing a client sets changes another's
//!   query. `SET statement_timeout` can only shorten `[sql] timeout_ms`.
//! - **A result larger than `max_rows` is an error** (SQLSTATE 54000)
//!   naming the bound, not a silently cut table.
//! - **Planning is bounded too.** `Describe` plans the query against a
//!   template session with the same tables, on the SQL engine's own
//!   thread and time limit ([`sql::plan`]).

use super::catalog::PgCatalog;
use super::stats::PgStats;
use crate::AppState;
use crate::SqlConfig;
use crate::sql::{self, SqlError, SqlResult};
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::QueryHook;
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters;
use datafusion_postgres::arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type,
};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::pgwire;
use futures::Sink;
use overtime_store::PeerSource;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::types::format::FormatOptions;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// A prepared statement: the rewritten SQL and, unless it is empty, the
/// parsed statement and its plan against the template (for `Describe`).
pub(crate) type Prepared = (String, Option<(Statement, LogicalPlan)>);

/// Marks a connection that passed authentication
/// ([`super::auth::TokenStartup`]); a query on a connection without it is
/// refused, whatever state the protocol machine is in.
#[derive(Debug)]
pub(crate) struct SignedIn;

/// What every connection's queries share.
pub(crate) struct Engine {
    pub state: Arc<AppState>,
    pub catalog: PgCatalog,
    /// The tables every query sees, never run: `Describe` plans here.
    pub template: SessionContext,
    /// What `SET`/`SHOW` hooks may touch; no query runs in it.
    pub scratch: SessionContext,
    pub parser: PostgresCompatibilityParser,
    pub hooks: Vec<Arc<dyn QueryHook>>,
    pub stats: Arc<PgStats>,
}

fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        code.into(),
        message.into(),
    )))
}

impl Engine {
    /// The session one query runs in: `POST /api/sql`'s, with
    /// `pg_catalog`, reading PostgreSQL's dialect.
    fn session(&self) -> Result<SessionContext, SqlError> {
        let peers = crate::api::peer_query(&self.state, &None).map(|p| p as Arc<dyn PeerSource>);
        let ctx = sql::session_of(&self.state, peers)?;
        self.prepare(&ctx)?;
        Ok(ctx)
    }

    /// `pg_catalog` and PostgreSQL's dialect in `ctx`.
    pub(crate) fn prepare(&self, ctx: &SessionContext) -> Result<(), SqlError> {
        self.catalog
            .install(ctx)
            .map_err(|e| SqlError::Failed(e.to_string()))?;
        ctx.state_ref()
            .write()
            .config_mut()
            .options_mut()
            .sql_parser
            .dialect = datafusion::common::config::Dialect::PostgreSQL;
        Ok(())
    }

    /// `[sql]`'s bounds, with the time limit shortened to the client's
    /// `statement_timeout` when it set a shorter one.
    fn limits<C: ClientInfo + ?Sized>(&self, client: &C) -> SqlConfig {
        let mut lim = self.state.sql.clone();
        // Where datafusion-postgres' SET hook keeps it.
        if let Some(ms) = client
            .metadata()
            .get("statement_timeout_ms")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
        {
            lim.timeout_ms = lim.timeout_ms.min(ms);
        }
        lim
    }

    fn signed_in<C: ClientInfo + ?Sized>(client: &C) -> PgWireResult<()> {
        if client.session_extensions().get::<SignedIn>().is_some() {
            Ok(())
        } else {
            Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                "28000".into(),
                "not signed in".into(),
            ))))
        }
    }

    /// The client's text, size-checked and rewritten into DataFusion's
    /// PostgreSQL dialect, one statement each.
    fn parse(&self, text: &str) -> PgWireResult<Vec<Statement>> {
        sql::check_size(text).map_err(|e| self.failure(e))?;
        self.parser.parse(text).map_err(|e| {
            self.stats.queries_failed.fetch_add(1, Relaxed);
            user_error("42601", format!("syntax error: {e}"))
        })
    }

    /// A query's error as PostgreSQL's, counted.
    fn failure(&self, e: SqlError) -> PgWireError {
        let s = &self.stats;
        let (code, text) = match &e {
            SqlError::Timeout(ms) => {
                s.queries_timeout.fetch_add(1, Relaxed);
                (
                    "57014",
                    format!(
                        "canceling statement due to statement timeout: it ran longer than {ms} ms ([sql] timeout_ms or statement_timeout)"
                    ),
                )
            }
            SqlError::Cancelled => {
                s.queries_failed.fetch_add(1, Relaxed);
                ("57014", "canceling statement due to user request".into())
            }
            SqlError::Refused(_) => {
                s.queries_failed.fetch_add(1, Relaxed);
                ("0A000", e.to_string())
            }
            SqlError::Failed(m) => {
                s.queries_failed.fetch_add(1, Relaxed);
                let code = if m.contains("Resources exhausted") {
                    "53200"
                } else {
                    "42000"
                };
                (code, e.to_string())
            }
        };
        user_error(code, text)
    }

    /// A result as rows to send, or the error that it had more than
    /// `max_rows`.
    fn answer<C: ClientInfo + ?Sized>(
        &self,
        result: Result<SqlResult, SqlError>,
        format: &Format,
        limits: &SqlConfig,
        client: &C,
    ) -> PgWireResult<QueryResponse> {
        let r = result.map_err(|e| self.failure(e))?;
        if r.truncated {
            self.stats.queries_too_many_rows.fetch_add(1, Relaxed);
            return Err(user_error(
                "54000",
                format!(
                    "the result has more than {} rows ([sql] max_rows); narrow it with WHERE, LIMIT or an aggregate",
                    limits.max_rows
                ),
            ));
        }
        self.stats.queries_ok.fetch_add(1, Relaxed);
        let opts = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let fields = Arc::new(arrow_schema_to_pg_fields(&r.schema, format, Some(opts))?);
        let f = fields.clone();
        let rows = r
            .batches
            .into_iter()
            .flat_map(move |b| encode_recordbatch(f.clone(), b));
        Ok(QueryResponse::new(fields, futures::stream::iter(rows)))
    }
}

/// Placeholder types of `plan`, in `$1, $2…` order.
fn parameter_types(plan: &LogicalPlan) -> PgWireResult<Vec<Option<DataType>>> {
    let types = plan
        .get_parameter_types()
        .map_err(|e| user_error("42P18", e.to_string()))?;
    let mut v: Vec<(usize, Option<DataType>)> = types
        .into_iter()
        .filter_map(|(k, t)| Some((k.trim_start_matches('$').parse().ok()?, t)))
        .collect();
    v.sort_by_key(|(i, _)| *i);
    Ok(v.into_iter().map(|(_, t)| t).collect())
}

/// The front door's handlers over one [`Engine`].
#[derive(Clone)]
pub(crate) struct Door(pub Arc<Engine>);

#[async_trait]
impl SimpleQueryHandler for Door {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let e = &self.0;
        Engine::signed_in(client)?;
        let statements = e.parse(query)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut out = Vec::with_capacity(statements.len());
        'next: for st in statements {
            for h in &e.hooks {
                if let Some(r) = h.handle_simple_query(&st, &e.scratch, client).await {
                    match r {
                        Ok(r) => out.push(r),
                        Err(err) => {
                            out.push(Response::Error(Box::new(err.into())));
                            break 'next;
                        }
                    }
                    continue 'next;
                }
            }
            let lim = e.limits(client);
            let result = match e.session() {
                Ok(ctx) => sql::run(&ctx, &st.to_string(), &lim).await,
                Err(err) => Err(err),
            };
            match e.answer(result, &Format::UnifiedText, &lim, client) {
                Ok(q) => out.push(Response::Query(q)),
                Err(err) => {
                    // Like PostgreSQL: the statements after a failed one
                    // are not run.
                    out.push(Response::Error(Box::new(err.into())));
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl QueryParser for Door {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let e = &self.0;
        Engine::signed_in(client)?;
        let mut statements = e.parse(sql)?;
        if statements.is_empty() {
            return Ok(None);
        }
        if statements.len() > 1 {
            return Err(user_error(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let st = statements.remove(0);
        for h in &e.hooks {
            if let Some(plan) = h.handle_extended_parse_query(&st, &e.scratch, client).await {
                return Ok(Some((st.to_string(), Some((st, plan?)))));
            }
        }
        let text = st.to_string();
        let plan = sql::plan(&e.template, &text, &e.limits(client))
            .await
            .map_err(|err| e.failure(err))?;
        Ok(Some((text, Some((st, plan)))))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        let Some((_, plan)) = &stmt.1 else {
            return Ok(vec![]);
        };
        parameter_types(plan)?
            .iter()
            .map(|t| t.as_ref().map_or(Ok(Type::UNKNOWN), into_pg_type))
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match &stmt.1 {
            Some((_, plan)) => arrow_schema_to_pg_fields(
                plan.schema().as_arrow(),
                format.unwrap_or(&Format::UnifiedText),
                None,
            ),
            None => Ok(vec![]),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for Door {
    type Statement = Prepared;
    type QueryParser = Door;

    fn query_parser(&self) -> Arc<Door> {
        Arc::new(self.clone())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let e = &self.0;
        Engine::signed_in(client)?;
        let (text, Some((st, plan))) = &portal.statement.statement else {
            return Ok(Response::EmptyQuery);
        };
        let none = ParamValues::List(vec![]);
        for h in &e.hooks {
            if let Some(r) = h
                .handle_extended_query(st, plan, &none, &e.scratch, client)
                .await
            {
                return r;
            }
        }
        let types = parameter_types(plan)?;
        let refs: Vec<Option<&DataType>> = types.iter().map(Option::as_ref).collect();
        let params = deserialize_parameters(portal, &refs)?;
        let lim = e.limits(client);
        let result = match e.session() {
            Ok(ctx) => sql::run_with_params(&ctx, text, Some(params), &lim).await,
            Err(err) => Err(err),
        };
        let q = e.answer(result, &portal.result_column_format, &lim, client)?;
        Ok(Response::Query(q))
    }
}
