//! Cutting a line whose values may hold the literal that follows them: an
//! unquoted `$upstream_*` list before a space (`", "` and `" : "` hold
//! one), before `|` or `]` (an address may hold one), free text before a
//! space, two variables with no literal between them.
//!
//! Every way of cutting the line is tried — each value must be one nginx
//! can write for its variable (`domain.rs`), a variable written twice must
//! be the same twice, and the whole line must pass the format's checks
//! (`checks.rs`) — and:
//! - one way: that is the line;
//! - several: nginx writes every `$upstream_*` list of a line from the same
//!   tries, so only the ways where all lists have the same shape
//!   (`lists.rs`) count; one of those: that is the line;
//! - several still: the line is ambiguous, and is rejected naming the
//!   first variable it could end two ways — never guessed;
//! - none: the same again with values that only look like nginx's (a time
//!   with one decimal: a line another program wrote or changed); still
//!   none: the caller cuts at the first literals to say what is wrong.
//!
//! The search stops as soon as the answer is known and after
//! [`MAX_STEPS`] values tried (a line with that many readings is
//! rejected as ambiguous), so no line costs more than a bounded amount.
//!
//! ```text
//! format  $status|$upstream_addr|$upstream_status|$upstream_connect_time
//! line    200|10.0.0.1:80, 10.0.0.2:80|502, 200|0.1, 0.000
//! ways    $upstream_addr = "10.0.0.1:80, 10.0.0.2:80"            → the rest reads: one way
//!         $upstream_addr = "10.0.0.1:80, 10.0.0.2:80|502, 200"   → "0.1, 0.000" has no "|" after it
//! ```

use super::checks::passes;
use super::domain::{Domain, all_printable};
use super::format::Escape;
use super::plan::Plan;

/// Values tried per line at most.
pub(crate) const MAX_STEPS: usize = 4096;

/// Buffers reused from line to line.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    cur: Vec<(usize, usize)>,
    shapes: Vec<u64>,
    /// The first two ways found, and the first two with lists alike.
    ways: [Vec<(usize, usize)>; 4],
}

/// What the search found.
pub(crate) enum Found {
    /// One reading, now in the caller's spans.
    One,
    /// No reading: cut at the first literals to say why.
    None,
    /// Several readings: the rejection detail.
    Several(String),
}

struct Walk<'a> {
    plan: &'a Plan,
    line: &'a str,
    esc: Escape,
    /// Where the last value ends.
    end: usize,
    s: &'a mut Scratch,
    steps: usize,
    found: usize,
    alike: usize,
    /// Values that only look like nginx's count too (`Domain::value`).
    loose: bool,
    /// Every byte of the line is printable ASCII (`Domain::extent`).
    printable: bool,
}

/// Cuts `line` every way it can be cut (see the module doc) into `spans`.
pub(crate) fn cut(
    plan: &Plan,
    line: &str,
    esc: Escape,
    spans: &mut Vec<(usize, usize)>,
    s: &mut Scratch,
) -> Found {
    let b = line.as_bytes();
    let n = plan.occs.len();
    let end = match plan.groups.last().and_then(|g| g.after.as_ref()) {
        Some(lit)
            if b.len() >= plan.prefix.len() + lit.len() && lit.is_at(b, b.len() - lit.len()) =>
        {
            b.len() - lit.len()
        }
        Some(_) => return Found::None,
        None => b.len(),
    };
    s.cur.clear();
    s.cur.resize(n, (0, 0));
    s.shapes.clear();
    s.shapes.resize(n, 1);
    let mut w = Walk {
        plan,
        line,
        esc,
        end,
        s,
        steps: 0,
        found: 0,
        alike: 0,
        loose: false,
        printable: esc == Escape::Default && all_printable(b),
    };
    w.walk(0, plan.prefix.len());
    // A line nginx did not write itself (times with other decimals...):
    // read it the same way with values that look the part.
    if w.found == 0 && w.steps <= MAX_STEPS {
        w.loose = true;
        w.walk(0, plan.prefix.len());
    }
    let over = w.steps > MAX_STEPS;
    let (found, alike) = (w.found, w.alike);
    let pick = |k: usize| &s.ways[k];
    let several = |a: &[(usize, usize)], b: &[(usize, usize)]| {
        let i = (0..n).find(|&i| a[i] != b[i]).unwrap_or(0);
        // The value's last characters, where the two readings part.
        let v = |sp: (usize, usize)| -> String {
            let t = &line[sp.0..sp.1];
            match t.char_indices().rev().nth(39) {
                Some((k, _)) => format!("…{}", &t[k..]),
                None => t.to_string(),
            }
        };
        Found::Several(format!(
            "the line reads {} ways: ${} is {:?} or {:?} (put a literal nginx never writes \
             inside a value after ${}, e.g. quotes)",
            if over { "too many" } else { "several" },
            plan.names[i],
            v(a[i]),
            v(b[i]),
            plan.names[i],
        ))
    };
    let one = |spans: &mut Vec<(usize, usize)>, k: usize| {
        spans.clear();
        spans.extend_from_slice(pick(k));
        Found::One
    };
    match (alike, found) {
        _ if over && found >= 2 => several(pick(0), pick(1)),
        _ if over => Found::Several(format!(
            "the line reads too many ways (over {MAX_STEPS} values tried)"
        )),
        (1, _) => one(spans, 2),
        (2.., _) => several(pick(2), pick(3)),
        (0, 1) => one(spans, 0),
        (0, 2..) => several(pick(0), pick(1)),
        (0, 0) => Found::None,
    }
}

impl Walk<'_> {
    /// Tries every end of value `i`, which starts at `pos`; false stops
    /// the search.
    fn walk(&mut self, i: usize, pos: usize) -> bool {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return false;
        }
        let plan = self.plan;
        let Some(occ) = plan.occs.get(i) else {
            return self.solution();
        };
        let b = self.line.as_bytes();
        if i + 1 == plan.occs.len() {
            return self.end < pos || self.try_end(i, pos, self.end, 0, false);
        }
        match &occ.after {
            Some(lit) if !occ.open => match plan.find_literal(b, pos, lit) {
                Some(e) => self.try_end(i, pos, e, lit.len(), false),
                None => true,
            },
            Some(lit) => {
                // A value holds only bytes its domain can hold, so the
                // first other byte ends the candidates: the literal is
                // looked for up to there only.
                let ext = occ.domain.extent(b, pos, self.esc, self.printable);
                let upto = &b[..(ext + lit.len()).min(b.len())];
                let mut from = pos;
                // A list never ends inside a separator (`", "`, `" : "`).
                let list = matches!(occ.domain, Domain::List(_));
                while let Some(e) = lit.find(upto, from) {
                    let inside = list && e > pos && matches!(b[e - 1], b',' | b' ' | b':');
                    if !inside && !self.try_end(i, pos, e, lit.len(), true) {
                        return false;
                    }
                    from = e + 1;
                }
                true
            }
            None => {
                let ext = occ.domain.extent(b, pos, self.esc, self.printable);
                (pos..=ext)
                    .all(|e| !self.line.is_char_boundary(e) || self.try_end(i, pos, e, 0, true))
            }
        }
    }

    /// Value `i` is `pos..e` if its domain holds it (`bytes_ok`: its bytes
    /// are known to be of the domain's class); then the rest.
    fn try_end(&mut self, i: usize, pos: usize, e: usize, lit: usize, bytes_ok: bool) -> bool {
        let occ = &self.plan.occs[i];
        let b = self.line.as_bytes();
        let Some(shape) = occ.domain.value(b, pos, e, self.esc, self.loose, bytes_ok) else {
            return true;
        };
        if occ.same_as != i {
            let (a, z) = self.s.cur[occ.same_as];
            if b[a..z] != b[pos..e] {
                return true;
            }
        }
        self.s.cur[i] = (pos, e);
        self.s.shapes[i] = shape;
        self.walk(i + 1, e + lit)
    }

    /// A whole reading in `cur`: counts it if the format's checks pass.
    fn solution(&mut self) -> bool {
        let plan = self.plan;
        for &(occ, c) in &plan.checks {
            let (a, z) = self.s.cur[occ];
            if !passes(c, &self.line[a..z], plan.json) {
                return true;
            }
        }
        let mut lists = plan.list_occs.iter().map(|&i| self.s.shapes[i]);
        let first = lists.next();
        let alike = lists.all(|x| Some(x) == first);
        let Scratch { cur, ways, .. } = &mut *self.s;
        if self.found < 2 {
            ways[self.found].clear();
            ways[self.found].extend_from_slice(cur);
        }
        self.found += 1;
        if alike {
            if self.alike < 2 {
                ways[2 + self.alike].clear();
                ways[2 + self.alike].extend_from_slice(cur);
            }
            self.alike += 1;
        }
        // Lists can still tell readings apart only while fewer than two
        // readings with lists alike are known.
        if plan.list_occs.len() >= 2 {
            self.alike < 2
        } else {
            self.found < 2
        }
    }
}
