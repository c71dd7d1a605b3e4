//! The tail loop: read whole lines, notice rotation and truncation, resume
//! from a checkpoint.
//!
//! Design rules:
//! - Only whole lines are read: bytes after the last `\n` wait in the
//!   buffer until the writer finishes the line (or the file is left for
//!   good, see below).
//! - Rotation by rename is seen at end of file as the path's inode
//!   changing (or the path vanishing). The old file is kept open and read
//!   until it has been idle for `rotate_wait_ms` — nginx workers keep
//!   writing to it until they reopen — then the new file is read from 0.
//! - Copytruncate is seen as the open file being shorter than what was
//!   read: the same file is read again from 0.
//! - A resume seeks to the checkpoint when the path still has the
//!   checkpoint's inode; otherwise the file was rotated while the tail was
//!   down and `<path>.1` is read from the offset if it has that inode.

use super::batcher::{Batcher, Cancelled};
use super::{FilePosition, FileSourceConfig, FileTailError, FileTailStats};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Bytes read per `read` call.
const CHUNK: usize = 256 * 1024;
/// A line longer than this is cut and delivered in pieces (each piece
/// usually rejected): a writer that never ends its line must not make the
/// tail buffer without bound.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The file being read.
struct Current {
    file: File,
    inode: u64,
    /// Bytes read from the file so far (`buf` holds `offset..read_pos`).
    read_pos: u64,
    /// End of the last line handed to the batcher.
    offset: u64,
    /// Lines handed to the batcher from this inode.
    line: u64,
    /// When the path was seen to point elsewhere (rotation by rename).
    rotated_at: Option<Instant>,
    last_growth: Instant,
}

impl Current {
    fn position(&self) -> String {
        FilePosition {
            inode: self.inode,
            offset: self.offset,
            line: self.line,
        }
        .to_string()
    }
}

/// What the path says about the file being read, at end of file.
enum FileState {
    Same,
    Truncated,
    /// The path is another file now, or gone.
    Moved,
}

pub(crate) struct Follower {
    cfg: FileSourceConfig,
    stats: Arc<FileTailStats>,
    batcher: Batcher,
    buf: Vec<u8>,
}

fn io_err(path: &Path, e: io::Error) -> FileTailError {
    FileTailError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// The path a rotated file is renamed to (`access.log` → `access.log.1`).
pub(crate) fn rotated_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}

impl Follower {
    pub(crate) fn new(cfg: FileSourceConfig, stats: Arc<FileTailStats>, batcher: Batcher) -> Self {
        Follower {
            cfg,
            stats,
            batcher,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    /// Runs until shutdown. I/O errors other than a missing file are
    /// counted and retried after a poll interval; only a checkpoint that
    /// cannot be read stops the tail.
    pub(crate) fn run(mut self, checkpoint: Option<String>) -> Result<(), FileTailError> {
        let resume = match checkpoint {
            Some(s) => Some(s.parse::<FilePosition>()?),
            None => None,
        };
        let Ok(mut cur) = self.open_start(resume) else {
            return Ok(());
        };
        loop {
            match self.step(&mut cur) {
                Ok(Some(next)) => cur = next,
                Ok(None) => {}
                Err(Step::Cancelled) => return Ok(()),
                Err(Step::Io(e)) => {
                    self.stats.io_errors.fetch_add(1, Relaxed);
                    *self
                        .stats
                        .last_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                    if self.poll().is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn poll(&self) -> Result<(), Cancelled> {
        self.batcher.sleep(self.cfg.poll_interval_ms)
    }

    /// Opens where the checkpoint says (see the module rules), waiting for
    /// the path to exist when there is nothing else to read.
    fn open_start(&mut self, resume: Option<FilePosition>) -> Result<Current, Cancelled> {
        let path = self.cfg.path.clone();
        if let Some(p) = resume {
            if let Some(cur) = open_at(&path, Some(p.inode), p.offset, p.line) {
                return Ok(cur);
            }
            if let Some(mut cur) = open_at(&rotated_path(&path), Some(p.inode), p.offset, p.line) {
                cur.rotated_at = Some(Instant::now());
                return Ok(cur);
            }
            if fs::metadata(&path).is_ok_and(|m| m.ino() == p.inode) {
                // Same inode but shorter than the checkpoint: truncated
                // while the tail was down.
                self.stats.truncations.fetch_add(1, Relaxed);
            } else {
                self.stats.lost_positions.fetch_add(1, Relaxed);
            }
        }
        loop {
            if let Some(cur) = open_at(&path, None, 0, 0) {
                return Ok(cur);
            }
            self.poll()?;
        }
    }

    /// One read, or one end-of-file check. Returns the next file when the
    /// tail moved on to one.
    fn step(&mut self, cur: &mut Current) -> Result<Option<Current>, Step> {
        if self.batcher.sleep(0).is_err() {
            return Err(Step::Cancelled);
        }
        let old_len = self.buf.len();
        self.buf.resize(old_len + CHUNK, 0);
        let n = match cur.file.read(&mut self.buf[old_len..]) {
            Ok(n) => n,
            Err(e) => {
                self.buf.truncate(old_len);
                return Err(Step::Io(io_err(&self.cfg.path, e)));
            }
        };
        self.buf.truncate(old_len + n);
        if n > 0 {
            cur.read_pos += n as u64;
            cur.last_growth = Instant::now();
            self.take_lines(cur)?;
            return Ok(None);
        }
        // End of file: deliver what is parsed, then look at the path.
        if self.batcher.pending_lines() > 0 {
            self.batcher.flush(cur.position())?;
        }
        match self.file_state(cur) {
            FileState::Same => {
                self.poll()?;
                Ok(None)
            }
            FileState::Truncated => {
                self.finish_partial(cur)?;
                cur.file
                    .seek(SeekFrom::Start(0))
                    .map_err(|e| Step::Io(io_err(&self.cfg.path, e)))?;
                (cur.read_pos, cur.offset, cur.line) = (0, 0, 0);
                self.stats.truncations.fetch_add(1, Relaxed);
                Ok(None)
            }
            FileState::Moved => {
                let since = *cur.rotated_at.get_or_insert_with(Instant::now);
                let idle = since.max(cur.last_growth).elapsed();
                if idle < Duration::from_millis(self.cfg.rotate_wait_ms) {
                    self.poll()?;
                    return Ok(None);
                }
                match open_at(&self.cfg.path, None, 0, 0) {
                    Some(next) => {
                        self.finish_partial(cur)?;
                        self.stats.rotations.fetch_add(1, Relaxed);
                        Ok(Some(next))
                    }
                    None => {
                        self.poll()?;
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Hands every whole line in the buffer to the batcher, flushing each
    /// `batch_lines`.
    fn take_lines(&mut self, cur: &mut Current) -> Result<(), Cancelled> {
        let mut start = 0;
        let batch_lines = self.cfg.batch_lines.max(1);
        while let Some(k) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + k;
            cur.line += 1;
            self.batcher.push(&self.buf[start..end], cur.line);
            cur.offset += (end - start) as u64 + 1;
            start = end + 1;
            if self.batcher.pending_lines() >= batch_lines {
                self.batcher.flush(cur.position())?;
            }
        }
        if self.buf.len() - start > MAX_LINE {
            cur.line += 1;
            let end = start + MAX_LINE;
            self.batcher.push(&self.buf[start..end], cur.line);
            cur.offset += MAX_LINE as u64;
            self.stats.cut_lines.fetch_add(1, Relaxed);
            start = end;
        }
        self.buf.drain(..start);
        Ok(())
    }

    /// The file is being left (rotated or truncated): an unfinished last
    /// line will never be finished, so it is delivered as it is.
    fn finish_partial(&mut self, cur: &mut Current) -> Result<(), Cancelled> {
        if !self.buf.is_empty() {
            cur.line += 1;
            self.batcher.push(&self.buf, cur.line);
            cur.offset += self.buf.len() as u64;
            self.buf.clear();
            self.stats.partial_lines.fetch_add(1, Relaxed);
        }
        if self.batcher.pending_lines() > 0 {
            self.batcher.flush(cur.position())?;
        }
        Ok(())
    }

    fn file_state(&self, cur: &Current) -> FileState {
        if cur.file.metadata().is_ok_and(|m| m.len() < cur.read_pos) {
            return FileState::Truncated;
        }
        match fs::metadata(&self.cfg.path) {
            Ok(m) if m.ino() == cur.inode => FileState::Same,
            Ok(_) => FileState::Moved,
            Err(e) if e.kind() == io::ErrorKind::NotFound => FileState::Moved,
            Err(_) => FileState::Same,
        }
    }
}

/// Opens `path` at `offset` if it exists, is at least `offset` long and
/// (when given) has inode `inode`.
fn open_at(path: &Path, inode: Option<u64>, offset: u64, line: u64) -> Option<Current> {
    let mut file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if inode.is_some_and(|i| i != meta.ino()) || meta.len() < offset {
        return None;
    }
    file.seek(SeekFrom::Start(offset)).ok()?;
    Some(Current {
        file,
        inode: meta.ino(),
        read_pos: offset,
        offset,
        line,
        rotated_at: None,
        last_growth: Instant::now(),
    })
}

enum Step {
    Cancelled,
    Io(FileTailError),
}

impl From<Cancelled> for Step {
    fn from(_: Cancelled) -> Self {
        Step::Cancelled
    }
}
