//! The Kafka source against a real Kafka-API broker (tansu, started and
//! killed by each test): producers keyed by trace id in the three formats,
//! a consumer restart mid-stream, a crash between the durable write and the
//! commit, backpressure, and bad messages.

use crate::common;

use common::{Broker, jsonl_span, nginx_line, otlp_request};
use overtime_kafka::{
    KafkaSource, KafkaSourceConfig, TopicConfig, source_name, spawn_kafka_source,
};
use overtime_model::CommitPoints;
use overtime_parse::nginx::LogFormat;
use overtime_parse::record::RecordFormat;
use overtime_parse::spans::SpanFormat;
use overtime_test_support::net::wait_until;
use overtime_test_support::sink::RecordingSink;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 3;
/// Deadline of every wait, in seconds: generous for a loaded 2-core CI.
pub(crate) const WAIT: u64 = 120;
/// A JSONL span whose trace id is not hex.
const BAD_ID: &[u8] = br#"{"trace_id":"xyz","span_id":"b7ad6b7169203331","service":"a","name":"n","start_time":1714561200000,"duration_ms":1}"#;

pub(crate) fn config(broker: &Broker, group: &str, prefix: &str) -> KafkaSourceConfig {
    let topics = vec![
        TopicConfig {
            topic: format!("{prefix}-edge"),
            format: RecordFormat::nginx(LogFormat::builtin("overtime").unwrap(), "edge", 0),
        },
        TopicConfig {
            topic: format!("{prefix}-spans"),
            format: RecordFormat::Spans(SpanFormat::Jsonl),
        },
        TopicConfig {
            topic: format!("{prefix}-otlp"),
            format: RecordFormat::Spans(SpanFormat::OtlpProto),
        },
    ];
    let mut cfg = KafkaSourceConfig::new(&broker.addr, group, topics);
    cfg.batch_max_messages = 16;
    cfg.batch_max_ms = 100;
    cfg.max_prefetch_kbytes = 1024;
    for (k, v) in [
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "1000"),
        ("topic.metadata.refresh.interval.ms", "2000"),
        ("statistics.interval.ms", "1000"),
    ] {
        cfg.extra.insert(k.into(), v.into());
    }
    cfg
}

pub(crate) fn setup(prefix: &str) -> Broker {
    let broker = Broker::start();
    let topics: Vec<String> = ["edge", "spans", "otlp"]
        .iter()
        .map(|t| format!("{prefix}-{t}"))
        .collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    broker.create_topics(&names, PARTITIONS);
    broker
}

/// Produces messages `range` of each format, keyed by trace id.
pub(crate) fn produce(broker: &Broker, prefix: &str, range: Range<u64>) {
    let nginx: Vec<_> = range.clone().map(nginx_line).collect();
    let spans: Vec<_> = range.clone().map(jsonl_span).collect();
    let otlp: Vec<_> = range.map(otlp_request).collect();
    broker.produce(&format!("{prefix}-edge"), &nginx);
    broker.produce(&format!("{prefix}-spans"), &spans);
    broker.produce(&format!("{prefix}-otlp"), &otlp);
}

pub(crate) struct Running {
    pub(crate) source: KafkaSource,
    stop: CancellationToken,
}

pub(crate) fn start(cfg: &KafkaSourceConfig, sink: &Arc<RecordingSink>) -> Running {
    start_with(cfg, sink.clone())
}

pub(crate) fn start_with(cfg: &KafkaSourceConfig, sink: Arc<dyn CommitPoints>) -> Running {
    let stop = CancellationToken::new();
    let source =
        spawn_kafka_source(cfg.clone(), sink, stop.clone()).expect("spawning the kafka source");
    Running { source, stop }
}

impl Running {
    pub(crate) fn stop(self) -> Arc<overtime_kafka::KafkaStats> {
        self.stop.cancel();
        let stats = self.source.stats().clone();
        self.source.join().expect("the source ends cleanly");
        stats
    }
}

/// Waits until the sink holds `n` requests and `n` JSONL + `2n` OTLP spans.
fn wait_all(sink: &RecordingSink, n: usize, running: &Running) {
    let stats = running.source.stats().clone();
    wait_until(
        WAIT,
        &format!("{n} requests and {} spans", 3 * n),
        || {
            let s = sink.seen();
            s.requests.len() >= n && s.spans.len() >= 3 * n
        },
        || {
            let s = sink.seen();
            format!(
                "have {} requests, {} spans; messages {}, batches {}, rebalances {}, \
                 lag {:?}, last error {:?}",
                s.requests.len(),
                s.spans.len(),
                stats.messages(),
                stats.batches(),
                stats.rebalances(),
                stats.lag_by_partition(),
                stats.last_error()
            )
        },
    );
}

pub(crate) fn assert_exactly(sink: &RecordingSink, n: usize) {
    let s = sink.seen();
    assert_eq!(s.duplicates(), Vec::<String>::new(), "duplicates");
    assert_eq!(s.requests.len(), n, "gateway rows");
    assert_eq!(s.spans.len(), 3 * n, "spans");
    assert!(s.rejected.is_empty(), "rejected: {:?}", s.rejected);
}

#[test]
fn every_record_once_across_a_consumer_restart() {
    let prefix = "restart";
    let broker = setup(prefix);
    let cfg = config(&broker, "overtime-restart", prefix);
    let sink = Arc::new(RecordingSink::new());

    produce(&broker, prefix, 0..40);
    let first = start(&cfg, &sink);
    wait_all(&sink, 40, &first);

    // Mid-stream: more messages arrive while the consumer is stopped and a
    // new one (same group) takes over.
    produce(&broker, prefix, 40..80);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let stats = first.stop();
    assert!(stats.batches() > 0 && stats.commits().0 > 0);
    produce(&broker, prefix, 80..120);
    let second = start(&cfg, &sink);
    wait_all(&sink, 120, &second);
    // Give a duplicate time to show up.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let stats = second.stop();
    assert_exactly(&sink, 120);
    assert_eq!(stats.rejected(), 0);

    // Every partition of every topic has a checkpoint; the nginx rows kept
    // their layer and their trace id.
    let sink_state = sink.recorded();
    for t in ["edge", "spans", "otlp"] {
        for p in 0..PARTITIONS {
            let name = source_name("overtime-restart", &format!("{prefix}-{t}"), p);
            assert!(
                sink_state.checkpoints.contains_key(&name),
                "no checkpoint for {name}: keys must spread over partitions; {:?}",
                sink_state.checkpoints
            );
        }
    }
}

#[test]
fn a_crash_between_the_durable_write_and_the_commit_reads_nothing_twice() {
    let prefix = "crash";
    let broker = setup(prefix);
    produce(&broker, prefix, 0..30);

    // Group "a" reads everything into its store…
    let store_a = Arc::new(RecordingSink::new());
    let a = start(&config(&broker, "crash-a", prefix), &store_a);
    wait_all(&store_a, 30, &a);
    a.stop();

    // …then a store that holds all of it with its checkpoints, under group
    // "b" which never committed: exactly a crash after the WAL write and
    // before the offset commit.
    let store_b = Arc::new(RecordingSink::new());
    {
        let a_state = store_a.recorded();
        let mut b_state = store_b.recorded();
        b_state.writes = a_state.writes.clone();
        for (k, v) in &a_state.checkpoints {
            b_state
                .checkpoints
                .insert(k.replace("kafka:crash-a/", "kafka:crash-b/"), v.clone());
        }
    }
    let b = start(&config(&broker, "crash-b", prefix), &store_b);
    produce(&broker, prefix, 30..45);
    wait_all(&store_b, 45, &b);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let stats = b.stop();
    assert_exactly(&store_b, 45);
    assert!(
        stats.checkpoint_seeks() >= 3 * PARTITIONS as u64,
        "every partition starts from the sink's checkpoint: {} seeks",
        stats.checkpoint_seeks()
    );

    // The group caught up: a restart of "b" starts from its commits and
    // reads nothing again.
    let again = start(&config(&broker, "crash-b", prefix), &store_b);
    produce(&broker, prefix, 45..50);
    wait_all(&store_b, 50, &again);
    std::thread::sleep(std::time::Duration::from_secs(1));
    again.stop();
    assert_exactly(&store_b, 50);
}

#[test]
fn backpressure_pauses_partitions_and_loses_nothing() {
    let prefix = "full";
    let broker = setup(prefix);
    let sink = Arc::new(RecordingSink::new());
    sink.retry_after_ms.store(150, SeqCst);
    sink.full_for(12);
    produce(&broker, prefix, 0..60);
    let running = start(&config(&broker, "overtime-full", prefix), &sink);
    wait_all(&sink, 60, &running);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let stats = running.stop();
    assert_exactly(&sink, 60);
    assert_eq!(sink.full_answers.load(SeqCst), 12);
    assert_eq!(stats.sink_full(), 12);
    assert!(stats.pauses() >= 1, "a full sink pauses its partition");
    assert_eq!(stats.pauses(), stats.resumes(), "every pause was resumed");
}

#[test]
fn bad_messages_become_rejected_rows() {
    let prefix = "bad";
    let broker = setup(prefix);
    produce(&broker, prefix, 0..10);
    let bad = |key: &str, p: Option<&[u8]>| (key.to_string(), p.map(<[u8]>::to_vec));
    broker.produce(
        "bad-edge",
        &[bad("k1", Some(b"not an access-log line")), bad("k2", None)],
    );
    broker.produce(
        "bad-spans",
        &[bad("k1", Some(b"{\"trace_id\":")), bad("k2", Some(BAD_ID))],
    );
    broker.produce("bad-otlp", &[bad("k1", Some(b"\xff\xff\xff\xff"))]);

    let sink = Arc::new(RecordingSink::new());
    let running = start(&config(&broker, "overtime-bad", prefix), &sink);
    wait_until(
        WAIT,
        "10 requests, 30 spans and 5 rejected rows",
        || {
            let s = sink.seen();
            s.requests.len() >= 10 && s.spans.len() >= 30 && s.rejected.len() >= 5
        },
        || format!("{:?}", sink.seen()),
    );
    let stats = running.stop();
    let seen = sink.seen();
    assert_eq!(seen.duplicates(), Vec::<String>::new());
    assert_eq!((seen.requests.len(), seen.spans.len()), (10, 30));
    let mut reasons: Vec<(&str, &str)> = seen
        .rejected
        .iter()
        .map(|r| (r.position.split('/').next().unwrap(), r.reason.as_str()))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec![
            ("bad-edge", "empty_message"),
            ("bad-edge", "format_mismatch"),
            ("bad-otlp", "bad_proto"),
            ("bad-spans", "bad_id"),
            ("bad-spans", "bad_json"),
        ]
    );
    for r in &seen.rejected {
        let (_, offset) = r.position.split_once('@').expect("topic/partition@offset");
        assert_eq!(offset.parse::<u64>().unwrap(), r.line, "{r:?}");
    }
    assert_eq!(stats.rejected(), 5);
    assert_eq!(stats.rejected_by_reason().values().sum::<u64>(), 5);
}
