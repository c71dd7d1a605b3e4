//! The `verdicts` and `incidents` SQL tables, built from the live state at
//! query time.
//!
//! `verdicts`: trace_id, request_id, started_at (Timestamp µs UTC), outcome,
//! kind, component, share, summary, gateway_status, elapsed_ms, budget_ms,
//! revision, verdict (the whole docs/diagnosis.md JSON).
//! `incidents`: id, fingerprint, kind, component, status, window_start,
//! window_end, headline, trace_count, requests, failures, gateway_504,
//! report (the whole docs/diagnosis.md#incidents-and-their-reports JSON).
//!
//! `verdicts` is a [`VerdictsTable`]: its rows are built when a query
//! scans it, straight from the live diagnoser's verdicts under its lock
//! (no copy of a verdict, whose timeline holds every span), and its
//! `verdict` column only when the query reads it. That column is each
//! verdict's whole JSON (kilobytes with its timeline): copying and
//! serialising a day of verdicts for every refresh of a panel that only
//! counts 504s per minute cost more than the query itself.

use arrow::array::{
    ArrayRef, Float64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use overtime_diagnose::IncidentReport;
use overtime_model::Verdict;
use std::sync::{Arc, LazyLock};

fn ts_us(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<overtime_model::Timestamp>()
        .ok()
        .map(|t| t.us())
}

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|(_, a)| a).collect(),
    )
    .expect("columns of equal length")
}

/// Where the `verdicts` table's rows come from.
pub enum VerdictRows {
    /// (revision, verdict) pairs already copied out.
    Copied(Arc<[(u32, Verdict)]>),
    /// The live diagnoser's current verdicts, read when scanned.
    Live(Arc<crate::AppState>),
}

impl std::fmt::Debug for VerdictRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerdictRows::Copied(v) => write!(f, "Copied({} verdicts)", v.len()),
            VerdictRows::Live(_) => f.write_str("Live"),
        }
    }
}

/// The `verdicts` table (module docs).
#[derive(Debug)]
pub(crate) struct VerdictsTable {
    pub rows: VerdictRows,
}

/// `verdicts`' columns, the last one the whole verdict as JSON.
static VERDICTS_SCHEMA: LazyLock<SchemaRef> =
    LazyLock::new(|| verdicts_batch(std::iter::empty(), true).schema());

#[async_trait]
impl TableProvider for VerdictsTable {
    fn schema(&self) -> SchemaRef {
        VERDICTS_SCHEMA.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let json_col = VERDICTS_SCHEMA.fields().len() - 1;
        let json = projection.is_none_or(|p| p.contains(&json_col));
        let b = match &self.rows {
            VerdictRows::Copied(rows) => verdicts_batch(rows.iter().map(|(r, v)| (*r, v)), json),
            // Alone: the diagnoser's verdicts under its lock, none copied;
            // in a cluster: every collector's, one holder per trace.
            VerdictRows::Live(s) if s.peers.is_empty() => {
                let live = s.live.lock().expect("live state lock");
                verdicts_batch(live.verdicts(), json)
            }
            VerdictRows::Live(s) => {
                let all = s.verdicts();
                verdicts_batch(all.iter().map(|(r, v)| (*r, v)), json)
            }
        };
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![b]],
            self.schema(),
            projection.cloned(),
        )?)
    }
}

/// `verdicts` from (revision, verdict) pairs; the `verdict` column null
/// unless `json` (a scan that does not read it).
pub(crate) fn verdicts_batch<'a>(
    verdicts: impl Iterator<Item = (u32, &'a Verdict)>,
    json: bool,
) -> RecordBatch {
    let (mut id, mut rid, mut out, mut kind, mut comp, mut summary, mut text) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let mut started = TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let (mut share, mut elapsed, mut budget) = (
        Float64Builder::new(),
        Float64Builder::new(),
        Float64Builder::new(),
    );
    let mut status = UInt16Builder::new();
    let mut revision = UInt32Builder::new();
    for (rev, v) in verdicts {
        id.append_value(&v.trace_id);
        rid.append_option(v.request_id.as_deref());
        started.append_value(v.started_at.us());
        out.append_value(v.outcome.as_str());
        kind.append_value(v.root_cause.kind.as_str());
        comp.append_value(&v.root_cause.component);
        share.append_value(v.root_cause.share);
        summary.append_value(&v.root_cause.summary);
        status.append_option(v.gateway.as_ref().and_then(|g| g.status));
        elapsed.append_value(v.budget.consumed_ms);
        budget.append_option(v.budget.total_ms);
        revision.append_value(rev);
        if json {
            text.append_value(serde_json::to_string(v).unwrap_or_default());
        } else {
            text.append_null();
        }
    }
    batch(vec![
        ("trace_id", Arc::new(id.finish())),
        ("request_id", Arc::new(rid.finish())),
        ("started_at", Arc::new(started.finish())),
        ("outcome", Arc::new(out.finish())),
        ("kind", Arc::new(kind.finish())),
        ("component", Arc::new(comp.finish())),
        ("share", Arc::new(share.finish())),
        ("summary", Arc::new(summary.finish())),
        ("gateway_status", Arc::new(status.finish())),
        ("elapsed_ms", Arc::new(elapsed.finish())),
        ("budget_ms", Arc::new(budget.finish())),
        ("revision", Arc::new(revision.finish())),
        ("verdict", Arc::new(text.finish())),
    ])
}

/// `incidents` from reports.
pub(crate) fn incidents_batch(reports: &[IncidentReport]) -> RecordBatch {
    let s = || StringBuilder::new();
    let (mut id, mut fp, mut kind, mut comp, mut status, mut headline, mut json) =
        (s(), s(), s(), s(), s(), s(), s());
    let mut start = TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let mut end = TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let (mut n, mut req, mut fail, mut g504) = (
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
    );
    for r in reports {
        id.append_value(&r.id);
        fp.append_value(&r.fingerprint);
        kind.append_value(r.kind.as_str());
        comp.append_value(&r.component);
        status.append_value(&r.status);
        start.append_option(ts_us(&r.window.start));
        end.append_option(ts_us(&r.window.end));
        headline.append_value(&r.headline);
        n.append_value(r.trace_count as u64);
        req.append_value(r.totals.requests as u64);
        fail.append_value(r.totals.failures as u64);
        g504.append_value(r.totals.gateway_504 as u64);
        json.append_value(serde_json::to_string(r).unwrap_or_default());
    }
    batch(vec![
        ("id", Arc::new(id.finish())),
        ("fingerprint", Arc::new(fp.finish())),
        ("kind", Arc::new(kind.finish())),
        ("component", Arc::new(comp.finish())),
        ("status", Arc::new(status.finish())),
        ("window_start", Arc::new(start.finish())),
        ("window_end", Arc::new(end.finish())),
        ("headline", Arc::new(headline.finish())),
        ("trace_count", Arc::new(n.finish())),
        ("requests", Arc::new(req.finish())),
        ("failures", Arc::new(fail.finish())),
        ("gateway_504", Arc::new(g504.finish())),
        ("report", Arc::new(json.finish())),
    ])
}
