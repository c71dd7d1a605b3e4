//! Reading gateway rows back by (file, line): the bodies of the lean rows
//! whose request turned out to need a verdict (the batch engine's lean
//! rows). The file is read again from the start — decompressed the same
//! way, lines numbered the same way as the first read — and only the lines
//! asked for are parsed, by the same parser, into the same rows.

use super::Job;
use super::files;
use crate::{BatchError, RefetchHook};
use overtime_parse::record::{Decoder, RecordFormat, Records};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Rows handed to the engine at a time.
const BATCH_ROWS: usize = 4096;

/// The hook that reads rows back from `jobs` (indexed by their `file`).
pub(super) fn hook(jobs: &[Job]) -> RefetchHook {
    let files: Vec<(u32, PathBuf, RecordFormat)> = jobs
        .iter()
        .map(|j| (j.file, j.path.clone(), j.format.clone()))
        .collect();
    Arc::new(move |file, lines, sink| {
        let (_, path, format) = files
            .iter()
            .find(|f| f.0 == file)
            .ok_or_else(|| BatchError::Input(format!("no input file number {file}")))?;
        read_lines(path, format, lines, sink).map_err(|e| match e {
            BatchError::Input(m) if !m.starts_with(&*path.to_string_lossy()) => {
                BatchError::Input(format!("{}: {m}", path.display()))
            }
            e => e,
        })
    })
}

/// Parses lines `lines` (1-based, ascending) of `path` and hands them to
/// `sink` in batches. A line past the end is not handed (the engine says
/// which one is missing).
pub fn read_lines(
    path: &Path,
    format: &RecordFormat,
    lines: &[u64],
    sink: &mut dyn FnMut(&arrow::record_batch::RecordBatch) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let failed = |e: std::io::Error| {
        BatchError::Input(format!("{}: reading rows back: {e}", path.display()))
    };
    let file = files::open(path, Arc::new(AtomicU64::new(0))).map_err(failed)?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut decoder = Decoder::new(format, &path.display().to_string());
    let mut pending = 0usize;
    let mut flush = |decoder: &mut Decoder| -> Result<(), BatchError> {
        if let Records::Gateway(b) = decoder.finish().records
            && b.num_rows() > 0
        {
            sink(&b)?;
        }
        Ok(())
    };
    // `line`: the number of the line that starts at the reader's position.
    let (mut line, mut next) = (1u64, 0usize);
    let mut partial: Vec<u8> = Vec::new();
    while next < lines.len() {
        let data = r.fill_buf().map_err(failed)?;
        if data.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < data.len() && next < lines.len() {
            let want = lines[next];
            if line < want {
                // Skip to the start of the wanted line.
                let mut skipped = 0;
                let mut end = data.len();
                for j in memchr::memchr_iter(b'\n', &data[pos..]) {
                    skipped += 1;
                    if skipped == want - line {
                        end = pos + j + 1;
                        break;
                    }
                }
                line += skipped;
                pos = end;
                continue;
            }
            match memchr::memchr(b'\n', &data[pos..]) {
                Some(j) => {
                    partial.extend_from_slice(&data[pos..pos + j]);
                    decoder.push_record(&partial, want);
                    partial.clear();
                    pos += j + 1;
                    line += 1;
                    next += 1;
                    pending += 1;
                }
                None => {
                    partial.extend_from_slice(&data[pos..]);
                    pos = data.len();
                }
            }
        }
        r.consume(pos);
        if pending >= BATCH_ROWS {
            flush(&mut decoder)?;
            pending = 0;
        }
    }
    // A last line without its newline is a line too (as on the first read).
    if !partial.is_empty() && next < lines.len() && lines[next] == line {
        decoder.push_record(&partial, line);
        next += 1;
    }
    if let Some(l) = lines.get(next) {
        return Err(BatchError::Input(format!(
            "{}: line {l} is past the end of the file (did it change during the run?)",
            path.display()
        )));
    }
    flush(&mut decoder)
}
