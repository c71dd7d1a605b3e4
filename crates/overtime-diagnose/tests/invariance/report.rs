//! What the harness prints and scores: pass matrices (family × nesting,
//! folder × nesting, naming variants), what changed, every trace whose
//! rewrites changed a verdict with one side-by-side example each, and the
//! score JSON of docs/testing.md (*Scoreboard*).

use super::emit::Nesting;
use super::families::Family;
use super::run::{Combo, Key, Outcome, Sample};
use super::show;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// Side-by-side examples printed at most (one per trace that failed).
const EXAMPLES: usize = 12;

#[derive(Default, Clone, Copy)]
struct Tally {
    pass: usize,
    total: usize,
    skipped: usize,
}

impl Tally {
    fn cell(t: Option<&Tally>) -> String {
        match t {
            Some(t) => format!("{}/{} ({})", t.pass, t.total, t.skipped),
            None => "—".into(),
        }
    }
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

/// One trace whose rewrites changed its verdict.
struct Failed {
    count: usize,
    first: String,
    example: String,
}

#[derive(Default)]
pub struct Tallies {
    matrix: BTreeMap<(Family, Nesting), Tally>,
    by_folder: BTreeMap<(String, Nesting), Tally>,
    by_naming: BTreeMap<Combo, Tally>,
    scores: BTreeMap<Family, Score>,
    why: BTreeMap<(Family, Nesting), BTreeMap<String, usize>>,
    skips: BTreeMap<(Family, &'static str), usize>,
    failed: BTreeMap<(String, String), Failed>,
    pub unfaithful: Vec<String>,
    pub failures: usize,
    fallbacks: BTreeMap<&'static str, usize>,
    seconds: BTreeMap<String, f64>,
}

fn show_key(k: &Option<Key>) -> String {
    match k {
        Some((k, c, o)) => format!("{k} / {c} / {o}"),
        None => "healthy".into(),
    }
}

impl Tallies {
    pub fn add(&mut self, o: &Outcome, index: &HashMap<(&str, &str), &Sample>) {
        let c = o.combo;
        self.unfaithful
            .extend(o.unfaithful.iter().map(|u| format!("{}: {u}", o.incident)));
        for (why, n) in &o.fallbacks {
            *self.fallbacks.entry(why).or_default() += n;
        }
        *self.seconds.entry(o.incident.clone()).or_default() += o.elapsed.as_secs_f64();
        let score = self.scores.entry(c.family).or_default();
        for j in &o.judged {
            let cells = [
                self.matrix.entry((c.family, c.nesting)).or_default(),
                self.by_folder
                    .entry((o.incident.clone(), c.nesting))
                    .or_default(),
                self.by_naming.entry(c).or_default(),
            ];
            if let Some(reason) = j.skipped {
                for t in cells {
                    t.skipped += 1;
                }
                *self.skips.entry((c.family, reason)).or_default() += 1;
                continue;
            }
            for t in cells {
                t.total += 1;
                t.pass += j.pass as usize;
            }
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
            self.failures += 1;
            let change = format!("{} → {}", show_key(&j.want), show_key(&j.got));
            *self
                .why
                .entry((c.family, c.nesting))
                .or_default()
                .entry(change.clone())
                .or_default() += 1;
            let f = self
                .failed
                .entry((o.incident.clone(), j.trace_id.clone()))
                .or_insert_with(|| Failed {
                    count: 0,
                    first: format!("{}: {change}", c.label()),
                    example: String::new(),
                });
            f.count += 1;
            if let Some((rewrite, v1)) = &j.failure
                && f.example.is_empty()
            {
                let s = index[&(o.incident.as_str(), j.trace_id.as_str())];
                let title = format!(
                    "{} trace {}: {} (expected {})",
                    o.incident,
                    j.trace_id,
                    c.label(),
                    show_key(&j.want)
                );
                f.example =
                    show::side_by_side(&title, &s.spans, s.original.as_ref(), rewrite, v1.as_ref());
            }
        }
    }

    pub fn print(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\npass matrix (rewrites of failing and healthy traces that kept their verdict / rewrites judged; skipped in brackets):"
        );
        let _ = write!(out, "{:<26}", "family");
        for n in Nesting::ALL {
            let _ = write!(out, "{:>20}", n.name());
        }
        let _ = writeln!(out);
        for f in Family::ALL {
            let _ = write!(out, "{:<26}", f.name());
            for n in Nesting::ALL {
                let _ = write!(out, "{:>20}", Tally::cell(self.matrix.get(&(f, n))));
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "\nby folder (every family and naming together), and the time its rewrites took (summed over the workers):"
        );
        let mut folders: Vec<&String> = self.by_folder.keys().map(|(f, _)| f).collect();
        folders.dedup();
        for folder in folders {
            let _ = write!(out, "{folder:<26}");
            for n in Nesting::ALL {
                let cell = Tally::cell(self.by_folder.get(&(folder.clone(), n)));
                let _ = write!(out, "{cell:>20}");
            }
            let _ = writeln!(out, "{:>8.1} s", self.seconds.get(folder).unwrap_or(&0.0));
        }
        let partial: Vec<_> = self
            .by_naming
            .iter()
            .filter(|(_, t)| t.pass < t.total)
            .collect();
        let _ = writeln!(
            out,
            "\n{} of {} combinations (family × nesting × naming) kept every verdict{}",
            self.by_naming.len() - partial.len(),
            self.by_naming.len(),
            if partial.is_empty() {
                ""
            } else {
                "; the rest:"
            }
        );
        for (c, t) in partial {
            let _ = writeln!(out, "  {:<60} {}/{}", c.label(), t.pass, t.total);
        }
        for (why, n) in &self.fallbacks {
            let _ = writeln!(
                out,
                "{n} calls written in another nesting than asked, which cannot express them ({why})"
            );
        }
        for ((f, reason), n) in &self.skips {
            let _ = writeln!(out, "skipped {n} rewrites in {}: {reason}", f.name());
        }
        for ((f, n), m) in &self.why {
            let _ = writeln!(
                out,
                "\n{} × {}: what changed (expected → rewrite: count)",
                f.name(),
                n.name()
            );
            let mut v: Vec<_> = m.iter().collect();
            v.sort_by_key(|(_, c)| std::cmp::Reverse(**c));
            for (k, c) in v.into_iter().take(6) {
                let _ = writeln!(out, "  {c:>4}  {k}");
            }
        }
        if !self.failed.is_empty() {
            let _ = writeln!(
                out,
                "\ntraces whose rewrites changed the verdict (rewrites changed, the first):"
            );
        }
        for line in self.failed_traces() {
            let _ = writeln!(out, "  {line}");
        }
        for f in self.failed.values().take(EXAMPLES) {
            let _ = writeln!(out, "\n{}", f.example);
        }
    }

    /// Each trace whose rewrites changed a verdict: how many, the first.
    pub fn failed_traces(&self) -> Vec<String> {
        self.failed
            .iter()
            .map(|((inc, tid), f)| format!("{inc} {tid}: {} — {}", f.count, f.first))
            .collect()
    }

    pub fn score_json(&self) -> String {
        let mut datasets = serde_json::Map::new();
        for (f, s) in &self.scores {
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
}
