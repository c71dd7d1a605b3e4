//! An OTLP/HTTP storm: senders that post wide traces (one root, many
//! children) as fast as they can and, like a misbehaving exporter, post
//! the same body again at once after a 429 (ignoring `Retry-After`); a new
//! trace after a 200. What each answer was is tallied.

use super::{now_ns, request};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One OTLP JSON request: trace `id`, `spans` spans under one root.
pub fn wide_trace_body(id: &str, spans: u64) -> String {
    let end = now_ns();
    let start = end - 1_000_000_000;
    let spans: Vec<serde_json::Value> = (0..spans)
        .map(|i| {
            let mut s = serde_json::json!({
                "traceId": id, "spanId": format!("{:016x}", i + 1), "name": format!("step {i}"),
                "kind": if i == 0 { 2 } else { 3 },
                "startTimeUnixNano": (start + i as u128 * 1000).to_string(),
                "endTimeUnixNano": (end - i as u128 * 1000).to_string(),
                "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "search"}}],
                "status": {"code": 1}
            });
            if i > 0 {
                s["parentSpanId"] = "0000000000000001".into();
            }
            s
        })
        .collect();
    serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent-api"}}]},
        "scopeSpans": [{"spans": spans}]
    }]})
    .to_string()
}

/// What the senders got back.
#[derive(Default)]
pub struct Tally {
    /// Trace ids answered 200.
    pub acked: Mutex<Vec<String>>,
    pub throttled: AtomicU64,
    /// Answers other than 200 and 429 by status (0: no answer).
    pub other: Mutex<BTreeMap<u16, u64>>,
    /// 429s without a usable `Retry-After`.
    pub no_retry_after: AtomicU64,
    pub sent: AtomicU64,
}

pub struct Storm {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    senders: Vec<JoinHandle<()>>,
}

impl Storm {
    /// `senders` threads posting to `port`; trace ids are `id_prefix` +
    /// sender + sequence, so they are told apart from other traffic.
    pub fn start(port: u16, senders: u64, spans_per_request: u64, id_prefix: u128) -> Storm {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let senders = (0..senders)
            .map(|s| {
                let (tally, stop) = (tally.clone(), stop.clone());
                std::thread::spawn(move || {
                    let id_of =
                        |n: u64| format!("{:032x}", id_prefix + ((s as u128) << 32) + n as u128);
                    let mut n = 0u64;
                    let mut id = id_of(n);
                    let mut body = wide_trace_body(&id, spans_per_request);
                    while !stop.load(Relaxed) {
                        let a = request(
                            port,
                            "POST",
                            "/v1/traces",
                            &[("Content-Type", "application/json")],
                            body.as_bytes(),
                        );
                        tally.sent.fetch_add(1, Relaxed);
                        match a {
                            Some(a) if a.status == 200 => {
                                tally.acked.lock().unwrap().push(id.clone());
                                n += 1;
                                id = id_of(n);
                                body = wide_trace_body(&id, spans_per_request);
                            }
                            Some(a) if a.status == 429 => {
                                tally.throttled.fetch_add(1, Relaxed);
                                let ok = a
                                    .header("retry-after")
                                    .and_then(|v| v.parse::<u64>().ok())
                                    .is_some_and(|s| s >= 1);
                                if !ok {
                                    tally.no_retry_after.fetch_add(1, Relaxed);
                                }
                            }
                            Some(a) => {
                                *tally.other.lock().unwrap().entry(a.status).or_default() += 1
                            }
                            None => *tally.other.lock().unwrap().entry(0).or_default() += 1,
                        }
                    }
                })
            })
            .collect();
        Storm {
            stop,
            tally,
            senders,
        }
    }

    /// Stops the senders (each finishes its request) and gives the tally.
    pub fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Relaxed);
        for s in self.senders {
            s.join().unwrap();
        }
        self.tally
    }
}
