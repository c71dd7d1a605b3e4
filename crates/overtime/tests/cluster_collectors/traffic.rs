//! Incident C (`tests/fixtures/incidents/c_dns_retry`) as the traffic a
//! Kafka group of collectors receives: records keyed by trace id, played
//! as the last two minutes, produced as a gateway's and the services'
//! shippers would; and the truth it is judged against.

use crate::support::fixture;
use crate::support::kafka::{Ctx, Deliveries};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub(super) const INCIDENT: &str = "c_dns_retry";
pub(super) const EDGE: &str = "cluster-edge";
pub(super) const SPANS: &str = "cluster-spans";

/// One record to produce: topic, key (the trace id), payload, and when
/// it happened (ms) for the order of production.
#[derive(Clone)]
pub(super) struct Rec {
    pub(super) topic: &'static str,
    pub(super) key: String,
    payload: String,
    at_ms: i64,
}

/// How long the played incident lasts: the fixture's half hour is
/// played in this much recent time (each trace moved as a whole, so its
/// own timings stay), as a collector receives live traffic.
const PLAYED_MS: i64 = 120_000;

/// Incident C's access log and spans played as recent traffic: each
/// trace's records moved by one offset so the traces' starts keep their
/// order and fall in the last [`PLAYED_MS`] before now; each keyed by its
/// trace (a line without a traceparent by the trace whose spans carry its
/// request id); in the order they happened (a gateway line when the
/// gateway answered, a span when it ended).
pub(super) fn incident_traffic() -> Vec<Rec> {
    let read = |f: &str| std::fs::read_to_string(fixture(INCIDENT, f)).unwrap();
    let spans: Vec<serde_json::Map<String, Value>> = read("spans.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: Vec<String> = read("access.log")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let line_ms = |l: &str| -> i64 {
        let (s, ms) = l.split_once(' ').unwrap().0.split_once('.').unwrap();
        s.parse::<i64>().unwrap() * 1000 + ms.parse::<i64>().unwrap()
    };
    let span_start = |s: &serde_json::Map<String, Value>| s["start_time"].as_i64().unwrap();
    let span_end = |s: &serde_json::Map<String, Value>| -> i64 {
        span_start(s) + s["duration_ms"].as_f64().unwrap_or(0.0) as i64
    };
    let by_request: HashMap<String, String> = spans
        .iter()
        .filter_map(|s| {
            Some((
                s.get("request_id")?.as_str()?.to_string(),
                s["trace_id"].as_str()?.to_string(),
            ))
        })
        .collect();
    let line_trace = |l: &str| -> String {
        let field = |p: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(p))
                .map(str::to_string)
        };
        field("tp=00-")
            .and_then(|tp| tp.split('-').next().map(str::to_string))
            .or_else(|| by_request.get(&field("rid=")?).cloned())
            .unwrap_or_else(|| panic!("no trace for line {l}"))
    };
    // When each trace began, in the fixture.
    let mut began: HashMap<String, i64> = HashMap::new();
    for s in &spans {
        let e = began
            .entry(s["trace_id"].as_str().unwrap().to_string())
            .or_insert(i64::MAX);
        *e = (*e).min(span_start(s));
    }
    for l in &lines {
        let e = began.entry(line_trace(l)).or_insert(i64::MAX);
        *e = (*e).min(line_ms(l));
    }
    let first = *began.values().min().unwrap();
    let last = *began.values().max().unwrap();
    // The last trace begins 20 s ago: it has ended by now.
    let now_ms = (crate::support::now_ns() / 1_000_000) as i64;
    let to = now_ms - 20_000 - PLAYED_MS;
    let shift = |trace: &str| -> i64 {
        let b = began[trace];
        to + (b - first) * PLAYED_MS / (last - first).max(1) - b
    };
    let mut out = Vec::new();
    for s in &spans {
        let mut s = s.clone();
        let key = s["trace_id"].as_str().unwrap().to_string();
        let by = shift(&key);
        let at = span_end(&s) + by;
        s.insert("start_time".into(), (span_start(&s) + by).into());
        // A streamed call's chunk events carry their own times.
        if let Some(Value::Array(events)) = s.get_mut("events") {
            for e in events {
                if let Some(t) = e["time"].as_i64() {
                    e["time"] = (t + by).into();
                }
            }
        }
        out.push(Rec {
            topic: SPANS,
            key,
            payload: Value::Object(s).to_string(),
            at_ms: at,
        });
    }
    for l in &lines {
        let key = line_trace(l);
        let t = line_ms(l) + shift(&key);
        let rest = l.split_once(' ').unwrap().1;
        out.push(Rec {
            topic: EDGE,
            key,
            payload: format!("{}.{:03} {rest}", t / 1000, t % 1000),
            at_ms: t,
        });
    }
    // Spans before the gateway line that ends at the same millisecond.
    out.sort_by_key(|r| (r.at_ms, r.topic == EDGE));
    out
}

/// The truth's failing traces: trace id → root-cause kind.
pub(super) fn truth_failing() -> BTreeMap<String, String> {
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(INCIDENT, "truth.json")).unwrap())
            .unwrap();
    t["failing"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| (id.clone(), v["kind"].as_str().unwrap().to_string()))
        .collect()
}

/// The one fingerprint of incident C's failures (kind:component).
pub(super) fn truth_fingerprint() -> String {
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(INCIDENT, "truth.json")).unwrap())
            .unwrap();
    let fps: BTreeSet<String> = t["failing"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| {
            format!(
                "{}:{}",
                v["kind"].as_str().unwrap(),
                v["component"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(fps.len(), 1, "incident C has one cause: {fps:?}");
    fps.into_iter().next().unwrap()
}

/// A producer as a gateway's and the services' shippers would run it:
/// keyed by trace id, idempotent, one record per batch (tansu cannot
/// fetch from inside a batch).
pub(super) fn producer(addr: &str) -> (ThreadedProducer<Ctx>, Arc<Deliveries>) {
    let deliveries = Arc::new(Deliveries::default());
    let p = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "120000")
        .create_with_context(Ctx(deliveries.clone()))
        .expect("producer");
    (p, deliveries)
}

/// Sends `recs` (numbered from `first`), `pause` apart, and waits until
/// the broker acknowledged each.
pub(super) fn produce(p: &ThreadedProducer<Ctx>, recs: &[Rec], first: u64, pause: Duration) {
    for (i, r) in recs.iter().enumerate() {
        let mut rec = BaseRecord::with_opaque_to(r.topic, Box::new(first + i as u64))
            .key(r.key.as_str())
            .payload(r.payload.as_str());
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    p.flush(Duration::from_secs(120))
        .expect("the broker acknowledges every record");
}

pub(super) fn count(recs: &[Rec], topic: &str) -> u64 {
    recs.iter().filter(|r| r.topic == topic).count() as u64
}
