//! Reading inputs into the batch engine: one thread reads (and
//! decompresses) the files in order, in chunks of whole lines; every core
//! parses chunks and routes their records. Line numbers stay those of the
//! file, so a record's place in the input — and with it the result — does
//! not depend on which thread parsed it.

use super::OfflineError;
use super::files;
use super::progress::Progress;
use crate::{BatchError, Engine, Ingest, seq};
use overtime_model::{GatewayRows, RejectedRecord, SpanRecord};
use overtime_parse::record::{Decoder, RecordFormat, Records};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};

type Result<T> = std::result::Result<T, OfflineError>;

/// Bytes of text per chunk (a chunk ends at a line end).
const CHUNK: usize = 4 << 20;
/// Bytes kept from the start of a gateway log for the format check.
const HEAD: usize = 64 << 10;

/// One input file: its place in the input order and how to parse it.
pub struct Job {
    pub path: PathBuf,
    pub file: u32,
    pub format: RecordFormat,
}

/// What a file gave.
#[derive(Debug, Default, Clone)]
pub struct FileStats {
    pub records: usize,
    pub rejected: usize,
    pub reasons: BTreeMap<String, u64>,
    /// Some gateway row had a status or a request time.
    pub status_or_time: bool,
    /// The first rejected line: (line, raw text).
    pub first_rejected: Option<(u64, String)>,
    /// Why the first rejected record was rejected: (position, reason
    /// code, detail), e.g. (`line 3`, `bad_json`, `expected value …`).
    pub first_rejected_why: Option<(String, String, String)>,
    /// The start of the file's text (whole lines), for the format check.
    pub head: Vec<u8>,
}

impl FileStats {
    fn reject(&mut self, reason: &str, n: u64) {
        self.rejected += n as usize;
        *self.reasons.entry(reason.to_string()).or_default() += n;
    }

    fn first(&mut self, line: u64, raw: String, why: Option<(String, String, String)>) {
        if self.first_rejected.as_ref().is_none_or(|(l, _)| line < *l) {
            self.first_rejected = Some((line, raw));
            self.first_rejected_why = why;
        }
    }
}

struct Chunk {
    job: usize,
    data: Vec<u8>,
    first_line: u64,
}

/// Where parsed records go.
#[derive(Clone, Copy)]
pub enum Destination<'a> {
    /// Into the batch engine (`diagnose`).
    Engine(&'a Engine),
    /// Into memory, every record kept (`advise`, `whatif`).
    Memory(&'a Collector),
    /// Nowhere: parse and count (`--parse-only`).
    Nothing,
}

/// Records held in memory, each with its place in the input, so the
/// order of parsers finishing their chunks does not change the result.
#[derive(Default)]
pub struct Collector {
    gateway: Mutex<Vec<((u32, u64), arrow::record_batch::RecordBatch)>>,
    spans: Mutex<Vec<(crate::Seq, SpanRecord)>>,
}

impl Collector {
    /// The gateway batches and spans in input order (file, then line).
    pub fn into_input_order(self) -> (Vec<arrow::record_batch::RecordBatch>, Vec<SpanRecord>) {
        let mut g = self.gateway.into_inner().expect("collector lock");
        g.sort_by_key(|(k, _)| *k);
        let mut s = self.spans.into_inner().expect("collector lock");
        s.sort_by_key(|(k, _)| *k);
        (
            g.into_iter().map(|(_, b)| b).collect(),
            s.into_iter().map(|(_, r)| r).collect(),
        )
    }
}

/// Reads every job into `into` with `threads` parsers.
pub fn read_all(
    jobs: &[Job],
    into: Destination<'_>,
    threads: usize,
    progress: &Progress,
    cancel: &AtomicBool,
) -> Result<Vec<FileStats>> {
    let stats: Vec<Mutex<FileStats>> = jobs.iter().map(|_| Mutex::default()).collect();
    let (tx, rx) = sync_channel::<Chunk>(threads * 2);
    let rx = Mutex::new(rx);
    // Set when a parser fails: the reader stops, the others drain.
    let failed = AtomicBool::new(false);
    let stop = || failed.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<()> {
            let tx = tx;
            for (i, job) in jobs.iter().enumerate() {
                read_file(i, job, &stats[i], progress, &stop, &mut |c| {
                    tx.send(c).map_err(|_| OfflineError::Stopped)
                })?;
            }
            Ok(())
        });
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let _guard = DrainOnPanic {
                        rx: &rx,
                        failed: &failed,
                    };
                    let engine = match into {
                        Destination::Engine(e) => Some(e),
                        _ => None,
                    };
                    let held = match into {
                        Destination::Memory(c) => Some(c),
                        _ => None,
                    };
                    let mut ing = engine.map(Engine::ingest);
                    let r = parse_chunks(&rx, jobs, &stats, ing.as_mut(), held, progress);
                    let r = match &mut ing {
                        Some(ing) => r.and_then(|()| ing.flush().map_err(OfflineError::from)),
                        None => r,
                    };
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                        drain(&rx);
                    }
                    r
                })
            })
            .collect();
        let mut result = reader.join().expect("reader thread panicked");
        for w in workers {
            let r = w.join().expect("parser thread panicked");
            // A parser's own error says more than the reader's "stopped".
            if r.is_err() && (result.is_ok() || failed.load(Ordering::Relaxed)) {
                result = r;
            }
        }
        result
    })?;
    if cancel.load(Ordering::Relaxed) {
        return Err(BatchError::Interrupted.into());
    }
    Ok(stats
        .into_iter()
        .map(|m| m.into_inner().expect("stats lock"))
        .collect())
}

fn drain(rx: &Mutex<Receiver<Chunk>>) {
    loop {
        // A parser that panicked holding the lock poisons it; the queue
        // itself is still sound.
        let guard = rx.lock().unwrap_or_else(|p| p.into_inner());
        if guard.recv().is_err() {
            return;
        }
    }
}

/// A parser that panics stops the reader and keeps the queue moving, so
/// the run ends with the panic instead of hanging.
struct DrainOnPanic<'a> {
    rx: &'a Mutex<Receiver<Chunk>>,
    failed: &'a AtomicBool,
}

impl Drop for DrainOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.failed.store(true, Ordering::Relaxed);
            drain(self.rx);
        }
    }
}

/// Reads one file into chunks of whole lines.
fn read_file(
    idx: usize,
    job: &Job,
    stats: &Mutex<FileStats>,
    progress: &Progress,
    stop: &dyn Fn() -> bool,
    send: &mut dyn FnMut(Chunk) -> Result<()>,
) -> Result<()> {
    let mut r =
        files::open(&job.path, progress.read.clone()).map_err(|source| OfflineError::Read {
            path: job.path.clone(),
            source,
        })?;
    if !job.format.is_line_based() {
        // Not line-based: one message stream, parsed whole.
        let mut data = Vec::new();
        if let Err(e) = r.read_to_end(&mut data) {
            decode_error(stats, &job.path, &e);
        }
        progress
            .text
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        return send(Chunk {
            job: idx,
            data,
            first_line: 0,
        });
    }
    let mut carry: Vec<u8> = Vec::new();
    let mut line = 1u64;
    let mut first = true;
    loop {
        if stop() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut carry);
        buf.reserve(CHUNK);
        let want = CHUNK.saturating_sub(buf.len()).max(64 << 10);
        let eof = match (&mut r).take(want as u64).read_to_end(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => {
                decode_error(stats, &job.path, &e);
                true
            }
        };
        let end = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(k) => k + 1,
                // A line longer than a chunk: read on.
                None => {
                    carry = buf;
                    continue;
                }
            }
        };
        carry = buf[end..].to_vec();
        buf.truncate(end);
        if first {
            first = false;
            let gateway = job.format.nginx_log().is_some();
            if !gateway && buf.starts_with(b"\xef\xbb\xbf") {
                buf.drain(..3);
            }
            if gateway {
                let mut head = &buf[..buf.len().min(HEAD)];
                if let Some(k) = memchr::memrchr(b'\n', head) {
                    head = &head[..k + 1];
                }
                stats.lock().expect("stats lock").head = head.to_vec();
            }
        }
        let lines = memchr::memchr_iter(b'\n', &buf).count() as u64;
        progress.text.fetch_add(buf.len() as u64, Ordering::Relaxed);
        if !buf.is_empty() {
            send(Chunk {
                job: idx,
                data: buf,
                first_line: line,
            })?;
        }
        line += lines;
        progress.tick();
        if eof {
            return Ok(());
        }
    }
}

/// A file that stops decoding (a truncated `.gz`, a corrupt block):
/// what was read is kept, the error is counted and said.
fn decode_error(stats: &Mutex<FileStats>, path: &std::path::Path, e: &std::io::Error) {
    tracing::warn!(
        "overtime: {}: cannot decode the rest of the file ({e}); keeping what was read",
        path.display()
    );
    stats.lock().expect("stats lock").reject("decode_error", 1);
}

fn parse_chunks(
    rx: &Mutex<Receiver<Chunk>>,
    jobs: &[Job],
    stats: &[Mutex<FileStats>],
    mut ing: Option<&mut Ingest>,
    held: Option<&Collector>,
    progress: &Progress,
) -> Result<()> {
    loop {
        let chunk = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(c) => c,
            Err(_) => return Ok(()),
        };
        let job = &jobs[chunk.job];
        let source = job.path.display().to_string();
        let mut decoder = Decoder::new(&job.format, &source);
        decoder.push_bytes(&chunk.data, chunk.first_line);
        let decoded = decoder.finish();
        let mut local = FileStats::default();
        count_rejected(&mut local, decoded.rejected);
        let stats = &stats[chunk.job];
        match decoded.records {
            Records::Gateway(good) => {
                local.records = good.num_rows();
                progress
                    .lines
                    .fetch_add((local.records + local.rejected) as u64, Ordering::Relaxed);
                if let Some(ing) = ing.as_deref_mut() {
                    ing.gateway(&good, job.file)?;
                }
                let known = stats.lock().expect("stats lock").status_or_time;
                if !known {
                    local.status_or_time = GatewayRows::new(&good).is_ok_and(|r| {
                        (0..r.len())
                            .any(|i| r.status(i).is_some() || r.request_time_ms(i).is_some())
                    });
                }
                merge(stats, local);
                if let Some(c) = held {
                    c.gateway
                        .lock()
                        .expect("collector lock")
                        .push(((job.file, chunk.first_line), good));
                }
            }
            Records::Spans(spans) => {
                let n = spans.len() as u64;
                // A span's place: its line and its index among that line's
                // spans; a protobuf file is one message stream (line 0).
                let proto = !job.format.is_line_based();
                let mut sub = 0u32;
                let mut last_line = None;
                let mut keep = Vec::new();
                for s in spans {
                    let line = if proto { 0 } else { s.line };
                    sub = if last_line == Some(line) { sub + 1 } else { 0 };
                    last_line = Some(line);
                    let at = seq(job.file, line, sub);
                    if let Some(ing) = ing.as_deref_mut() {
                        ing.span(&s, at)?;
                    }
                    if held.is_some() {
                        keep.push((at, s));
                    }
                }
                if let Some(c) = held {
                    c.spans.lock().expect("collector lock").append(&mut keep);
                }
                local.records = n as usize;
                progress.spans.fetch_add(n, Ordering::Relaxed);
                merge(stats, local);
            }
        }
        progress.tick();
    }
}

fn count_rejected(local: &mut FileStats, rejected: Vec<RejectedRecord>) {
    for r in rejected {
        local.reject(&r.reason, 1);
        local.first(r.line, r.raw, Some((r.position, r.reason, r.detail)));
    }
}

fn merge(into: &Mutex<FileStats>, s: FileStats) {
    let mut t = into.lock().expect("stats lock");
    t.records += s.records;
    t.rejected += s.rejected;
    for (k, v) in s.reasons {
        *t.reasons.entry(k).or_default() += v;
    }
    t.status_or_time |= s.status_or_time;
    if let Some((l, raw)) = s.first_rejected {
        t.first(l, raw, s.first_rejected_why);
    }
}
