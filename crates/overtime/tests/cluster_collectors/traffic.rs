//! Recorded incidents (`tests/fixtures/incidents/*`) as the traffic a Kafka
//! group of collectors receives: each trace's records played as recent
//! traffic, produced as a gateway's and the services' shippers would, keyed
//! the way `docs/kafka.md` says; and the truth they are judged against.
//!
//! Several incidents can be played over one window (their failures then
//! overlap in time, as two outages on one platform do); each keeps its own
//! gateway topic (its own `log_format`) and its own gateway layer.

use crate::support::fixture;
use crate::support::kafka::{Ctx, Deliveries};
use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub(super) const INCIDENT: &str = "c_dns_retry";
pub(super) const EDGE: &str = "cluster-edge";
pub(super) const SPANS: &str = "cluster-spans";

/// How the gateway's shipper keys its lines (spans are always keyed by
/// their trace id, as the OpenTelemetry Collector does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keying {
    /// Every line by the trace it belongs to, even one that logged no
    /// traceparent (a shipper that knew the trace: the ideal case).
    ByTrace,
    /// As `docs/kafka.md` says: the trace id of the line's traceparent,
    /// else its `$request_id`.
    AsDocs,
    /// nginx passes no traceparent (none is logged) and the services,
    /// auto-instrumented, start their own traces: every line is keyed by
    /// its `$request_id`, which is not the trace id of its spans.
    RequestIdOnly,
}

/// One recorded incident to play: its fixture, the topic its gateway lines
/// go to, and how they are keyed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Incident {
    pub(super) fixture: &'static str,
    pub(super) edge_topic: &'static str,
    pub(super) keying: Keying,
}

/// One record to produce: topic, key, payload, and when it happened (ms)
/// for the order of production.
#[derive(Clone)]
pub(super) struct Rec {
    pub(super) topic: &'static str,
    pub(super) key: String,
    /// The trace the record belongs to (what the truth names).
    pub(super) trace: String,
    payload: String,
    at_ms: i64,
}

/// How long the played incidents last: each fixture's traffic window is
/// played in this much recent time (each trace moved as a whole, so its
/// own timings stay), as a collector receives live traffic.
const PLAYED_MS: i64 = 120_000;

/// Incident C's traffic, every line keyed by its trace (the first tests').
pub(super) fn incident_traffic() -> Vec<Rec> {
    play(
        &[Incident {
            fixture: INCIDENT,
            edge_topic: EDGE,
            keying: Keying::ByTrace,
        }],
        20_000,
    )
}

/// A span's start and end (ms since the epoch), whichever way the fixture
/// writes them (epoch ms with `duration_ms`, or RFC 3339 `start_time` and
/// `end_time`).
fn span_times(s: &serde_json::Map<String, Value>) -> (i64, i64) {
    let at = |v: &Value| -> i64 {
        match v {
            Value::Number(n) => n.as_f64().unwrap() as i64,
            Value::String(t) => DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis(),
            _ => panic!("a span time: {v}"),
        }
    };
    let start = at(&s["start_time"]);
    let end = match s.get("end_time") {
        Some(e) => at(e),
        None => start + s["duration_ms"].as_f64().unwrap_or(0.0) as i64,
    };
    (start, end)
}

/// `v` (a span time as the fixture writes it) moved by `by` ms.
fn shifted(v: &Value, by: i64) -> Value {
    match v {
        Value::Number(n) => Value::from(n.as_i64().unwrap() + by),
        Value::String(t) => {
            let t = DateTime::parse_from_rfc3339(t).unwrap() + chrono::Duration::milliseconds(by);
            Value::from(
                t.with_timezone(&Utc)
                    .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string(),
            )
        }
        _ => panic!("a span time: {v}"),
    }
}

/// An access-log line's time (ms) and the line with it moved by `by` ms:
/// `$msec` first (`1794985326.586 …`) or `[$time_iso8601]`.
fn line_time(l: &str) -> i64 {
    if let Some((_, rest)) = l.split_once(" [") {
        let iso = rest.split_once(']').unwrap().0;
        return DateTime::parse_from_rfc3339(iso)
            .unwrap()
            .timestamp_millis();
    }
    let (s, ms) = l.split_once(' ').unwrap().0.split_once('.').unwrap();
    s.parse::<i64>().unwrap() * 1000 + ms.parse::<i64>().unwrap()
}

fn line_shifted(l: &str, by: i64) -> String {
    let t = line_time(l) + by;
    if let Some((head, rest)) = l.split_once(" [") {
        let (iso, tail) = rest.split_once(']').unwrap();
        let offset = *DateTime::parse_from_rfc3339(iso).unwrap().offset();
        let at: DateTime<FixedOffset> = offset.timestamp_millis_opt(t).unwrap();
        return format!("{head} [{}]{tail}", at.format("%Y-%m-%dT%H:%M:%S%:z"));
    }
    let rest = l.split_once(' ').unwrap().1;
    format!("{}.{:03} {rest}", t / 1000, t % 1000)
}

/// A line field `name=value` (quotes removed), when logged.
fn field(l: &str, name: &str) -> Option<String> {
    l.split_whitespace()
        .find_map(|w| w.strip_prefix(name))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| v != "-" && !v.is_empty())
}

/// The line with its traceparent removed (logged as `-`), as nginx logs a
/// request that carried none.
fn without_traceparent(l: &str) -> String {
    l.split(' ')
        .map(|w| match w.strip_prefix("tp=") {
            Some(v) if v.starts_with('"') => "tp=\"-\"".to_string(),
            Some(_) => "tp=-".to_string(),
            None => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The incidents' access logs and spans played as recent traffic: each
/// trace's records moved by one offset so that, per incident, the traces'
/// starts keep their order and spread over the last [`PLAYED_MS`] before
/// `ends_ms_ago` ms ago; keyed per [`Keying`]; in the order they happened
/// (a gateway line when the gateway answered, a span when it ended).
pub(super) fn play(incidents: &[Incident], ends_ms_ago: i64) -> Vec<Rec> {
    let now_ms = (crate::support::now_ns() / 1_000_000) as i64;
    let mut out = Vec::new();
    for inc in incidents {
        out.extend(play_one(inc, now_ms - ends_ms_ago - PLAYED_MS));
    }
    // Spans before the gateway line that ends at the same millisecond.
    out.sort_by_key(|r| (r.at_ms, r.topic != SPANS));
    out
}

fn play_one(inc: &Incident, to: i64) -> Vec<Rec> {
    let read = |f: &str| std::fs::read_to_string(fixture(inc.fixture, f)).unwrap();
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
        field(l, "tp=")
            .and_then(|tp| tp.split('-').nth(1).map(str::to_string))
            .or_else(|| by_request.get(&field(l, "rid=")?).cloned())
            .or_else(|| field(l, "rid="))
            .unwrap_or_else(|| panic!("no trace for line {l}"))
    };
    // When each trace began, in the fixture.
    let mut began: HashMap<String, i64> = HashMap::new();
    for s in &spans {
        let e = began
            .entry(s["trace_id"].as_str().unwrap().to_string())
            .or_insert(i64::MAX);
        *e = (*e).min(span_times(s).0);
    }
    for l in &lines {
        let e = began.entry(line_trace(l)).or_insert(i64::MAX);
        *e = (*e).min(line_time(l));
    }
    let first = *began.values().min().unwrap();
    let last = *began.values().max().unwrap();
    let shift = |trace: &str| -> i64 {
        let b = began[trace];
        to + (b - first) * PLAYED_MS / (last - first).max(1) - b
    };
    let mut out = Vec::new();
    for s in &spans {
        let mut s = s.clone();
        let trace = s["trace_id"].as_str().unwrap().to_string();
        let by = shift(&trace);
        let at = span_times(&s).1 + by;
        for k in ["start_time", "end_time"] {
            if let Some(v) = s.get(k) {
                let v = shifted(v, by);
                s.insert(k.into(), v);
            }
        }
        // A streamed call's chunk events carry their own times.
        if let Some(Value::Array(events)) = s.get_mut("events") {
            for e in events {
                if e.get("time").is_some() {
                    e["time"] = shifted(&e["time"], by);
                }
            }
        }
        out.push(Rec {
            topic: SPANS,
            key: trace.clone(),
            trace,
            payload: Value::Object(s).to_string(),
            at_ms: at,
        });
    }
    for l in &lines {
        let trace = line_trace(l);
        let by = shift(&trace);
        let mut line = line_shifted(l, by);
        let key = match inc.keying {
            Keying::ByTrace => trace.clone(),
            Keying::AsDocs => field(&line, "tp=")
                .and_then(|tp| tp.split('-').nth(1).map(str::to_string))
                .or_else(|| field(&line, "rid="))
                .unwrap_or_default(),
            Keying::RequestIdOnly => {
                line = without_traceparent(&line);
                field(&line, "rid=").unwrap_or_default()
            }
        };
        out.push(Rec {
            topic: inc.edge_topic,
            key,
            trace,
            at_ms: line_time(&line),
            payload: line,
        });
    }
    out
}

/// The truth's failing traces of an incident: trace id → root-cause kind.
pub(super) fn failing_of(incident: &str) -> BTreeMap<String, String> {
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(incident, "truth.json")).unwrap())
            .unwrap();
    t["failing"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| (id.clone(), v["kind"].as_str().unwrap().to_string()))
        .collect()
}

/// Incident C's failing traces: trace id → root-cause kind.
pub(super) fn truth_failing() -> BTreeMap<String, String> {
    failing_of(INCIDENT)
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
/// idempotent, one record per batch (tansu cannot fetch from inside a
/// batch), FNV-1a on keys (`fnv1a_random`, as docs/kafka.md has every
/// producer hash).
pub(super) fn producer(addr: &str) -> (ThreadedProducer<Ctx>, Arc<Deliveries>) {
    let deliveries = Arc::new(Deliveries::default());
    let p = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "120000")
        .set("partitioner", "fnv1a_random")
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

/// Records of `recs` produced to `topic`.
pub(super) fn count(recs: &[Rec], topic: &str) -> u64 {
    recs.iter().filter(|r| r.topic == topic).count() as u64
}

/// Records of `recs` produced to any topic but the spans'.
pub(super) fn lines(recs: &[Rec]) -> u64 {
    recs.iter().filter(|r| r.topic != SPANS).count() as u64
}
