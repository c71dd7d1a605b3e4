//! Is the log format the user gave the one the file was written in?
//!
//! A format that matches nothing must not "succeed": when most lines of a
//! gateway log are rejected, or the lines parse but the format gives neither
//! `$status` nor `$request_time` (so no request can be seen to fail or to
//! take long), `diagnose` stops with one line that says so, shows the first
//! rejected line and names the built-in format the first lines match, if
//! any. The same holds for a span file: when most of its records are
//! rejected, `diagnose` stops naming the file, how many were rejected and
//! why the first one was. `--allow-rejects` diagnoses anyway (the
//! rejections stay counted).

use overtime_model::GatewayRows;
use overtime_parse::nginx::{GatewayParser, LogFormat};
use std::collections::BTreeMap;
use std::path::Path;

/// Built-in formats tried on the first lines, in this order (a name the
/// parser does not know is skipped).
const BUILTINS: [&str; 3] = ["overtime", "ingress-nginx", "combined"];
/// Lines tried against the built-ins.
const SAMPLE_LINES: usize = 50;

/// What one gateway log gave, for the check.
pub struct Parsed<'a> {
    pub path: &'a Path,
    /// The format as the user named it (a built-in name or the body).
    pub format_label: &'a str,
    /// Whether the format has `$status` or `$request_time` at all.
    pub format_has_status_or_time: bool,
    pub rows: usize,
    pub rejected_rows: usize,
    /// Some parsed row has a status or a request time.
    pub gives_status_or_time: bool,
    /// The first rejected line: (line, raw text).
    pub first_rejected: Option<(u64, String)>,
}

/// `Err(message)` when the format does not fit the file (see the module
/// header); the message is one line. `head` is the start of the file.
pub fn check(p: &Parsed, head: &[u8]) -> Result<(), String> {
    let total = p.rows + p.rejected_rows;
    if total == 0 {
        return Ok(());
    }
    // A format with neither variable can never show a failure: say that
    // first, whatever else its lines did.
    let no_status_or_time = !p.format_has_status_or_time || !p.gives_status_or_time;
    let problem = if !p.format_has_status_or_time
        || (p.rejected_rows * 2 <= total && no_status_or_time)
    {
        format!(
            "the format {} gives neither $status nor $request_time for any of the {} lines read, \
             so no request can be seen to fail",
            short(p.format_label),
            total
        )
    } else if p.rejected_rows * 2 > total {
        format!(
            "{} of {total} lines do not match the format {}",
            p.rejected_rows,
            short(p.format_label)
        )
    } else {
        return Ok(());
    };
    let first = p
        .first_rejected
        .as_ref()
        .map(|(line, raw)| format!("; first rejected, line {line}: {}", short(raw)))
        .unwrap_or_default();
    let likely = match likely_format(head) {
        Some((name, _, _)) if name == p.format_label => String::new(),
        Some((name, n, of)) => format!(
            "; {n} of the first {of} lines match the built-in format `{name}`: --log-format {name}"
        ),
        None => "; no built-in format matches its first lines either: give the log_format body \
                 as written in nginx.conf (--log-format, or --nginx-conf with --format-name)"
            .into(),
    };
    Err(format!(
        "{}: {problem}{first}{likely} (or --allow-rejects to diagnose anyway)",
        p.path.display()
    ))
}

/// What one span file gave, for the check.
pub struct SpansParsed<'a> {
    pub path: &'a Path,
    /// The flag the file was given with (`--spans`, `--otlp-json`, …).
    pub flag: &'a str,
    /// Spans read.
    pub records: usize,
    /// Records rejected (a line, or a message, each).
    pub rejected: usize,
    /// Rejections by reason code.
    pub reasons: &'a BTreeMap<String, u64>,
    /// The first rejected record: (position, reason code, detail) and its
    /// raw text.
    pub first_rejected: Option<((String, String, String), &'a str)>,
}

/// `Err(message)` when most records of a span file are rejected: the file
/// is likely not spans, or not in the format of the flag it was given
/// with. The message is one line: the file, the count, the first rejected
/// record's position and reason.
pub fn check_spans(p: &SpansParsed) -> Result<(), String> {
    let total = p.records + p.rejected;
    if total == 0 || p.rejected * 2 <= total {
        return Ok(());
    }
    let first = match &p.first_rejected {
        Some(((position, reason, detail), raw)) => format!(
            "; first rejected, {position}: {reason} ({}): {}",
            detail.trim(),
            short(raw)
        ),
        None => {
            let r: Vec<String> = p.reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("; rejected as {}", r.join(", "))
        }
    };
    Err(format!(
        "{}: {} of {total} span records given with {} are rejected{first}; \
         --spans reads JSONL spans, --otlp-json OTLP JSON, --otlp-proto OTLP protobuf \
         (or --allow-rejects to diagnose anyway)",
        p.path.display(),
        p.rejected,
        p.flag,
    ))
}

/// The built-in format that accepts most of the first lines (at least
/// half of them, with a status): (name, lines accepted, lines tried).
pub fn likely_format(data: &[u8]) -> Option<(&'static str, usize, usize)> {
    let mut end = 0;
    let mut lines = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            lines += 1;
            end = i + 1;
            if lines == SAMPLE_LINES {
                break;
            }
        }
    }
    if lines < SAMPLE_LINES {
        end = data.len();
        lines += usize::from(data.last().is_some_and(|b| *b != b'\n'));
    }
    let sample = &data[..end];
    let mut best: Option<(&'static str, usize)> = None;
    for name in BUILTINS {
        let Some(format) = LogFormat::builtin(name) else {
            continue;
        };
        let mut p = GatewayParser::new(format, "sample", 0);
        p.push_bytes(sample, 1);
        let (g, _) = p.finish();
        let ok = GatewayRows::new(&g)
            .map(|r| (0..r.len()).filter(|&i| r.status(i).is_some()).count())
            .unwrap_or(0);
        if ok * 2 >= lines.max(1) && best.is_none_or(|(_, n)| ok > n) {
            best = Some((name, ok));
        }
    }
    best.map(|(name, n)| (name, n, lines))
}

/// A long format body or line, cut for a one-line message.
fn short(s: &str) -> String {
    let s = s.trim();
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(records: usize, rejected: usize) -> Result<(), String> {
        let reasons = BTreeMap::from([("bad_json".to_string(), rejected as u64)]);
        check_spans(&SpansParsed {
            path: Path::new("/data/spans.jsonl"),
            flag: "--spans",
            records,
            rejected,
            reasons: &reasons,
            first_rejected: Some((
                (
                    "line 1".into(),
                    "bad_json".into(),
                    "expected value at line 1 column 1".into(),
                ),
                "not json",
            )),
        })
    }

    #[test]
    fn a_span_file_most_of_whose_records_are_rejected_is_an_error() {
        let err = spans(10, 11).unwrap_err();
        assert!(
            err.starts_with("/data/spans.jsonl: 11 of 21 span records"),
            "{err}"
        );
        assert!(err.contains("first rejected, line 1: bad_json"), "{err}");
        assert!(err.contains("--allow-rejects"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn a_span_file_with_half_or_fewer_rejected_passes() {
        assert_eq!(spans(10, 10), Ok(()));
        assert_eq!(spans(100, 1), Ok(()));
        assert_eq!(spans(0, 0), Ok(()));
    }
}
