//! Lean rows: most of a day's gateway rows are healthy requests nothing
//! else saw, and a verdict never reads more of them than their head
//! (layer, status, time, request time). Such a row is routed as its head
//! and its place alone, and its body is read back from the input only if
//! its request turns out to need a verdict after all — a 5xx from another
//! layer, say (docs/diagnose-at-scale.md, *Lean rows*).
//!
//! Design rules:
//! - **Exact whatever the input**: a lean row whose request needs a
//!   verdict is never diagnosed from its head. Assembly sets every record
//!   of such a request aside ([`super::partition::Deferred`]); the rows'
//!   bodies are read back from their files ([`RefetchHook`]) and the
//!   request is assembled and diagnosed with them, as if it had never
//!   been lean. The output is the same bytes either way (a test runs both).
//! - **Rarely read back**: spans are read before gateway logs, and a row
//!   whose trace may have spans ([`SpanKeys`], a Bloom filter of the span
//!   traces: no false negatives) keeps its body, as does every 5xx row.
//!   What is left to read back is a healthy row of a request that another
//!   layer failed and that has no spans.
//! - **Only from files**: rows are routed lean only when the caller can
//!   read them back by (file, line) — [`super::BatchOptions::refetch`] —
//!   and every span was read first ([`super::Engine::spans_read`]).

use crate::codec::{GwHead, Out, Seq, WireHead, close_len, open_len};
use crate::gateway_wire::GatewayWire;
use crate::spill::{Partitions, key_hash, part_of};
use crate::{BatchError, Engine};
use arrow::record_batch::RecordBatch;
use fastbloom::AtomicBloomFilter;
use overtime_diagnose::assemble::Key;
use rustc_hash::FxBuildHasher;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Reads rows back from the input: given an input file's number and
/// line numbers (ascending), calls the sink with `gateway_requests`
/// batches holding exactly those lines, parsed as when they were first
/// read; an error if one cannot be read (the file changed or is gone).
pub type RefetchHook = Arc<
    dyn Fn(
            u32,
            &[u64],
            &mut dyn FnMut(&RecordBatch) -> Result<(), BatchError>,
        ) -> Result<(), BatchError>
        + Send
        + Sync,
>;

/// The traces that have spans, as a Bloom filter over their key hashes:
/// "no" is certain, "maybe" is wrong for under 1 % of the keys while the
/// filter is sized for them (from the span input's size).
pub(crate) struct SpanKeys(AtomicBloomFilter<FxBuildHasher>);

impl SpanKeys {
    /// Sized for the spans of `span_bytes` of input (~12 bits for each
    /// span of 300 bytes), within a sixteenth of `memory_limit`.
    fn new(span_bytes: u64, memory_limit: usize) -> Self {
        let bits = (span_bytes / 25).clamp(1 << 16, (memory_limit as u64 / 16 * 8).max(1 << 16));
        let items = (span_bytes / 300).max(1);
        SpanKeys(
            AtomicBloomFilter::with_num_bits(bits as usize)
                .hasher(FxBuildHasher)
                .expected_items(items as usize),
        )
    }
    // The key's hash is already well mixed: the filter takes it as is
    // (the hasher is never asked).
    pub fn insert(&self, k: &Key) {
        self.0.insert_hash(key_hash(k));
    }
    pub fn may_have(&self, k: &Key) -> bool {
        self.0.contains_hash(key_hash(k))
    }
}

/// A lean row to read back: its place, the key it was routed by, and
/// the head it had (checked against the row read back).
type Wanted = (Seq, Key, GwHead);

/// The engine's lean-row state.
pub(crate) struct Lean {
    pub spans: SpanKeys,
    /// Set once every span was routed: from then on rows may be lean.
    sealed: AtomicBool,
    /// Records of the requests that need a lean row's body, by key.
    pub deferred: Partitions,
    /// The lean rows to read back, with the key each was routed by and
    /// the head it had.
    wanted: Mutex<Vec<Wanted>>,
    hook: RefetchHook,
}

impl Lean {
    pub fn new(hook: RefetchHook, span_bytes: u64, memory_limit: usize, n: usize) -> Self {
        Lean {
            spans: SpanKeys::new(span_bytes, memory_limit),
            sealed: AtomicBool::new(false),
            deferred: Partitions::new("d", n, (memory_limit / 20).max(16 << 10)),
            wanted: Mutex::new(Vec::new()),
            hook,
        }
    }
    pub fn seal(&self) {
        self.sealed.store(true, Ordering::Release);
    }
    /// Whether rows may be routed lean now.
    pub fn open(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
    }
    /// Whether a healthy row of `key` may go lean.
    pub fn row_may_be_lean(&self, key: &Key) -> bool {
        self.open() && !self.spans.may_have(key)
    }
}

impl Engine {
    /// Sets a partition's deferred requests aside: their records into the
    /// deferred partitions, their lean rows onto the list to read back.
    pub(crate) fn defer(&self, d: super::partition::Deferred<'_>) -> Result<(), BatchError> {
        let Some(lean) = &self.lean else {
            return Err(super::codec::Corrupt("a lean row in a run without them").into());
        };
        let mut local = vec![Vec::new(); self.n];
        for (key, rec) in d.records {
            super::spill::frame(&mut local[part_of(key_hash(&key), 0, self.n)], rec);
        }
        lean.deferred.absorb(&mut local, &self.spill)?;
        lean.wanted.lock().expect("lean lock").extend(d.wanted);
        Ok(())
    }

    /// Reads back the rows deferred requests need, every file on its own
    /// core, into the deferred partitions; `Ok(false)` when none was.
    pub(crate) fn refetch(&self) -> Result<bool, BatchError> {
        let Some(lean) = &self.lean else {
            return Ok(false);
        };
        let mut wanted = std::mem::take(&mut *lean.wanted.lock().expect("lean lock"));
        if wanted.is_empty() {
            return Ok(false);
        }
        wanted.sort_unstable_by_key(|w| w.0);
        // One group per file: (file, its wanted rows).
        let mut files: Vec<(u32, &[Wanted])> = Vec::new();
        let mut rest = &wanted[..];
        while let Some(first) = rest.first() {
            let file = (first.0 >> 96) as u32;
            let k = rest.partition_point(|w| (w.0 >> 96) as u32 == file);
            files.push((file, &rest[..k]));
            rest = &rest[k..];
        }
        self.each_partition(
            0..files.len(),
            || vec![Vec::new(); self.n],
            |local, g| {
                let (file, rows) = files[g];
                let lines: Vec<u64> = rows.iter().map(|w| (w.0 >> 32) as u64).collect();
                let mut got = vec![false; rows.len()];
                let mut held = 0usize;
                (lean.hook)(file, &lines, &mut |batch| {
                    let wire = GatewayWire::new(batch).ok_or_else(|| {
                        BatchError::Input("rows read back are not the parser's batch".into())
                    })?;
                    for i in 0..batch.num_rows() {
                        let at = lines.binary_search(&wire.line(i)).map_err(|_| {
                            BatchError::Input(format!(
                                "line {} was read back unasked",
                                wire.line(i)
                            ))
                        })?;
                        got[at] = true;
                        let (seq, key, head) = &rows[at];
                        // Not the line first read (a log rotated during
                        // the run): an error, never another request's row.
                        if !wire.head(i).same_as(head) {
                            return Err(BatchError::Input(format!(
                                "line {} is not what it was when first read (did the file change during the run?)",
                                lines[at]
                            )));
                        }
                        let elided = match key {
                            Key::Trace(t) => wire.elided(i, *t),
                            Key::Other(_) => 0,
                        };
                        let buf = &mut local[part_of(key_hash(key), 0, self.n)];
                        let len = open_len(buf);
                        Out(buf).gateway_row(*seq, key, elided, |b| wire.write(i, b, elided));
                        held += buf.len() - len;
                        close_len(buf, len);
                    }
                    if held > 8 << 20 {
                        held = 0;
                        lean.deferred.absorb(local, &self.spill)?;
                    }
                    Ok(())
                })?;
                if let Some(k) = got.iter().position(|g| !g) {
                    return Err(BatchError::Input(format!(
                        "input {file}: line {} could not be read back (did the file change during the run?)",
                        lines[k]
                    )));
                }
                lean.deferred.absorb(local, &self.spill)
            },
        )?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::{BatchOptions, Engine, RefetchHook, seq};
    use overtime_diagnose::DiagnoseConfig;
    use overtime_model::{GatewayColumns, GatewayRecord, SpanRecord};
    use std::sync::{Arc, Mutex};

    const T: [&str; 4] = [
        "0af7651916cd43dd8448eb211c80319c",
        "1af7651916cd43dd8448eb211c80319c",
        "2af7651916cd43dd8448eb211c80319c",
        "3af7651916cd43dd8448eb211c80319c",
    ];

    fn row(layer: u32, line: u64, status: u16, trace: Option<&str>, rid: &str) -> GatewayRecord {
        GatewayRecord {
            source: if layer == 0 { "edge" } else { "internal" }.into(),
            layer,
            line,
            time_us: 1_764_410_400_000_000 + line as i64 * 1_000_000,
            time_precision_us: 1000,
            uri: Some("/v1/agent/chat".into()),
            status: Some(status),
            request_time_ms: Some(if status == 504 { 10_002.0 } else { 800.0 }),
            upstream_addr: vec![Some("10.0.0.7:8080".into())],
            request_id: Some(rid.into()),
            traceparent: trace.map(|t| format!("00-{t}-00f067aa0ba902b7-01")),
            trace_id: trace.map(String::from),
            ..Default::default()
        }
    }

    /// Two layers: the edge (file 0) logs request ids only, the inner
    /// layer (file 1) both. Request 0 failed at the edge while the inner
    /// layer answered 200; request 1 is healthy; request 2 has spans;
    /// request 3 failed at the edge, 499 inside.
    fn logs() -> [Vec<GatewayRecord>; 2] {
        let edge = vec![
            row(0, 1, 504, None, "r0"),
            row(0, 2, 200, None, "r1"),
            row(0, 3, 200, None, "r2"),
            row(0, 4, 504, None, "r3"),
        ];
        let inner = vec![
            row(1, 1, 200, Some(T[0]), "r0"),
            row(1, 2, 200, Some(T[1]), "r1"),
            row(1, 3, 200, Some(T[2]), "r2"),
            row(1, 4, 499, Some(T[3]), "r3"),
        ];
        [edge, inner]
    }

    fn batch(rows: &[GatewayRecord]) -> arrow::record_batch::RecordBatch {
        let mut c = GatewayColumns::new();
        rows.iter().for_each(|r| c.append(r));
        c.finish()
    }

    /// What a run gave: the verdicts as JSON, the (file, line)s read back,
    /// and each diagnosed request's gateway rows as (source, status, uri).
    type Ran = (String, Vec<(u32, u64)>, Vec<(String, Vec<Row>)>);
    type Row = (String, Option<u16>, Option<String>);

    /// A run; `change` alters the rows the hook reads back (a log that
    /// changed under the run).
    fn run(lean: bool) -> Ran {
        run_with(lean, |_| {}).unwrap()
    }

    fn run_with(lean: bool, change: fn(&mut GatewayRecord)) -> Result<Ran, crate::BatchError> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rows = seen.clone();
        let on_trace: crate::TraceHook = Arc::new(move |t, _, _| {
            let gw = t
                .gateway
                .iter()
                .map(|g| (g.source.clone(), g.status, g.uri.clone()));
            rows.lock().unwrap().push((t.id.clone(), gw.collect()));
        });
        let asked = Arc::new(Mutex::new(Vec::new()));
        let files = logs();
        let log = asked.clone();
        let hook: RefetchHook = Arc::new(move |file, lines, sink| {
            let rows: Vec<GatewayRecord> = files[file as usize]
                .iter()
                .filter(|r| lines.contains(&r.line))
                .map(|r| {
                    let mut r = r.clone();
                    change(&mut r);
                    r
                })
                .collect();
            log.lock().unwrap().extend(lines.iter().map(|l| (file, *l)));
            sink(&batch(&rows))
        });
        let opts = BatchOptions {
            threads: 1,
            refetch: lean.then_some(hook),
            span_bytes_hint: 1000,
            on_trace: Some(on_trace),
            ..Default::default()
        };
        let engine = Engine::new(DiagnoseConfig::default(), opts);
        let mut ing = engine.ingest();
        let span = SpanRecord::new(T[2], "00000000000000a1", "agent-api", "root", 0, 10);
        ing.span(&span, seq(2, 1, 0)).unwrap();
        ing.flush().unwrap();
        engine.spans_read();
        for (file, rows) in logs().iter().enumerate() {
            ing.gateway(&batch(rows), file as u32).unwrap();
        }
        ing.flush().unwrap();
        drop(ing);
        let out = engine.finish()?;
        let v = out.verdicts.collect()?;
        let asked = asked.lock().unwrap().clone();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        Ok((serde_json::to_string(&v).unwrap(), asked, seen))
    }

    #[test]
    fn a_row_that_changed_since_it_was_read_is_an_error_not_another_requests_row() {
        let err = run_with(true, |r| r.status = Some(201)).expect_err("an error");
        let msg = err.to_string();
        assert!(msg.contains("line 1 is not what it was"), "{msg}");
        let err = run_with(true, |r| r.time_us += 1).expect_err("an error");
        assert!(err.to_string().contains("did the file change"), "{err}");
    }

    #[test]
    fn a_healthy_row_of_a_request_another_layer_failed_is_read_back_and_the_verdicts_do_not_change()
    {
        let (whole, none, whole_traces) = run(false);
        assert!(none.is_empty());
        let (lean, asked, lean_traces) = run(true);
        assert_eq!(lean, whole);
        assert_eq!(lean_traces, whole_traces);
        // Only the inner rows of the two requests the edge failed: the
        // healthy request stayed light, the one with spans kept its row.
        assert_eq!(asked, vec![(1, 1), (1, 4)]);
        let uri = Some("/v1/agent/chat".to_string());
        let of = |t: &str| &lean_traces.iter().find(|x| x.0 == t).unwrap().1;
        assert_eq!(
            of(T[0]),
            &vec![
                ("edge".to_string(), Some(504), uri.clone()),
                ("internal".to_string(), Some(200), uri.clone())
            ]
        );
        assert_eq!(of(T[3])[1], ("internal".to_string(), Some(499), uri));
        assert_eq!(lean_traces.len(), 3, "{lean_traces:?}");
    }
}
