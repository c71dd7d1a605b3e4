//! The compact binary form records take in partitions, in memory or
//! spilled: a tag byte, the routing facts read without decoding the record,
//! then the record itself (postcard), length-prefixed so a light gateway
//! row is never decoded at all.
//!
//! Every record of a day is written here and, past the memory limit, to a
//! spill file and back, so the form is kept short: a record's place is
//! three varints, not a `u128`; a gateway row routed by its trace leaves
//! out the ids that spell the trace again ([`super::gateway_wire`]), and
//! its head (what routing and light rows read) is read from the front of
//! its postcard bytes ([`GwHead::of_body`]), not written twice; a request
//! id in hex is its 16 bytes ([`Rid`]).
//!
//! The format lives only inside one run (a temp dir removed at the end),
//! so it carries no version.

use overtime_diagnose::assemble::Key;
use overtime_model::{GatewayRecord, SpanRecord};

/// Where a record sits in the input: file, line, index within the line.
/// Batch assembly keeps the first of anything (span copy, request-id link)
/// by this order, so the result never depends on which thread or partition
/// saw a record first.
pub type Seq = u128;

/// The order of a record: `file` is the input's index on the command line
/// (gateway logs first, then span files), `line` its 1-based line, `sub`
/// the span's index among the spans of that line (OTLP lines hold many).
pub fn seq(file: u32, line: u64, sub: u32) -> Seq {
    ((file as u128) << 96) | ((line as u128) << 32) | sub as u128
}

pub(crate) const SPAN: u8 = 1;
pub(crate) const GATEWAY: u8 = 2;
pub(crate) const LINK: u8 = 3;
pub(crate) const RID_ROW: u8 = 4;
/// A gateway row routed as its head alone ([`GwHead`]): a healthy row
/// whose body is read back from the input only if its request turns out
/// to need a verdict (docs/diagnose-at-scale.md, *Lean rows*).
pub(crate) const LEAN: u8 = 5;

/// What a gateway row's routing and light accounting need: the one
/// line head of assembly.
pub use overtime_diagnose::assemble::LineHead as GwHead;

/// A [`GwHead`] on the wire.
pub(crate) trait WireHead: Sized {
    /// Read from the front of the row's postcard bytes.
    fn of_body(body: &[u8]) -> R<Self>;
    /// Written on its own, for a [`LEAN`] row.
    fn write(&self, o: &mut Out);
    /// Read back as [`WireHead::write`] wrote it.
    fn read(i: &mut In) -> R<Self>;
    /// The same values, bit for bit (a NaN equals itself).
    fn same_as(&self, o: &GwHead) -> bool;
}

impl WireHead for GwHead {
    /// Read from the front of the row's postcard bytes (the fields come
    /// first in `GatewayRecord`), so the row does not carry them twice;
    /// the strings before them are skipped, not decoded.
    fn of_body(body: &[u8]) -> R<Self> {
        let mut i = In::new(body);
        i.bytes()?; // source
        let layer = u32::try_from(i.var()?).map_err(|_| Corrupt("layer"))?;
        i.var()?; // line
        let time_us = i.zig()?;
        i.zig()?; // time_precision_us
        for _ in 0..4 {
            // remote_addr, method, uri, protocol
            if i.u8()? != 0 {
                i.bytes()?;
            }
        }
        let status = match i.u8()? {
            0 => None,
            _ => Some(u16::try_from(i.var()?).map_err(|_| Corrupt("status"))?),
        };
        if i.u8()? != 0 {
            i.zig()?; // body_bytes_sent
        }
        Ok(GwHead {
            layer,
            status,
            time_us,
            request_time_ms: i.opt_f64()?,
        })
    }

    /// Written on its own, for a [`LEAN`] row.
    fn write(&self, o: &mut Out) {
        o.var(self.layer as u64);
        match self.status {
            Some(s) => {
                o.u8(1);
                o.var(s as u64);
            }
            None => o.u8(0),
        }
        o.zig(self.time_us);
        match self.request_time_ms {
            Some(v) => {
                o.u8(1);
                o.f64(v);
            }
            None => o.u8(0),
        }
    }

    /// Read back as [`GwHead::write`] wrote it.
    fn read(i: &mut In) -> R<Self> {
        let layer = u32::try_from(i.var()?).map_err(|_| Corrupt("layer"))?;
        let status = match i.u8()? {
            0 => None,
            _ => Some(u16::try_from(i.var()?).map_err(|_| Corrupt("status"))?),
        };
        Ok(GwHead {
            layer,
            status,
            time_us: i.zig()?,
            request_time_ms: i.opt_f64()?,
        })
    }

    /// The same values, bit for bit (a NaN equals itself).
    fn same_as(&self, o: &GwHead) -> bool {
        (self.layer, self.status, self.time_us) == (o.layer, o.status, o.time_us)
            && self.request_time_ms.map(f64::to_bits) == o.request_time_ms.map(f64::to_bits)
    }
}

/// A request id as records carry it: 32 lowercase hex digits (the common
/// form) as their 16 bytes, anything else as its text. One id is always
/// written the same way, so links and rows meet on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rid<'a> {
    Hex(u128),
    Text(&'a str),
}

impl Rid<'_> {
    /// The id as it was logged.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Rid::Hex(v) => {
                let h = hex32(*v);
                std::borrow::Cow::Owned(String::from_utf8(h.to_vec()).expect("hex is ascii"))
            }
            Rid::Text(s) => std::borrow::Cow::Borrowed(s),
        }
    }
}

/// A value as 32 lowercase hex digits.
pub(crate) fn hex32(t: u128) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (k, b) in out.iter_mut().enumerate() {
        *b = DIGITS[((t >> (124 - 4 * k)) & 0xf) as usize];
    }
    out
}

/// Appends the wire form of values to a buffer.
pub(crate) struct Out<'a>(pub &'a mut Vec<u8>);

impl Out<'_> {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn var(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A signed value as a zigzag varint (small magnitudes, few bytes).
    pub fn zig(&mut self, v: i64) {
        self.var(((v << 1) ^ (v >> 63)) as u64);
    }
    pub fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A place in the input as its three parts, each a varint: ~6 bytes
    /// where the `u128` takes 16, on every record of a day.
    pub fn seq(&mut self, s: Seq) {
        self.var((s >> 96) as u64);
        self.var((s >> 32) as u64);
        self.var(s as u32 as u64);
    }
    /// A request id ([`Rid`]).
    pub fn rid(&mut self, rid: &str) {
        let b = rid.as_bytes();
        if b.len() == 32 && b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            let v = u128::from_str_radix(rid, 16).expect("32 hex digits");
            self.u8(0);
            self.0.extend_from_slice(&v.to_le_bytes());
        } else {
            self.u8(1);
            self.bytes(b);
        }
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.var(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn key(&mut self, k: &Key) {
        match k {
            Key::Trace(t) => {
                self.u8(0);
                self.0.extend_from_slice(&t.to_le_bytes());
            }
            Key::Other(s) => {
                self.u8(1);
                self.bytes(s.as_bytes());
            }
        }
    }
    pub fn opt_u16(&mut self, v: Option<u16>) {
        match v {
            Some(x) => {
                self.u8(1);
                self.0.extend_from_slice(&x.to_le_bytes());
            }
            None => self.u8(0),
        }
    }
    /// Bytes behind a 4-byte length (a record's body, a whole frame).
    pub fn body_bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(&(b.len() as u32).to_le_bytes());
        self.0.extend_from_slice(b);
    }
    /// A [`LEAN`] row: its place, key and head.
    pub fn lean_row(&mut self, seq: Seq, key: &Key, head: &GwHead) {
        self.u8(LEAN);
        self.seq(seq);
        self.key(key);
        head.write(self);
    }
    /// A [`GATEWAY`] row: place, key, the ids `elided` from the body
    /// `write` appends ([`super::gateway_wire::restore`]).
    pub fn gateway_row(
        &mut self,
        seq: Seq,
        key: &Key,
        elided: u8,
        write: impl FnOnce(&mut Vec<u8>),
    ) {
        self.u8(GATEWAY);
        self.seq(seq);
        self.key(key);
        self.u8(elided);
        self.record_with(write);
    }
    /// A record as postcard behind a 4-byte length, written in place.
    pub fn record<T: serde::Serialize>(&mut self, r: &T) {
        self.record_with(|buf| postcard_into(r, buf));
    }
    /// A record written by `write` behind a 4-byte length.
    pub fn record_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = open_len(self.0);
        write(self.0);
        close_len(self.0, at);
    }
}

/// Appends `r` as postcard.
pub(crate) fn postcard_into<T: serde::Serialize>(r: &T, buf: &mut Vec<u8>) {
    postcard::serialize_with_flavor::<T, _, ()>(r, Append(buf))
        .expect("records serialize to memory");
}

/// Reserves a 4-byte length at the end of `buf`; returns where.
pub(crate) fn open_len(buf: &mut Vec<u8>) -> usize {
    buf.extend_from_slice(&[0; 4]);
    buf.len() - 4
}

/// Writes the length of what followed `at` into its reserved bytes.
pub(crate) fn close_len(buf: &mut [u8], at: usize) {
    let n = (buf.len() - at - 4) as u32;
    buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
}

/// postcard writing straight into a buffer (no intermediate Vec).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();
    fn try_push(&mut self, b: u8) -> postcard::Result<()> {
        self.0.push(b);
        Ok(())
    }
    fn try_extend(&mut self, b: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(b);
        Ok(())
    }
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// The spill or buffer ended in the middle of a record: a bug or a
/// truncated temp file.
#[derive(Debug, thiserror::Error)]
#[error("a partition of the run's temp data is corrupt ({0})")]
pub struct Corrupt(pub &'static str);

/// Reads values back in the order [`Out`] wrote them.
pub(crate) struct In<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

type R<T> = Result<T, Corrupt>;

impl<'a> In<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        In { buf, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Corrupt("length"))?;
        let s = self.buf.get(self.pos..end).ok_or(Corrupt("truncated"))?;
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn var(&mut self) -> R<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(Corrupt("varint"))
    }
    pub fn zig(&mut self) -> R<i64> {
        let v = self.var()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }
    pub fn f64(&mut self) -> R<f64> {
        Ok(f64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn seq(&mut self) -> R<Seq> {
        let file = self.var()?;
        let line = self.var()?;
        let sub = self.var()?;
        if file > u32::MAX as u64 || sub > u32::MAX as u64 {
            return Err(Corrupt("place"));
        }
        Ok(((file as u128) << 96) | ((line as u128) << 32) | sub as u128)
    }
    pub fn bytes(&mut self) -> R<&'a [u8]> {
        let n = self.var()? as usize;
        self.take(n)
    }
    /// Bytes behind a 4-byte length.
    pub fn body(&mut self) -> R<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> R<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Corrupt("utf-8"))
    }
    pub fn rid(&mut self) -> R<Rid<'a>> {
        match self.u8()? {
            0 => Ok(Rid::Hex(u128::from_le_bytes(
                self.take(16)?.try_into().expect("16 bytes"),
            ))),
            1 => Ok(Rid::Text(self.str()?)),
            _ => Err(Corrupt("request id tag")),
        }
    }
    pub fn key(&mut self) -> R<Key> {
        match self.u8()? {
            0 => Ok(Key::Trace(u128::from_le_bytes(
                self.take(16)?.try_into().expect("16 bytes"),
            ))),
            1 => Ok(Key::Other(self.str()?.to_string())),
            _ => Err(Corrupt("key tag")),
        }
    }
    pub fn opt_u16(&mut self) -> R<Option<u16>> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(u16::from_le_bytes(
                self.take(2)?.try_into().expect("2 bytes"),
            )),
        })
    }
    pub fn opt_f64(&mut self) -> R<Option<f64>> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.f64()?),
        })
    }
}

pub(crate) fn decode_span(body: &[u8]) -> R<SpanRecord> {
    postcard::from_bytes(body).map_err(|_| Corrupt("span"))
}

pub(crate) fn decode_gateway(body: &[u8]) -> R<GatewayRecord> {
    postcard::from_bytes(body).map_err(|_| Corrupt("gateway record"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_routing_facts_read_back_as_written() {
        let mut buf = Vec::new();
        let mut s = SpanRecord::new(
            "0af7651916cd43dd8448eb211c80319c",
            "b7ad6b7169203331",
            "api",
            "root",
            5,
            9,
        );
        s.events.push(overtime_model::SpanEvent {
            name: "chunk".into(),
            time_us: 7,
            duration_ms: None,
        });
        let g = GatewayRecord {
            source: "edge".into(),
            status: Some(504),
            request_time_ms: Some(60_000.5),
            upstream_connect_ms: vec![Some(1.0), None],
            extra: vec![("k".into(), "v".into())],
            ..Default::default()
        };
        let mut o = Out(&mut buf);
        o.seq(seq(3, 1 << 40, 7));
        o.seq(seq(u32::MAX, u64::MAX, u32::MAX));
        o.key(&Key::Other("request:x".into()));
        o.key(&Key::Trace(u128::MAX - 5));
        o.record(&s);
        o.record(&g);
        o.var(u64::MAX);
        for v in [0, -1, 1, i64::MIN, i64::MAX, 1_764_410_400_014_000] {
            o.zig(v);
        }
        let rids = [
            "099950d836f675cc81e74ef5e8e25d94",
            "099950D836F675CC81E74EF5E8E25D94",
            "00000000000000000000000000000000",
            "req-1",
            "099950d836f675cc81e74ef5e8e25d9",
        ];
        for r in rids {
            o.rid(r);
        }
        let mut i = In::new(&buf);
        assert_eq!(i.seq().unwrap(), seq(3, 1 << 40, 7));
        assert_eq!(i.seq().unwrap(), seq(u32::MAX, u64::MAX, u32::MAX));
        assert_eq!(i.key().unwrap(), Key::Other("request:x".into()));
        assert_eq!(i.key().unwrap(), Key::Trace(u128::MAX - 5));
        assert_eq!(decode_span(i.body().unwrap()).unwrap(), s);
        let body = i.body().unwrap();
        assert_eq!(decode_gateway(body).unwrap(), g);
        assert_eq!(GwHead::of_body(body).unwrap(), GwHead::of(&g));
        assert_eq!(i.var().unwrap(), u64::MAX);
        for v in [0, -1, 1, i64::MIN, i64::MAX, 1_764_410_400_014_000] {
            assert_eq!(i.zig().unwrap(), v);
        }
        for (k, r) in rids.iter().enumerate() {
            let got = i.rid().unwrap();
            assert_eq!(got.text(), *r);
            assert_eq!(matches!(got, Rid::Hex(_)), k == 0 || k == 2, "{r}");
        }
        assert!(i.done());
        assert!(In::new(&buf[..10]).key().is_err());
    }

    #[test]
    fn input_order_is_file_then_line_then_index() {
        assert!(seq(0, 5, 9) < seq(0, 6, 0));
        assert!(seq(0, u64::MAX >> 1, 0) < seq(1, 1, 0));
        assert!(seq(2, 1, 0) < seq(2, 1, 1));
    }
}
