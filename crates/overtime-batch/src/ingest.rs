//! A reader's handle on the engine: routes each record to its partition
//! by its join key, buffering locally and handing over in blocks.

use super::*;

/// Routes records into the engine's partitions; buffers locally and hands
/// over in blocks ([`Ingest::flush`], also on drop).
pub struct Ingest<'e> {
    pub(super) engine: &'e Engine,
    pub(super) local: Vec<Vec<u8>>,
    pub(super) local_bytes: usize,
    pub(super) samples: LayerSamples,
    pub(super) stats: AssemblyStats,
}

/// Bytes a handle buffers before handing over.
const LOCAL_BYTES: usize = 4 << 20;

impl Ingest<'_> {
    /// Writes one framed record into partition `p`'s buffer.
    fn put(&mut self, p: usize, write: impl FnOnce(&mut Out)) -> Result<(), BatchError> {
        let buf = &mut self.local[p];
        let at = open_len(buf);
        write(&mut Out(buf));
        close_len(buf, at);
        self.local_bytes += buf.len() - at;
        if self.local_bytes > LOCAL_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn trace_part(&self, k: &Key) -> usize {
        part_of(key_hash(k), 0, self.engine.n)
    }

    fn rid_part(&self, rid: &str) -> usize {
        self.engine.n + part_of(str_hash(rid), 0, self.engine.n)
    }

    /// A record of trace `key` at `at_us` carries request id `rid`: a
    /// binding for the one join ([`overtime_diagnose::join::RequestIds`]).
    fn link(
        &mut self,
        rid: &str,
        at_us: i64,
        key: &Key,
        from_span: bool,
    ) -> Result<(), BatchError> {
        let p = self.rid_part(rid);
        self.put(p, |o| {
            o.u8(LINK);
            o.rid(rid);
            o.zig(at_us.clamp(0, overtime_diagnose::assemble::MAX_TIME_US));
            o.key(key);
            o.u8(u8::from(from_span));
        })
    }

    /// Routes a span; `seq` is its place in the input ([`seq`]).
    pub fn span(&mut self, s: &SpanRecord, seq: Seq) -> Result<(), BatchError> {
        let key = hex128(&s.trace_id)
            .map(Key::Trace)
            .unwrap_or_else(|| Key::Other(s.trace_id.clone()));
        if let Some(rid) = &s.request_id {
            self.link(rid, s.start_us, &key, true)?;
        }
        if let Some(lean) = &self.engine.lean {
            lean.spans.insert(&key);
        }
        let p = self.trace_part(&key);
        self.put(p, |o| {
            o.u8(SPAN);
            o.seq(seq);
            o.key(&key);
            o.record(s);
        })
    }

    /// Routes the rows of a `gateway_requests` batch parsed from input
    /// file number `file` (the rows' `line` gives their place in it).
    pub fn gateway(
        &mut self,
        batch: &arrow::record_batch::RecordBatch,
        file: u32,
    ) -> Result<(), BatchError> {
        self.gateway_rows(batch, file, true)
    }

    /// Routes the rows of a batch that is input number `file` as a whole,
    /// in row order (batches from a store, built in memory).
    pub fn gateway_in_row_order(
        &mut self,
        batch: &arrow::record_batch::RecordBatch,
        file: u32,
    ) -> Result<(), BatchError> {
        self.gateway_rows(batch, file, false)
    }

    fn gateway_rows(
        &mut self,
        batch: &arrow::record_batch::RecordBatch,
        file: u32,
        by_line: bool,
    ) -> Result<(), BatchError> {
        // The parser's batches are encoded from their columns; others
        // through a record.
        let wire = GatewayWire::new(batch);
        let slow = match wire {
            Some(_) => None,
            None => Some(GatewayRows::new(batch)?),
        };
        // Healthy rows go lean when they can be read back (lean.rs): from
        // the parser's batches of a file, after every span.
        let lean = match (&self.engine.lean, &wire) {
            (Some(l), Some(_)) if by_line && l.open() => Some(l),
            _ => None,
        };
        for i in 0..batch.num_rows() {
            let record = slow.as_ref().map(|r| r.row(i));
            let (src, line, head, trace_id, rid, relayed, last_try) = match (&wire, &record) {
                (Some(w), _) => (
                    w.source(i),
                    w.line(i),
                    w.head(i),
                    w.trace_id(i),
                    w.request_id(i),
                    w.relayed(i),
                    w.last_try_ms(i),
                ),
                (None, Some(g)) => (
                    g.source.as_str(),
                    g.line,
                    GwHead::of(g),
                    g.trace_id.as_deref(),
                    g.request_id.as_deref(),
                    overtime_diagnose::outcome::relayed(g),
                    (
                        g.upstream_response_ms.len(),
                        g.upstream_response_ms.last().copied().flatten(),
                    ),
                ),
                (None, None) => unreachable!("one of the two is there"),
            };
            let body = |buf: &mut Vec<u8>, elided: u8| match (&wire, &record) {
                (Some(w), _) => w.write(i, buf, elided),
                (None, Some(g)) => codec::postcard_into(g, buf),
                (None, None) => unreachable!("one of the two is there"),
            };
            let seq = codec::seq(file, if by_line { line } else { i as u64 }, 0);
            // Layer timeouts' raw material (overtime_diagnose::passes).
            self.samples
                .add(src, head.status, relayed, head.request_time_ms, last_try);
            self.stats.gateway_records += 1;
            if let Some(t) = trace_id.and_then(hex128) {
                self.stats.joined_by_traceparent += 1;
                let key = Key::Trace(t);
                let p = self.trace_part(&key);
                if !head.failed() && lean.is_some_and(|l| l.row_may_be_lean(&key)) {
                    self.put(p, |o| o.lean_row(seq, &key, &head))?;
                } else {
                    let elided = wire.as_ref().map_or(0, |w| w.elided(i, t));
                    self.put(p, |o| o.gateway_row(seq, &key, elided, |b| body(b, elided)))?;
                }
                if let Some(rid) = rid {
                    self.link(rid, head.time_us, &key, false)?;
                }
            } else if let Some(rid) = rid {
                let p = self.rid_part(rid);
                self.put(p, |o| {
                    o.u8(RID_ROW);
                    o.seq(seq);
                    o.rid(rid);
                    o.record_with(|buf| body(buf, 0));
                })?;
            } else {
                self.stats.unjoined_gateway_records += 1;
                let key = Key::Other(format!("line:{src}:{line}"));
                let p = self.trace_part(&key);
                if !head.failed() && lean.is_some() {
                    self.put(p, |o| o.lean_row(seq, &key, &head))?;
                } else {
                    self.put(p, |o| o.gateway_row(seq, &key, 0, |b| body(b, 0)))?;
                }
            }
        }
        Ok(())
    }

    /// Hands buffered records to the engine (may spill).
    pub fn flush(&mut self) -> Result<(), BatchError> {
        self.engine.check_cancel()?;
        self.engine
            .parts
            .absorb(&mut self.local, &self.engine.spill)?;
        self.local_bytes = 0;
        let mut sh = self.engine.shared.lock().expect("engine lock");
        sh.samples.merge(std::mem::take(&mut self.samples));
        let s = std::mem::take(&mut self.stats);
        sh.stats.gateway_records += s.gateway_records;
        sh.stats.joined_by_traceparent += s.joined_by_traceparent;
        sh.stats.unjoined_gateway_records += s.unjoined_gateway_records;
        Ok(())
    }
}

impl Drop for Ingest<'_> {
    fn drop(&mut self) {
        if self.local_bytes > 0 || !self.samples.is_empty() || self.stats.gateway_records > 0 {
            // An error here (a full disk) surfaces again at finish.
            let _ = self.flush();
        }
    }
}
