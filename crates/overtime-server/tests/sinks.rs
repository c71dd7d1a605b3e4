//! The pipeline's sinks stand between every source and the store: what a
//! Kafka source asks them about commits (the commit point, publishing, the
//! positions other collectors published) must be the store's answer, not
//! the trait's default. A store on a bucket (a `file://` directory) has
//! answers that differ from the defaults, so a sink that did not pass a
//! question on fails here.

use overtime_model::{Checkpoint, CommitPoints, SpanColumns, SpanRecord, Table};
use overtime_server::AppState;
use overtime_server::pipeline::{DiagnosingSink, SourceSink};
use overtime_store::{Store, StoreConfig};
use std::sync::Arc;

fn one_span() -> arrow::record_batch::RecordBatch {
    let mut c = SpanColumns::new();
    c.append(&SpanRecord::new(
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
        "agent",
        "root",
        1_764_446_400_000_000,
        1_764_446_400_005_000,
    ));
    c.finish()
}

#[test]
fn the_pipelines_sinks_answer_a_kafka_sources_questions_as_the_store_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig {
        data_dir: dir.path().join("data"),
        url: Some(format!("file://{}/bucket", dir.path().display())),
        collector_id: Some("c-1".into()),
        flush_interval_ms: 0,
        retention_age_hours: None,
        ..Default::default()
    })
    .unwrap();
    let state = Arc::new(AppState::with_defaults(store));
    let sinks: Vec<(&str, Box<dyn CommitPoints>)> = vec![
        (
            "SourceSink",
            Box::new(SourceSink {
                state: state.clone(),
                source: "kafka",
            }),
        ),
        (
            "DiagnosingSink",
            Box::new(DiagnosingSink {
                state: state.clone(),
            }),
        ),
    ];
    for (i, (name, sink)) in sinks.iter().enumerate() {
        let source = format!("kafka:g/spans/{i}");
        let cp = Checkpoint {
            source: source.clone(),
            position: "12".into(),
        };
        sink.write_replayable(Table::Spans, one_span(), Some(cp))
            .unwrap();
        assert_eq!(sink.checkpoint(&source).as_deref(), Some("12"), "{name}");
        assert_eq!(sink.commit_point(&source), None, "{name}: not flushed yet");
        sink.publish().unwrap();
        assert_eq!(sink.commit_point(&source).as_deref(), Some("12"), "{name}");
        let shared: Vec<String> = sink
            .shared_checkpoints()
            .unwrap()
            .into_iter()
            .filter(|c| c.source == source)
            .map(|c| c.position)
            .collect();
        assert_eq!(shared, vec!["12".to_string()], "{name}");
    }
}
