//! # overtime-batch
//!
//! The batch engine of `overtime diagnose`: any amount of gateway lines
//! and spans, in any order, diagnosed in bounded memory on every core,
//! with the same result as the in-memory run
//! ([`overtime_diagnose::diagnose_tables`]) — the same join, assembly and
//! passes, run partition by partition (see docs/diagnose-at-scale.md).
//! This crate owns what that takes and the pure `overtime-diagnose` must
//! not have: the temp dir and its files, the worker threads, the clock of
//! `OVERTIME_PROFILE` — and what feeds it, the [`offline`] inputs of
//! `overtime diagnose`, `advise` and `whatif` (files, globs of rotated
//! logs, `.gz` / `.zst`, the progress bar, the format check).
//!
//! 1. **Route** (parallel, as the caller parses): each record goes to the
//!    partition of its join key — the trace id; a gateway row that has only
//!    a request id goes, with every (request id → trace) link that spans
//!    and other layers give, to the partition of the request id.
//!    Partitions are held in memory up to a budget, then spilled to one
//!    file each in a temp dir (a grace hash join).
//! 2. **Resolve**: each request-id partition joins its rows to their trace
//!    by the one join ([`overtime_diagnose::join`]) and moves them to the
//!    trace's partition.
//! 3. **Diagnose** (parallel, one partition per worker; a partition over
//!    its share of memory is split again by other hash bits): assembly
//!    ([`overtime_diagnose::assemble::assemble_sorted`]), then the passes
//!    ([`overtime_diagnose::passes`]). A request the first pass cannot
//!    judge yet waits, set aside, until the whole run is seen
//!    ([`revisit`]); then it is judged with the final timeouts and book.
//! 4. **Merge**: verdicts in (start, trace id) order, incidents from the
//!    failing traces and a stream of every trace's compact summary.

#![warn(missing_docs)]

mod codec;
mod gateway_wire;
mod in_memory;
mod ingest;
mod lean;
pub mod offline;
mod partition;
mod pass;
mod results;
mod revisit;
use revisit::PassCtx;
mod spill;
mod spill_file;

pub use codec::{Seq, seq};
pub use in_memory::ingest_in_memory;
pub use ingest::Ingest;
pub use lean::RefetchHook;
pub use results::Verdicts;

use codec::{GwHead, In, LINK, Out, RID_ROW, SPAN, WireHead, close_len, open_len};
use gateway_wire::GatewayWire;
use overtime_diagnose::assemble::{AssemblyStats, Key, hex128};
use overtime_diagnose::passes::{Judge, LayerSamples, Pass};
use overtime_diagnose::phasebook::PhaseBook;
use overtime_diagnose::verdict::TraceSummary;
use overtime_diagnose::{BucketRow, DiagnoseConfig, IncidentReport, LayerTimeout, Trace};
use overtime_model::{GatewayRows, SpanRecord, Verdict};
use results::Collector;
use spill::{Partitions, SpillDir, key_hash, part_of, str_hash};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What can stop a batch run.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A spill file or the temp dir could not be written or read.
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The spill dir could not be made (why, in words).
    #[error("{0}")]
    Spill(String),
    /// A spill file read back is not what was written.
    #[error(transparent)]
    Corrupt(#[from] codec::Corrupt),
    /// An Arrow batch given lacks a column of its table, or has it in
    /// another type.
    #[error(transparent)]
    Model(#[from] overtime_model::ModelError),
    /// The verdicts could not be written out.
    #[error("writing the output: {0}")]
    Output(std::io::Error),
    /// An input could not be read again as it was read the first time
    /// (lean rows, [`BatchOptions::refetch`]).
    #[error("{0}")]
    Input(String),
    /// [`BatchOptions::cancel`] was set.
    #[error("interrupted")]
    Interrupted,
}

impl BatchError {
    /// An [`BatchError::Io`] on `path`.
    pub(crate) fn io(path: &Path, error: std::io::Error) -> Self {
        BatchError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// A trace as diagnosed, for callers that want more than the verdicts
/// (`advise`, `whatif`): called once per request that needed a verdict.
pub type TraceHook = Arc<dyn Fn(&Trace, &TraceSummary, Option<&Verdict>) + Send + Sync>;

/// Progress of the steps after reading: (step, done, total).
pub type ProgressHook = Arc<dyn Fn(&'static str, u64, u64) + Send + Sync>;

/// How a batch run may use the machine.
#[derive(Clone)]
pub struct BatchOptions {
    /// Bytes the run keeps in memory at most (beyond: spilled to disk).
    pub memory_limit: usize,
    /// Worker threads for assembly and verdicts.
    pub threads: usize,
    /// Where the temp dir goes (default: the system's temp dir).
    pub spill_dir: Option<PathBuf>,
    /// Spill files as LZ4 frames: half the bytes to disk for about a
    /// sixth more CPU; worth it when the input and the spill would not
    /// stay in the page cache (default: plain).
    pub compress_spill: bool,
    /// The input's size, decompressed, as far as known: sizes partitions.
    pub input_bytes_hint: u64,
    /// Set to stop the run ([`BatchError::Interrupted`]).
    pub cancel: Arc<AtomicBool>,
    /// Told the progress of the steps after reading; `None`: nobody.
    pub progress: Option<ProgressHook>,
    /// Shown every request that needed a verdict; `None`: nobody.
    pub on_trace: Option<TraceHook>,
    /// Reads gateway rows back from the input by (file, line). Given,
    /// healthy rows are routed as their head alone once every span was
    /// read ([`Engine::spans_read`]), and read back only for a request
    /// that needs a verdict ([`RefetchHook`]). `None`: every row whole.
    pub refetch: Option<RefetchHook>,
    /// Bytes of span input, decompressed, as far as known: sizes the
    /// filter of the traces that have spans.
    pub span_bytes_hint: u64,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            memory_limit: usize::MAX / 4,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            spill_dir: None,
            compress_spill: false,
            input_bytes_hint: 0,
            cancel: Arc::new(AtomicBool::new(false)),
            progress: None,
            on_trace: None,
            refetch: None,
            span_bytes_hint: 0,
        }
    }
}

#[derive(Default)]
struct Shared {
    samples: LayerSamples,
    stats: AssemblyStats,
}

/// A batch run. Feed it through [`Engine::ingest`] handles (one per
/// thread), then [`Engine::finish`].
pub struct Engine {
    cfg: DiagnoseConfig,
    opts: BatchOptions,
    /// Trace partitions `0..n`, request-id partitions `n..2n`.
    parts: Partitions,
    n: usize,
    /// Shared with the output, whose spilled verdicts live in it.
    spill: Arc<SpillDir>,
    shared: Mutex<Shared>,
    /// Lean rows, when the input can be read back ([`lean`]).
    lean: Option<lean::Lean>,
    /// Requests waiting for the layers' final timeouts ([`revisit`]).
    revisit: revisit::Revisit,
    /// The model servers' phase histograms, when given: finished calls
    /// beside those the first pass sees ([`Engine::with_server_metrics`]).
    book: PhaseBook,
    /// The model servers' metrics, when given ([`Engine::with_server_metrics`]).
    metrics: Option<overtime_diagnose::server_metrics::ServerMetrics>,
}

/// Encoded bytes a partition may hold for one worker to assemble it.
fn partition_target(limit: usize, threads: usize) -> u64 {
    // Decoded spans and gateway rows take ~4x their encoded size.
    ((limit as u64 * 2 / 5) / threads.max(1) as u64 / 5).max(64 << 10)
}

impl Engine {
    /// A run of `cfg` within `opts`' memory and threads; its temp dir is
    /// made only if it spills.
    pub fn new(cfg: DiagnoseConfig, opts: BatchOptions) -> Self {
        let target = partition_target(opts.memory_limit, opts.threads);
        // Encoded records are ~0.8x the text they came from.
        let est = opts.input_bytes_hint.saturating_mul(4) / 5;
        let n = (est / target + 1)
            .next_power_of_two()
            .clamp(4 * opts.threads.max(1) as u64, 4096) as usize;
        let budget = (opts.memory_limit / 2).max(16 << 10);
        let lean = opts
            .refetch
            .clone()
            .filter(|_| !cfg.all_verdicts)
            .map(|hook| lean::Lean::new(hook, opts.span_bytes_hint, opts.memory_limit, n));
        Engine {
            lean,
            revisit: revisit::Revisit::new(n, budget),
            book: PhaseBook::default(),
            metrics: None,
            parts: Partitions::new("p", 2 * n, budget),
            n,
            spill: Arc::new(SpillDir::new(opts.spill_dir.clone(), opts.compress_spill)),
            shared: Mutex::new(Shared::default()),
            cfg,
            opts,
        }
    }

    /// Reads the model servers' metrics beside the logs: their phase
    /// histograms count as finished calls for the phase of cut ones, their
    /// queue depth and KV-cache use go into the incidents' statistics.
    pub fn with_server_metrics(
        mut self,
        m: overtime_diagnose::server_metrics::ServerMetrics,
    ) -> Self {
        self.book.merge(&m.phase_book());
        self.metrics = Some(m);
        self
    }

    /// Every span has been routed: from now on healthy gateway rows may
    /// be routed lean ([`BatchOptions::refetch`]). Spans routed later are
    /// still right, only more rows are read back.
    pub fn spans_read(&self) {
        if let Some(l) = &self.lean {
            l.seal();
        }
    }

    /// Whether any data went to disk so far.
    pub fn spilled(&self) -> bool {
        self.spill.used()
    }

    fn check_cancel(&self) -> Result<(), BatchError> {
        if self.opts.cancel.load(Ordering::Relaxed) {
            Err(BatchError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// A handle that routes records; each thread takes its own.
    pub fn ingest(&self) -> Ingest<'_> {
        Ingest {
            engine: self,
            local: vec![Vec::new(); 2 * self.n],
            local_bytes: 0,
            samples: LayerSamples::default(),
            stats: AssemblyStats::default(),
        }
    }

    /// Resolves, assembles, diagnoses and merges.
    pub fn finish(self) -> Result<BatchOutput, BatchError> {
        let mut timings = Vec::new();
        let mut clock = std::time::Instant::now();
        let mut lap = |name: &'static str, t: &mut Vec<(&'static str, std::time::Duration)>| {
            t.push((name, clock.elapsed()));
            clock = std::time::Instant::now();
        };
        self.resolve_request_ids()?;
        lap("resolve request ids", &mut timings);
        let shared = std::mem::take(&mut *self.shared.lock().expect("engine lock"));
        // From configuration and 504s; requests whose verdicts depend on
        // the cut streams too wait for the final ones (revisit.rs).
        let timeouts = shared.samples.timeouts(&BTreeMap::new(), &self.cfg);
        let collector = Mutex::new(Collector::new(self.opts.memory_limit / 10));
        let no_book = PhaseBook::default();
        let done = AtomicUsize::new(0);
        let cx = PassCtx {
            judge: Judge {
                cfg: &self.cfg,
                timeouts: &timeouts,
                pass: Pass::First,
                book: &no_book,
            },
            collector: &collector,
            target: partition_target(self.opts.memory_limit, self.opts.threads),
        };
        self.each_partition(
            0..self.n,
            || (),
            |(), p| {
                self.diagnose_partition(&self.parts, p, 0, &cx)?;
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(progress) = &self.opts.progress {
                    progress("diagnose", d as u64, self.n as u64);
                }
                Ok(())
            },
        )?;
        lap("assemble and verdicts", &mut timings);
        // Requests that waited for lean rows' bodies: read back, then
        // diagnosed as any other (lean.rs).
        if self.refetch()? {
            lap("read rows back", &mut timings);
            let deferred = &self
                .lean
                .as_ref()
                .expect("lean rows were read back")
                .deferred;
            self.each_partition(
                0..self.n,
                || (),
                |(), p| self.diagnose_partition(deferred, p, 0, &cx),
            )?;
            if self.refetch()? {
                return Err(codec::Corrupt("a request waited twice for its rows").into());
            }
            lap("verdicts of read-back rows", &mut timings);
        }
        // Every layer's timeout from its 504s and the streams it cut; the
        // requests that waited for it diagnosed with it.
        let learned = self.revisit.take_learned();
        let timeouts = shared.samples.timeouts(&learned.cuts, &self.cfg);
        let mut book = self.book.clone();
        book.merge(&learned.book);
        // Calls whose server answered in a trace of its own count as
        // finished calls of their model (answers.rs).
        book.settle();
        if self.diagnose_set_aside(&PassCtx {
            judge: Judge {
                timeouts: &timeouts,
                pass: Pass::Final,
                book: &book,
                ..cx.judge
            },
            ..cx
        })? {
            lap("verdicts that waited for the timeouts", &mut timings);
        }
        let mut c = collector.into_inner().expect("collector lock");
        overtime_diagnose::tally::sort_failing(&mut c.failing);
        let stream = c.take_summaries();
        let (mut incidents, latency) = overtime_diagnose::tally::incidents_and_latency(
            &c.failing,
            c.data_end,
            &self.cfg,
            |visit| results::read_summaries(stream, visit),
        )?;
        if let Some(m) = &self.metrics {
            m.annotate(&mut incidents);
        }
        lap("incidents", &mut timings);
        let mut stats = shared.stats;
        stats.spans_in = c.stats.spans_in;
        stats.duplicate_spans = c.stats.duplicate_spans;
        Ok(BatchOutput {
            incidents,
            latency,
            stats,
            summaries_len: c.n_summaries,
            failed: c.failed,
            unknown_count: c.unknown_count,
            unknown: c
                .unknown
                .iter()
                .map(|(_, id, s)| (id.clone(), s.clone()))
                .collect(),
            timeouts,
            timings,
            spilled: self.spill.used(),
            verdicts: c.into_verdicts(self.spill.clone()),
        })
    }

    /// Runs `work` on each partition of `parts`, one at a time per worker
    /// (`--threads` of them), each worker with its own `state`, made by
    /// `init`; the states come back when every partition is done, or the
    /// first error (a cancelled run's too).
    fn each_partition<S: Send>(
        &self,
        parts: std::ops::Range<usize>,
        init: impl Fn() -> S + Sync,
        work: impl Fn(&mut S, usize) -> Result<(), BatchError> + Sync,
    ) -> Result<Vec<S>, BatchError> {
        let next = AtomicUsize::new(parts.start);
        let workers = self.opts.threads.clamp(1, parts.len().max(1));
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| -> Result<S, BatchError> {
                        let mut state = init();
                        loop {
                            let p = next.fetch_add(1, Ordering::Relaxed);
                            if p >= parts.end {
                                return Ok(state);
                            }
                            self.check_cancel()?;
                            work(&mut state, p)?;
                        }
                    })
                })
                .collect();
            let mut states = Vec::with_capacity(workers);
            let mut first_error = None;
            for h in handles {
                match h.join().expect("partition worker panicked") {
                    Ok(state) => states.push(state),
                    Err(e) => drop(first_error.get_or_insert(e)),
                }
            }
            first_error.map_or(Ok(states), Err)
        })
    }

    /// Step 2: request-id partitions → rows moved to their traces, a
    /// partition per worker at a time (each partition is sized for one
    /// worker, as in step 3; where rows land never depends on which
    /// worker moved them, since assembly orders records by their place).
    fn resolve_request_ids(&self) -> Result<(), BatchError> {
        let workers = self.each_partition(
            self.n..2 * self.n,
            || (AssemblyStats::default(), vec![Vec::new(); 2 * self.n]),
            |(joined, local), p| self.resolve_partition(p, local, joined),
        )?;
        let mut joined = AssemblyStats::default();
        for (j, _) in workers {
            joined.merge(&j);
        }
        let mut sh = self.shared.lock().expect("engine lock");
        sh.stats.merge(&joined);
        Ok(())
    }

    /// Step 2 for request-id partition `p`: its rows resolved and routed
    /// through `local` to their trace partitions, counted in `joined`.
    fn resolve_partition(
        &self,
        p: usize,
        local: &mut [Vec<u8>],
        joined: &mut AssemblyStats,
    ) -> Result<(), BatchError> {
        if self.parts.size(p) == 0 {
            return Ok(());
        }
        let bufs = self.parts.take(p, &self.spill)?;
        let mut links = overtime_diagnose::join::RequestIds::default();
        let mut rows: Vec<(Seq, codec::Rid, &[u8])> = Vec::new();
        spill::for_each_record_in(&bufs, |r| {
            let mut i = In::new(r);
            match i.u8()? {
                LINK => {
                    let rid = i.rid()?;
                    let at_us = i.zig()?;
                    let key = i.key()?;
                    match (i.u8()?, key) {
                        (1, k) => drop(links.bind_span(rid, at_us, k)),
                        (_, Key::Trace(t)) => drop(links.bind_line(rid, at_us, t)),
                        (_, Key::Other(_)) => return Err(codec::Corrupt("link").into()),
                    }
                }
                RID_ROW => {
                    let seq = i.seq()?;
                    let rid = i.rid()?;
                    rows.push((seq, rid, i.body()?));
                }
                _ => return Err(codec::Corrupt("request-id record").into()),
            }
            Ok(())
        })?;
        for (seq, rid, body) in rows {
            let (key, how) = links.resolve(&rid, &rid.text());
            joined.count_join(how);
            let buf = &mut local[part_of(key_hash(&key), 0, self.n)];
            let at = open_len(buf);
            let mut o = Out(buf);
            let head = GwHead::of_body(body)?;
            let lean = self.lean.as_ref();
            if !head.failed() && lean.is_some_and(|l| l.row_may_be_lean(&key)) {
                o.lean_row(seq, &key, &head);
            } else {
                o.gateway_row(seq, &key, 0, |b| b.extend_from_slice(body));
            }
            close_len(buf, at);
        }
        self.parts.absorb(local, &self.spill)
    }
}

/// The result of a batch run.
pub struct BatchOutput {
    /// Failing traces grouped by (kind, component), with their reports.
    pub incidents: Vec<IncidentReport>,
    /// LLM latency by input-token bucket over all traces.
    pub latency: Vec<BucketRow>,
    /// How the records were joined into traces.
    pub stats: AssemblyStats,
    /// Requests seen.
    pub summaries_len: usize,
    /// Verdicts whose outcome is not `ok`.
    pub failed: usize,
    /// Failing verdicts with root cause `unknown`, and the first few of
    /// them in output order: (trace id, summary).
    pub unknown_count: usize,
    /// The first of them: (trace id, summary).
    pub unknown: Vec<(String, String)>,
    /// Each gateway layer's read timeout, configured or inferred, by
    /// layer name (no entry: neither).
    pub timeouts: BTreeMap<String, LayerTimeout>,
    /// Wall time of each phase, for `OVERTIME_PROFILE`.
    pub timings: Vec<(&'static str, std::time::Duration)>,
    /// Whether the run used its temp dir.
    pub spilled: bool,
    /// Every verdict, in (start, trace id) order, read from memory or
    /// the spill files.
    pub verdicts: Verdicts,
}
