//! Queries the server asks the store itself (the Jaeger API, the charts):
//! DataFusion over the store's tables and, with `[cluster] peers`, the
//! peers' unflushed rows, within `[sql]`'s memory and time limits, as a
//! query of `POST /api/sql` would run.

use crate::AppState;
use crate::api::peer_query;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use axum::http::StatusCode;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use overtime_store::PeerSource;
use std::sync::Arc;

/// Why a query of the store failed: its text, and the status to answer.
#[derive(Debug)]
pub(crate) struct QueryError {
    pub status: StatusCode,
    pub msg: String,
}

fn internal(msg: impl Into<String>) -> QueryError {
    QueryError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        msg: msg.into(),
    }
}

/// `table` shaped by `f`, collected within `[sql]`'s time and memory limits.
pub(crate) async fn query(
    s: &AppState,
    table: &str,
    f: impl FnOnce(DataFrame) -> datafusion::error::Result<DataFrame>,
) -> Result<Vec<RecordBatch>, QueryError> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(s.sql.memory_bytes, 1.0)
        .build_arc()
        .map_err(|e| internal(e.to_string()))?;
    let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
    let peers = peer_query(s, &None).map(|p| p as Arc<dyn PeerSource>);
    s.store
        .register_with_peers(&ctx, peers)
        .map_err(|e| internal(e.to_string()))?;
    let df_err = |e: datafusion::error::DataFusionError| internal(e.to_string());
    let df = f(ctx.table(table).await.map_err(df_err)?).map_err(df_err)?;
    let ms = s.sql.timeout_ms;
    tokio::time::timeout(std::time::Duration::from_millis(ms), df.collect())
        .await
        .map_err(|_| QueryError {
            status: StatusCode::REQUEST_TIMEOUT,
            msg: format!("the store did not answer within {ms} ms"),
        })?
        .map_err(df_err)
}

/// Column `i` of every batch as text (nulls skipped).
pub(crate) fn strings(batches: &[RecordBatch], i: usize) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let Ok(c) = arrow::compute::cast(b.column(i), &DataType::Utf8) else {
            continue;
        };
        let c = arrow::array::cast::as_string_array(c.as_ref());
        out.extend(
            (0..c.len())
                .filter(|&r| c.is_valid(r))
                .map(|r| c.value(r).to_string()),
        );
    }
    out
}

/// Column `i` of every batch as numbers (`None` for a null).
pub(crate) fn numbers(batches: &[RecordBatch], i: usize) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    for b in batches {
        let Ok(c) = arrow::compute::cast(b.column(i), &DataType::Float64) else {
            out.extend(std::iter::repeat_n(None, b.num_rows()));
            continue;
        };
        let c = c
            .as_any()
            .downcast_ref::<arrow::array::Float64Array>()
            .expect("cast to Float64");
        out.extend((0..c.len()).map(|r| c.is_valid(r).then(|| c.value(r))));
    }
    out
}
