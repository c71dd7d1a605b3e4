//! Bounded label values: at most `max` distinct values per label, the rest
//! reported as `other`, so a client sending a new route per request cannot
//! grow the metrics without bound.

use std::collections::HashSet;

/// The value reported for labels past the bound.
pub const OTHER: &str = "other";

/// The distinct values seen for one label.
#[derive(Debug, Clone)]
pub struct BoundedLabel {
    max: usize,
    seen: HashSet<String>,
    /// Values reported as `other` since start.
    pub overflowed: u64,
}

impl BoundedLabel {
    pub fn new(max: usize) -> Self {
        BoundedLabel {
            max: max.max(1),
            seen: HashSet::new(),
            overflowed: 0,
        }
    }

    /// `v` itself while fewer than `max` values were seen (or `v` already
    /// was), else `other`. Empty values read `unknown`.
    pub fn get(&mut self, v: &str) -> String {
        let v = if v.is_empty() { "unknown" } else { v };
        if self.seen.contains(v) {
            return v.to_string();
        }
        if self.seen.len() < self.max {
            self.seen.insert(v.to_string());
            return v.to_string();
        }
        self.overflowed += 1;
        OTHER.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_cap_read_other() {
        let mut l = BoundedLabel::new(2);
        assert_eq!(l.get("/a"), "/a");
        assert_eq!(l.get("/b"), "/b");
        assert_eq!(l.get("/c"), "other");
        assert_eq!(l.get("/a"), "/a");
    }
}
