//! A [`RecordSink`] for tests of the sources (file tail, OTLP receivers,
//! Kafka): it keeps every accepted write and checkpoint in memory, and can
//! push back on command.
//!
//! Rules:
//! - A write is durable the moment it is accepted: what a source sees as
//!   written is in [`RecordingSink::recorded`], checkpoint and batch
//!   together (one lock), so a reader never sees a checkpoint without its
//!   batch.
//! - Pushing back is the test's decision ([`RecordingSink::set_full`],
//!   [`RecordingSink::full_for`], [`RecordingSink::set_early_full`]); a
//!   refused write stores nothing and is counted.

use arrow::record_batch::RecordBatch;
use overtime_model::{
    Checkpoint, CommitPoints, GatewayRecord, RecordSink, RejectedRecord, SinkError, SpanRecord,
    Table, gateway_records, rejected_records, span_records,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One accepted write.
#[derive(Clone)]
pub struct Write {
    /// The table written to.
    pub table: Table,
    /// The rows.
    pub batch: RecordBatch,
    /// The source position stored with them.
    pub checkpoint: Option<Checkpoint>,
}

/// Everything a [`RecordingSink`] holds.
#[derive(Default)]
pub struct Recorded {
    /// Every accepted write, in order.
    pub writes: Vec<Write>,
    /// The last checkpoint of each source: source → position.
    pub checkpoints: HashMap<String, String>,
}

/// A [`RecordSink`] in memory that records every write (see the module).
pub struct RecordingSink {
    recorded: Mutex<Recorded>,
    full: AtomicBool,
    full_for: AtomicU64,
    early: AtomicBool,
    /// `retry_after_ms` given with `Full` and with early backpressure (50
    /// unless set).
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

impl Default for RecordingSink {
    fn default() -> Self {
        RecordingSink {
            recorded: Mutex::default(),
            full: AtomicBool::new(false),
            full_for: AtomicU64::new(0),
            early: AtomicBool::new(false),
            retry_after_ms: AtomicU64::new(50),
            full_answers: AtomicU64::new(0),
            early_asks: AtomicU64::new(0),
            write_delay_ms: AtomicU64::new(0),
            in_write: AtomicU64::new(0),
            max_in_write: AtomicU64::new(0),
        }
    }
}

impl RecordingSink {
    /// An empty sink that accepts every write.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answer `Full` (and store nothing) while `on`.
    pub fn set_full(&self, on: bool) {
        self.full.store(on, SeqCst);
    }

    /// Answer `Full` to the next `n` writes, then accept again.
    pub fn full_for(&self, n: u64) {
        self.full_for.store(n, SeqCst);
    }

    /// Push back early ([`RecordSink::backpressure`]) while `on`.
    pub fn set_early_full(&self, on: bool) {
        self.early.store(on, SeqCst);
    }

    /// What the sink holds, locked: writes and checkpoints (a test may also
    /// change them, as a store restored from elsewhere would hold them).
    pub fn recorded(&self) -> MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap()
    }

    /// Every accepted write, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.recorded().writes.clone()
    }

    fn batches(&self, table: Table) -> Vec<RecordBatch> {
        self.recorded()
            .writes
            .iter()
            .filter(|w| w.table == table)
            .map(|w| w.batch.clone())
            .collect()
    }

    /// Every `gateway_requests` row written.
    pub fn gateway(&self) -> Vec<GatewayRecord> {
        self.batches(Table::GatewayRequests)
            .iter()
            .flat_map(|b| gateway_records(b).unwrap())
            .collect()
    }

    /// Every `spans` row written.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.batches(Table::Spans)
            .iter()
            .flat_map(|b| span_records(b).unwrap())
            .collect()
    }

    /// Every `rejected` row written.
    pub fn rejected(&self) -> Vec<RejectedRecord> {
        self.batches(Table::Rejected)
            .iter()
            .flat_map(|b| rejected_records(b).unwrap())
            .collect()
    }

    /// How many rows of `table` were written.
    pub fn rows(&self, table: Table) -> usize {
        self.batches(table).iter().map(|b| b.num_rows()).sum()
    }

    /// The identities of the rows written, each with how often it was.
    pub fn seen(&self) -> Seen {
        let mut seen = Seen::default();
        for r in self.gateway() {
            *seen
                .requests
                .entry(r.request_id.unwrap_or_default())
                .or_default() += 1;
        }
        for r in self.spans() {
            *seen.spans.entry(r.span_id).or_default() += 1;
        }
        seen.rejected = self.rejected();
        seen
    }
}

impl RecordSink for RecordingSink {
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
        let counted_down = self
            .full_for
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if self.full.load(SeqCst) || counted_down {
            self.full_answers.fetch_add(1, SeqCst);
            return Err(SinkError::Full {
                retry_after_ms: self.retry_after_ms.load(SeqCst),
            });
        }
        let mut recorded = self.recorded();
        if let Some(cp) = &checkpoint {
            recorded
                .checkpoints
                .insert(cp.source.clone(), cp.position.clone());
        }
        recorded.writes.push(Write {
            table,
            batch,
            checkpoint,
        });
        Ok(())
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.recorded().checkpoints.get(source).cloned()
    }

    fn backpressure(&self) -> Option<u64> {
        self.early_asks.fetch_add(1, SeqCst);
        self.early
            .load(SeqCst)
            .then(|| self.retry_after_ms.load(SeqCst))
    }
}

/// A sink with nothing shared: a source commits at the recorded
/// checkpoint (the defaults).
impl CommitPoints for RecordingSink {}

/// The identities of what a sink holds, each with how often it was seen.
#[derive(Default, Debug)]
pub struct Seen {
    /// Gateway rows by `$request_id`.
    pub requests: BTreeMap<String, u32>,
    /// Spans by span id.
    pub spans: BTreeMap<String, u32>,
    /// The rejected rows.
    pub rejected: Vec<RejectedRecord>,
}

impl Seen {
    /// Ids seen more than once, as `id ×n`.
    pub fn duplicates(&self) -> Vec<String> {
        self.requests
            .iter()
            .chain(&self.spans)
            .filter(|&(_, &n)| n > 1)
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect()
    }
}
