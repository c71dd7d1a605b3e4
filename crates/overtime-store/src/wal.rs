//! The write-ahead log: every batch is here, checksummed and fsynced,
//! before a source may acknowledge it.
//!
//! # Design rules
//!
//! (After Vector's disk buffer `disk_v2`: small, explicit invariants.)
//!
//! - **One record per write.** A record carries the table, the write time,
//!   the source's optional checkpoint and the batch (an Arrow IPC stream),
//!   so data and the position that produced it become durable together:
//!   there is never a checkpoint without its data or data without its
//!   checkpoint.
//! - **Framing is length + CRC32 per record**: `[len: u32 LE][crc32(payload):
//!   u32 LE][payload]`. A record is valid only if it is whole and its CRC
//!   matches. Replay stops at the first invalid record of a segment and
//!   truncates the segment there: after `kill -9` the torn last record is
//!   dropped and everything before it is kept. Nothing after a bad record
//!   is trusted.
//! - **Acknowledge only after fsync.** [`Wal::append`] writes, then
//!   [`Wal::commit`] waits until an fsync covers the record. Group commit:
//!   whoever gets the sync lock first fsyncs for every record written so
//!   far, and writers whose record was covered return without another
//!   fsync.
//! - **Segments are immutable once rotated.** The log is a sequence of
//!   files `wal/<seq>.wal`. A flush rotates (fsyncs the current segment and
//!   opens the next), writes the memtable that those segments fed to
//!   Parquet, records `flushed_through = seq` in the manifest, and only then
//!   deletes segments `<= seq`. A crash at any point leaves either the WAL
//!   or the Parquet files (never neither) holding every record; the
//!   manifest says which.
//! - **A new process never appends to an old segment**: open replays every
//!   live segment and starts a fresh one.

use crate::StoreError;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use overtime_model::{Checkpoint, Table};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes of a record header: length and CRC32.
pub const HEADER_LEN: usize = 8;
/// Larger lengths are treated as corruption, not as a record to allocate.
const MAX_RECORD: u32 = 1 << 30;
const PAYLOAD_VERSION: u8 = 1;

/// One decoded WAL record.
#[derive(Debug, Clone, PartialEq)]
pub struct WalRecord {
    /// The table the batch belongs to.
    pub table: Table,
    /// When the store accepted the batch (µs since the epoch).
    pub written_us: i64,
    /// The source's position written with the batch; `None` for a source
    /// without positions (OTLP).
    pub checkpoint: Option<Checkpoint>,
    /// The rows, in the schema the store held when it wrote them (read
    /// older records through the store to get the current schema).
    pub batch: RecordBatch,
    /// Bytes of the encoded payload (what replay charges to the budget:
    /// decoded IPC batches share the payload's buffers).
    pub encoded_len: usize,
}

fn table_code(t: Table) -> u8 {
    crate::tables::idx(t) as u8
}

/// Encodes a record's payload (everything after the 8-byte header).
pub fn encode_payload(
    table: Table,
    written_us: i64,
    checkpoint: Option<&Checkpoint>,
    batch: &RecordBatch,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() / 2 + 256);
    out.push(PAYLOAD_VERSION);
    out.push(table_code(table));
    out.extend_from_slice(&written_us.to_le_bytes());
    let ck = match checkpoint {
        Some(c) => serde_json::to_vec(c).expect("a Checkpoint always serializes"),
        None => Vec::new(),
    };
    out.extend_from_slice(&(ck.len() as u32).to_le_bytes());
    out.extend_from_slice(&ck);
    let ctx = || format!("encoding a `{table}` WAL record");
    let mut w = StreamWriter::try_new(&mut out, &batch.schema())
        .map_err(|e| StoreError::arrow(ctx(), e))?;
    w.write(batch).map_err(|e| StoreError::arrow(ctx(), e))?;
    w.finish().map_err(|e| StoreError::arrow(ctx(), e))?;
    drop(w);
    Ok(out)
}

/// Decodes a payload written by [`encode_payload`]; `None` if malformed.
pub fn decode_payload(p: &[u8]) -> Option<WalRecord> {
    if p.len() < 14 || p[0] != PAYLOAD_VERSION {
        return None;
    }
    let table = *Table::ALL.get(p[1] as usize)?;
    let written_us = i64::from_le_bytes(p[2..10].try_into().ok()?);
    let ck_len = u32::from_le_bytes(p[10..14].try_into().ok()?) as usize;
    let ck_end = 14usize.checked_add(ck_len)?;
    let ck_bytes = p.get(14..ck_end)?;
    let checkpoint = if ck_len == 0 {
        None
    } else {
        Some(serde_json::from_slice(ck_bytes).ok()?)
    };
    let mut reader = StreamReader::try_new(&p[ck_end..], None).ok()?;
    // A record written by an older version gets the current schema.
    let batch = crate::tables::upgrade(table, reader.next()?.ok()?);
    Some(WalRecord {
        table,
        written_us,
        checkpoint,
        batch,
        encoded_len: p.len(),
    })
}

/// The frame of one record: header + payload.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads the valid records of one segment file. Returns them with the
/// byte length of the valid prefix (where a torn or corrupt tail starts).
pub fn read_segment(path: &Path) -> Result<(Vec<WalRecord>, u64), StoreError> {
    let f = File::open(path).map_err(|e| StoreError::io("opening WAL segment", path, e))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut records = Vec::new();
    let mut good: u64 = 0;
    let mut header = [0u8; HEADER_LEN];
    loop {
        if read_full(&mut r, &mut header).map_err(|e| StoreError::io("reading", path, e))?
            < HEADER_LEN
        {
            break;
        }
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if len > MAX_RECORD {
            break;
        }
        let mut payload = vec![0u8; len as usize];
        if read_full(&mut r, &mut payload).map_err(|e| StoreError::io("reading", path, e))?
            < payload.len()
        {
            break;
        }
        if crc32fast::hash(&payload) != crc {
            break;
        }
        let Some(rec) = decode_payload(&payload) else {
            break;
        };
        records.push(rec);
        good += (HEADER_LEN + payload.len()) as u64;
    }
    Ok((records, good))
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Path of segment `seq` in `dir`.
pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016}.wal"))
}

/// Sequence numbers of the segments in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| StoreError::io("listing", dir, e))? {
        let e = e.map_err(|e| StoreError::io("listing", dir, e))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(seq) = name.strip_suffix(".wal").and_then(|s| s.parse().ok()) {
            out.push(seq);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// fsyncs a directory so that a create, rename or delete in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsyncing directory", dir, e))
}

struct Active {
    file: Arc<File>,
    seq: u64,
    len: u64,
    /// Records appended since open (all segments); the group-commit clock.
    written: u64,
    /// Bytes of all live segments.
    total: u64,
    segments: Vec<(u64, u64)>,
}

/// The live log: the segment being appended to, and the ones before it
/// that a flush has not yet removed.
pub struct Wal {
    dir: PathBuf,
    fsync: bool,
    active: Mutex<Active>,
    /// Records known durable (group commit). Lock order: `synced`, then `active`.
    synced: Mutex<u64>,
}

impl Wal {
    /// Opens the log in `dir` with `live` (seq, bytes) segments already
    /// replayed, starting a fresh segment after the last of them and past
    /// `after` (the
    /// highest flush sequence already used by this collector's files in
    /// object storage, so a lost `data_dir` never reuses a file name).
    pub fn open_after(
        dir: &Path,
        live: Vec<(u64, u64)>,
        fsync: bool,
        after: u64,
    ) -> Result<Wal, StoreError> {
        let seq = live.last().map(|(s, _)| s + 1).unwrap_or(1).max(after + 1);
        let file = create_segment(dir, seq, fsync)?;
        let total = live.iter().map(|(_, b)| b).sum();
        let mut segments = live;
        segments.push((seq, 0));
        Ok(Wal {
            dir: dir.to_path_buf(),
            fsync,
            active: Mutex::new(Active {
                file: Arc::new(file),
                seq,
                len: 0,
                written: 0,
                total,
                segments,
            }),
            synced: Mutex::new(0),
        })
    }

    /// Appends one framed record; returns its ticket for [`Wal::commit`].
    /// On a failed write the segment is cut back so no partial record stays.
    pub fn append(&self, framed: &[u8]) -> Result<u64, StoreError> {
        let mut a = self.active.lock().expect("wal lock");
        let path = segment_path(&self.dir, a.seq);
        if let Err(e) = (&*a.file).write_all(framed) {
            let _ = a.file.set_len(a.len);
            return Err(StoreError::io("appending to WAL segment", path, e));
        }
        a.len += framed.len() as u64;
        a.total += framed.len() as u64;
        let len = a.len;
        if let Some(last) = a.segments.last_mut() {
            last.1 = len;
        }
        a.written += 1;
        Ok(a.written)
    }

    /// Returns once the record with `ticket` is on disk (fsync, shared
    /// with every writer whose record was already written).
    pub fn commit(&self, ticket: u64) -> Result<(), StoreError> {
        if !self.fsync {
            return Ok(());
        }
        let mut synced = self.synced.lock().expect("wal sync lock");
        if *synced >= ticket {
            return Ok(());
        }
        let (file, upto, seq) = {
            let a = self.active.lock().expect("wal lock");
            (a.file.clone(), a.written, a.seq)
        };
        file.sync_data()
            .map_err(|e| StoreError::io("fsyncing WAL segment", segment_path(&self.dir, seq), e))?;
        *synced = upto;
        Ok(())
    }

    /// Seals the current segment (fsynced) and starts the next one.
    /// Returns the sealed segment's sequence number: every record appended
    /// before this call is in a segment `<=` it.
    pub fn rotate(&self) -> Result<u64, StoreError> {
        let mut synced = self.synced.lock().expect("wal sync lock");
        let mut a = self.active.lock().expect("wal lock");
        let sealed = a.seq;
        if self.fsync {
            a.file.sync_data().map_err(|e| {
                StoreError::io("fsyncing WAL segment", segment_path(&self.dir, sealed), e)
            })?;
        }
        *synced = a.written;
        let next = sealed + 1;
        a.file = Arc::new(create_segment(&self.dir, next, self.fsync)?);
        a.seq = next;
        a.len = 0;
        a.segments.push((next, 0));
        Ok(sealed)
    }

    /// Deletes every segment `<= upto` (their records are in Parquet).
    pub fn remove_through(&self, upto: u64) -> Result<u64, StoreError> {
        let doomed: Vec<(u64, u64)> = {
            let mut a = self.active.lock().expect("wal lock");
            let (gone, keep): (Vec<_>, Vec<_>) = a
                .segments
                .iter()
                .partition(|(s, _)| *s <= upto && *s != a.seq);
            a.segments = keep;
            a.total -= gone.iter().map(|(_, b)| b).sum::<u64>();
            gone
        };
        for (seq, _) in &doomed {
            let p = segment_path(&self.dir, *seq);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("removing WAL segment", p, e)),
            }
        }
        if self.fsync && !doomed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(doomed.len() as u64)
    }

    /// Bytes in all live segments.
    pub fn bytes(&self) -> u64 {
        self.active.lock().expect("wal lock").total
    }

    /// Number of live segment files.
    pub fn segments(&self) -> usize {
        self.active.lock().expect("wal lock").segments.len()
    }
}

fn create_segment(dir: &Path, seq: u64, fsync: bool) -> Result<File, StoreError> {
    let path = segment_path(dir, seq);
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| StoreError::io("creating WAL segment", &path, e))?;
    if fsync {
        sync_dir(dir)?;
    }
    Ok(f)
}

/// Cuts a segment back to its valid prefix (drops a torn tail).
pub fn truncate_segment(path: &Path, len: u64) -> Result<(), StoreError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io("opening WAL segment", path, e))?;
    f.set_len(len)
        .and_then(|_| f.sync_all())
        .map_err(|e| StoreError::io("truncating torn WAL tail", path, e))
}

#[cfg(test)]
mod module_example {
    use super::{decode_payload, encode_payload};
    use overtime_model::{Checkpoint, RejectedColumns, RejectedRecord, Table};

    #[test]
    fn a_payload_round_trips_with_its_checkpoint() {
        let mut c = RejectedColumns::new();
        c.append(&RejectedRecord::new(
            "edge.log",
            1,
            "format_mismatch",
            "bad",
            b"x",
        ));
        // As the store writes it: conformed, `ingested_at` stamped.
        let batch = crate::tables::conform(Table::Rejected, c.finish(), 42).unwrap();
        let ck = Checkpoint {
            source: "file:edge.log".into(),
            position: "offset=2".into(),
        };
        let bytes = encode_payload(Table::Rejected, 42, Some(&ck), &batch).unwrap();
        let rec = decode_payload(&bytes).unwrap();
        assert_eq!(rec.table, Table::Rejected);
        assert_eq!(rec.checkpoint, Some(ck));
        assert_eq!(rec.batch, batch);
        assert_eq!(rec.encoded_len, bytes.len());
    }
}
