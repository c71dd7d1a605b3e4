//! A collector's unflushed rows joined into another collector's reads over
//! one bucket: each row once, in the two races a flush opens — an answer
//! taken while the flush was in flight (its rows are both in the answer and
//! in the files the flush then publishes), and a reader whose listing is
//! older than the flush the answer says is done.

use datafusion::prelude::SessionContext;
use overtime_model::{RecordSink, SpanColumns, SpanRecord, Table};
use overtime_store::{PeerSource, Store, StoreConfig, Unflushed};
use std::path::Path;
use std::sync::Arc;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

fn open(dir: &Path, bucket: &Path, id: &str) -> Store {
    Store::open(StoreConfig {
        data_dir: dir.into(),
        url: Some(format!("file://{}", bucket.display())),
        collector_id: Some(id.into()),
        flush_interval_ms: 0,
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap()
}

fn spans(n: usize) -> arrow::record_batch::RecordBatch {
    let mut c = SpanColumns::new();
    for i in 0..n {
        let id = format!("{:016x}", i + 1);
        c.append(&SpanRecord::new(
            TRACE,
            &id,
            "agent",
            "chat",
            1_000 + i as i64,
            2_000,
        ));
    }
    c.finish()
}

fn rows(b: &[arrow::record_batch::RecordBatch]) -> usize {
    b.iter().map(|b| b.num_rows()).sum()
}

/// A fixed answer, as a peer would have given it.
#[derive(Debug)]
struct Answer(Vec<Unflushed>);

#[async_trait::async_trait]
impl PeerSource for Answer {
    async fn unflushed(
        &self,
        _: Table,
        _: Option<i64>,
        _: Option<i64>,
        _: Option<&str>,
    ) -> Vec<Unflushed> {
        self.0.clone()
    }
}

async fn sql_count(store: &Store, answer: Vec<Unflushed>) -> i64 {
    let ctx = SessionContext::new();
    store
        .register_with_peers(&ctx, Some(Arc::new(Answer(answer))))
        .unwrap();
    let b = ctx
        .sql("SELECT count(*) FROM spans")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    b[0].column(0)
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap()
        .value(0)
}

#[tokio::test]
async fn rows_answered_during_a_flush_are_read_once_when_the_flush_lands() {
    let d = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    let (a, b) = (
        open(d[0].path(), d[2].path(), "a"),
        open(d[1].path(), d[2].path(), "b"),
    );
    a.write(Table::Spans, spans(5), None).unwrap();
    // The answer, then the flush that publishes the same rows.
    let answer = a.unflushed(Table::Spans, None, None, None).unwrap();
    assert_eq!(rows(&answer.batches), 5);
    a.flush().unwrap();
    let trace_answer = a.unflushed(Table::Spans, None, None, Some(TRACE)).unwrap();
    assert_eq!(rows(&trace_answer.batches), 0, "flushed");
    // b reads the older answer: the new files are past its sequence.
    assert_eq!(
        rows(
            &b.trace_with(TRACE, &[], std::slice::from_ref(&answer))
                .unwrap()
                .1
        ),
        5
    );
    assert_eq!(sql_count(&b, vec![answer]).await, 5);
    // And with the newer answer, from the files alone.
    assert_eq!(
        rows(
            &b.trace_with(TRACE, &[], std::slice::from_ref(&trace_answer))
                .unwrap()
                .1
        ),
        5
    );
    assert_eq!(sql_count(&b, vec![trace_answer]).await, 5);
}

#[tokio::test]
async fn a_reader_whose_listing_predates_the_peers_flush_lists_again() {
    let d = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    let (a, b) = (
        open(d[0].path(), d[2].path(), "a"),
        open(d[1].path(), d[2].path(), "b"),
    );
    a.write(Table::Spans, spans(3), None).unwrap();
    // b lists the (empty) bucket and would keep that listing for seconds.
    assert_eq!(rows(&b.trace(TRACE).unwrap().1), 0);
    a.flush().unwrap();
    let answer = a.unflushed(Table::Spans, None, None, None).unwrap();
    assert!(answer.flushed_through > 0 && answer.batches.is_empty());
    assert_eq!(
        rows(
            &b.trace_with(TRACE, &[], std::slice::from_ref(&answer))
                .unwrap()
                .1
        ),
        3
    );
    assert_eq!(sql_count(&b, vec![answer]).await, 3);
}

#[tokio::test]
async fn an_answer_from_the_reader_itself_or_in_another_schema_is_not_read_as_rows() {
    let d = [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    ];
    let (a, b) = (
        open(d[0].path(), d[2].path(), "a"),
        open(d[1].path(), d[2].path(), "b"),
    );
    b.write(Table::Spans, spans(2), None).unwrap();
    let own = b.unflushed(Table::Spans, None, None, None).unwrap();
    assert_eq!(
        rows(&b.trace_with(TRACE, &[], &[own]).unwrap().1),
        2,
        "not twice"
    );
    // Rows of another table sent as spans: refused with the collector named.
    let mut wrong = a.unflushed(Table::Spans, None, None, None).unwrap();
    let mut g = overtime_model::GatewayColumns::new();
    g.append(&overtime_model::GatewayRecord::default());
    wrong.batches = vec![g.finish()];
    let err = b.trace_with(TRACE, &[], &[wrong]).unwrap_err().to_string();
    assert!(err.contains("collector a"), "{err}");
}
