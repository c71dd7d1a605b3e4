//! Reading input files: whole files (gzip detected by its magic), split at
//! line boundaries into one chunk per worker thread, parsed in parallel.
//! Line numbers stay those of the file.

use anyhow::{Context, Result};
use arrow::record_batch::RecordBatch;
use overtime_model::{RejectedRecord, SpanRecord};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{self, ParsedSpans, SpanFormat};
use std::io::Read;
use std::path::Path;

/// The whole file, gunzipped when it is gzip.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{} is not valid gzip", path.display()))?;
        return Ok(out);
    }
    Ok(raw)
}

/// Splits `data` into at most `n` chunks ending at a newline, each with
/// the file line number of its first line.
pub fn chunks(data: &[u8], n: usize) -> Vec<(&[u8], u64)> {
    let n = n.max(1);
    let target = data.len() / n + 1;
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    let mut line = 1u64;
    while start < data.len() {
        let mut end = (start + target).min(data.len());
        if end < data.len() {
            end = match data[end..].iter().position(|&b| b == b'\n') {
                Some(p) => end + p + 1,
                None => data.len(),
            };
        }
        let chunk = &data[start..end];
        out.push((chunk, line));
        line += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        start = end;
    }
    out
}

/// What one nginx log gave.
pub struct GatewayInput {
    pub gateway: Vec<RecordBatch>,
    pub rejected: Vec<RecordBatch>,
    pub rows: usize,
    pub rejected_rows: usize,
    pub rejected_by_reason: std::collections::BTreeMap<String, u64>,
}

pub fn parse_nginx(
    data: &[u8],
    format: &LogFormat,
    source: &str,
    layer: u32,
    threads: usize,
) -> GatewayInput {
    let parts = chunks(data, threads);
    let results: Vec<GatewayParser> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|(chunk, first)| {
                let format = format.clone();
                s.spawn(move || {
                    let mut p = GatewayParser::new(format, source, layer);
                    p.push_bytes(chunk, *first);
                    p
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("nginx parser thread panicked"))
            .collect()
    });
    let mut out = GatewayInput {
        gateway: vec![],
        rejected: vec![],
        rows: 0,
        rejected_rows: 0,
        rejected_by_reason: Default::default(),
    };
    for mut p in results {
        out.rows += p.rows();
        out.rejected_rows += p.rejected_rows();
        for (k, v) in p.rejected_by_reason() {
            *out.rejected_by_reason.entry(k.clone()).or_default() += v;
        }
        let (g, r) = p.finish();
        out.gateway.push(g);
        out.rejected.push(r);
    }
    out
}

/// Parses a span file; line-based formats in parallel chunks.
pub fn parse_spans(data: &[u8], format: SpanFormat, source: &str, threads: usize) -> ParsedSpans {
    if matches!(format, SpanFormat::OtlpProto) {
        return spans::parse_span_bytes(format, data, source);
    }
    let parts = chunks(data, threads);
    let results: Vec<ParsedSpans> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|(chunk, first)| {
                s.spawn(move || {
                    let mut out = ParsedSpans::default();
                    for (i, line) in chunk.split(|&b| b == b'\n').enumerate() {
                        // Blank lines, CRLF and a stray OTLP line in a JSONL
                        // file are handled by the per-line reader.
                        spans::parse_span_line(format, line, source, first + i as u64, &mut out);
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("span parser thread panicked"))
            .collect()
    });
    let mut all = ParsedSpans::default();
    for r in results {
        all.extend(r);
    }
    all
}

/// Spans and rejections gathered from every span file.
#[derive(Default)]
pub struct SpanInputs {
    pub spans: Vec<SpanRecord>,
    pub rejected: Vec<RejectedRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn chunks_keep_line_numbers() {
        let data = b"a\nb\nc\nd\ne";
        let parts = chunks(data, 3);
        let joined: Vec<u8> = parts.iter().flat_map(|(c, _)| c.iter().copied()).collect();
        assert_eq!(joined, data);
        for (c, first) in &parts {
            let expect = (c[0] - b'a') as u64 + 1;
            assert_eq!(*first, expect);
        }
        assert!(chunks(b"", 4).is_empty());
    }
}
