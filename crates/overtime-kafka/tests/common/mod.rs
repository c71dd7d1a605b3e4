//! Test harness for the Kafka source: a real tansu broker started per test
//! (`overtime_test_support::tansu`, killed on drop), topic creation and
//! keyed producing through rdkafka, and the messages the tests send. The
//! sink is `overtime_test_support::sink::RecordingSink`.
//!
//! Design rules:
//! - Every wait is a bounded poll with a generous deadline (2-core CI), and
//!   a timeout panics with what was seen so far.
//! - The broker is found through `scripts/tansu` (or `OVERTIME_TANSU`);
//!   when missing the test fails saying how to install it.

#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use overtime_test_support::tansu::Tansu;
use prost::Message as _;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// A tansu broker on a port of its own on 127.0.0.1, in-memory storage, and the
/// rdkafka clients the tests drive it with.
pub struct Broker {
    _tansu: Tansu,
    pub addr: String,
}

impl Broker {
    /// Starts tansu and waits until it accepts connections.
    pub fn start() -> Broker {
        let tansu = Tansu::in_memory();
        Broker {
            addr: tansu.addr.clone(),
            _tansu: tansu,
        }
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
