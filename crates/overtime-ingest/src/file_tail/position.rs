//! A file tail's checkpoint: `inode=<n> offset=<bytes> line=<n>`.
//!
//! Design rules:
//! - The position names the file by inode, not by path: after a rotation
//!   the path points at another file, the inode does not lie.
//! - `offset` is always the end of the last whole line delivered, and
//!   `line` the number of lines delivered from that inode, so a restart
//!   seeks there and numbers the next line `line + 1`.

use std::fmt;
use std::str::FromStr;

/// Where a file tail is: the file (inode), the byte offset just after the
/// last delivered line, and how many lines of that file were delivered.
///
/// ```
/// use overtime_ingest::file_tail::FilePosition;
/// let p: FilePosition = "inode=42 offset=1048576 line=4096".parse().unwrap();
/// assert_eq!(p, FilePosition { inode: 42, offset: 1_048_576, line: 4096 });
/// assert_eq!(p.to_string(), "inode=42 offset=1048576 line=4096");
/// assert!("offset=1".parse::<FilePosition>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FilePosition {
    /// The file's inode number.
    pub inode: u64,
    /// Bytes from the start of the file to just after the last delivered
    /// line.
    pub offset: u64,
    /// Lines of that file delivered (the next one is `line + 1`).
    pub line: u64,
}

/// A checkpoint string that is not `inode=<n> offset=<n> line=<n>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad file checkpoint `{0}`: expected `inode=<n> offset=<bytes> line=<n>`")]
pub struct BadPosition(pub String);

impl FromStr for FilePosition {
    type Err = BadPosition;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPosition(s.to_string());
        let (mut inode, mut offset, mut line) = (None, None, None);
        for part in s.split_ascii_whitespace() {
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let v: u64 = v.parse().map_err(|_| bad())?;
            match k {
                "inode" => inode = Some(v),
                "offset" => offset = Some(v),
                "line" => line = Some(v),
                _ => return Err(bad()),
            }
        }
        Ok(FilePosition {
            inode: inode.ok_or_else(bad)?,
            offset: offset.ok_or_else(bad)?,
            line: line.ok_or_else(bad)?,
        })
    }
}

impl fmt::Display for FilePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "inode={} offset={} line={}",
            self.inode, self.offset, self.line
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let p = FilePosition {
            inode: u64::MAX,
            offset: 0,
            line: 7,
        };
        assert_eq!(p.to_string().parse::<FilePosition>(), Ok(p));
        for bad in ["", "inode=1 offset=2", "inode=x offset=1 line=1", "a=1"] {
            assert!(bad.parse::<FilePosition>().is_err(), "{bad}");
        }
        assert_eq!(
            "line=3  offset=2 inode=1".parse(),
            Ok(FilePosition {
                inode: 1,
                offset: 2,
                line: 3
            })
        );
    }
}
