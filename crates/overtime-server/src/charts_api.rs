//! The series the UI's charts draw: `GET /api/incidents/{id}/timeline`
//! (failures per minute by cause over the incident and the hour before it,
//! and its dominant call's P50/P99) and `GET /api/overview` (requests,
//! failures and chain health per minute, with the alerts that fired).
//!
//! Design rules:
//! - Buckets of one minute (wider when a range would need more than
//!   [`MAX_POINTS`]), `t_ms` their starts, every bucket present (zeros,
//!   or `null` where a percentile has no call), so a chart's x axis is the
//!   time itself and a gap is a gap.
//! - Each series comes from where the number is made: requests and
//!   failures from the store (`gateway_requests` of the outermost layer;
//!   the root spans when no gateway logged the range), failures by cause
//!   from the verdicts the incidents are built from (this collector's and
//!   the peers'), the dominant call's latency from the store's spans (the
//!   calls whose model or tool is the incident's component, else whose
//!   peer is), chain health and the alerts from the SLO engine's own
//!   memory (6 hours of minutes; it starts empty with the process).
//! - Data time, not the wall clock: a replayed day is charted at its own
//!   time. The overview ends at the newest row in the store (else at the
//!   SLO watermark); an incident's chart runs up to an hour past its
//!   window, as far as the store has rows.

use crate::AppState;
use crate::error::ApiError;
use crate::store_query::{QueryError, numbers, query};
use arrow::datatypes::DataType;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use datafusion::functions_aggregate::expr_fn::{approx_percentile_cont, count, max, sum};
use datafusion::prelude::{Expr, cast, col, lit};
use datafusion::scalar::ScalarValue;
use overtime_model::Outcome;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most buckets in one series.
pub const MAX_POINTS: i64 = 720;
const MINUTE_US: i64 = 60_000_000;
const HOUR_US: i64 = 60 * MINUTE_US;
/// The stages of a call (what the dominant call can be).
const CALL_STAGES: [&str; 6] = ["llm", "judge", "tool", "memory", "network", "queue"];

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        ApiError::new(e.status, "store", e.msg)
    }
}

/// The buckets of `[from, to)`: their start and width, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Buckets {
    pub from_us: i64,
    pub step_us: i64,
    pub n: usize,
}

impl Buckets {
    /// Whole minutes around `[from, to)`, widened to at most [`MAX_POINTS`].
    pub(crate) fn new(from_us: i64, to_us: i64) -> Buckets {
        let from = from_us.div_euclid(MINUTE_US) * MINUTE_US;
        let to = (to_us.max(from + 1) + MINUTE_US - 1).div_euclid(MINUTE_US) * MINUTE_US;
        let minutes = (to - from) / MINUTE_US;
        let per = (minutes + MAX_POINTS - 1) / MAX_POINTS;
        let step_us = per.max(1) * MINUTE_US;
        let n = ((to - from) + step_us - 1) / step_us;
        Buckets {
            from_us: from,
            step_us,
            n: n as usize,
        }
    }
    fn end_us(&self) -> i64 {
        self.from_us + self.step_us * self.n as i64
    }
    fn index(&self, t_us: i64) -> Option<usize> {
        (t_us >= self.from_us && t_us < self.end_us())
            .then(|| ((t_us - self.from_us) / self.step_us) as usize)
    }
    fn starts_ms(&self) -> Vec<i64> {
        (0..self.n as i64)
            .map(|i| (self.from_us + i * self.step_us) / 1000)
            .collect()
    }
    /// The bucket of `time_col` as an expression (an integer index).
    fn expr(&self, time_col: &str) -> Expr {
        (cast(col(time_col), DataType::Int64) - lit(self.from_us)) / lit(self.step_us)
    }
    fn range(&self, time_col: &str) -> Expr {
        let ts = |us: i64| {
            lit(ScalarValue::TimestampMicrosecond(
                Some(us),
                Some("UTC".into()),
            ))
        };
        col(time_col)
            .gt_eq(ts(self.from_us))
            .and(col(time_col).lt(ts(self.end_us())))
    }
    /// Values per bucket from (bucket index, value) rows.
    fn spread(&self, idx: &[Option<f64>], vals: &[Option<f64>], zero: bool) -> Vec<Value> {
        let mut out = vec![if zero { json!(0) } else { Value::Null }; self.n];
        for (i, v) in idx.iter().zip(vals) {
            if let (Some(i), Some(v)) = (i, v)
                && *i >= 0.0
                && (*i as usize) < self.n
            {
                out[*i as usize] = if zero { json!(*v as i64) } else { json!(v) };
            }
        }
        out
    }
}

fn us_of(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<overtime_model::Timestamp>()
        .ok()
        .map(|t| t.us())
}

/// Requests, failures (5xx) and 504s per bucket from the outermost
/// gateway layer; from the root spans when no gateway logged the range.
async fn requests(
    s: &AppState,
    b: Buckets,
) -> Result<(Vec<Value>, Vec<Value>, Vec<Value>, &'static str), ApiError> {
    let i64_of = |e: Expr| cast(e, DataType::Int64);
    let gw = query(s, "gateway_requests", move |df| {
        df.filter(col("layer").eq(lit(0u32)).and(b.range("time")))?
            .aggregate(
                vec![b.expr("time").alias("b")],
                vec![
                    count(lit(1)).alias("n"),
                    sum(i64_of(col("status").gt_eq(lit(500u16)))).alias("failed"),
                    sum(i64_of(col("status").eq(lit(504u16)))).alias("g504"),
                ],
            )
    })
    .await?;
    let (batches, source) = if gw.iter().any(|x| x.num_rows() > 0) {
        (gw, "gateway_requests")
    } else {
        let failed = col("status")
            .in_list(vec![lit("error"), lit("timeout"), lit("cancelled")], false)
            .or(col("http_status").gt_eq(lit(500u16)));
        let roots = query(s, "spans", move |df| {
            df.filter(col("parent_span_id").is_null().and(b.range("start_time")))?
                .aggregate(
                    vec![b.expr("start_time").alias("b")],
                    vec![
                        count(lit(1)).alias("n"),
                        sum(i64_of(failed)).alias("failed"),
                        sum(i64_of(col("http_status").eq(lit(504u16)))).alias("g504"),
                    ],
                )
        })
        .await?;
        (roots, "spans")
    };
    let idx = numbers(&batches, 0);
    Ok((
        b.spread(&idx, &numbers(&batches, 1), true),
        b.spread(&idx, &numbers(&batches, 2), true),
        b.spread(&idx, &numbers(&batches, 3), true),
        source,
    ))
}

/// P50, P99 and the count per bucket of the calls named `component`.
async fn call_latency(s: &AppState, b: Buckets, component: &str) -> Result<Value, ApiError> {
    let stages: Vec<Expr> = CALL_STAGES.iter().map(|st| lit(*st)).collect();
    let mut by = "model or tool";
    for named in [
        col("model")
            .eq(lit(component.to_string()))
            .or(col("tool").eq(lit(component.to_string()))),
        col("peer").eq(lit(component.to_string())),
    ] {
        let stages = stages.clone();
        let batches = query(s, "spans", move |df| {
            df.filter(
                b.range("start_time")
                    .and(col("stage").in_list(stages, false))
                    .and(named),
            )?
            .aggregate(
                vec![b.expr("start_time").alias("b")],
                vec![
                    approx_percentile_cont(col("duration_ms").sort(true, false), lit(0.5), None)
                        .alias("p50"),
                    approx_percentile_cont(col("duration_ms").sort(true, false), lit(0.99), None)
                        .alias("p99"),
                    count(lit(1)).alias("n"),
                ],
            )
        })
        .await?;
        if batches.iter().any(|x| x.num_rows() > 0) {
            let idx = numbers(&batches, 0);
            return Ok(json!({
                "component": component, "matched_by": by,
                "p50_ms": b.spread(&idx, &numbers(&batches, 1), false),
                "p99_ms": b.spread(&idx, &numbers(&batches, 2), false),
                "calls": b.spread(&idx, &numbers(&batches, 3), true),
            }));
        }
        by = "peer";
    }
    Ok(json!({"component": component, "matched_by": null,
        "p50_ms": vec![Value::Null; b.n], "p99_ms": vec![Value::Null; b.n], "calls": vec![0; b.n]}))
}

/// `GET /api/incidents/{id}/timeline`.
pub(crate) async fn incident_timeline(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let r = s
        .incidents()
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| ApiError::not_found(format!("no incident {id}")))?;
    let (start, end) = match (us_of(&r.window.start), us_of(&r.window.end)) {
        (Some(a), Some(b)) => (a, b.max(a)),
        _ => return Err(ApiError::not_found(format!("incident {id} has no window"))),
    };
    // The hour before, the window, and what came after it (up to an hour
    // of data, at least ten minutes): enough to see whether it is over.
    let newest = newest(&s).await?.unwrap_or(end);
    let after = newest.clamp(end + 10 * MINUTE_US, end + HOUR_US);
    let b = Buckets::new(start - HOUR_US, after);
    let mut causes: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    {
        let view = s.cluster.lock().expect("cluster view lock");
        let live = s.live.lock().expect("live state lock");
        let own = live.verdicts().map(|(_, v)| v);
        let peers = view
            .others
            .iter()
            .flat_map(|o| o.verdicts.iter().map(|(_, v)| v));
        for v in own.chain(peers) {
            if v.outcome == Outcome::Ok || !seen.insert(v.trace_id.clone()) {
                continue;
            }
            if let Some(i) = b.index(v.started_at.us()) {
                causes
                    .entry(v.root_cause.kind.as_str().to_string())
                    .or_insert_with(|| vec![0; b.n])[i] += 1;
            }
        }
    }
    let kind = r.kind.as_str().to_string();
    let mut order: Vec<(String, Vec<i64>)> = causes.into_iter().collect();
    order.sort_by_key(|(k, v)| (*k != kind, -v.iter().sum::<i64>()));
    let (reqs, failed, g504, source) = requests(&s, b).await?;
    let dominant = call_latency(&s, b, &r.component).await?;
    Ok(Json(json!({
        "incident": r.id, "kind": kind, "component": r.component, "status": r.status,
        "window": {"start_ms": start / 1000, "end_ms": end / 1000},
        "step_ms": b.step_us / 1000, "t_ms": b.starts_ms(),
        "causes": order.into_iter().map(|(k, v)| json!({"kind": k, "failures": v})).collect::<Vec<_>>(),
        "requests": reqs, "failed": failed, "gateway_504": g504, "requests_from": source,
        "dominant": dominant,
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct OverviewQuery {
    /// Hours back from the end (default 3, at most 24).
    hours: Option<f64>,
    /// The end: RFC 3339 or epoch ms (default: the newest data).
    to: Option<String>,
}

/// The newest time in the store (µs), if it holds any row.
async fn newest(s: &AppState) -> Result<Option<i64>, ApiError> {
    for (table, c) in [("gateway_requests", "time"), ("spans", "start_time")] {
        let b = query(s, table, move |df| {
            df.aggregate(vec![], vec![max(cast(col(c), DataType::Int64)).alias("t")])
        })
        .await?;
        if let Some(Some(t)) = numbers(&b, 0).first() {
            return Ok(Some(*t as i64));
        }
    }
    Ok(None)
}

/// `GET /api/overview?hours=&to=`: `to` defaults to the newest data.
pub(crate) async fn overview(
    State(s): State<Arc<AppState>>,
    Query(q): Query<OverviewQuery>,
) -> Result<Response, ApiError> {
    let hours = q.hours.unwrap_or(3.0);
    if !(hours > 0.0 && hours <= 24.0) {
        return Err(ApiError::bad_request(
            "bad_hours",
            format!("hours={hours}: more than 0, at most 24"),
        ));
    }
    let (health, alerts, watermark) = s.metrics.slo_history();
    let to = match crate::api::time_param(q.to.as_deref(), "to")? {
        Some(t) => t.us(),
        None => match newest(&s).await? {
            Some(t) => t,
            None if watermark > 0 => watermark,
            None => crate::pipeline::now_us(),
        },
    };
    let b = Buckets::new(to - (hours * HOUR_US as f64) as i64, to);
    let (reqs, failed, g504, source) = requests(&s, b).await?;
    let to_ms = |us: i64| us / 1000;
    let health: Vec<Value> = health
        .iter()
        .filter(|h| b.index(h.minute_start_us).is_some())
        .map(|h| json!({"t_ms": to_ms(h.minute_start_us), "value": h.value}))
        .collect();
    let alerts: Vec<Value> = alerts
        .iter()
        .filter(|a| a.start_us < b.end_us() && a.end_us.is_none_or(|e| e >= b.from_us))
        .map(|a| {
            json!({"name": a.name, "severity": a.severity, "early_warning": a.early_warning,
                "labels": a.labels, "summary": a.summary,
                "start_ms": to_ms(a.start_us), "end_ms": a.end_us.map(to_ms)})
        })
        .collect();
    Ok(Json(json!({
        "from_ms": b.from_us / 1000, "to_ms": b.end_us() / 1000, "step_ms": b.step_us / 1000,
        "t_ms": b.starts_ms(), "requests": reqs, "failed": failed, "gateway_504": g504,
        "requests_from": source, "chain_health": health, "alerts": alerts,
        "watermark_ms": (watermark > 0).then(|| to_ms(watermark)),
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_whole_minutes_and_widen_past_the_cap() {
        let b = Buckets::new(90 * 1_000_000, 185 * 1_000_000);
        assert_eq!((b.from_us, b.step_us, b.n), (60_000_000, MINUTE_US, 3));
        assert_eq!(b.index(179_999_999), Some(1));
        assert_eq!(b.index(240_000_000), None);
        let day = Buckets::new(0, 24 * HOUR_US);
        assert_eq!((day.step_us, day.n), (2 * MINUTE_US, 720));
    }
}
