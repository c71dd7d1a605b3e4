//! Proof by re-writing (docs/testing.md, *The rewrite harness*): the
//! same incident, written by any instrumentation, gets the same verdict.
//!
//! Every incident under `tests/fixtures/incidents/` (and every recorded
//! run under `tests/fixtures/e2e_*/`) is read as `overtime diagnose` reads
//! it; a sample of its traces is taken apart into structure and calls
//! (`model`), and each call is written again in every convention family
//! (`families`: ours, OpenTelemetry GenAI current and deprecated,
//! OpenInference, Traceloop, LangChain, bare framework spans, HTTP only)
//! crossed with every nesting (`emit`: attempts as children, as siblings,
//! retries as repeated operations, orphans) and every naming variant
//! (captured headers with `-` or `_`, string or string-array values, HTTP
//! conventions old or stable). Each rewrite is read back through the real
//! parser (OTLP JSON lines or JSONL), checked to say what it was written
//! to say, and diagnosed with the incident's own gateway log.
//!
//! The verdict of every failing trace must keep its kind, component and
//! outcome (the component becomes the call's address only where no span
//! of the rewrite names the call: `run::expect`), and no healthy trace may
//! fail. A failing rewrite is printed as the two span trees side by side.
//! With `OVERTIME_SCORE_DIR` set the pass counts per family are written
//! to `$OVERTIME_SCORE_DIR/invariance.json` (docs/testing.md, *Scoreboard*).
//!
//! ```text
//! cargo nextest run -p overtime-diagnose -E 'test(/^invariance::/)' --no-capture
//! ```
//!
//! `OVERTIME_INVARIANCE_FIXTURES=DIR` rewrites the incidents under another
//! folder (laid out as `tests/fixtures`: `incidents/*`, `e2e_*/…`), e.g. a
//! run of an e2e harness given an `args.json`.
//! `OVERTIME_INVARIANCE_DUMP=DIR` also writes every rewrite's spans to
//! `DIR/<incident>/<family>-<nesting>-<naming>.{jsonl,otlp.jsonl}`, to be
//! diagnosed again with the incident's own gateway log and arguments.

mod emit;
mod families;
mod incident;
mod model;
mod run;
mod show;
mod write;

use families::Family;
use run::{Combo, Outcome, Sample};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Failing traces rewritten per incident, taken in turn from each original
/// root-cause kind.
const FAILING: usize = 12;
/// Healthy traces rewritten per incident.
const HEALTHY: usize = 3;

#[derive(Default, Clone, Copy)]
struct Tally {
    pass: usize,
    total: usize,
    skipped: usize,
}

/// The numbers of the score JSON for one family.
#[derive(Default)]
struct Score {
    failing: usize,
    with_verdict: usize,
    kind_right: usize,
    kind_component_right: usize,
    outcome_right: usize,
    false_positives: usize,
}

fn run_all(incidents: &[incident::Incident], samples: &[Vec<Sample>]) -> Vec<Outcome> {
    let jobs: Vec<(usize, Combo)> = (0..incidents.len())
        .flat_map(|i| run::combos().into_iter().map(move |c| (i, c)))
        .collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(i, combo)) = jobs.get(k) else {
                        break;
                    };
                    let o = run::run(&incidents[i], &samples[i], combo);
                    done.lock().unwrap().push(o);
                }
            });
        }
    });
    let mut out = done.into_inner().unwrap();
    out.sort_by(|a, b| (&a.incident, a.combo).cmp(&(&b.incident, b.combo)));
    out
}

/// The original diagnosis against the incident's truth.
fn original_vs_truth(inc: &incident::Incident) -> Vec<String> {
    let mut bad = Vec::new();
    for (tid, t) in inc.failing.iter().flatten() {
        let want = (t.kind.clone(), t.component.clone(), t.outcome.clone());
        let got = inc.original.get(tid).map(incident::verdict_key);
        if got.as_ref() != Some(&want) {
            bad.push(format!(
                "{} {tid}: truth {want:?}, original {got:?}",
                inc.name
            ));
        }
    }
    for tid in inc.ok_traces.iter().flatten() {
        if let Some(v) = inc.original.get(tid)
            && v.outcome.as_str() != "ok"
        {
            bad.push(format!(
                "{} {tid}: healthy in the truth, original {:?}",
                inc.name,
                incident::verdict_key(v)
            ));
        }
    }
    bad
}

fn score_json(scores: &BTreeMap<Family, Score>) -> String {
    let mut datasets = serde_json::Map::new();
    for (f, s) in scores {
        datasets.insert(
            format!("invariance/{}", f.name()),
            serde_json::json!({
                "failing": s.failing, "with_verdict": s.with_verdict,
                "kind_right": s.kind_right, "kind_component_right": s.kind_component_right,
                "outcome_right": s.outcome_right,
                "findings_expected": 0, "findings_found": 0,
                "false_positives": s.false_positives,
            }),
        );
    }
    serde_json::to_string_pretty(&serde_json::json!({ "datasets": datasets })).unwrap()
}

#[test]
fn every_rewrite_of_every_incident_keeps_its_verdict() {
    let root = match std::env::var_os("OVERTIME_INVARIANCE_FIXTURES") {
        Some(d) => Path::new(&d).to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"),
    };
    let dirs = incident::folders(&root);
    assert!(!dirs.is_empty(), "no incidents under {}", root.display());
    let incidents: Vec<incident::Incident> =
        dirs.iter().map(|d| incident::load(&root, d)).collect();
    let truth_problems: Vec<String> = incidents.iter().flat_map(original_vs_truth).collect();
    let samples: Vec<Vec<Sample>> = incidents
        .iter()
        .map(|i| run::sample(i, FAILING, HEALTHY))
        .collect();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "rewriting up to {FAILING} failing traces (each root-cause kind in turn) and {HEALTHY} healthy traces per incident, {} ways each:",
        run::combos().len()
    );
    for (inc, s) in incidents.iter().zip(&samples) {
        let failing = s.iter().filter(|s| s.want.is_some()).count();
        let mut shapes: BTreeMap<&str, usize> = BTreeMap::new();
        for c in s.iter().flat_map(|s| &s.logical.calls) {
            *shapes.entry(c.original_shape).or_default() += 1;
        }
        let _ = writeln!(
            report,
            "  {}: {failing} failing + {} healthy traces; calls as the original wrote them: {shapes:?}",
            inc.name,
            s.len() - failing
        );
    }
    let outcomes = run_all(&incidents, &samples);

    let mut matrix: BTreeMap<(Family, emit::Nesting), Tally> = BTreeMap::new();
    let mut by_naming: BTreeMap<Combo, Tally> = BTreeMap::new();
    let mut scores: BTreeMap<Family, Score> = BTreeMap::new();
    let mut why: BTreeMap<(Family, emit::Nesting), BTreeMap<String, usize>> = BTreeMap::new();
    let mut skips: BTreeMap<(Family, &'static str), usize> = BTreeMap::new();
    let mut examples: BTreeMap<(Family, emit::Nesting), String> = BTreeMap::new();
    let mut unfaithful = Vec::new();
    let mut failures = 0;
    let mut fallbacks = 0;
    let index: HashMap<(&str, &str), &Sample> = incidents
        .iter()
        .zip(&samples)
        .flat_map(|(i, ss)| {
            ss.iter()
                .map(move |s| ((i.name.as_str(), s.trace_id.as_str()), s))
        })
        .collect();
    for o in &outcomes {
        let c = o.combo;
        unfaithful.extend(o.unfaithful.iter().map(|u| format!("{}: {u}", o.incident)));
        fallbacks += o.fallbacks;
        let score = scores.entry(c.family).or_default();
        for j in &o.judged {
            let cell = matrix.entry((c.family, c.nesting)).or_default();
            let fine = by_naming.entry(c).or_default();
            if let Some(reason) = j.skipped {
                cell.skipped += 1;
                fine.skipped += 1;
                *skips.entry((c.family, reason)).or_default() += 1;
                continue;
            }
            cell.total += 1;
            fine.total += 1;
            cell.pass += j.pass as usize;
            fine.pass += j.pass as usize;
            match (&j.want, &j.got) {
                (Some(w), got) => {
                    score.failing += 1;
                    if let Some(g) = got {
                        score.with_verdict += (g.2 != "ok") as usize;
                        score.kind_right += (g.0 == w.0) as usize;
                        score.kind_component_right += (g.0 == w.0 && g.1 == w.1) as usize;
                        score.outcome_right += (g.2 == w.2) as usize;
                    }
                }
                (None, got) => {
                    score.false_positives += got.as_ref().is_some_and(|g| g.2 != "ok") as usize
                }
            }
            if j.pass {
                continue;
            }
            failures += 1;
            let show = |k: &Option<run::Key>| match k {
                Some((k, c, o)) => format!("{k} / {c} / {o}"),
                None => "healthy".into(),
            };
            *why.entry((c.family, c.nesting))
                .or_default()
                .entry(format!("{} → {}", show(&j.want), show(&j.got)))
                .or_default() += 1;
            if let Some((rewrite, v1)) = &j.failure
                && !examples.contains_key(&(c.family, c.nesting))
            {
                let s = index[&(o.incident.as_str(), j.trace_id.as_str())];
                let title = format!(
                    "{} trace {}: {} (expected {})",
                    o.incident,
                    j.trace_id,
                    c.label(),
                    show(&j.want)
                );
                examples.insert(
                    (c.family, c.nesting),
                    show::side_by_side(&title, &s.spans, s.original.as_ref(), rewrite, v1.as_ref()),
                );
            }
        }
    }

    let _ = writeln!(
        report,
        "\npass matrix (rewrites of failing and healthy traces that kept their verdict / rewrites judged; skipped in brackets):"
    );
    let _ = write!(report, "{:<18}", "family");
    for n in emit::Nesting::ALL {
        let _ = write!(report, "{:>20}", n.name());
    }
    let _ = writeln!(report);
    for f in Family::ALL {
        let _ = write!(report, "{:<18}", f.name());
        for n in emit::Nesting::ALL {
            let cell = match matrix.get(&(f, n)) {
                Some(t) => format!("{}/{} ({})", t.pass, t.total, t.skipped),
                None => "—".into(),
            };
            let _ = write!(report, "{cell:>20}");
        }
        let _ = writeln!(report);
    }
    let _ = writeln!(
        report,
        "\nper naming variant (family × nesting × naming: pass/judged):"
    );
    for (c, t) in &by_naming {
        if t.pass < t.total {
            let _ = writeln!(report, "  {:<60} {}/{}", c.label(), t.pass, t.total);
        }
    }
    let all_pass = by_naming.values().filter(|t| t.pass == t.total).count();
    let _ = writeln!(
        report,
        "  ({all_pass} of {} combinations kept every verdict)",
        by_naming.len()
    );
    if fallbacks > 0 {
        let _ = writeln!(
            report,
            "\n{fallbacks} times a call was written as children because the nesting asked cannot express it (its attempts went to several addresses)"
        );
    }
    for ((f, reason), n) in &skips {
        let _ = writeln!(report, "skipped {n} rewrites in {}: {reason}", f.name());
    }
    for ((f, n), m) in &why {
        let _ = writeln!(
            report,
            "\n{} × {}: what changed (expected → rewrite: count)",
            f.name(),
            n.name()
        );
        let mut v: Vec<_> = m.iter().collect();
        v.sort_by_key(|(_, c)| std::cmp::Reverse(**c));
        for (k, c) in v.into_iter().take(6) {
            let _ = writeln!(report, "  {c:>4}  {k}");
        }
    }
    for e in examples.values() {
        let _ = writeln!(report, "\n{e}");
    }
    println!("{report}");
    if let Ok(dir) = std::env::var("OVERTIME_SCORE_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        let path = Path::new(&dir).join("invariance.json");
        std::fs::write(&path, score_json(&scores)).unwrap();
        println!("score written to {}", path.display());
    }
    assert!(
        unfaithful.is_empty(),
        "{} rewrites did not read back as written (a bug of the harness, not of the diagnosis):\n{}",
        unfaithful.len(),
        unfaithful[..unfaithful.len().min(20)].join("\n")
    );
    assert!(
        truth_problems.is_empty(),
        "the original diagnosis differs from truth.json:\n{}",
        truth_problems.join("\n")
    );
    assert_eq!(
        failures, 0,
        "{failures} rewrites changed a verdict (see above)"
    );
}
