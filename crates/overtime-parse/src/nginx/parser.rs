//! [`GatewayParser`]: access-log lines → `gateway_requests` and `rejected`.
//!
//! Per line: UTF-8 check, cut by the compiled [`Plan`](super::plan::Plan)
//! (byte searches for the literals, no regex), unescape only the values
//! that contain a backslash (into a reused buffer), read and validate every
//! typed value, and only then append `&str` slices straight into the Arrow
//! builders, so a bad line never leaves a half-written row.

use super::bytes::{find_byte, has_byte};
use super::checks::{detail, passes};
use super::columns::presized;
use super::format::{Escape, LogFormat};
use super::plan::{Col, Plan, Role};
use super::request::split_request;
use super::search::Scratch;
use super::values::{
    ListItems, duration_ms, is_null, iso8601_us, msec_us, secs_to_ms, time_local_us, trace_id,
    uint, unescape_default, unescape_json, utf8_or_escaped,
};
use arrow::record_batch::RecordBatch;
use overtime_model::{GatewayColumns, RejectedColumns, RejectedRecord, sum_known};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Parses nginx access-log lines of one format and one source into Arrow.
///
/// ```
/// use overtime_parse::nginx::{GatewayParser, LogFormat};
/// use overtime_model::{gateway_records, rejected_records};
/// let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
/// let log = concat!(
///     "10.0.0.1 [2026-11-29T10:00:00+00:00] \"POST /v1/chat HTTP/1.1\" 504 167 rt=60.001 ",
///     "uct=\"0.001, 0.000\" uht=\"-, -\" urt=\"30.000, 30.001\" us=\"504, 504\" ",
///     "ua=\"10.0.0.5:8000, 10.0.0.6:8000\" rid=4bf92f3577b34da6a3ce929d0e0e4736 ",
///     "tp=\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\" mw=\"120s\" ",
///     "llm=\"kv_cache_build=3.2s,decode_loop=28.1s\" llmd=\"47.2s\"\n",
///     "this is not an access-log line\n",
/// );
/// assert_eq!(p.push_bytes(log.as_bytes(), 1), 2);
/// let (good, bad) = p.finish();
/// let r = &gateway_records(&good).unwrap()[0];
/// assert_eq!(r.status, Some(504));
/// assert_eq!(r.request_time_ms, Some(60001.0));
/// assert_eq!(r.upstream_response_ms, vec![Some(30000.0), Some(30001.0)]);
/// assert_eq!(r.upstream_header_ms, vec![None, None]);
/// assert_eq!(r.trace_id.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
/// assert_eq!(r.max_wait_ms, Some(120000.0));
/// assert_eq!(r.llm_duration_ms, Some(47200.0));
/// let rej = &rejected_records(&bad).unwrap()[0];
/// assert_eq!((rej.line, rej.reason.as_str()), (2, "format_mismatch"));
/// ```
pub struct GatewayParser {
    plan: Plan,
    escape: Escape,
    source: String,
    layer: u32,
    cols: GatewayColumns,
    /// Rejections since the last finish, as records: few, and a caller
    /// that rewrites their position (Kafka) needs no Arrow round trip.
    rejected: Vec<RejectedRecord>,
    by_reason: BTreeMap<String, u64>,
    total_rows: u64,
    total_rejected: u64,
    // Scratch reused across lines.
    spans: Vec<(usize, usize)>,
    scratch: String,
    tmp: Vec<u8>,
    lists: Lists,
    cuts: Scratch,
}

/// Per-try numeric values of the current line.
#[derive(Default)]
struct Lists {
    connect: Vec<Option<f64>>,
    header: Vec<Option<f64>>,
    response: Vec<Option<f64>>,
    status: Vec<Option<u16>>,
}

/// The typed, validated values of one line, borrowing the line and the
/// unescape buffer.
#[derive(Default)]
struct Row<'a> {
    time_us: i64,
    precision_us: i64,
    remote_addr: Option<&'a str>,
    request: (Option<&'a str>, Option<&'a str>, Option<&'a str>),
    /// `$request` as written, when nginx's request-line grammar cannot
    /// split it (kept in `extra` as `request`).
    request_raw: Option<&'a str>,
    method: Option<&'a str>,
    uri: Option<&'a str>,
    protocol: Option<&'a str>,
    status: Option<u16>,
    bytes: Option<i64>,
    request_time_ms: Option<f64>,
    up_status_raw: Option<&'a str>,
    up_addr: Option<&'a str>,
    request_id: Option<&'a str>,
    traceparent: Option<&'a str>,
    trace_id: Option<Cow<'a, str>>,
    max_wait_ms: Option<f64>,
    llm_reason: Option<&'a str>,
    llm_duration_ms: Option<f64>,
    /// Header values that did not parse: kept raw in `extra` by name.
    unparsed: [Option<(&'static str, &'a str)>; 2],
}

/// A rejection: reason code and detail.
type Reject = (&'static str, String);

fn bad_number(name: &str, v: &str) -> Reject {
    let shown: String = v.chars().take(64).collect();
    ("bad_number", format!("${name}: {shown:?} is not a number"))
}

fn opt(v: &str) -> Option<&str> {
    (!is_null(v)).then_some(v)
}

fn times(v: &str, name: &str, out: &mut Vec<Option<f64>>) -> Result<(), Reject> {
    for item in ListItems::new(v) {
        out.push(secs_to_ms(item).map_err(|_| bad_number(name, item))?);
    }
    Ok(())
}

/// Marks a span whose value was unescaped into the scratch buffer.
const IN_SCRATCH: usize = 1 << (usize::BITS - 1);

/// The values of a cut line: spans into the line, or (flagged with
/// [`IN_SCRATCH`]) into the unescape buffer.
#[derive(Clone, Copy)]
struct Values<'a> {
    line: &'a str,
    scratch: &'a str,
    spans: &'a [(usize, usize)],
}

impl<'a> Values<'a> {
    #[inline]
    fn get(&self, occ: usize) -> &'a str {
        let (a, b) = self.spans[occ];
        if a & IN_SCRATCH != 0 {
            self.scratch.get(a & !IN_SCRATCH..b).unwrap_or("")
        } else {
            self.line.get(a..b).unwrap_or("")
        }
    }
}

/// Reads and validates every value of a cut line.
fn read_row<'a>(plan: &Plan, vals: Values<'a>, lists: &mut Lists) -> Result<Row<'a>, Reject> {
    let mut r = Row::default();
    for (occ, role) in plan.roles.iter().enumerate() {
        let Role::Col(col) = *role else { continue };
        let v = vals.get(occ);
        let name = plan.names[occ].as_str();
        match col {
            Col::RemoteAddr => r.remote_addr = opt(v),
            Col::Request => {
                r.request = split_request(v);
                if r.request.0.is_none() && !is_null(v) {
                    r.request_raw = Some(v);
                }
            }
            Col::Method => r.method = opt(v),
            Col::Uri => r.uri = opt(v),
            Col::Protocol => r.protocol = opt(v),
            Col::Status => r.status = uint(v).map_err(|_| bad_number(name, v))?,
            Col::Bytes => r.bytes = uint(v).map_err(|_| bad_number(name, v))?,
            Col::RequestTime => {
                r.request_time_ms = secs_to_ms(v).map_err(|_| bad_number(name, v))?
            }
            Col::UpConnect => times(v, name, &mut lists.connect)?,
            Col::UpHeader => times(v, name, &mut lists.header)?,
            Col::UpResponse => times(v, name, &mut lists.response)?,
            Col::UpStatus => {
                r.up_status_raw = opt(v);
                for item in ListItems::new(v) {
                    lists
                        .status
                        .push(uint(item).map_err(|_| bad_number(name, item))?);
                }
            }
            Col::UpAddr => r.up_addr = opt(v),
            Col::RequestId => r.request_id = opt(v),
            Col::Traceparent => {
                r.traceparent = opt(v);
                r.trace_id = r.traceparent.and_then(trace_id);
            }
            Col::MaxWait => {
                r.max_wait_ms = opt(v).and_then(duration_ms);
                if r.max_wait_ms.is_none() && !is_null(v) {
                    r.unparsed[0] = Some((name_static(col), v));
                }
            }
            Col::LlmReason => r.llm_reason = opt(v),
            Col::LlmDuration => {
                r.llm_duration_ms = opt(v).and_then(duration_ms);
                if r.llm_duration_ms.is_none() && !is_null(v) {
                    r.unparsed[1] = Some((name_static(col), v));
                }
            }
            Col::Msec | Col::TimeIso | Col::TimeLocal => {
                let (t, p) = match col {
                    Col::Msec => (msec_us(v), 1_000),
                    Col::TimeIso => (iso8601_us(v), 1_000_000),
                    _ => (time_local_us(v), 1_000_000),
                };
                r.time_us = t.ok_or_else(|| {
                    let shown: String = v.chars().take(64).collect();
                    ("bad_time", format!("${name}: {shown:?} is not a time"))
                })?;
                r.precision_us = p;
            }
        }
    }
    // The row starts at `time - request_time`: an absurd `$request_time`
    // (`1e300`) with a time before 1970 would not fit in i64 µs (found by
    // fuzzing). Computed exactly as `append` and the model's `start_us` do.
    let rt_us = (r.request_time_ms.unwrap_or(0.0) * 1000.0).round() as i64;
    if r.time_us.checked_sub(rt_us).is_none() {
        let ms = r.request_time_ms.unwrap_or(0.0);
        return Err((
            "bad_number",
            format!(
                "$request_time: {ms} ms is out of range for a request ending at {} µs",
                r.time_us
            ),
        ));
    }
    Ok(r)
}

fn name_static(col: Col) -> &'static str {
    match col {
        Col::MaxWait => "http_x_max_wait",
        _ => "upstream_http_x_llm_duration",
    }
}

impl GatewayParser {
    /// A parser for lines of `format` read from `source` (the layer's name,
    /// written in every row and rejection), `layer` 0 for the outermost
    /// gateway.
    pub fn new(format: LogFormat, source: &str, layer: u32) -> Self {
        GatewayParser {
            plan: Plan::new(&format),
            escape: format.escape(),
            source: source.to_string(),
            layer,
            cols: GatewayColumns::new(),
            rejected: Vec::new(),
            by_reason: BTreeMap::new(),
            total_rows: 0,
            total_rejected: 0,
            spans: Vec::new(),
            scratch: String::new(),
            tmp: Vec::new(),
            lists: Lists::default(),
            cuts: Scratch::default(),
        }
    }

    /// One line without its trailing newline (a trailing `'\r'` is
    /// stripped). A good line is appended to the gateway columns; a bad one
    /// becomes a rejected row with its reason (`format_mismatch`,
    /// `bad_time`, `bad_number`, `not_utf8`), line number and raw bytes.
    /// Empty and whitespace-only lines are skipped. Never panics.
    ///
    /// Invalid UTF-8 is rejected for `escape=default` (nginx escapes every
    /// non-ASCII byte there, so the line is corrupt); with `escape=json` or
    /// `none` nginx writes request bytes raw, so the line is kept with each
    /// byte that is not UTF-8 written `\xHH` (as `escape=default` would):
    /// no byte is lost, in the values or in the rejection's `raw`.
    ///
    /// ```
    /// use overtime_parse::nginx::{GatewayParser, LogFormat};
    /// let mut p = GatewayParser::new(LogFormat::compile("'$status rt=$request_time'").unwrap(), "edge", 0);
    /// p.push_line(b"504 rt=60.001\r", 1);
    /// p.push_line(b"504 rt=slow", 2);
    /// p.push_line(b"   ", 3);
    /// assert_eq!((p.rows(), p.rejected_rows()), (1, 1));
    /// assert_eq!(p.rejected_by_reason()["bad_number"], 1);
    /// ```
    pub fn push_line(&mut self, line: &[u8], line_no: u64) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match std::str::from_utf8(line) {
            Ok(s) => self.push_str(s, line, line_no),
            Err(e) if self.escape == Escape::Default => self.reject(
                line_no,
                "not_utf8",
                format!(
                    "invalid UTF-8 at byte {} (escape=default never writes raw non-ASCII bytes)",
                    e.valid_up_to()
                ),
                utf8_or_escaped(line).as_bytes(),
            ),
            Err(_) => {
                let s = utf8_or_escaped(line);
                self.push_str(&s, s.as_bytes(), line_no);
            }
        }
    }

    /// Splits `data` on `'\n'` and pushes each line, numbering them from
    /// `first_line_no`; a last line without `'\n'` is parsed too. Returns
    /// the number of lines consumed.
    ///
    /// ```
    /// use overtime_parse::nginx::{GatewayParser, LogFormat};
    /// let mut p = GatewayParser::new(LogFormat::compile("$status").unwrap(), "t", 0);
    /// assert_eq!(p.push_bytes(b"200\r\n\n504", 10), 3);
    /// assert_eq!(p.rows(), 2);
    /// ```
    pub fn push_bytes(&mut self, data: &[u8], first_line_no: u64) -> u64 {
        let mut n = 0;
        let mut rest = data;
        while !rest.is_empty() {
            let (line, next) = match find_byte(rest, b'\n') {
                Some(k) => (&rest[..k], &rest[k + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            self.push_line(line, first_line_no + n);
            n += 1;
            rest = next;
        }
        n
    }

    /// Gateway rows buffered since the last [`finish`](Self::finish).
    pub fn rows(&self) -> usize {
        self.cols.len()
    }

    /// Rejected rows buffered since the last [`finish`](Self::finish).
    pub fn rejected_rows(&self) -> usize {
        self.rejected.len()
    }

    /// Gateway rows produced since creation.
    pub fn total_rows(&self) -> u64 {
        self.total_rows
    }

    /// Rejections since creation.
    pub fn total_rejected(&self) -> u64 {
        self.total_rejected
    }

    /// Rejections by reason code since creation.
    pub fn rejected_by_reason(&self) -> &BTreeMap<String, u64> {
        &self.by_reason
    }

    /// Takes what has been built so far as (`gateway_requests` batch,
    /// `rejected` batch) and resets the builders; counts since creation
    /// ([`rejected_by_reason`](Self::rejected_by_reason),
    /// [`total_rows`](Self::total_rows)) are kept. The next builders are
    /// sized like this batch; finishing every ~8192 rows (DataFusion's batch
    /// size) keeps their memory in the allocator's reuse range.
    ///
    /// ```
    /// use overtime_parse::nginx::{GatewayParser, LogFormat};
    /// use overtime_model::{gateway_schema, rejected_schema};
    /// let mut p = GatewayParser::new(LogFormat::builtin("combined").unwrap(), "edge", 0);
    /// p.push_bytes(b"garbage\n", 1);
    /// let (good, bad) = p.finish();
    /// assert_eq!((good.schema(), bad.schema()), (gateway_schema(), rejected_schema()));
    /// assert_eq!((good.num_rows(), bad.num_rows()), (0, 1));
    /// assert_eq!((p.rejected_rows(), p.total_rejected()), (0, 1));
    /// ```
    pub fn finish(&mut self) -> (RecordBatch, RecordBatch) {
        let (good, rejected) = self.finish_records();
        let mut cols = RejectedColumns::new();
        rejected.iter().for_each(|r| cols.append(r));
        (good, cols.finish())
    }

    /// As [`finish`](Self::finish), with the rejections as records (in
    /// the order their lines were pushed).
    ///
    /// ```
    /// use overtime_parse::nginx::{GatewayParser, LogFormat};
    /// let mut p = GatewayParser::new(LogFormat::compile("$status").unwrap(), "edge", 0);
    /// p.push_bytes(b"200\nnot a status\n", 1);
    /// let (good, bad) = p.finish_records();
    /// assert_eq!((good.num_rows(), bad[0].line, bad[0].source.as_str()), (1, 2, "edge"));
    /// ```
    pub fn finish_records(&mut self) -> (RecordBatch, Vec<RejectedRecord>) {
        let good = self.cols.finish();
        self.cols = presized(&good);
        (good, std::mem::take(&mut self.rejected))
    }

    fn reject(&mut self, line_no: u64, reason: &'static str, detail: String, raw: &[u8]) {
        self.rejected.push(RejectedRecord::new(
            &self.source,
            line_no,
            reason,
            detail,
            raw,
        ));
        match self.by_reason.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                self.by_reason.insert(reason.to_string(), 1);
            }
        }
        self.total_rejected += 1;
    }

    fn push_str(&mut self, line: &str, raw: &[u8], line_no: u64) {
        if let Err(d) = self.plan.split(line, &mut self.spans, &mut self.cuts) {
            return self.reject(line_no, "format_mismatch", d, raw);
        }
        // What values may hold, checked as nginx wrote them (escaped).
        for &(occ, c) in &self.plan.checks {
            let (a, b) = self.spans[occ];
            let v = line.get(a..b).unwrap_or("");
            if !passes(c, v, self.plan.json) {
                let d = detail(c, &self.plan.names[occ], v, occ == 0);
                return self.reject(line_no, "format_mismatch", d, raw);
            }
        }
        // Most lines have no backslash at all: one branch-free pass instead
        // of a search per value.
        if self.escape != Escape::None && has_byte(line.as_bytes(), b'\\') {
            self.scratch.clear();
            for (occ, span) in self.spans.iter_mut().enumerate() {
                let v = &line[span.0..span.1];
                if self.plan.roles[occ] == Role::Skip || !has_byte(v.as_bytes(), b'\\') {
                    continue;
                }
                let start = self.scratch.len();
                let text = match self.escape {
                    Escape::Json => {
                        unescape_json(v, &mut self.scratch);
                        true
                    }
                    _ => unescape_default(v, &mut self.tmp, &mut self.scratch),
                };
                // Bytes that are not text stay as nginx wrote them.
                if text {
                    *span = (start | IN_SCRATCH, self.scratch.len());
                }
            }
        }
        let vals = Values {
            line,
            scratch: &self.scratch,
            spans: &self.spans,
        };
        let lists = &mut self.lists;
        lists.connect.clear();
        lists.header.clear();
        lists.response.clear();
        lists.status.clear();
        match read_row(&self.plan, vals, lists) {
            Ok(row) => {
                append(
                    &mut self.cols,
                    &self.plan,
                    &self.source,
                    self.layer,
                    line_no,
                    &row,
                    lists,
                    vals,
                );
                self.total_rows += 1;
            }
            Err((reason, detail)) => self.reject(line_no, reason, detail, raw),
        }
    }
}

/// Appends one validated row to the builders.
#[allow(clippy::too_many_arguments)]
fn append(
    c: &mut GatewayColumns,
    plan: &Plan,
    source: &str,
    layer: u32,
    line_no: u64,
    r: &Row<'_>,
    lists: &Lists,
    vals: Values<'_>,
) {
    c.source.append_value(source);
    c.layer.append_value(layer);
    c.line.append_value(line_no);
    c.time.append_value(r.time_us);
    c.time_precision_us.append_value(r.precision_us);
    let rt_us = (r.request_time_ms.unwrap_or(0.0) * 1000.0).round() as i64;
    c.start_time.append_value(r.time_us - rt_us);
    c.remote_addr.append_option(r.remote_addr);
    c.method.append_option(r.method.or(r.request.0));
    c.uri.append_option(r.uri.or(r.request.1));
    c.protocol.append_option(r.protocol.or(r.request.2));
    c.status.append_option(r.status);
    c.body_bytes_sent.append_option(r.bytes);
    c.request_time_ms.append_option(r.request_time_ms);
    for (b, v) in [
        (&mut c.upstream_connect_ms, &lists.connect),
        (&mut c.upstream_header_ms, &lists.header),
        (&mut c.upstream_response_ms, &lists.response),
    ] {
        b.values().extend(v.iter().copied());
        b.append(true);
    }
    c.upstream_connect_ms_sum
        .append_option(sum_known(&lists.connect));
    c.upstream_header_ms_sum
        .append_option(sum_known(&lists.header));
    c.upstream_response_ms_sum
        .append_option(sum_known(&lists.response));
    c.upstream_status
        .values()
        .extend(lists.status.iter().copied());
    c.upstream_status.append(true);
    c.upstream_status_raw.append_option(r.up_status_raw);
    let mut addrs = 0;
    for a in ListItems::new(r.up_addr.unwrap_or("-")) {
        c.upstream_addr.values().append_option(opt(a));
        addrs += 1;
    }
    c.upstream_addr.append(true);
    let tries = [
        lists.connect.len(),
        lists.header.len(),
        lists.response.len(),
        lists.status.len(),
        addrs,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    c.upstream_tries.append_value(tries as u32);
    c.request_id.append_option(r.request_id);
    c.traceparent.append_option(r.traceparent);
    c.trace_id.append_option(r.trace_id.as_deref());
    c.max_wait_ms.append_option(r.max_wait_ms);
    c.llm_reason.append_option(r.llm_reason);
    c.llm_duration_ms.append_option(r.llm_duration_ms);
    for (occ, role) in plan.roles.iter().enumerate() {
        if let Role::Extra(k) = *role {
            let v = vals.get(occ);
            if !is_null(v) {
                c.extra.keys().append_value(&plan.extra_names[k]);
                c.extra.values().append_value(v);
            }
        }
    }
    for (k, v) in r.unparsed.iter().flatten() {
        c.extra.keys().append_value(k);
        c.extra.values().append_value(v);
    }
    if let Some(v) = r.request_raw {
        c.extra.keys().append_value("request");
        c.extra.values().append_value(v);
    }
    // Keys and values were appended in pairs just above, which is the only
    // way MapBuilder::append fails.
    let _ = c.extra.append(true);
}
