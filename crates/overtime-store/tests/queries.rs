//! Every canned SRE query in `queries/` runs against a store holding a
//! small incident (half in Parquet, half in the memtable) and returns the
//! rows an SRE would expect.

use crate::common;
use arrow::array::{ArrayRef, Float64Array, StringArray, TimestampMicrosecondArray, UInt16Array};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use common::*;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use overtime_model::{
    GatewayColumns, GatewayRecord, RecordSink, RejectedColumns, RejectedRecord, SpanColumns,
    SpanRecord, SpanStatus, Stage, Table,
};
use overtime_store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

const N: u64 = 40;

/// 40 requests: every other one a 504 at the edge after 60 s, because its
/// LLM call (deepseek, long prompt) ran out of budget; the rest are fine.
fn incident(s: &Store) {
    let mut g = GatewayColumns::new();
    let mut sp = SpanColumns::new();
    for i in 0..N {
        let t0 = T0 + i as i64 * 10_000_000;
        let failed = i.is_multiple_of(2);
        let rt = if failed { 60_001.0 } else { 2_000.0 + i as f64 };
        for (layer, source) in [(0u32, "edge"), (1, "internal")] {
            let status = match (failed, layer) {
                (true, 0) => 504,
                (true, _) => 499,
                _ => 200,
            };
            g.append(&GatewayRecord {
                source: source.into(),
                layer,
                line: i,
                time_us: t0 + (rt * 1000.0) as i64,
                time_precision_us: 1000,
                status: Some(status),
                request_time_ms: Some(rt - layer as f64),
                trace_id: Some(tid(i)),
                ..Default::default()
            });
        }
        let dur_us = (rt * 1000.0) as i64;
        let mut root = SpanRecord::new(
            &tid(i),
            &format!("{:016x}", i * 10 + 1),
            "agent",
            "handle",
            t0,
            t0 + dur_us,
        );
        root.stage = Stage::Service;
        root.budget_ms = Some(60_000.0);
        root.remaining_budget_ms = Some(60_000.0);
        sp.append(&root);
        let mut tool = SpanRecord::new(
            &tid(i),
            &format!("{:016x}", i * 10 + 2),
            "agent",
            "search",
            t0 + 1_000,
            t0 + 1_500_000,
        );
        tool.stage = Stage::Tool;
        tool.tool = Some("weather_api".into());
        tool.timeout_ms = Some(5_000.0);
        tool.remaining_budget_ms = Some(59_999.0);
        tool.parent_span_id = Some(root.span_id.clone());
        sp.append(&tool);
        let llm_end = if failed { t0 + dur_us } else { t0 + 1_900_000 };
        let mut llm = SpanRecord::new(
            &tid(i),
            &format!("{:016x}", i * 10 + 3),
            "agent",
            "chat",
            t0 + 1_500_000,
            llm_end,
        );
        llm.stage = Stage::Llm;
        llm.model = Some(
            if failed {
                "deepseek-v4-pro"
            } else {
                "small-fast"
            }
            .into(),
        );
        llm.input_tokens = Some(if failed {
            400 + i as i64
        } else {
            30 + i as i64
        });
        llm.ttft_ms = Some(if failed { 9_000.0 } else { 120.0 });
        llm.status = if failed {
            SpanStatus::Timeout
        } else {
            SpanStatus::Ok
        };
        llm.remaining_budget_ms = Some(58_500.0);
        llm.timeout_ms = Some(120_000.0);
        llm.parent_span_id = Some(root.span_id.clone());
        sp.append(&llm);
    }
    let (g, sp) = (g.finish(), sp.finish());
    let half = |b: &RecordBatch| {
        (
            b.slice(0, b.num_rows() / 2),
            b.slice(b.num_rows() / 2, b.num_rows() - b.num_rows() / 2),
        )
    };
    let (g1, g2) = half(&g);
    let (s1, s2) = half(&sp);
    let mut r = RejectedColumns::new();
    for i in 0..5 {
        r.append(&RejectedRecord::new(
            "edge.log",
            100 + i,
            "format_mismatch",
            "expected ' ['",
            b"garbage line",
        ));
    }
    r.append(&RejectedRecord::new(
        "spans.jsonl",
        7,
        "bad_json",
        "EOF while parsing",
        b"{\"trace_id\":",
    ));
    s.write(Table::GatewayRequests, g1, None).unwrap();
    s.write(Table::Spans, s1, None).unwrap();
    s.write(Table::Rejected, r.finish(), None).unwrap();
    s.flush().unwrap();
    s.write(Table::GatewayRequests, g2, None).unwrap();
    s.write(Table::Spans, s2, None).unwrap();
}

/// The `verdicts` table the server registers, as a MemTable.
fn verdicts() -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("trace_id", DataType::Utf8, false),
        Field::new(
            "started_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("outcome", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("component", DataType::Utf8, false),
        Field::new("share", DataType::Float64, true),
        Field::new("gateway_status", DataType::UInt16, true),
        Field::new("elapsed_ms", DataType::Float64, true),
    ]));
    let ids: Vec<u64> = (0..N).filter(|i| i.is_multiple_of(2)).collect();
    let kind = |i: u64| {
        if i.is_multiple_of(10) {
            "tool_slow"
        } else {
            "llm_prefill_slow"
        }
    };
    let comp = |i: u64| {
        if i.is_multiple_of(10) {
            "weather_api"
        } else {
            "deepseek-v4-pro"
        }
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| tid(*i)))),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                ids.iter().map(|i| T0 + *i as i64 * 10_000_000),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter_values(
            ids.iter().map(|_| "gateway_timeout"),
        )),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| kind(*i)))),
        Arc::new(StringArray::from_iter_values(ids.iter().map(|i| comp(*i)))),
        Arc::new(Float64Array::from_iter_values(ids.iter().map(|_| 0.9))),
        Arc::new(UInt16Array::from_iter_values(ids.iter().map(|_| 504))),
        Arc::new(Float64Array::from_iter_values(ids.iter().map(|_| 60_001.0))),
    ];
    let b = RecordBatch::try_new(schema.clone(), cols).unwrap();
    MemTable::try_new(schema, vec![vec![b]]).unwrap()
}

/// Rows of a result as name → cell strings.
fn table(b: &[RecordBatch]) -> Vec<BTreeMap<String, String>> {
    let mut out = Vec::new();
    for b in b {
        for r in 0..b.num_rows() {
            let mut row = BTreeMap::new();
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                row.insert(f.name().clone(), array_value_to_string(c, r).unwrap());
            }
            out.push(row);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_canned_query_answers_its_question() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(cfg(dir.path())).unwrap();
    incident(&s);
    assert!(s.stats().parquet_files > 0 && s.stats().memtable_bytes > 0);
    let ctx = SessionContext::new();
    s.register(&ctx).unwrap();
    ctx.register_table("verdicts", Arc::new(verdicts()))
        .unwrap();

    let qdir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../queries");
    let mut files: Vec<_> = std::fs::read_dir(&qdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let mut checked = 0;
    for f in &files {
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.starts_with("-- Question:"),
            "{name}: header comment says the question it answers"
        );
        let rows = table(
            &ctx.sql(&text)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        assert!(!rows.is_empty(), "{name} returned no rows");
        let first = &rows[0];
        match name.as_str() {
            "504s_by_cause" => {
                assert_eq!(first["kind"], "llm_prefill_slow", "{rows:?}");
                assert_eq!(first["traces"], "16");
                assert_eq!(first["pct_of_504s"], "80.0");
                assert_eq!(rows.len(), 2);
            }
            "slowest_stages" => {
                assert_eq!(first["stage"], "service", "{rows:?}");
                let llm = rows
                    .iter()
                    .find(|r| r["component"] == "deepseek-v4-pro")
                    .unwrap();
                assert_eq!(llm["timeouts"], "20");
                let tool = rows
                    .iter()
                    .find(|r| r["component"] == "weather_api")
                    .unwrap();
                assert_eq!(tool["spans"], "40");
            }
            "llm_latency_by_input_tokens" => {
                let big = rows
                    .iter()
                    .find(|r| r["model"] == "deepseek-v4-pro")
                    .unwrap();
                assert_eq!(big["input_bucket"], "200-500", "{rows:?}");
                assert_eq!(big["timeout_pct"], "100.0");
                let small: Vec<_> = rows.iter().filter(|r| r["model"] == "small-fast").collect();
                assert_eq!(small.len(), 2, "<50 and 50-200: {rows:?}");
            }
            "budget_left_by_stage" => {
                assert_eq!(first["stage"], "llm", "{rows:?}");
                assert_eq!(first["timeout_beyond_budget"], "40");
                assert_eq!(rows.len(), 3);
            }
            "timeouts_by_layer" => {
                assert_eq!(first["source"], "edge", "{rows:?}");
                assert_eq!(first["gateway_timeouts"], "20");
                assert_eq!(first["p50_504_request_ms"], "60001.0");
                assert_eq!(rows[1]["gateway_timeouts"], "0");
            }
            "rejected_by_reason" => {
                assert_eq!(first["reason"], "format_mismatch", "{rows:?}");
                assert_eq!(first["records"], "5");
                assert_eq!(rows.len(), 2);
            }
            other => panic!("queries/{other}.sql has no check here: add one"),
        }
        checked += 1;
    }
    assert_eq!(checked, files.len());
}
