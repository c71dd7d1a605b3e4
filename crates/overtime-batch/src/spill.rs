//! Partitions of encoded records, kept in memory up to a byte budget and
//! appended to one file each in a temp dir beyond it — the build side of a
//! grace hash join. Every record is framed by its length, so a spilled
//! partition can be read back whole or streamed record by record.
//!
//! How the files are written and read back: [`super::spill_file`].

use crate::BatchError;
use crate::codec::{In, Out};
use crate::spill_file::{SpillWriter, append_frame, for_each_spilled, read_spilled};
use overtime_diagnose::assemble::Key;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The run's temp dir, created on the first spill and removed when the
/// run ends (or is interrupted: it lives in the engine, which unwinds).
pub struct SpillDir {
    parent: Option<PathBuf>,
    dir: OnceLock<Result<tempfile::TempDir, String>>,
    /// Spill files as LZ4 frames (else plain).
    compress: bool,
}

impl SpillDir {
    pub fn new(parent: Option<PathBuf>, compress: bool) -> Self {
        SpillDir {
            parent,
            dir: OnceLock::new(),
            compress,
        }
    }
    /// The dir, created now if needed.
    pub fn path(&self) -> Result<&Path, BatchError> {
        let d = self.dir.get_or_init(|| {
            let mut b = tempfile::Builder::new();
            b.prefix("overtime-diagnose-");
            match &self.parent {
                Some(p) => b.tempdir_in(p),
                None => b.tempdir(),
            }
            .map_err(|e| e.to_string())
        });
        match d {
            Ok(t) => Ok(t.path()),
            Err(e) => Err(BatchError::Spill(format!("cannot create a temp dir: {e}"))),
        }
    }
    /// Whether anything was spilled.
    pub fn used(&self) -> bool {
        self.dir.get().is_some()
    }
}

/// A well-mixed 64-bit hash of a join key (stable within a run).
pub(crate) fn key_hash(k: &Key) -> u64 {
    match k {
        Key::Trace(t) => mix((*t as u64) ^ ((*t >> 64) as u64)),
        Key::Other(s) => str_hash(s),
    }
}

pub fn str_hash(s: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(s.as_bytes());
    mix(h.finish())
}

/// splitmix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// The partition of hash `h` among `n` at split level `level` (each level
/// of re-partitioning uses independent bits).
pub fn part_of(h: u64, level: u32, n: usize) -> usize {
    let x = if level == 0 {
        h
    } else {
        mix(h ^ (level as u64).wrapping_mul(0x9e3779b97f4a7c15))
    };
    (((x >> 32) * n as u64) >> 32) as usize
}

/// One record framed: its length (4 bytes), then its bytes.
pub fn frame(buf: &mut Vec<u8>, record: &[u8]) {
    Out(buf).body_bytes(record);
}

/// Calls `f` with each framed record of `buf`.
pub fn for_each_record<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(&'a [u8]) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let mut i = In::new(buf);
    while !i.done() {
        f(i.body()?)?;
    }
    Ok(())
}

/// Calls `f` with each framed record of each of `bufs` (a partition as
/// [`Partitions::take`] gives it).
pub fn for_each_record_in<'a>(
    bufs: &'a [Vec<u8>],
    mut f: impl FnMut(&'a [u8]) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    for b in bufs {
        for_each_record(b, &mut f)?;
    }
    Ok(())
}

/// A partition's records in memory: the workers' buffers as they were
/// handed over, never copied into one growing buffer (a day's input went
/// through that growth twice, each time on fresh, zeroed pages).
#[derive(Default, Clone)]
struct Chunks {
    bufs: Vec<Vec<u8>>,
    /// Bytes of records.
    len: usize,
    /// Bytes the buffers hold (what the budget counts): up to twice `len`,
    /// as a worker's buffer grows.
    cap: usize,
}

struct State {
    mem: Vec<Chunks>,
    mem_bytes: usize,
    on_disk: Vec<u64>,
}

/// `n` partitions sharing one memory budget.
///
/// Spilling writes (and compresses) outside the state lock, so the other
/// readers keep routing while one writes, and two that spill at once
/// write different files side by side: the buffers to spill are taken out
/// (and counted as on disk) under the state lock, and the lock of each of
/// their files is taken before the state lock is let go. Whoever reads a
/// partition's file ([`Partitions::take`], [`Partitions::drain`]) passes
/// through its file lock while holding the state lock, so it waits for
/// every write counted before it; writes to one file land in the order
/// they were counted. (File locks are only ever taken under the state
/// lock, and their holders never wait on it: no order between them can
/// deadlock.)
pub struct Partitions {
    name: String,
    budget: usize,
    state: Mutex<State>,
    files: Vec<Mutex<()>>,
}

impl Partitions {
    pub fn new(name: impl Into<String>, n: usize, budget: usize) -> Self {
        Partitions {
            name: name.into(),
            budget,
            state: Mutex::new(State {
                mem: vec![Chunks::default(); n],
                mem_bytes: 0,
                on_disk: vec![0; n],
            }),
            files: (0..n).map(|_| Mutex::new(())).collect(),
        }
    }

    fn file(&self, dir: &Path, p: usize) -> PathBuf {
        dir.join(format!("{}-{p}.bin", self.name))
    }

    /// Moves a worker's framed records (one buffer per partition) in;
    /// spills every partition to its file when over the budget.
    pub fn absorb(&self, local: &mut [Vec<u8>], spill: &SpillDir) -> Result<(), BatchError> {
        let mut st = self.state.lock().expect("partition lock");
        for (p, buf) in local.iter_mut().enumerate() {
            if buf.is_empty() {
                continue;
            }
            st.mem_bytes += buf.capacity();
            let next = Vec::with_capacity(buf.len());
            let chunks = &mut st.mem[p];
            chunks.len += buf.len();
            chunks.cap += buf.capacity();
            chunks.bufs.push(std::mem::replace(buf, next));
        }
        if st.mem_bytes <= self.budget {
            return Ok(());
        }
        let out = self.largest(&mut st);
        let dir = spill.path()?;
        let out: Vec<_> = out
            .into_iter()
            .map(|(p, chunks)| {
                (
                    p,
                    chunks,
                    self.files[p].lock().expect("partition file lock"),
                )
            })
            .collect();
        drop(st);
        for (p, chunks, file) in out {
            append_frame(&self.file(dir, p), &chunks.bufs, spill.compress)?;
            drop(file);
        }
        Ok(())
    }

    /// Takes the largest partitions out until half the budget is free
    /// (the others stay in memory: a small input past its budget by a
    /// little spills a little), counted as on disk.
    fn largest(&self, st: &mut State) -> Vec<(usize, Chunks)> {
        let mut order: Vec<usize> = (0..st.mem.len()).collect();
        order.sort_unstable_by_key(|&p| std::cmp::Reverse(st.mem[p].cap));
        let mut out = Vec::new();
        for p in order {
            if st.mem_bytes <= self.budget / 2 || st.mem[p].len == 0 {
                break;
            }
            let chunks = std::mem::take(&mut st.mem[p]);
            st.on_disk[p] += chunks.len as u64;
            st.mem_bytes -= chunks.cap;
            out.push((p, chunks));
        }
        out
    }

    /// Bytes of partition `p`, in memory and on disk.
    pub fn size(&self, p: usize) -> u64 {
        let st = self.state.lock().expect("partition lock");
        st.on_disk[p] + st.mem[p].len as u64
    }

    /// Takes partition `p` out of the state: its buffers in memory and
    /// the bytes of it on disk, once every write counted in them landed.
    fn take_out(&self, p: usize) -> (Chunks, u64) {
        let mut st = self.state.lock().expect("partition lock");
        let mem = std::mem::take(&mut st.mem[p]);
        st.mem_bytes -= mem.cap;
        let disk = std::mem::take(&mut st.on_disk[p]);
        if disk > 0 {
            // Waits for the writes counted in `disk` (see the type's doc).
            drop(self.files[p].lock().expect("partition file lock"));
        }
        (mem, disk)
    }

    /// Takes partition `p` whole (its file is removed): buffers of framed
    /// records, what was spilled first.
    pub fn take(&self, p: usize, spill: &SpillDir) -> Result<Vec<Vec<u8>>, BatchError> {
        let (mem, disk) = self.take_out(p);
        if disk == 0 {
            return Ok(mem.bufs);
        }
        let path = self.file(spill.path()?, p);
        let out = read_spilled(&path, spill.compress, disk)?;
        let _ = std::fs::remove_file(&path);
        let mut bufs = Vec::with_capacity(mem.bufs.len() + 1);
        bufs.push(out);
        bufs.extend(mem.bufs);
        Ok(bufs)
    }

    /// Streams partition `p` record by record (its file is removed after).
    pub fn drain(
        &self,
        p: usize,
        spill: &SpillDir,
        mut f: impl FnMut(&[u8]) -> Result<(), BatchError>,
    ) -> Result<(), BatchError> {
        let (mem, disk) = self.take_out(p);
        if disk > 0 {
            let path = self.file(spill.path()?, p);
            for_each_spilled(&path, spill.compress, disk, &mut f)?;
            let _ = std::fs::remove_file(&path);
        }
        for_each_record_in(&mem.bufs, f)
    }
}

/// Framed records in memory up to a budget, then appended to one file:
/// for what pass 2 produces (summaries) and reads once at the end. The
/// file is always an LZ4 frame of 64 KiB blocks, whatever the run's
/// `compress`: summaries are short varint records that shrink to about
/// 0.6x for little CPU (4 GB: 336 MB plain, 206 MB as LZ4), and every
/// byte of a new file is a page-cache copy (docs/diagnose-at-scale.md).
pub struct Stream {
    name: String,
    budget: usize,
    mem: Vec<u8>,
    file: Option<(PathBuf, SpillWriter)>,
    pub bytes: u64,
}

impl Stream {
    pub fn new(name: impl Into<String>, budget: usize) -> Self {
        Stream {
            name: name.into(),
            budget,
            mem: Vec::new(),
            file: None,
            bytes: 0,
        }
    }

    /// Appends a block of framed records.
    pub fn push(&mut self, block: &[u8], spill: &SpillDir) -> Result<(), BatchError> {
        self.bytes += block.len() as u64;
        self.mem.extend_from_slice(block);
        if self.mem.len() > self.budget {
            if self.file.is_none() {
                let path = spill.path()?.join(format!("{}.bin", self.name));
                let f = std::fs::File::create(&path).map_err(|e| BatchError::io(&path, e))?;
                self.file = Some((path, SpillWriter::lz4_small_blocks(f)));
            }
            let (path, w) = self.file.as_mut().expect("created above");
            w.write_all(&self.mem)
                .map_err(|e| BatchError::io(path, e))?;
            self.mem.clear();
        }
        Ok(())
    }

    /// Reads every framed record back, in the order pushed.
    pub fn read(
        mut self,
        mut f: impl FnMut(&[u8]) -> Result<(), BatchError>,
    ) -> Result<(), BatchError> {
        if let Some((path, w)) = self.file.take() {
            w.finish().map_err(|e| BatchError::io(&path, e))?;
            let spilled = self.bytes - self.mem.len() as u64;
            for_each_spilled(&path, true, spilled, &mut f)?;
            let _ = std::fs::remove_file(&path);
        }
        for_each_record(&self.mem, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_read_back_the_same_records_spilled_or_not() {
        for (budget, compress) in [(usize::MAX, false), (10, false), (10, true)] {
            let spill = SpillDir::new(None, compress);
            let parts = Partitions::new("t", 3, budget);
            for round in 0..4u8 {
                let mut local = vec![Vec::new(); 3];
                for (p, buf) in local.iter_mut().enumerate() {
                    frame(buf, &[p as u8, round]);
                    frame(buf, &vec![round; 300]);
                }
                parts.absorb(&mut local, &spill).unwrap();
            }
            for p in 0..3 {
                let mut whole = Vec::new();
                for_each_record_in(&parts.take(p, &spill).unwrap(), |r| {
                    whole.push(r.to_vec());
                    Ok(())
                })
                .unwrap();
                assert_eq!(whole.len(), 8);
                assert_eq!(whole[6], vec![p as u8, 3]);
                assert_eq!(parts.size(p), 0, "taken");
            }
            assert_eq!(spill.used(), budget == 10, "a 10-byte budget spills");
        }
    }

    /// Spills 2000 short records to partition 0; returns their bytes.
    fn spill_2000(parts: &Partitions, spill: &SpillDir) -> u64 {
        let mut local = vec![Vec::new()];
        for i in 0..2000u32 {
            frame(
                &mut local[0],
                format!("span {i} of service checkout").as_bytes(),
            );
        }
        let raw = local[0].len() as u64;
        parts.absorb(&mut local, spill).unwrap();
        raw
    }

    #[test]
    fn compressed_spill_files_are_smaller_and_a_damaged_one_is_an_error_not_wrong_records() {
        let spill = SpillDir::new(None, true);
        let parts = Partitions::new("d", 1, 10);
        let raw = spill_2000(&parts, &spill);
        let path = parts.file(spill.path().unwrap(), 0);
        let mut bytes = std::fs::read(&path).unwrap();
        assert!((bytes.len() as u64) < raw / 2, "{} of {raw}", bytes.len());
        assert_eq!(parts.size(0), raw, "sizes count the records, not the file");
        let whole = bytes.clone();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        let err = parts.drain(0, &spill, |_| Ok(())).unwrap_err();
        assert!(matches!(err, BatchError::Io { .. }), "{err}");

        // Cut short at any point: an error too, never fewer records.
        for cut in [whole.len() - 1, whole.len() - 4, whole.len() / 3, 7] {
            let parts = Partitions::new("d", 1, 10);
            spill_2000(&parts, &spill);
            std::fs::write(&path, &whole[..cut]).unwrap();
            // (A cut into the frame's end mark loses no record.)
            if let Ok(bufs) = parts.take(0, &spill) {
                let mut n = 0;
                for_each_record_in(&bufs, |_| {
                    n += 1;
                    Ok(())
                })
                .unwrap();
                assert_eq!(n, 2000, "cut at {cut} of {}", whole.len());
            }
        }
    }

    #[test]
    fn a_partition_streams_record_by_record() {
        for compress in [false, true] {
            let spill = SpillDir::new(None, compress);
            let parts = Partitions::new("s", 1, 100);
            let mut local = vec![Vec::new()];
            for i in 0..50u8 {
                frame(&mut local[0], &vec![i; i as usize]);
                parts.absorb(&mut local, &spill).unwrap();
            }
            let mut n = 0;
            parts
                .drain(0, &spill, |r| {
                    assert_eq!(r.len(), n);
                    n += 1;
                    Ok(())
                })
                .unwrap();
            assert_eq!(n, 50);
        }
    }

    #[test]
    fn a_plain_spill_file_cut_short_is_an_error() {
        let spill = SpillDir::new(None, false);
        let parts = Partitions::new("c", 1, 10);
        let mut local = vec![Vec::new()];
        for i in 0..100u32 {
            frame(&mut local[0], format!("record {i}").as_bytes());
        }
        parts.absorb(&mut local, &spill).unwrap();
        let path = parts.file(spill.path().unwrap(), 0);
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 13]).unwrap();
        assert!(parts.drain(0, &spill, |_| Ok(())).is_err());
    }

    #[test]
    fn a_stream_reads_back_what_was_pushed_plain_or_compressed() {
        for compress in [false, true] {
            let spill = SpillDir::new(None, compress);
            let mut s = Stream::new("sum", 64);
            for i in 0..300u32 {
                let mut block = Vec::new();
                frame(&mut block, &i.to_le_bytes());
                s.push(&block, &spill).unwrap();
            }
            let mut got = Vec::new();
            s.read(|r| {
                got.push(u32::from_le_bytes(r.try_into().unwrap()));
                Ok(())
            })
            .unwrap();
            assert_eq!(got, (0..300).collect::<Vec<_>>(), "compress {compress}");
        }
    }

    #[test]
    fn partition_bits_spread_keys_evenly_at_every_level() {
        for level in 0..3 {
            let mut counts = [0usize; 8];
            for t in 0..8000u128 {
                counts[part_of(key_hash(&Key::Trace(t * 0x1_0000_0001)), level, 8)] += 1;
            }
            assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        }
    }
}
