//! Assembly of one partition: every record of the traces whose join key
//! hashes here, in any order, in; requests out, by the one assembly
//! ([`assemble_sorted`]: each span once, gateway records of every layer
//! joined to their trace, healthy gateway-only requests kept light —
//! docs/inputs.md, *Identity and joining*).
//!
//! Records are put back in input order ([`Seq`]) first, so what "first"
//! means never depends on threads, partitions or spilling.

use crate::BatchError;
use crate::codec::{
    Corrupt, GATEWAY, GwHead, In, LEAN, SPAN, Seq, WireHead, decode_gateway, decode_span,
};
use crate::gateway_wire::restore;
use crate::spill::for_each_record_in;
use overtime_diagnose::assemble::{Assembled, Key, Line, assemble_sorted};
use rustc_hash::FxHashSet;

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
            _ => return Err(Corrupt("record tag").into()),
        }
        Ok(())
    })?;
    spans.sort_unstable_by_key(|s| s.0);
    gws.sort_unstable_by_key(|g| g.seq);

    // A request needs a verdict when it has spans, a layer answered 5xx,
    // or every verdict was asked for; those with a lean row wait for its
    // body.
    let waiting: FxHashSet<Key> = {
        let with_spans: FxHashSet<&Key> = spans.iter().map(|s| &s.1).collect();
        let heavy: FxHashSet<&Key> = gws
            .iter()
            .filter(|g| all || g.head.failed() || with_spans.contains(&g.key))
            .map(|g| &g.key)
            .collect();
        gws.iter()
            .filter(|g| g.body.is_none() && heavy.contains(&g.key))
            .map(|g| g.key.clone())
            .collect()
    };
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
    let spans = spans
        .into_iter()
        .map(|(_, key, body, _)| Ok((key, decode_span(body)?)))
        .collect::<Result<Vec<_>, BatchError>>()?;
    let lines = gws
        .into_iter()
        .map(|g| Line {
            key: g.key,
            head: g.head,
            row: g.body.map(|b| (g.elided, b)),
        })
        .collect();
    let out = assemble_sorted(spans, lines, all, |row, key| {
        // A heavy request's lean rows were set aside above.
        let (elided, body) = row.ok_or(Corrupt("a lean row in a request to judge"))?;
        let mut r = decode_gateway(body)?;
        restore(&mut r, elided, key)?;
        Ok::<_, BatchError>(r)
    })?;
    Ok((out, deferred))
}
