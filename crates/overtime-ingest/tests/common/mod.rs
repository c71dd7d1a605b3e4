//! Test helpers: an in-memory [`RecordSink`] that keeps every batch and
//! checkpoint, with a switch that makes it answer `Full`.
#![allow(dead_code)]

use arrow::record_batch::RecordBatch;
use overtime_model::{
    gateway_records, rejected_records, span_records, Checkpoint, GatewayRecord, RecordSink,
    RejectedRecord, SinkError, SpanRecord, Table,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;
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
    /// `retry_after_ms` given with `Full`.
    pub retry_after_ms: AtomicU64,
    /// How many writes were answered `Full`.
    pub full_answers: AtomicU64,
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
