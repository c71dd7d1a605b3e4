//! The Kafka source over a store whose files every collector reads (a
//! bucket), against a real broker (tansu): offsets are committed at the
//! store's flush, so a collector killed with rows only in its memory loses
//! nothing — the partition's next owner reads them again — and a graceful
//! hand-over publishes first, so nothing is read twice. A collector killed
//! after a flush and before committing its offsets has published the
//! flush's positions with it: the next owner starts after them. With a
//! replay window, the next owner reads the window's messages before its
//! start again for the diagnosis only, storing none of them twice.

use crate::broker::{Running, WAIT, assert_exactly, config, produce, setup, start_with};
use crate::common::Broker;
use arrow::record_batch::RecordBatch;
use overtime_kafka::KafkaSourceConfig;
use overtime_model::{Checkpoint, CommitPoints, RecordSink, SinkError, Table};
use overtime_test_support::net::wait_until;
use overtime_test_support::sink::RecordingSink;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

type Row = (Table, RecordBatch, Option<Checkpoint>);

/// What every collector's flushes published with their rows: (source,
/// position), as the store's manifests in the bucket hold them.
type Published = Arc<Mutex<Vec<(String, String)>>>;

/// One collector's store in front of a shared bucket, in memory:
/// replayable writes wait in its memtable until [`Collector::flush`], which
/// writes them to the bucket, publishes their checkpoints and makes them
/// the commit points; [`Collector::crash`] loses the memtable, as kill -9
/// does; after [`Collector::hold_commits`] its commit points stop moving,
/// as when it dies right after a flush, before committing.
struct Collector {
    bucket: Arc<RecordingSink>,
    published: Published,
    memtable: Mutex<Vec<Row>>,
    checkpoints: Mutex<HashMap<String, String>>,
    flushed: Mutex<HashMap<String, String>>,
    held: Mutex<Option<HashMap<String, String>>>,
    crashed: AtomicBool,
    /// `CommitPoints::replay_window_ms` (0: none), and what was replayed.
    window_ms: std::sync::atomic::AtomicU64,
    replayed: Mutex<Vec<(Table, usize)>>,
}

impl Collector {
    fn new(bucket: &Arc<RecordingSink>, published: &Published) -> Arc<Self> {
        Arc::new(Collector {
            bucket: bucket.clone(),
            published: published.clone(),
            memtable: Mutex::default(),
            checkpoints: Mutex::default(),
            flushed: Mutex::default(),
            held: Mutex::default(),
            crashed: AtomicBool::new(false),
            window_ms: Default::default(),
            replayed: Mutex::default(),
        })
    }

    /// The memtable to the bucket; the checkpoints as of now are published
    /// and become the commit points.
    fn flush(&self) {
        if self.crashed.load(SeqCst) {
            return;
        }
        let rows = std::mem::take(&mut *self.memtable.lock().unwrap());
        let checkpoints = self.checkpoints.lock().unwrap().clone();
        for (table, batch, _) in rows {
            self.bucket.write(table, batch, None).unwrap();
        }
        self.published
            .lock()
            .unwrap()
            .extend(checkpoints.iter().map(|(s, p)| (s.clone(), p.clone())));
        *self.flushed.lock().unwrap() = checkpoints;
    }

    /// From now on no commit point moves: the flushes that follow are
    /// never committed.
    fn hold_commits(&self) {
        *self.held.lock().unwrap() = Some(self.flushed.lock().unwrap().clone());
    }

    fn crash(&self) {
        self.crashed.store(true, SeqCst);
        self.memtable.lock().unwrap().clear();
    }

    fn unflushed_rows(&self) -> usize {
        self.memtable
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b, _)| b.num_rows())
            .sum()
    }
}

impl RecordSink for Collector {
    fn write(&self, _: Table, _: RecordBatch, _: Option<Checkpoint>) -> Result<(), SinkError> {
        panic!("a Kafka source in front of a bucket writes replayable batches");
    }

    fn write_replayable(
        &self,
        table: Table,
        batch: RecordBatch,
        checkpoint: Option<Checkpoint>,
    ) -> Result<(), SinkError> {
        if self.crashed.load(SeqCst) {
            return Err(SinkError::Failed("the collector is dead".into()));
        }
        if let Some(c) = &checkpoint {
            let mut cps = self.checkpoints.lock().unwrap();
            cps.insert(c.source.clone(), c.position.clone());
        }
        self.memtable
            .lock()
            .unwrap()
            .push((table, batch, checkpoint));
        Ok(())
    }

    fn checkpoint(&self, source: &str) -> Option<String> {
        self.checkpoints.lock().unwrap().get(source).cloned()
    }
}

impl CommitPoints for Collector {
    fn commit_point(&self, source: &str) -> Option<String> {
        if let Some(held) = &*self.held.lock().unwrap() {
            return held.get(source).cloned();
        }
        self.flushed.lock().unwrap().get(source).cloned()
    }

    fn shared_checkpoints(&self) -> Result<Vec<Checkpoint>, SinkError> {
        let published = self.published.lock().unwrap();
        Ok(published
            .iter()
            .map(|(source, position)| Checkpoint {
                source: source.clone(),
                position: position.clone(),
            })
            .collect())
    }

    fn publish(&self) -> Result<(), SinkError> {
        if self.crashed.load(SeqCst) {
            return Err(SinkError::Failed("the collector is dead".into()));
        }
        self.flush();
        Ok(())
    }

    fn replay_window_ms(&self) -> u64 {
        self.window_ms.load(SeqCst)
    }

    fn replay(&self, table: Table, batch: RecordBatch) {
        self.replayed
            .lock()
            .unwrap()
            .push((table, batch.num_rows()));
    }
}

/// Flushes `c` until the bucket holds `n` requests and `3n` spans.
fn flush_until(c: &Collector, n: usize, running: &Running) {
    let stats = running.source.stats().clone();
    wait_until(
        WAIT,
        &format!("{n} requests and {} spans in the bucket", 3 * n),
        || {
            c.flush();
            let s = c.bucket.seen();
            s.requests.len() >= n && s.spans.len() >= 3 * n
        },
        || format!("{:?}; last error {:?}", c.bucket.seen(), stats.last_error()),
    );
}

/// A broker with the topics of `prefix`, the source's config (group
/// `overtime-<prefix>`), an empty bucket and nothing published.
struct Setup {
    prefix: &'static str,
    broker: Broker,
    cfg: KafkaSourceConfig,
    bucket: Arc<RecordingSink>,
    published: Published,
}

impl Setup {
    fn new(prefix: &'static str) -> Setup {
        let broker = setup(prefix);
        let cfg = config(&broker, &format!("overtime-{prefix}"), prefix);
        Setup {
            prefix,
            broker,
            cfg,
            bucket: Arc::new(RecordingSink::new()),
            published: Published::default(),
        }
    }

    fn collector(&self) -> Arc<Collector> {
        Collector::new(&self.bucket, &self.published)
    }

    /// Collector A reads 0..30 and flushes them; its commits follow the
    /// flush. Returns its store, its source and how many commits it made.
    fn first_collector(&self) -> (Arc<Collector>, Running, u64) {
        produce(&self.broker, self.prefix, 0..30);
        let a_store = self.collector();
        let a = start_with(&self.cfg, a_store.clone());
        flush_until(&a_store, 30, &a);
        // The run loop looks at the commit points every 50 ms.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let commits = a.source.stats().commits().0;
        (a_store, a, commits)
    }
}

#[test]
fn a_collector_killed_before_its_flush_loses_nothing_and_a_hand_over_reads_nothing_twice() {
    let prefix = "bucket";
    let t = Setup::new(prefix);
    let (broker, cfg, bucket) = (&t.broker, &t.cfg, &t.bucket);
    let (a_store, a, commits) = t.first_collector();
    assert!(
        commits > 0,
        "a flush moves the commit points, which are committed"
    );

    // 30..45 reach A's memtable, not the bucket; then A dies.
    produce(broker, prefix, 30..45);
    wait_until(
        WAIT,
        "30..45 (15 requests, 45 spans) in A's memtable",
        || a_store.unflushed_rows() >= 15 + 45,
        || format!("{} rows unflushed", a_store.unflushed_rows()),
    );
    assert_eq!(
        a.source.stats().commits().0,
        commits,
        "nothing unflushed is committed"
    );
    a_store.crash();
    a.stop();

    // B takes the group over from the commit points: it reads again what A
    // lost, and nothing the bucket holds.
    let b_store = t.collector();
    let b = start_with(cfg, b_store.clone());
    flush_until(&b_store, 45, &b);

    // A graceful hand-over (B stops with rows unflushed): B publishes
    // before it commits, and C reads nothing twice.
    produce(broker, prefix, 45..60);
    wait_until(
        WAIT,
        "B's memtable holds 45..60",
        || b_store.unflushed_rows() >= 15 + 45,
        || format!("{} rows unflushed", b_store.unflushed_rows()),
    );
    b.stop();
    produce(broker, prefix, 60..70);
    let c_store = t.collector();
    let c = start_with(cfg, c_store.clone());
    flush_until(&c_store, 70, &c);
    std::thread::sleep(std::time::Duration::from_secs(1));
    c_store.flush();
    c.stop();
    assert_exactly(bucket, 70);
}

#[test]
fn a_collector_killed_between_its_flush_and_its_commit_has_nothing_read_twice() {
    let prefix = "flushed";
    let t = Setup::new(prefix);
    let (broker, cfg, bucket) = (&t.broker, &t.cfg, &t.bucket);
    let (a_store, a, commits) = t.first_collector();

    // 30..45 are flushed to the bucket, and A dies before committing them.
    a_store.hold_commits();
    produce(broker, prefix, 30..45);
    flush_until(&a_store, 45, &a);
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(
        a.source.stats().commits().0,
        commits,
        "the group's offsets are still those of 0..30"
    );
    a_store.crash();
    a.stop();

    // B starts after what A published, not at the group's offsets.
    produce(broker, prefix, 45..55);
    let b_store = t.collector();
    let b = start_with(cfg, b_store.clone());
    flush_until(&b_store, 55, &b);
    std::thread::sleep(std::time::Duration::from_secs(1));
    b_store.flush();
    let seeks = b.source.stats().checkpoint_seeks();
    b.stop();
    assert_exactly(bucket, 55);
    assert!(
        seeks >= 1,
        "B started past the group's offsets, from a published position"
    );
}

#[test]
fn a_new_owner_reads_its_replay_window_again_for_the_diagnosis_only_and_stores_nothing_twice() {
    let prefix = "replayed";
    let t = Setup::new(prefix);
    let (broker, cfg, bucket) = (&t.broker, &t.cfg, &t.bucket);
    // A stores and commits 0..30, then dies: what it had not judged yet
    // went with it.
    let (a_store, a, _) = t.first_collector();
    a_store.crash();
    a.stop();

    // B, with a window reaching before all of it, starts storing where A
    // stopped and hands 0..30 to its diagnosis alone.
    let b_store = t.collector();
    b_store.window_ms.store(600_000, SeqCst);
    produce(broker, prefix, 30..40);
    let b = start_with(cfg, b_store.clone());
    flush_until(&b_store, 40, &b);
    let replayed = |table| -> usize {
        b_store
            .replayed
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == table)
            .map(|(_, n)| n)
            .sum()
    };
    wait_until(
        WAIT,
        "0..30 (30 requests, 90 spans) replayed to B's diagnosis",
        || replayed(Table::GatewayRequests) == 30 && replayed(Table::Spans) == 90,
        || format!("{:?}", b_store.replayed.lock().unwrap()),
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    b_store.flush();
    let stats = b.source.stats().clone();
    b.stop();
    assert_exactly(bucket, 40);
    assert_eq!(
        stats.replayed(),
        30 * 3,
        "every message of 0..30 (three topics), counted"
    );
    assert_eq!(
        (replayed(Table::GatewayRequests), replayed(Table::Spans)),
        (30, 90),
        "nothing past where B stores is replayed"
    );
}
