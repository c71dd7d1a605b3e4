//! The run on records already in memory (`diagnose_tables`, `serve`'s
//! API, the tests): the one join ([`crate::join`]), the one assembly
//! ([`crate::assemble::assemble_sorted`]) and the two passes
//! ([`crate::passes`]) the batch engine runs on each of its partitions —
//! with nothing encoded, partitioned or spilled.
//!
//! Design rules:
//! - **The batch engine's answer, byte for byte**: records take the
//!   places the batch engine gives them (gateway batches in order, row by
//!   row, then spans), so "first" means the same in both, and the output
//!   is the same (held by the batch crate's parity tests over every
//!   incident fixture, in memory and spilling).
//! - Pure: no file, thread or clock.

use crate::assemble::{Assembled, AssemblyStats, Key, Line, LineHead, MAX_TIME_US, hex128};
use crate::config::DiagnoseConfig;
use crate::join::RequestIds;
use crate::passes::{Judge, LayerSamples, Learned, Pass};
use crate::phasebook::PhaseBook;
use crate::server_metrics::ServerMetrics;
use crate::tally::{Tally, incidents_and_latency, order, sort_failing};
use crate::verdict::TraceSummary;
use crate::{Diagnosis, Trace};
use arrow::record_batch::RecordBatch;
use overtime_model::{GatewayRecord, GatewayRows, ModelError, SpanRecord};

/// Records joined into their traces, not yet assembled.
pub(crate) struct JoinedRecords {
    spans: Vec<(Key, SpanRecord)>,
    lines: Vec<Line<GatewayRecord>>,
    /// The join's counts (gateway lines and how each was joined).
    pub stats: AssemblyStats,
    /// The layers' timeouts' raw material.
    pub samples: LayerSamples,
}

impl JoinedRecords {
    /// Joins `gateway_requests` batches and spans.
    pub fn of(gateway: &[RecordBatch], spans: Vec<SpanRecord>) -> Result<Self, ModelError> {
        let mut ids: RequestIds<String> = RequestIds::default();
        let mut stats = AssemblyStats::default();
        let mut samples = LayerSamples::default();
        let mut lines = Vec::new();
        // Lines with a request id alone, resolved once every record bound.
        let mut by_rid: Vec<(usize, String)> = Vec::new();
        for b in gateway {
            let rows = GatewayRows::new(b)?;
            for i in 0..b.num_rows() {
                let g = rows.row(i);
                samples.add_record(&g);
                stats.gateway_records += 1;
                let head = LineHead::of(&g);
                let key = if let Some(t) = g.trace_id.as_deref().and_then(hex128) {
                    stats.joined_by_traceparent += 1;
                    if let Some(rid) = &g.request_id {
                        ids.bind_line(rid.clone(), head.time_us.clamp(0, MAX_TIME_US), t);
                    }
                    Key::Trace(t)
                } else if let Some(rid) = &g.request_id {
                    by_rid.push((lines.len(), rid.clone()));
                    Key::Other(String::new())
                } else {
                    stats.unjoined_gateway_records += 1;
                    Key::Other(format!("line:{}:{}", g.source, g.line))
                };
                lines.push(Line { key, head, row: g });
            }
        }
        let spans: Vec<(Key, SpanRecord)> = spans
            .into_iter()
            .map(|s| {
                let key = hex128(&s.trace_id)
                    .map(Key::Trace)
                    .unwrap_or_else(|| Key::Other(s.trace_id.clone()));
                if let Some(rid) = &s.request_id {
                    ids.bind_span(rid.clone(), s.start_us.clamp(0, MAX_TIME_US), key.clone());
                }
                (key, s)
            })
            .collect();
        for (at, rid) in by_rid {
            let (key, how) = ids.resolve(&rid, &rid);
            stats.count_join(how);
            lines[at].key = key;
        }
        Ok(JoinedRecords {
            spans,
            lines,
            stats,
            samples,
        })
    }

    /// The requests (every one with `all`).
    pub fn assemble(self, all: bool) -> Assembled {
        self.into_parts(all).0
    }

    /// The requests (every one with `all`) and the layers' samples.
    fn into_parts(self, all: bool) -> (Assembled, LayerSamples) {
        let never = |g: GatewayRecord, _: &Key| Ok::<_, std::convert::Infallible>(g);
        let mut a = match crate::assemble::assemble_sorted(self.spans, self.lines, all, never) {
            Ok(a) => a,
            Err(e) => match e {},
        };
        let spans = (a.stats.spans_in, a.stats.duplicate_spans);
        a.stats = self.stats;
        (a.stats.spans_in, a.stats.duplicate_spans) = spans;
        (a, self.samples)
    }
}

/// Diagnoses the records given, in memory ([`crate::diagnose_tables`]).
pub(crate) fn diagnose(
    gateway: &[RecordBatch],
    spans: Vec<SpanRecord>,
    cfg: &DiagnoseConfig,
    metrics: Option<&ServerMetrics>,
) -> Result<Diagnosis, ModelError> {
    let (a, samples) = JoinedRecords::of(gateway, spans)?.into_parts(cfg.all_verdicts);
    let no_cuts = Default::default();
    let timeouts = samples.timeouts(&no_cuts, cfg);
    let no_book = PhaseBook::default();
    let first = Judge {
        cfg,
        timeouts: &timeouts,
        pass: Pass::First,
        book: &no_book,
    };
    let mut tally = Tally::default();
    for l in &a.light {
        tally.add(TraceSummary::light(l), None);
    }
    let mut learned = Learned::default();
    let mut waiting: Vec<&Trace> = Vec::new();
    for t in &a.traces {
        match first.judge(t, &mut learned) {
            Some((s, v)) => tally.add(s, v),
            None => waiting.push(t),
        }
    }
    // Every layer's timeout from its 504s and the streams it cut; the
    // requests that waited judged with it and the whole run's book.
    let timeouts = samples.timeouts(&learned.cuts, cfg);
    let mut book = metrics.map(ServerMetrics::phase_book).unwrap_or_default();
    book.merge(&learned.book);
    book.settle();
    let last = Judge {
        timeouts: &timeouts,
        pass: Pass::Final,
        book: &book,
        ..first
    };
    for t in waiting {
        let (s, v) = last
            .judge(t, &mut learned)
            .expect("the final pass judges every request");
        tally.add(s, v);
    }
    tally.verdicts.sort_by(|a, b| order(a).cmp(&order(b)));
    sort_failing(&mut tally.failing);
    let summaries = &tally.summaries;
    let each = |visit: &mut dyn FnMut(&crate::report::SummaryLite)| {
        summaries.iter().for_each(visit);
        Ok::<_, std::convert::Infallible>(())
    };
    let (mut incidents, latency) =
        match incidents_and_latency(&tally.failing, tally.data_end, cfg, each) {
            Ok(r) => r,
            Err(e) => match e {},
        };
    if let Some(m) = metrics {
        m.annotate(&mut incidents);
    }
    Ok(Diagnosis {
        summaries_len: tally.summaries.len(),
        verdicts: tally.verdicts,
        incidents,
        latency,
        assembly: a.stats,
    })
}
