//! What pass 2 gives, gathered from partitions finishing in any order and
//! merged so the output is the same whatever the order: verdicts as sorted
//! runs (in memory, or spilled as JSON in LZ4 frames when over budget) merged by
//! (start, trace id) on output; failing traces (slimmed to what incident
//! reports read); every trace's summary as a compact stream.

use crate::BatchError;
use crate::codec::{In, Out};
use crate::spill::{SpillDir, Stream, frame};
use crate::spill_file::{SpillReader, SpillWriter, open_frames};
use overtime_diagnose::assemble::AssemblyStats;
use overtime_diagnose::tally::{Failing, failing, order};
use overtime_diagnose::verdict::TraceSummary;
use overtime_diagnose::{SummaryLite, bucket_of};
use overtime_model::{Outcome, RootCauseKind, Timestamp, Verdict};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{Read, Write};
use std::path::PathBuf;

/// Failing verdicts with too little data shown in the report, at most.
pub const UNKNOWN_SHOWN: usize = 10;

/// One partition's results.
#[derive(Default)]
pub struct PartOut {
    pub verdicts: Vec<Verdict>,
    pub failing: Vec<Failing>,
    pub summaries: Vec<u8>,
    pub n_summaries: usize,
    pub data_end: i64,
    pub stats: AssemblyStats,
}

impl PartOut {
    /// Puts the verdicts in output order (before [`Collector::add`]).
    pub fn sort(&mut self) {
        self.verdicts.sort_by(|a, b| order(a).cmp(&order(b)));
    }

    /// Files one trace's summary and verdict.
    pub fn add(&mut self, s: TraceSummary, v: Option<Verdict>) {
        self.n_summaries += 1;
        self.data_end = self.data_end.max(s.end_us);
        encode_summary(&mut self.summaries, &s);
        if let Some(v) = v {
            if v.outcome != Outcome::Ok {
                self.failing.push(failing(&v, s));
            }
            self.verdicts.push(v);
        }
    }
}

fn encode_summary(buf: &mut Vec<u8>, s: &TraceSummary) {
    let mut rec = Vec::with_capacity(32);
    let mut o = Out(&mut rec);
    // Varints: a day's summaries go to a spill file and back.
    o.zig(s.start_us);
    o.zig(s.end_us.wrapping_sub(s.start_us));
    o.u8(SummaryLite::flags_of(s.outcome));
    o.opt_u16(s.gateway_status);
    let calls: Vec<_> = s
        .llm_calls
        .iter()
        .filter_map(|c| c.input_tokens.map(|t| (bucket_of(t) as u8, c.duration_ms)))
        .collect();
    o.var(calls.len() as u64);
    for (b, d) in calls {
        o.u8(b);
        o.f64(d);
    }
    frame(buf, &rec);
}

fn decode_summary(rec: &[u8], s: &mut SummaryLite) -> Result<(), BatchError> {
    let mut i = In::new(rec);
    s.start_us = i.zig()?;
    s.end_us = s.start_us.wrapping_add(i.zig()?);
    s.flags = i.u8()?;
    s.gateway_status = i.opt_u16()?;
    s.calls.clear();
    for _ in 0..i.var()? {
        let b = i.u8()?;
        s.calls.push((b as usize, i.f64()?));
    }
    Ok(())
}

enum Run {
    Mem(Vec<Verdict>),
    /// Framed (started_at, trace_id, JSON) records, and how many.
    File(PathBuf, usize),
}

/// Verdict runs [`Collector::add`] took out of memory: each to its file.
#[must_use = "the verdicts are lost unless written"]
pub struct SpillRuns(Vec<(PathBuf, Vec<Verdict>)>);

impl SpillRuns {
    /// Writes each run to its file (as `--json` prints each verdict), then
    /// files them in `collector`.
    pub fn write(self, collector: &std::sync::Mutex<Collector>) -> Result<(), BatchError> {
        if self.0.is_empty() {
            return Ok(());
        }
        let mut filed = Vec::with_capacity(self.0.len());
        for (path, vs) in self.0 {
            let f = std::fs::File::create(&path).map_err(|e| BatchError::io(&path, e))?;
            let mut w = SpillWriter::lz4_small_blocks(f);
            let mut rec = Vec::new();
            let mut framed = Vec::new();
            for v in &vs {
                rec.clear();
                framed.clear();
                let mut o = Out(&mut rec);
                o.zig(v.started_at.us());
                o.bytes(v.trace_id.as_bytes());
                o.bytes(&verdict_json(v));
                frame(&mut framed, &rec);
                w.write_all(&framed).map_err(|e| BatchError::io(&path, e))?;
            }
            w.finish().map_err(|e| BatchError::io(&path, e))?;
            filed.push(Run::File(path, vs.len()));
        }
        let mut c = collector.lock().expect("collector lock");
        c.runs.extend(filed);
        Ok(())
    }
}

/// Everything pass 2 produced, merged.
pub struct Collector {
    budget: usize,
    mem_bytes: usize,
    /// Verdict files named so far.
    files: usize,
    runs: Vec<Run>,
    pub failing: Vec<Failing>,
    pub unknown: Vec<(Timestamp, String, String)>,
    pub unknown_count: usize,
    pub failed: usize,
    pub verdict_count: usize,
    summaries: Stream,
    pub n_summaries: usize,
    pub data_end: i64,
    pub stats: AssemblyStats,
}

/// A verdict's weight in memory, roughly.
fn weight(v: &Verdict) -> usize {
    640 + 220 * v.timeline.len()
        + 96 * (v.findings.len() + v.root_cause.evidence.len() + v.contributing.len())
}

impl Collector {
    /// `budget`: bytes of verdicts and summaries kept in memory.
    pub fn new(budget: usize) -> Self {
        Collector {
            budget: budget / 2,
            mem_bytes: 0,
            files: 0,
            runs: Vec::new(),
            failing: Vec::new(),
            unknown: Vec::new(),
            unknown_count: 0,
            failed: 0,
            verdict_count: 0,
            summaries: Stream::new("summaries", budget / 2),
            n_summaries: 0,
            data_end: 0,
            stats: AssemblyStats::default(),
        }
    }

    /// Files a partition's results (sorted by [`PartOut::sort`] first,
    /// outside the lock). When the verdicts held pass the budget, they are
    /// handed back to be written outside the lock ([`SpillRuns::write`]).
    pub fn add(&mut self, mut p: PartOut, spill: &SpillDir) -> Result<SpillRuns, BatchError> {
        self.verdict_count += p.verdicts.len();
        let mut shown = 0;
        for v in &p.verdicts {
            if v.outcome != Outcome::Ok {
                self.failed += 1;
                if v.root_cause.kind == RootCauseKind::Unknown {
                    self.unknown_count += 1;
                    shown += 1;
                    if shown <= UNKNOWN_SHOWN {
                        self.unknown.push((
                            v.started_at,
                            v.trace_id.clone(),
                            v.root_cause.summary.clone(),
                        ));
                    }
                }
            }
        }
        // Keep the first ten by output order across partitions.
        self.unknown.sort();
        self.unknown.truncate(UNKNOWN_SHOWN);
        self.failing.append(&mut p.failing);
        self.summaries.push(&p.summaries, spill)?;
        self.n_summaries += p.n_summaries;
        self.data_end = self.data_end.max(p.data_end);
        let s = &mut self.stats;
        s.spans_in += p.stats.spans_in;
        s.duplicate_spans += p.stats.duplicate_spans;
        let mut out = SpillRuns(Vec::new());
        if p.verdicts.is_empty() {
            return Ok(out);
        }
        self.mem_bytes += p.verdicts.iter().map(weight).sum::<usize>();
        self.runs.push(Run::Mem(p.verdicts));
        if self.mem_bytes > self.budget {
            let dir = spill.path()?.to_path_buf();
            for run in std::mem::take(&mut self.runs) {
                match run {
                    Run::Mem(vs) => {
                        let path = dir.join(format!("verdicts-{}.bin", self.files));
                        self.files += 1;
                        out.0.push((path, vs));
                    }
                    filed => self.runs.push(filed),
                }
            }
            self.mem_bytes = 0;
        }
        Ok(out)
    }

    /// Visits every trace's summary (takes the stream).
    pub fn take_summaries(&mut self) -> Stream {
        std::mem::replace(&mut self.summaries, Stream::new("summaries", 0))
    }

    /// The verdict runs, for output (`dir` holds the spilled ones).
    pub fn into_verdicts(self, dir: std::sync::Arc<SpillDir>) -> Verdicts {
        Verdicts {
            runs: self.runs,
            count: self.verdict_count,
            _dir: dir,
        }
    }
}

/// Reads the summary stream back.
pub fn read_summaries(stream: Stream, mut f: impl FnMut(&SummaryLite)) -> Result<(), BatchError> {
    let mut s = SummaryLite::default();
    stream.read(|rec| {
        decode_summary(rec, &mut s)?;
        f(&s);
        Ok(())
    })
}

/// A verdict as `--json` prints it: through a `serde_json::Value`, so the
/// keys of every object are in sorted order.
pub fn verdict_json(v: &Verdict) -> Vec<u8> {
    let value = serde_json::to_value(v).expect("verdicts serialize");
    serde_json::to_vec(&value).expect("values serialize")
}

/// Every verdict of the run, sorted by (start, trace id) on the way out.
pub struct Verdicts {
    runs: Vec<Run>,
    /// How many verdicts there are.
    pub count: usize,
    /// Kept until the verdicts are out: dropping it removes the temp dir.
    _dir: std::sync::Arc<SpillDir>,
}

enum Cursor {
    Mem(std::vec::IntoIter<Verdict>),
    File(SpillReader, usize, PathBuf),
}

enum Item {
    Verdict(Box<Verdict>),
    Json(Vec<u8>),
}

struct Head {
    started_at: Timestamp,
    trace_id: String,
    item: Item,
}

impl Cursor {
    fn next(&mut self) -> Result<Option<Head>, BatchError> {
        match self {
            Cursor::Mem(it) => Ok(it.next().map(|v| Head {
                started_at: v.started_at,
                trace_id: v.trace_id.clone(),
                item: Item::Verdict(Box::new(v)),
            })),
            Cursor::File(r, left, path) => {
                if *left == 0 {
                    return Ok(None);
                }
                *left -= 1;
                let mut len = [0u8; 4];
                r.read_exact(&mut len)
                    .map_err(|e| BatchError::io(path, e))?;
                let mut rec = vec![0u8; u32::from_le_bytes(len) as usize];
                r.read_exact(&mut rec)
                    .map_err(|e| BatchError::io(path, e))?;
                let mut i = In::new(&rec);
                Ok(Some(Head {
                    started_at: Timestamp::from_us(i.zig()?),
                    trace_id: i.str()?.to_string(),
                    item: Item::Json(i.bytes()?.to_vec()),
                }))
            }
        }
    }
}

impl Verdicts {
    /// Visits each verdict in output order, as an object or as its
    /// `--json` bytes (spilled ones are only the latter).
    fn merge(self, mut f: impl FnMut(Item) -> Result<(), BatchError>) -> Result<(), BatchError> {
        let mut cursors = Vec::new();
        for run in self.runs {
            cursors.push(match run {
                Run::Mem(v) => Cursor::Mem(v.into_iter()),
                Run::File(path, n) => {
                    let r = open_frames(&path, true)?;
                    Cursor::File(r, n, path)
                }
            });
        }
        let mut heads: Vec<Option<Head>> = Vec::with_capacity(cursors.len());
        let mut heap = BinaryHeap::new();
        for (i, c) in cursors.iter_mut().enumerate() {
            let h = c.next()?;
            if let Some(h) = &h {
                heap.push(Reverse((h.started_at, h.trace_id.clone(), i)));
            }
            heads.push(h);
        }
        while let Some(Reverse((_, _, i))) = heap.pop() {
            let h = heads[i].take().expect("a head per heap entry");
            f(h.item)?;
            if let Some(n) = cursors[i].next()? {
                heap.push(Reverse((n.started_at, n.trace_id.clone(), i)));
                heads[i] = Some(n);
            }
        }
        for c in cursors {
            if let Cursor::File(_, _, path) = c {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(())
    }

    /// Writes the verdicts as the elements of a JSON array (comma
    /// separated, no brackets), in output order.
    pub fn write_json(self, w: &mut dyn Write) -> Result<(), BatchError> {
        let mut first = true;
        self.merge(|item| {
            if !first {
                w.write_all(b",").map_err(BatchError::Output)?;
            }
            first = false;
            match item {
                Item::Verdict(v) => w.write_all(&verdict_json(&v)),
                Item::Json(b) => w.write_all(&b),
            }
            .map_err(BatchError::Output)
        })
    }

    /// Every verdict, in output order, in memory — for the tests only: a
    /// spilled verdict is read back from its JSON, whose floats serde_json
    /// may parse one unit in the last place off (the CLI writes the
    /// stored bytes instead: [`Verdicts::write_json`]).
    #[cfg(test)]
    pub(crate) fn collect(self) -> Result<Vec<Verdict>, BatchError> {
        let mut out = Vec::with_capacity(self.count);
        self.merge(|item| {
            out.push(match item {
                Item::Verdict(v) => *v,
                Item::Json(b) => {
                    serde_json::from_slice(&b).map_err(|_| crate::codec::Corrupt("verdict"))?
                }
            });
            Ok(())
        })?;
        Ok(out)
    }
}
