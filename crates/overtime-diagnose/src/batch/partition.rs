//! Assembly of one partition: every record of the traces whose join key
//! hashes here, in any order, in; requests out — each span once (the first
//! copy in input order), gateway records of every layer joined to their
//! trace, healthy gateway-only requests kept light (docs/inputs.md, *Identity and joining*).
//!
//! Records are put back in input order ([`Seq`]) first, so what "first"
//! means never depends on threads, partitions or spilling.

use crate::assemble::{
    Assembled, Key, LightRequest, MAX_TIME_US, Trace, key_name, sane_gateway, sane_ms, sane_span,
};
use crate::batch::BatchError;
use crate::batch::codec::{GATEWAY, GwHead, In, LEAN, SPAN, Seq, decode_gateway, decode_span};
use crate::batch::gateway_wire::restore;
use crate::batch::spill::for_each_record_in;
use rustc_hash::{FxHashMap, FxHashSet};

struct GwEntry<'a> {
    seq: Seq,
    key: Key,
    head: GwHead,
    /// The ids left out of `body` ([`restore`]).
    elided: u8,
    /// `None` for a lean row ([`LEAN`]): its head only.
    body: Option<&'a [u8]>,
    /// The whole record, to set it aside ([`Deferred`]).
    raw: &'a [u8],
}

/// The requests of a partition that need a verdict but hold lean rows
/// (docs/diagnose-at-scale.md, *Lean rows*): set aside whole until those
/// rows are read back from the input.
#[derive(Default)]
pub struct Deferred<'a> {
    /// Every other record of those requests, by key, as framed.
    pub records: Vec<(Key, &'a [u8])>,
    /// Their lean rows: (place, key, head).
    pub wanted: Vec<(Seq, Key, GwHead)>,
}

impl Deferred<'_> {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.wanted.is_empty()
    }
}

/// Assembles the framed records of one partition. `all` materialises
/// every request (for `all_verdicts`).
pub fn assemble_partition(
    bufs: &[Vec<u8>],
    all: bool,
) -> Result<(Assembled, Deferred<'_>), BatchError> {
    let mut spans: Vec<(Seq, Key, &[u8], &[u8])> = Vec::new();
    let mut gws: Vec<GwEntry> = Vec::new();
    for_each_record_in(bufs, |r| {
        let mut i = In::new(r);
        match i.u8()? {
            SPAN => {
                let seq = i.seq()?;
                let key = i.key()?;
                spans.push((seq, key, i.body()?, r));
            }
            GATEWAY => {
                let seq = i.seq()?;
                let key = i.key()?;
                let elided = i.u8()?;
                let body = i.body()?;
                gws.push(GwEntry {
                    seq,
                    key,
                    head: GwHead::of_body(body)?,
                    elided,
                    body: Some(body),
                    raw: r,
                });
            }
            LEAN => {
                let seq = i.seq()?;
                let key = i.key()?;
                gws.push(GwEntry {
                    seq,
                    key,
                    head: GwHead::read(&mut i)?,
                    elided: 0,
                    body: None,
                    raw: r,
                });
            }
            _ => return Err(crate::batch::codec::Corrupt("record tag").into()),
        }
        Ok(())
    })?;
    spans.sort_unstable_by_key(|s| s.0);
    gws.sort_unstable_by_key(|g| g.seq);

    // A request needs a verdict when it has spans, a layer answered 5xx,
    // or every verdict was asked for.
    let with_spans: FxHashSet<&Key> = spans.iter().map(|s| &s.1).collect();
    let mut heavy: FxHashSet<&Key> = FxHashSet::default();
    for g in &gws {
        if all || g.head.failed() || with_spans.contains(&g.key) {
            heavy.insert(&g.key);
        }
    }
    // Those with a lean row wait for its body.
    let waiting: FxHashSet<Key> = gws
        .iter()
        .filter(|g| g.body.is_none() && heavy.contains(&g.key))
        .map(|g| g.key.clone())
        .collect();
    let heavy: FxHashSet<Key> = heavy.into_iter().cloned().collect();
    drop(with_spans);
    let mut deferred = Deferred::default();
    if !waiting.is_empty() {
        spans.retain(|s| {
            let wait = waiting.contains(&s.1);
            if wait {
                deferred.records.push((s.1.clone(), s.3));
            }
            !wait
        });
        gws.retain(|g| {
            let wait = waiting.contains(&g.key);
            match (wait, g.body) {
                (true, None) => deferred.wanted.push((g.seq, g.key.clone(), g.head)),
                (true, Some(_)) => deferred.records.push((g.key.clone(), g.raw)),
                (false, _) => {}
            }
            !wait
        });
    }

    let mut out = Assembled::default();
    out.stats.spans_in = spans.len();
    let mut index: FxHashMap<Key, usize> = FxHashMap::default();
    let mut seen: FxHashSet<(u128, u64)> = FxHashSet::default();
    let mut seen_odd: FxHashSet<(String, String)> = FxHashSet::default();
    for (_, key, body, _) in spans {
        let mut s = decode_span(body)?;
        sane_span(&mut s);
        let span64 = u64::from_str_radix(&s.span_id, 16)
            .ok()
            .filter(|_| s.span_id.len() <= 16);
        let first = match (&key, span64) {
            (Key::Trace(t), Some(sp)) => seen.insert((*t, sp)),
            _ => seen_odd.insert((s.trace_id.clone(), s.span_id.clone())),
        };
        if !first {
            out.stats.duplicate_spans += 1;
            continue;
        }
        let idx = *index.entry(key).or_insert_with(|| {
            out.traces.push(Trace {
                id: s.trace_id.clone(),
                ..Default::default()
            });
            out.traces.len() - 1
        });
        out.traces[idx].spans.push(s);
    }

    let mut light: FxHashMap<Key, LightRequest> = FxHashMap::default();
    for g in gws {
        match (heavy.contains(&g.key), g.body) {
            (true, Some(body)) => {
                let mut r = decode_gateway(body)?;
                restore(&mut r, g.elided, &g.key)?;
                let idx = match index.get(&g.key) {
                    Some(&idx) => idx,
                    None => {
                        out.traces.push(Trace {
                            id: key_name(&g.key),
                            ..Default::default()
                        });
                        index.insert(g.key, out.traces.len() - 1);
                        out.traces.len() - 1
                    }
                };
                out.traces[idx].gateway.push(sane_gateway(r));
            }
            (true, None) => unreachable!("a heavy request's lean rows were set aside"),
            (false, _) => {
                let h = g.head;
                let end = h.time_us.clamp(0, MAX_TIME_US);
                let start = end - (sane_ms(h.request_time_ms).unwrap_or(0.0) * 1000.0) as i64;
                let req = LightRequest {
                    start_us: start,
                    end_us: end,
                    status: h.status,
                    layer: h.layer,
                };
                light
                    .entry(g.key)
                    .and_modify(|l| {
                        if req.layer < l.layer {
                            *l = req;
                        }
                    })
                    .or_insert(req);
            }
        }
    }
    out.light = light.into_values().collect();
    for t in &mut out.traces {
        t.normalize();
    }
    Ok((out, deferred))
}
