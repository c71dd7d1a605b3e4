//! Which files an input argument names, in which order, and how to read
//! them: a file, a glob (`access.log*`) or a directory, expanded to files
//! in rotation order (oldest first: `access.log.3.gz`, `access.log.2.gz`,
//! `access.log.1`, `access.log`); gzip and zstd undone on the fly, by
//! their magic bytes rather than their names.

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file name's compression suffix, if any.
fn strip_compression(name: &str) -> &str {
    for ext in [".gz", ".zst", ".zstd"] {
        if let Some(s) = name.strip_suffix(ext) {
            return s;
        }
    }
    name
}

/// Where a file sits in its rotation set: dated copies (`-20251129`) by
/// date, then numbered ones from the highest number (oldest) down, then
/// the live file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Rotation {
    Dated(String),
    Numbered(std::cmp::Reverse<u64>),
    Live,
}

/// (stem shared by the set, place in it) of a file name.
fn rotation_key(name: &str) -> (String, Rotation) {
    let base = strip_compression(name);
    if let Some((stem, n)) = base.rsplit_once('.')
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = n.parse()
    {
        return (stem.to_string(), Rotation::Numbered(std::cmp::Reverse(n)));
    }
    if let Some((stem, d)) = base.rsplit_once('-')
        && d.len() >= 6
        && d.bytes().all(|b| b.is_ascii_digit())
    {
        return (stem.to_string(), Rotation::Dated(d.to_string()));
    }
    (base.to_string(), Rotation::Live)
}

/// Sorts files into rotation order (grouped by their set).
pub fn rotation_order(files: &mut [PathBuf]) {
    files.sort_by_cached_key(|p| {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (stem, rot) = rotation_key(&name);
        (p.parent().map(Path::to_path_buf), stem, rot)
    });
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The files an input argument names, in rotation order; `Err` says why
/// there are none.
pub fn expand(arg: &Path) -> Result<Vec<PathBuf>, String> {
    if arg.is_file() {
        return Ok(vec![arg.to_path_buf()]);
    }
    let mut files = Vec::new();
    if arg.is_dir() {
        let entries = std::fs::read_dir(arg).map_err(|e| format!("{}: {e}", arg.display()))?;
        for e in entries {
            // An entry that cannot be read is said, not skipped unseen.
            let e = e.map_err(|e| format!("{}: {e}", arg.display()))?;
            let p = e.path();
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            if p.is_file() && !hidden {
                files.push(p);
            }
        }
        if files.is_empty() {
            return Err(format!("{}: an empty directory", arg.display()));
        }
    } else {
        let text = arg.to_string_lossy();
        if !is_glob(&text) {
            return Err(format!("{}: no such file", arg.display()));
        }
        let paths = glob::glob(&text).map_err(|e| format!("{text}: not a usable glob ({e})"))?;
        for p in paths {
            let p = p.map_err(|e| format!("{text}: {e}"))?;
            if p.is_file() {
                files.push(p);
            }
        }
        if files.is_empty() {
            return Err(format!("{text}: matches no file"));
        }
    }
    rotation_order(&mut files);
    Ok(files)
}

/// How a file's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// By the file's first bytes.
    pub fn sniff(path: &Path) -> std::io::Result<Self> {
        let mut magic = [0u8; 4];
        let mut f = std::fs::File::open(path)?;
        let mut n = 0;
        while n < 4 {
            let k = f.read(&mut magic[n..])?;
            if k == 0 {
                break;
            }
            n += k;
        }
        Ok(if n >= 2 && magic[..2] == [0x1f, 0x8b] {
            Compression::Gzip
        } else if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
            Compression::Zstd
        } else {
            Compression::None
        })
    }

    /// A guess of how much larger the text is than the file (for sizing
    /// partitions; a wrong guess costs a re-split, not a wrong result).
    pub fn ratio(self) -> u64 {
        match self {
            Compression::None => 1,
            Compression::Gzip => 8,
            Compression::Zstd => 10,
        }
    }
}

/// Counts the bytes read from the file (compressed), for progress.
struct Counting {
    inner: std::fs::File,
    read: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The file's text, decompressed as it is read; bytes read from disk are
/// added to `read`.
pub fn open(path: &Path, read: Arc<AtomicU64>) -> std::io::Result<Box<dyn Read + Send>> {
    let kind = Compression::sniff(path)?;
    let file = Counting {
        inner: std::fs::File::open(path)?,
        read,
    };
    Ok(match kind {
        Compression::None => Box::new(file),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(
            1 << 20,
            file,
        ))),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(
            BufReader::with_capacity(1 << 20, file),
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_files_sort_oldest_first_and_the_live_file_last() {
        let mut v: Vec<PathBuf> = [
            "access.log",
            "access.log.1",
            "access.log.10.gz",
            "access.log.2.gz",
            "edge.log-20251128.gz",
            "edge.log",
            "edge.log-20251129",
            "access.log.3.zst",
        ]
        .iter()
        .map(|s| PathBuf::from("/l").join(s))
        .collect();
        rotation_order(&mut v);
        let names: Vec<_> = v
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "access.log.10.gz",
                "access.log.3.zst",
                "access.log.2.gz",
                "access.log.1",
                "access.log",
                "edge.log-20251128.gz",
                "edge.log-20251129",
                "edge.log",
            ]
        );
    }
}
