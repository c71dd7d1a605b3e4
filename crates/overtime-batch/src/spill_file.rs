//! The spill files themselves: how a partition's or a stream's framed
//! records are written to disk and read back.
//!
//! When the run is told to compress ([`BatchOptions::compress_spill`],
//! for a day whose input and spill would not stay in the page cache),
//! spill files are LZ4 frames ([`lz4_flex::frame`]): about half the bytes
//! go to disk, which is what assembly then waits on. It costs about a
//! sixth more CPU, so a run whose files stay cached writes them plain.
//! Each 256 KiB block carries its checksum, checked before it is
//! decompressed; each spill appends a whole frame, and a file of frames
//! one after another reads as one stream. Plain or compressed, a file
//! that reads back other than its recorded length is an error: a damaged
//! spill file never gives fewer or wrong records.
//!
//! [`BatchOptions::compress_spill`]: crate::BatchOptions::compress_spill

use crate::BatchError;
use crate::codec::Corrupt;
use lz4_flex::frame::{BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

/// A spill file's writer: LZ4 frames of independent, checksummed blocks,
/// or the bytes as they are.
pub(crate) enum SpillWriter {
    Lz4(FrameEncoder<std::fs::File>),
    Plain(BufWriter<std::fs::File>),
}

impl SpillWriter {
    pub(crate) fn new(file: std::fs::File, compress: bool) -> Self {
        if compress {
            let info = FrameInfo::new()
                .block_size(BlockSize::Max256KB)
                .block_checksums(true);
            SpillWriter::Lz4(FrameEncoder::with_frame_info(info, file))
        } else {
            SpillWriter::Plain(BufWriter::with_capacity(1 << 20, file))
        }
    }
    /// Always an LZ4 frame, of 64 KiB blocks: for verdicts spilled as
    /// JSON, which shrinks ~12x for little CPU, and whose files are all
    /// read at once in the merge (a decoder per file holds two blocks).
    pub(crate) fn lz4_small_blocks(file: std::fs::File) -> Self {
        let info = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_checksums(true);
        SpillWriter::Lz4(FrameEncoder::with_frame_info(info, file))
    }
    pub(crate) fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            SpillWriter::Lz4(w) => w.write_all(b),
            SpillWriter::Plain(w) => w.write_all(b),
        }
    }
    /// Ends the frame (or flushes): the file is complete.
    pub(crate) fn finish(self) -> std::io::Result<()> {
        match self {
            SpillWriter::Lz4(w) => w.finish().map(drop).map_err(std::io::Error::from),
            SpillWriter::Plain(w) => w.into_inner().map(drop).map_err(|e| e.into_error()),
        }
    }
}

/// Writes `bufs` at the end of `path` (one more frame when compressed).
pub(crate) fn append_frame(
    path: &Path,
    bufs: &[Vec<u8>],
    compress: bool,
) -> Result<(), BatchError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|f| {
            let mut w = SpillWriter::new(f, compress);
            bufs.iter().try_for_each(|b| w.write_all(b))?;
            w.finish()
        })
        .map_err(|e| BatchError::io(path, e))
}

/// A spill file's frames, one stream of bytes, decompressed as they are
/// read. (The decoder reads `0` at the end of each frame; only the end of
/// the file ends the stream.)
pub(crate) struct Frames {
    frames: FrameDecoder<std::fs::File>,
    len: u64,
}

impl Read for Frames {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Seek;
        loop {
            let n = self.frames.read(buf)?;
            if n > 0 || buf.is_empty() || self.frames.get_mut().stream_position()? >= self.len {
                return Ok(n);
            }
        }
    }
}

/// A spill file's bytes, as written.
pub(crate) enum SpillReader {
    Lz4(Frames),
    Plain(BufReader<std::fs::File>),
}

impl Read for SpillReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            SpillReader::Lz4(r) => r.read(buf),
            SpillReader::Plain(r) => r.read(buf),
        }
    }
}

/// A spill file's records, decompressed as they are read when `compress`.
pub(crate) fn open_frames(path: &Path, compress: bool) -> Result<SpillReader, BatchError> {
    let file = std::fs::File::open(path).map_err(|e| BatchError::io(path, e))?;
    if !compress {
        return Ok(SpillReader::Plain(BufReader::with_capacity(1 << 20, file)));
    }
    let len = file.metadata().map_err(|e| BatchError::io(path, e))?.len();
    Ok(SpillReader::Lz4(Frames {
        frames: FrameDecoder::new(file),
        len,
    }))
}

/// The whole of a spill file that holds `bytes` of records (one that
/// reads back other than that is corrupt). A plain file is read straight
/// into a buffer of its size, which is never zeroed first.
pub(crate) fn read_spilled(path: &Path, compress: bool, bytes: u64) -> Result<Vec<u8>, BatchError> {
    let out = if compress {
        let mut out = Vec::with_capacity(bytes as usize);
        open_frames(path, true)?.read_to_end(&mut out).map(|_| out)
    } else {
        std::fs::read(path)
    }
    .map_err(|e| BatchError::io(path, e))?;
    if out.len() as u64 != bytes {
        return Err(Corrupt("a spill file shorter than written").into());
    }
    Ok(out)
}

/// Calls `f` with each framed record of a spill file that holds `bytes`
/// of them (a file that reads back shorter is corrupt, not short).
pub(crate) fn for_each_spilled(
    path: &Path,
    compress: bool,
    bytes: u64,
    mut f: impl FnMut(&[u8]) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let mut r = open_frames(path, compress)?;
    let mut rec = Vec::new();
    let mut read = 0u64;
    while let Some(n) = read_len(&mut r).map_err(|e| BatchError::io(path, e))? {
        rec.resize(n as usize, 0);
        r.read_exact(&mut rec)
            .map_err(|e| BatchError::io(path, e))?;
        read += 4 + n;
        f(&rec)?;
    }
    if read != bytes {
        return Err(Corrupt("a spill file shorter than written").into());
    }
    Ok(())
}

/// A frame's length at the reader's position; `None` at a clean end of file.
fn read_len(r: &mut impl Read) -> std::io::Result<Option<u64>> {
    let mut b = [0u8; 4];
    let mut n = 0;
    while n < 4 {
        let k = r.read(&mut b[n..])?;
        if k == 0 {
            return if n == 0 {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        n += k;
    }
    Ok(Some(u32::from_le_bytes(b) as u64))
}
