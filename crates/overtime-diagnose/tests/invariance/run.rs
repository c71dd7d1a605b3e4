//! Rewriting a sample of an incident's traces one way, reading the
//! rewrite back through the real span parser, diagnosing it with the
//! incident's own gateway log and settings, and judging each trace.
//!
//! Expectations come from the original verdict and from what the rewrite
//! itself says about the guilty call ([`super::emit::tells`]):
//! - the kind and the outcome stay the original's;
//! - the component stays the original's, except that a call no span of
//!   the rewrite names is named by its address ("an address only when
//!   nothing in the call names it": HTTP-only, and an operation that never
//!   arrived);
//! - a rewrite whose spans cannot say what the guilty call was (an LLM call
//!   with no operation and no phases, a judge in a family with no way to
//!   say judge) is skipped for that trace, with the reason.
//!
//! Healthy traces must get no failing verdict in any rewrite.

use super::decompose::logical;
use super::emit::{self, Nesting};
use super::families::{Family, Naming};
use super::incident::{Incident, verdict_key};
use super::model::{Logical, fnv};
use super::write::{self, Out};
use overtime_diagnose::diagnose_tables;
use overtime_model::{SpanRecord, Verdict};
use overtime_parse::llm_reason::parse_llm_reason;
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// (kind, component, outcome).
pub type Key = (String, String, String);

/// One sampled trace of an incident.
pub struct Sample {
    pub trace_id: String,
    pub logical: Logical,
    /// The original spans of the trace, as parsed.
    pub spans: Vec<SpanRecord>,
    /// What the original was diagnosed as (`None`: healthy).
    pub want: Option<Key>,
    /// The call the original blamed, when it blamed a call.
    pub dominant: Option<usize>,
    pub original: Option<Verdict>,
}

/// Picks the traces to rewrite: up to `failing_max` failing traces, taken
/// in turn from each original root-cause kind (so every kind is in, however
/// many an incident has), and `healthy` healthy ones; within a kind in the
/// order of a hash of the trace id (the same every run).
pub fn sample(inc: &Incident, failing_max: usize, healthy: usize) -> Vec<Sample> {
    let mut by_trace: BTreeMap<&str, Vec<SpanRecord>> = BTreeMap::new();
    for s in &inc.spans {
        by_trace.entry(&s.trace_id).or_default().push(s.clone());
    }
    let failing_ids: Vec<String> = match &inc.failing {
        Some(f) => f.keys().cloned().collect(),
        None => inc
            .original
            .values()
            .filter(|v| v.outcome.as_str() != "ok")
            .map(|v| v.trace_id.clone())
            .collect(),
    };
    let healthy_ids: Vec<String> = match &inc.ok_traces {
        Some(o) => o.clone(),
        None => by_trace
            .keys()
            .filter(|t| !failing_ids.iter().any(|f| f == *t))
            .map(|t| t.to_string())
            .collect(),
    };
    // Failing traces with spans, by the kind the original gave them.
    let mut kinds: BTreeMap<String, Vec<(String, Key)>> = BTreeMap::new();
    for tid in failing_ids
        .iter()
        .filter(|t| by_trace.contains_key(t.as_str()))
    {
        let want: Key = match (
            inc.original.get(tid.as_str()),
            inc.failing.as_ref().and_then(|f| f.get(tid)),
        ) {
            (Some(v), _) => verdict_key(v),
            (None, Some(t)) => (t.kind.clone(), t.component.clone(), t.outcome.clone()),
            (None, None) => continue,
        };
        kinds
            .entry(want.0.clone())
            .or_default()
            .push((tid.clone(), want));
    }
    for v in kinds.values_mut() {
        v.sort_by_key(|(t, _)| fnv(t));
        v.reverse();
    }
    let mut picked = Vec::new();
    while picked.len() < failing_max && kinds.values().any(|v| !v.is_empty()) {
        for v in kinds.values_mut() {
            if picked.len() < failing_max
                && let Some(p) = v.pop()
            {
                picked.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for (tid, want) in picked {
        let original = inc.original.get(tid.as_str()).cloned();
        let spans = by_trace[tid.as_str()].clone();
        let logical = logical(&spans);
        let call_span = inc
            .failing
            .as_ref()
            .and_then(|f| f.get(&tid))
            .and_then(|t| t.call_span.clone());
        let dominant = dominant(&logical, &want.1, call_span.as_deref());
        out.push(Sample {
            trace_id: tid,
            logical,
            spans,
            want: Some(want),
            dominant,
            original,
        });
    }
    let mut ok: Vec<&String> = healthy_ids
        .iter()
        .filter(|t| by_trace.contains_key(t.as_str()))
        .collect();
    ok.sort_by_key(|t| fnv(t));
    for tid in ok.into_iter().take(healthy) {
        let spans = by_trace[tid.as_str()].clone();
        out.push(Sample {
            trace_id: tid.clone(),
            logical: logical(&spans),
            spans,
            want: None,
            dominant: None,
            original: inc.original.get(tid.as_str()).cloned(),
        });
    }
    out
}

/// The call the original verdict's component names (the truth's guilty
/// span decides between calls of one name; else the longest).
fn dominant(l: &Logical, component: &str, call_span: Option<&str>) -> Option<usize> {
    let named: Vec<usize> = (0..l.calls.len())
        .filter(|&i| l.calls[i].names().iter().any(|n| n == component))
        .collect();
    if let Some(cs) = call_span
        && let Some(&i) = named
            .iter()
            .find(|&&i| l.calls[i].span_ids.iter().any(|s| s == cs))
    {
        return Some(i);
    }
    named
        .into_iter()
        .max_by_key(|&i| l.calls[i].end_us - l.calls[i].start_us)
}

/// One way of rewriting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Combo {
    pub family: Family,
    pub nesting: Nesting,
    pub naming: Naming,
}

impl Combo {
    pub fn label(&self) -> String {
        format!(
            "{} × {} × {}",
            self.family.name(),
            self.nesting.name(),
            self.naming.label()
        )
    }
}

/// Every combination the harness runs. HTTP-only writes no operation
/// span, so `siblings` and `repeated` would be `children` again: it runs
/// `children` and `orphans` only. With `every_naming` false, each OTLP
/// family is spelled two ways of its eight: the first spelling of each
/// variant, and every other one at once.
pub fn combos(every_naming: bool) -> Vec<Combo> {
    let mut v = Vec::new();
    for family in Family::ALL {
        for nesting in Nesting::ALL {
            if family == Family::HttpOnly
                && matches!(nesting, Nesting::Siblings | Nesting::Repeated)
            {
                continue;
            }
            let namings = family.namings();
            let last = namings.len() - 1;
            for (k, naming) in namings.into_iter().enumerate() {
                if !every_naming && k != 0 && k != last {
                    continue;
                }
                v.push(Combo {
                    family,
                    nesting,
                    naming,
                });
            }
        }
    }
    v
}

/// How one trace fared in one rewrite.
pub struct Judged {
    pub trace_id: String,
    /// Expected (kind, component, outcome); `None`: healthy.
    pub want: Option<Key>,
    pub got: Option<Key>,
    pub pass: bool,
    pub skipped: Option<&'static str>,
    /// For a failure: the rewrite as parsed, and its verdict.
    pub failure: Option<(Vec<SpanRecord>, Option<Verdict>)>,
}

/// One rewrite of an incident's sample.
pub struct Outcome {
    pub combo: Combo,
    pub incident: String,
    pub judged: Vec<Judged>,
    pub fallbacks: BTreeMap<&'static str, usize>,
    /// Rewrites that did not read back as written: the harness's own bugs.
    pub unfaithful: Vec<String>,
    /// Time spent rewriting, reading back and diagnosing.
    pub elapsed: std::time::Duration,
}

/// Rewrites, reads back, diagnoses and judges.
pub fn run(inc: &Incident, samples: &[Sample], combo: Combo) -> Outcome {
    let started = std::time::Instant::now();
    let mut text = String::new();
    let mut emitted = Vec::new();
    let mut fallbacks = BTreeMap::new();
    for s in samples {
        let e = emit::trace(&s.logical, combo.family, combo.nesting, combo.naming);
        for (why, n) in e.fallbacks {
            *fallbacks.entry(why).or_default() += n;
        }
        text.push_str(&if combo.family.jsonl() {
            write::jsonl(&e.outs, &s.trace_id)
        } else {
            write::otlp(&e.outs, &s.trace_id)
        });
        emitted.push(e.outs);
    }
    if let Some(dir) = std::env::var_os("OVERTIME_INVARIANCE_DUMP") {
        dump(Path::new(&dir), inc, combo, &text);
    }
    let format = if combo.family.jsonl() {
        SpanFormat::Jsonl
    } else {
        SpanFormat::OtlpJson
    };
    let parsed = parse_span_bytes(format, text.as_bytes(), "rewrite");
    let mut unfaithful: Vec<String> = parsed
        .rejected
        .iter()
        .map(|r| format!("{}: rejected: {} {}", combo.label(), r.reason, r.detail))
        .collect();
    let mut by_trace: HashMap<&str, Vec<SpanRecord>> = HashMap::new();
    for s in &parsed.spans {
        by_trace.entry(&s.trace_id).or_default().push(s.clone());
    }
    for (s, outs) in samples.iter().zip(&emitted) {
        let got = by_trace
            .get(s.trace_id.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        unfaithful.extend(
            faithful(s, outs, got)
                .into_iter()
                .map(|e| format!("{} {}: {e}", combo.label(), s.trace_id)),
        );
    }
    let d = diagnose_tables(&inc.gateway, parsed.spans.clone(), &inc.config)
        .unwrap_or_else(|e| panic!("{}: {}: {e}", inc.name, combo.label()));
    let verdicts: HashMap<&str, &Verdict> = d
        .verdicts
        .iter()
        .map(|v| (v.trace_id.as_str(), v))
        .collect();
    let mut judged = Vec::new();
    for (s, outs) in samples.iter().zip(&emitted) {
        let v1 = verdicts.get(s.trace_id.as_str()).copied();
        let got = v1.map(verdict_key);
        let (want, skipped) = expect(s, outs);
        let pass = match (&want, &got) {
            (_, _) if skipped.is_some() => true,
            (None, None) => true,
            (None, Some(g)) => g.2 == "ok",
            (Some(w), g) => g.as_ref() == Some(w),
        };
        let failure = (!pass).then(|| {
            (
                by_trace
                    .get(s.trace_id.as_str())
                    .cloned()
                    .unwrap_or_default(),
                v1.cloned(),
            )
        });
        judged.push(Judged {
            trace_id: s.trace_id.clone(),
            want,
            got,
            pass,
            skipped,
            failure,
        });
    }
    Outcome {
        combo,
        incident: inc.name.clone(),
        judged,
        fallbacks,
        unfaithful,
        elapsed: started.elapsed(),
    }
}

/// How long after the cut a call may end and still have run to it, µs
/// (docs/diagnosis.md, "Names": what went silent in a cut stream).
const AT_CUT_US: i64 = 500_000;

/// What this rewrite of `s` must be diagnosed as, or why it cannot be judged.
fn expect(s: &Sample, outs: &[Out]) -> (Option<Key>, Option<&'static str>) {
    let Some(w) = &s.want else {
        return (None, None);
    };
    let mut want = w.clone();
    if s.original.is_none() {
        return (
            Some(want),
            Some("the original got no verdict to keep (see the original against the truth)"),
        );
    }
    if let Some(ci) = s.dominant {
        let c = &s.logical.calls[ci];
        let t = emit::tells(outs, ci);
        if c.class.is_llm() && !t.llm {
            return (
                Some(want),
                Some(
                    "no span of the rewrite says the guilty call is an LLM call (no operation, no phases)",
                ),
            );
        }
        if c.class == super::model::Class::Judge && !t.judge {
            return (
                Some(want),
                Some("no span of the rewrite says the guilty call is a judge"),
            );
        }
        // What went silent is the call still running at the cut: a
        // rewrite whose spans of it all ended long before (its operation
        // never arrived, its attempt ended with the headers) cannot say so.
        let ran_to = outs
            .iter()
            .filter(|o| o.call == Some(ci))
            .map(|o| o.end_us)
            .max()
            .unwrap_or(i64::MIN);
        if w.0 == "stream_idle_gap" && ran_to < c.end_us - AT_CUT_US {
            return (
                Some(want),
                Some(
                    "no span of the rewrite says the streaming call ran to the cut (its operation never arrived)",
                ),
            );
        }
        let by_address = c.attempts.iter().any(|a| a.address.component() == w.1);
        if !by_address && !t.names {
            want.1 = c.address().component();
        }
    }
    (Some(want), None)
}

/// Does the rewrite read back as it was written? Times, parents, status,
/// phases and timeouts of every span; the stage of every structure span.
pub fn faithful(s: &Sample, outs: &[Out], got: &[SpanRecord]) -> Vec<String> {
    let by_id: HashMap<&str, &SpanRecord> = got.iter().map(|g| (g.span_id.as_str(), g)).collect();
    let orig: HashMap<&str, &SpanRecord> =
        s.spans.iter().map(|g| (g.span_id.as_str(), g)).collect();
    let mut errs = Vec::new();
    for o in outs {
        let Some(g) = by_id.get(o.id.as_str()) else {
            errs.push(format!("span {} ({}) was not read back", o.id, o.name));
            continue;
        };
        if (g.start_us, g.end_us) != (o.start_us, o.end_us) {
            errs.push(format!(
                "{} times {}..{} read as {}..{}",
                o.name, o.start_us, o.end_us, g.start_us, g.end_us
            ));
        }
        if g.parent_span_id != o.parent {
            errs.push(format!(
                "{} parent {:?} read as {:?}",
                o.name, o.parent, g.parent_span_id
            ));
        }
        if g.status != o.status {
            errs.push(format!(
                "{} status {} read as {}",
                o.name, o.status, g.status
            ));
        }
        if let Some(r) = &o.reason
            && g.phases != parse_llm_reason(r)
        {
            errs.push(format!("{} phases {r:?} read as {:?}", o.name, g.phases));
        }
        if o.call.is_none()
            && let Some(og) = orig.get(o.id.as_str())
            && og.stage != g.stage
        {
            errs.push(format!(
                "structure span {} stage {} read as {}",
                o.name, og.stage, g.stage
            ));
        }
    }
    errs
}

/// Writes a rewrite where `overtime diagnose` can read it again
/// (`OVERTIME_INVARIANCE_DUMP=DIR`): `DIR/<incident>/<combination>.jsonl`,
/// spans only; the gateway log is the incident's own.
fn dump(dir: &Path, inc: &Incident, combo: Combo, text: &str) {
    let d = dir.join(&inc.name);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    let n = combo.naming;
    let name = format!(
        "{}-{}-{}{}{}.{}",
        combo.family.name(),
        combo.nesting.name(),
        if n.underscore { "underscore" } else { "dash" },
        if n.array { "-array" } else { "-string" },
        if n.old_http {
            "-oldhttp"
        } else {
            "-stablehttp"
        },
        if combo.family.jsonl() {
            "jsonl"
        } else {
            "otlp.jsonl"
        }
    );
    std::fs::write(d.join(&name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
}
