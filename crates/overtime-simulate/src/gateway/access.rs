//! The gateway's access log in overtime's recommended `log_format
//! overtime` (docs/inputs.md#nginx-access-logs, `overtime nginx-format`), with nginx's own value
//! semantics: times in seconds with millisecond resolution, `-` for a
//! variable with no value, `escape=default` (`"`, `\`, control and
//! non-ASCII bytes as `\xHH`).

use crate::error::SimulateError;
use chrono::{DateTime, Local};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The directive, as `overtime nginx-format` prints it: the parser's own.
pub(crate) use overtime_parse::nginx::OVERTIME_LOG_FORMAT;

/// What one request leaves in the access log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AccessRecord {
    pub(crate) remote_addr: String,
    /// When the line is written (the request's end).
    pub(crate) time: DateTime<Local>,
    /// `POST /v1/agent/run HTTP/1.1`.
    pub(crate) request: String,
    pub(crate) status: u16,
    pub(crate) body_bytes_sent: u64,
    pub(crate) request_time: Duration,
    /// `None`: the upstream was never tried (`-`).
    pub(crate) upstream_connect: Option<Duration>,
    pub(crate) upstream_header: Option<Duration>,
    pub(crate) upstream_response: Option<Duration>,
    pub(crate) upstream_status: Option<u16>,
    pub(crate) upstream_addr: Option<String>,
    pub(crate) request_id: String,
    pub(crate) traceparent: Option<String>,
    pub(crate) max_wait: Option<String>,
    pub(crate) llm_reason: Option<String>,
    pub(crate) llm_duration: Option<String>,
}

/// nginx's `escape=default` of a variable's value; empty is `-`.
pub(crate) fn escape(v: &str) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(v.len());
    for &b in v.as_bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Seconds with milliseconds, as nginx prints `$request_time`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

fn opt_secs(d: Option<Duration>) -> String {
    d.map(secs).unwrap_or_else(|| "-".into())
}

fn opt(v: &Option<String>) -> String {
    escape(v.as_deref().unwrap_or(""))
}

impl AccessRecord {
    /// The `overtime`-format line (no newline).
    pub(crate) fn line(&self) -> String {
        format!(
            "{} [{}] \"{}\" {} {} rt={} uct=\"{}\" uht=\"{}\" urt=\"{}\" us=\"{}\" ua=\"{}\" rid={} tp=\"{}\" mw=\"{}\" llm=\"{}\" llmd=\"{}\"",
            escape(&self.remote_addr),
            self.time.format("%Y-%m-%dT%H:%M:%S%:z"),
            escape(&self.request),
            self.status,
            self.body_bytes_sent,
            secs(self.request_time),
            opt_secs(self.upstream_connect),
            opt_secs(self.upstream_header),
            opt_secs(self.upstream_response),
            self.upstream_status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            opt(&self.upstream_addr),
            escape(&self.request_id),
            opt(&self.traceparent),
            opt(&self.max_wait),
            opt(&self.llm_reason),
            opt(&self.llm_duration),
        )
    }
}

/// The access-log file: one `write` per line, as nginx does.
#[derive(Debug)]
pub(crate) struct AccessLog {
    pub(crate) path: PathBuf,
    file: Mutex<File>,
    pub(crate) lines: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl AccessLog {
    /// Creates (truncates) the file.
    pub(crate) fn create(path: &Path) -> Result<Self, SimulateError> {
        let file = File::create(path).map_err(|source| SimulateError::File {
            what: "cannot create the access log",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(AccessLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            lines: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        })
    }

    /// Appends one record.
    pub(crate) fn write(&self, r: &AccessRecord) {
        let mut line = r.line();
        line.push('\n');
        let ok = self
            .file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(line.as_bytes())
            .is_ok();
        if ok {
            self.lines.fetch_add(1, Relaxed);
        } else {
            self.failed.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn secs_example() {
        assert_eq!(secs(std::time::Duration::from_micros(60_001_499)), "60.001");
    }

    #[test]
    fn escape_example() {
        assert_eq!(escape("a \"b\" \\c"), r#"a \x22b\x22 \x5Cc"#);
        assert_eq!(escape(""), "-");
        assert_eq!(escape("é"), r"\xC3\xA9");
    }

    #[test]
    fn a_504_line_reads_like_nginx() {
        let r = AccessRecord {
            remote_addr: "127.0.0.1".into(),
            time: Local.with_ymd_and_hms(2025, 3, 1, 12, 0, 1).unwrap(),
            request: "POST /v1/agent/run HTTP/1.1".into(),
            status: 504,
            body_bytes_sent: 160,
            request_time: Duration::from_millis(60_002),
            upstream_connect: Some(Duration::from_micros(300)),
            upstream_header: None,
            upstream_response: Some(Duration::from_millis(60_001)),
            upstream_status: Some(504),
            upstream_addr: Some("127.0.0.1:8001".into()),
            request_id: "0123456789abcdef0123456789abcdef".into(),
            traceparent: None,
            max_wait: None,
            llm_reason: None,
            llm_duration: None,
        };
        let line = r.line();
        assert!(line.starts_with("127.0.0.1 [2025-03-01T12:00:01"), "{line}");
        assert!(
            line.contains(r#""POST /v1/agent/run HTTP/1.1" 504 160 rt=60.002 uct="0.000" uht="-" urt="60.001" us="504" ua="127.0.0.1:8001" rid=0123456789abcdef0123456789abcdef tp="-" mw="-" llm="-" llmd="-""#),
            "{line}"
        );
    }

    #[test]
    fn the_format_is_the_one_of_the_spec() {
        // Every variable of docs/inputs.md#nginx-access-logs's `overtime` format, in order.
        let vars: Vec<&str> = OVERTIME_LOG_FORMAT
            .split('$')
            .skip(1)
            .map(|v| {
                v.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .next()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            vars,
            [
                "remote_addr",
                "time_iso8601",
                "request",
                "status",
                "body_bytes_sent",
                "request_time",
                "upstream_connect_time",
                "upstream_header_time",
                "upstream_response_time",
                "upstream_status",
                "upstream_addr",
                "request_id",
                "http_traceparent",
                "http_x_max_wait",
                "upstream_http_x_llm_reason",
                "upstream_http_x_llm_duration"
            ]
        );
    }
}
