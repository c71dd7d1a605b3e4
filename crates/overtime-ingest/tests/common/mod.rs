//! Test helpers: an in-memory [`RecordSink`] that keeps every batch and
//! checkpoint, with a switch that makes it answer `Full`.
#![allow(dead_code)]

use arrow::record_batch::RecordBatch;
use overtime_model::{
    Checkpoint, GatewayRecord, RecordSink, RejectedRecord, SinkError, SpanRecord, Table,
    gateway_records, rejected_records, span_records,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// One accepted write.
#[derive(Clone)]
pub struct Write {
    pub table: Table,
    pub batch: RecordBatch,
    pub checkpoint: Option<Checkpoint>,
}

#[derive(Default)]
pub struct TestSink {
    writes: Mutex<Vec<Write>>,
    checkpoints: Mutex<HashMap<String, String>>,
    full: AtomicBool,
    early: AtomicBool,
    /// `retry_after_ms` given with `Full`.
    pub retry_after_ms: AtomicU64,
    /// How many writes were answered `Full`.
    pub full_answers: AtomicU64,
    /// How many times early backpressure was asked for.
    pub early_asks: AtomicU64,
    /// Each write takes this long (to make writes overlap in tests).
    pub write_delay_ms: AtomicU64,
    in_write: AtomicU64,
    /// Most writes seen in progress at once.
    pub max_in_write: AtomicU64,
}

impl TestSink {
    pub fn new() -> Self {
        let s = TestSink::default();
        s.retry_after_ms.store(50, SeqCst);
        s
    }

    /// Answer `Full` (and store nothing) while `on`.
    pub fn set_full(&self, on: bool) {
        self.full.store(on, SeqCst);
    }

    /// Push back early ([`RecordSink::backpressure`]) while `on`.
    pub fn set_early_full(&self, on: bool) {
        self.early.store(on, SeqCst);
    }

    pub fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }

    fn batches(&self, table: Table) -> Vec<RecordBatch> {
        self.writes()
            .into_iter()
            .filter(|w| w.table == table)
            .map(|w| w.batch)
            .collect()
    }

    pub fn gateway(&self) -> Vec<GatewayRecord> {
        self.batches(Table::GatewayRequests)
            .iter()
            .flat_map(|b| gateway_records(b).unwrap())
            .collect()
    }

    pub fn spans(&self) -> Vec<SpanRecord> {
        self.batches(Table::Spans)
            .iter()
            .flat_map(|b| span_records(b).unwrap())
            .collect()
    }

    pub fn rejected(&self) -> Vec<RejectedRecord> {
        self.batches(Table::Rejected)
            .iter()
            .flat_map(|b| rejected_records(b).unwrap())
            .collect()
    }

    pub fn rows(&self, table: Table) -> usize {
        self.batches(table).iter().map(|b| b.num_rows()).sum()
    }
}

impl RecordSink for TestSink {
    fn write(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        let now = self.in_write.fetch_add(1, SeqCst) + 1;
        self.max_in_write.fetch_max(now, SeqCst);
        std::thread::sleep(Duration::from_millis(self.write_delay_ms.load(SeqCst)));
        self.in_write.fetch_sub(1, SeqCst);
        if self.full.load(SeqCst) {
            self.full_answers.fetch_add(1, SeqCst);
            return Err(SinkError::Full {
                retry_after_ms: self.retry_after_ms.load(SeqCst),
            });
        }
        // Same lock order as readers: writes, then checkpoints, so a reader
        // never sees a checkpoint without its batch.
        let mut writes = self.writes.lock().unwrap();
        if let Some(cp) = &checkpoint {
            self.checkpoints
                .lock()
                .unwrap()
                .insert(cp.source.clone(), cp.position.clone());
        }
        writes.push(Write {
            table,
            batch,
            checkpoint,
        });
        Ok(())
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.checkpoints.lock().unwrap().get(source).cloned()
    }

    fn backpressure(&self) -> Option<u64> {
        self.early_asks.fetch_add(1, SeqCst);
        self.early
            .load(SeqCst)
            .then(|| self.retry_after_ms.load(SeqCst))
    }
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after
/// `secs` seconds.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A response read by [`http_post`].
pub struct HttpResponse {
    pub status: u16,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A hand-built HTTP/1.1 POST over a plain socket (`Connection: close`),
/// so tests control every header and byte of the request.
pub fn http_post(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading the whole body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}
