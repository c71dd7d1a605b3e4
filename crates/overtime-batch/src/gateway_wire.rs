//! A gateway row straight from the parser's Arrow columns to the postcard
//! bytes of the [`GatewayRecord`] it stands for: no record built, no
//! allocation per row (building one costs ~15 allocations, and a day has
//! tens of millions of rows). Batches of another shape (read back from
//! Parquet, built by hand) take the general path through
//! [`overtime_model::GatewayRows::row`]; a test holds the two to the same
//! bytes.
//!
//! A row routed by its trace leaves out the ids that only spell that
//! trace again (its `trace_id`, the trace inside its `traceparent`: ~65 of
//! its ~330 bytes), and [`restore`] puts them back from the routing key:
//! every byte of a day's rows is written to a spill file and read back.

use crate::codec::{Corrupt, GwHead, hex32};
use arrow::array::{
    Array, AsArray, Float64Array, Int64Array, ListArray, MapArray, StringArray,
    TimestampMicrosecondArray, UInt16Array, UInt32Array, UInt64Array,
};
use arrow::datatypes::{Float64Type, UInt16Type};
use arrow::record_batch::RecordBatch;
use overtime_diagnose::assemble::Key;
use overtime_model::GatewayRecord;

/// The columns of one `gateway_requests` batch, typed as the parser
/// builds them.
pub(crate) struct GatewayWire<'a> {
    source: &'a StringArray,
    layer: &'a UInt32Array,
    line: &'a UInt64Array,
    time: &'a TimestampMicrosecondArray,
    precision: &'a Int64Array,
    remote_addr: &'a StringArray,
    method: &'a StringArray,
    uri: &'a StringArray,
    protocol: &'a StringArray,
    status: &'a UInt16Array,
    body_bytes: &'a Int64Array,
    request_time: &'a Float64Array,
    connect: &'a ListArray,
    header: &'a ListArray,
    response: &'a ListArray,
    upstream_status: &'a ListArray,
    upstream_status_raw: &'a StringArray,
    upstream_addr: &'a ListArray,
    request_id: &'a StringArray,
    traceparent: &'a StringArray,
    trace_id: &'a StringArray,
    max_wait: &'a Float64Array,
    llm_reason: &'a StringArray,
    llm_duration: &'a Float64Array,
    extra: &'a MapArray,
}

fn col<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Option<&'a T> {
    b.column_by_name(name)?.as_any().downcast_ref::<T>()
}

/// postcard's varint.
fn var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(out: &mut Vec<u8>, v: i64) {
    var(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn string(out: &mut Vec<u8>, s: &str) {
    var(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn opt_str(out: &mut Vec<u8>, a: &StringArray, i: usize) {
    if a.is_null(i) {
        out.push(0);
    } else {
        out.push(1);
        string(out, a.value(i));
    }
}

fn opt_f64(out: &mut Vec<u8>, a: &Float64Array, i: usize) {
    if a.is_null(i) {
        out.push(0);
    } else {
        out.push(1);
        out.extend_from_slice(&a.value(i).to_le_bytes());
    }
}

/// The record's `trace_id` is the routing trace's hex, left out.
pub(crate) const ELIDED_TRACE_ID: u8 = 1;
/// The record's `traceparent` holds the routing trace's hex at 3..35,
/// left out.
pub(crate) const ELIDED_TRACEPARENT: u8 = 2;

/// Puts back into a decoded record the ids [`GatewayWire::write`] left
/// out of it, from the trace it was routed by.
pub(crate) fn restore(g: &mut GatewayRecord, elided: u8, key: &Key) -> Result<(), Corrupt> {
    if elided == 0 {
        return Ok(());
    }
    let Key::Trace(t) = key else {
        return Err(Corrupt("ids left out of a row without a trace"));
    };
    let hex = hex32(*t);
    let hex = std::str::from_utf8(&hex).expect("hex is ascii");
    if elided & ELIDED_TRACE_ID != 0 {
        g.trace_id = Some(hex.to_string());
    }
    if elided & ELIDED_TRACEPARENT != 0 {
        match &mut g.traceparent {
            Some(tp) if tp.is_char_boundary(3) => tp.insert_str(3, hex),
            _ => return Err(Corrupt("traceparent")),
        }
    }
    Ok(())
}

fn str_at(a: &StringArray, i: usize) -> Option<&str> {
    (!a.is_null(i)).then(|| a.value(i))
}

impl<'a> GatewayWire<'a> {
    /// The batch's columns, if they have the parser's types.
    pub fn new(b: &'a RecordBatch) -> Option<Self> {
        let w = GatewayWire {
            source: col(b, "source")?,
            layer: col(b, "layer")?,
            line: col(b, "line")?,
            time: col(b, "time")?,
            precision: col(b, "time_precision_us")?,
            remote_addr: col(b, "remote_addr")?,
            method: col(b, "method")?,
            uri: col(b, "uri")?,
            protocol: col(b, "protocol")?,
            status: col(b, "status")?,
            body_bytes: col(b, "body_bytes_sent")?,
            request_time: col(b, "request_time_ms")?,
            connect: col(b, "upstream_connect_ms")?,
            header: col(b, "upstream_header_ms")?,
            response: col(b, "upstream_response_ms")?,
            upstream_status: col(b, "upstream_status")?,
            upstream_status_raw: col(b, "upstream_status_raw")?,
            upstream_addr: col(b, "upstream_addr")?,
            request_id: col(b, "request_id")?,
            traceparent: col(b, "traceparent")?,
            trace_id: col(b, "trace_id")?,
            max_wait: col(b, "max_wait_ms")?,
            llm_reason: col(b, "llm_reason")?,
            llm_duration: col(b, "llm_duration_ms")?,
            extra: col(b, "extra")?,
        };
        // The lists' and the map's items must be of the expected types too.
        let f64_items = [w.connect, w.header, w.response]
            .iter()
            .all(|l| l.values().as_primitive_opt::<Float64Type>().is_some());
        let ok = f64_items
            && w.upstream_status
                .values()
                .as_primitive_opt::<UInt16Type>()
                .is_some()
            && w.upstream_addr.values().as_string_opt::<i32>().is_some()
            && w.extra.keys().as_string_opt::<i32>().is_some()
            && w.extra.values().as_string_opt::<i32>().is_some();
        ok.then_some(w)
    }

    pub fn source(&self, i: usize) -> &'a str {
        str_at(self.source, i).unwrap_or("")
    }
    pub fn line(&self, i: usize) -> u64 {
        if self.line.is_null(i) {
            0
        } else {
            self.line.value(i)
        }
    }
    pub fn request_id(&self, i: usize) -> Option<&'a str> {
        str_at(self.request_id, i)
    }
    pub fn trace_id(&self, i: usize) -> Option<&'a str> {
        str_at(self.trace_id, i)
    }
    pub fn head(&self, i: usize) -> GwHead {
        GwHead {
            layer: if self.layer.is_null(i) {
                0
            } else {
                self.layer.value(i)
            },
            status: (!self.status.is_null(i)).then(|| self.status.value(i)),
            time_us: if self.time.is_null(i) {
                0
            } else {
                self.time.value(i)
            },
            request_time_ms: (!self.request_time.is_null(i)).then(|| self.request_time.value(i)),
        }
    }

    /// Row `i`'s last try got a response header from upstream
    /// ([`overtime_diagnose::outcome::relayed`]): a 504 of it was passed on.
    pub fn relayed(&self, i: usize) -> bool {
        let l = self.header;
        if l.is_null(i) {
            return false;
        }
        let e = l.value_offsets()[i + 1] as usize;
        e > l.value_offsets()[i] as usize && l.values().is_valid(e - 1)
    }

    /// Row `i`'s upstream tries and the last one's response time.
    pub fn last_try_ms(&self, i: usize) -> (usize, Option<f64>) {
        let l = self.response;
        if l.is_null(i) {
            return (0, None);
        }
        let (s, e) = (
            l.value_offsets()[i] as usize,
            l.value_offsets()[i + 1] as usize,
        );
        let v = l.values().as_primitive::<Float64Type>();
        let last = (e > s && v.is_valid(e - 1)).then(|| v.value(e - 1));
        (e - s, last)
    }

    fn f64_list(out: &mut Vec<u8>, l: &ListArray, i: usize) {
        if l.is_null(i) {
            return var(out, 0);
        }
        let (s, e) = (
            l.value_offsets()[i] as usize,
            l.value_offsets()[i + 1] as usize,
        );
        let v = l.values().as_primitive::<Float64Type>();
        var(out, (e - s) as u64);
        for j in s..e {
            opt_f64(out, v, j);
        }
    }

    /// Which of row `i`'s ids spell out `trace` (lowercase hex), the trace
    /// the row is routed by: those [`GatewayWire::write`] leaves out.
    pub fn elided(&self, i: usize, trace: u128) -> u8 {
        let hex = hex32(trace);
        let hex = std::str::from_utf8(&hex).expect("hex is ascii");
        let mut e = 0;
        if str_at(self.trace_id, i) == Some(hex) {
            e |= ELIDED_TRACE_ID;
        }
        if str_at(self.traceparent, i).and_then(|tp| tp.get(3..35)) == Some(hex) {
            e |= ELIDED_TRACEPARENT;
        }
        e
    }

    /// Appends row `i` as postcard `GatewayRecord` bytes, less what
    /// `elided` says ([`GatewayWire::elided`]; [`restore`] puts it back).
    pub fn write(&self, i: usize, out: &mut Vec<u8>, elided: u8) {
        let h = self.head(i);
        string(out, self.source(i));
        var(out, h.layer as u64);
        var(out, self.line(i));
        zigzag(out, h.time_us);
        let precision = if self.precision.is_null(i) {
            1000
        } else {
            self.precision.value(i)
        };
        zigzag(out, precision);
        for a in [self.remote_addr, self.method, self.uri, self.protocol] {
            opt_str(out, a, i);
        }
        match h.status {
            Some(s) => {
                out.push(1);
                var(out, s as u64);
            }
            None => out.push(0),
        }
        if self.body_bytes.is_null(i) {
            out.push(0);
        } else {
            out.push(1);
            zigzag(out, self.body_bytes.value(i));
        }
        opt_f64(out, self.request_time, i);
        for l in [self.connect, self.header, self.response] {
            Self::f64_list(out, l, i);
        }
        let us = self.upstream_status;
        if us.is_null(i) {
            var(out, 0);
        } else {
            let (s, e) = (
                us.value_offsets()[i] as usize,
                us.value_offsets()[i + 1] as usize,
            );
            let v = us.values().as_primitive::<UInt16Type>();
            var(out, (e - s) as u64);
            for j in s..e {
                if v.is_null(j) {
                    out.push(0);
                } else {
                    out.push(1);
                    var(out, v.value(j) as u64);
                }
            }
        }
        opt_str(out, self.upstream_status_raw, i);
        let ua = self.upstream_addr;
        if ua.is_null(i) {
            var(out, 0);
        } else {
            let (s, e) = (
                ua.value_offsets()[i] as usize,
                ua.value_offsets()[i + 1] as usize,
            );
            let v = ua.values().as_string::<i32>();
            var(out, (e - s) as u64);
            for j in s..e {
                opt_str(out, v, j);
            }
        }
        opt_str(out, self.request_id, i);
        match str_at(self.traceparent, i) {
            Some(tp) if elided & ELIDED_TRACEPARENT != 0 => {
                out.push(1);
                var(out, tp.len() as u64 - 32);
                out.extend_from_slice(&tp.as_bytes()[..3]);
                out.extend_from_slice(&tp.as_bytes()[35..]);
            }
            _ => opt_str(out, self.traceparent, i),
        }
        if elided & ELIDED_TRACE_ID != 0 {
            out.push(0);
        } else {
            opt_str(out, self.trace_id, i);
        }
        opt_f64(out, self.max_wait, i);
        opt_str(out, self.llm_reason, i);
        opt_f64(out, self.llm_duration, i);
        let m = self.extra;
        if m.is_null(i) {
            var(out, 0);
        } else {
            let (s, e) = (
                m.value_offsets()[i] as usize,
                m.value_offsets()[i + 1] as usize,
            );
            let (k, v) = (m.keys().as_string::<i32>(), m.values().as_string::<i32>());
            let pairs = (s..e).filter(|&j| !k.is_null(j));
            var(out, pairs.clone().count() as u64);
            for j in pairs {
                string(out, k.value(j));
                string(out, str_at(v, j).unwrap_or(""));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::WireHead;
    use overtime_model::{GatewayColumns, GatewayRecord, GatewayRows};

    #[test]
    fn the_bytes_are_postcards_of_the_record_the_row_reads_back_as() {
        let full = GatewayRecord {
            source: "edge".into(),
            layer: 2,
            line: 1 << 40,
            time_us: -5,
            time_precision_us: 1_000_000,
            remote_addr: Some("10.0.0.1".into()),
            method: Some("POST".into()),
            uri: Some("/v1/ünïcode".into()),
            protocol: None,
            status: Some(504),
            body_bytes_sent: Some(-1),
            request_time_ms: Some(60_000.25),
            upstream_connect_ms: vec![Some(1.0), None],
            upstream_header_ms: vec![],
            upstream_response_ms: vec![None],
            upstream_status: vec![Some(502), None, Some(504)],
            upstream_status_raw: Some("502, -, 504".into()),
            upstream_addr: vec![Some("a:1".into()), None],
            request_id: Some("r".repeat(200)),
            traceparent: Some("00-x-y-01".into()),
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            max_wait_ms: Some(f64::MAX),
            llm_reason: Some(String::new()),
            llm_duration_ms: None,
            extra: vec![("k".into(), "v".into()), ("e".into(), String::new())],
        };
        let mut cols = GatewayColumns::new();
        cols.append(&full);
        cols.append(&GatewayRecord::default());
        let batch = cols.finish();
        let wire = GatewayWire::new(&batch).expect("the parser's shape");
        let rows = GatewayRows::new(&batch).unwrap();
        for i in 0..2 {
            let mut got = Vec::new();
            wire.write(i, &mut got, 0);
            let record = rows.row(i);
            assert_eq!(got, postcard::to_allocvec(&record).unwrap(), "row {i}");
            assert_eq!(wire.head(i), GwHead::of(&record));
            assert_eq!(GwHead::of_body(&got).unwrap(), wire.head(i));
            assert_eq!(wire.trace_id(i), record.trace_id.as_deref());
        }
        assert_eq!(rows.row(0), full);
    }

    #[test]
    fn ids_left_out_come_back_from_the_routing_trace() {
        let t: u128 = 0x0af7651916cd43dd8448eb211c80319c;
        let hex = "0af7651916cd43dd8448eb211c80319c";
        let cases = [
            (Some(hex), Some(format!("00-{hex}-b7ad6b7169203331-01")), 3),
            (Some(hex), Some("00-x-y-01".to_string()), 1),
            (None, Some(format!("ff-{hex}")), 2),
            (Some("0AF7651916CD43DD8448EB211C80319C"), None, 0),
            (Some(&hex[1..]), Some(format!("00-{}", &hex[..31])), 0),
        ];
        for (trace_id, traceparent, want) in cases {
            let g = GatewayRecord {
                trace_id: trace_id.map(str::to_string),
                traceparent,
                request_id: Some("r".into()),
                ..Default::default()
            };
            let mut cols = GatewayColumns::new();
            cols.append(&g);
            let batch = cols.finish();
            let wire = GatewayWire::new(&batch).unwrap();
            let e = wire.elided(0, t);
            assert_eq!(e, want, "{g:?}");
            let mut got = Vec::new();
            wire.write(0, &mut got, e);
            let mut back: GatewayRecord = postcard::from_bytes(&got).unwrap();
            restore(&mut back, e, &Key::Trace(t)).unwrap();
            assert_eq!(back, GatewayRows::new(&batch).unwrap().row(0));
        }
        let mut g = GatewayRecord::default();
        assert!(restore(&mut g, 1, &Key::Other("line:x".into())).is_err());
        assert!(
            restore(&mut g, 2, &Key::Trace(t)).is_err(),
            "no traceparent"
        );
    }
}
