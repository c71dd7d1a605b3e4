//! Time-bucketed rings: the memory of every sliding window. A ring of `n`
//! slots of `width` µs keeps the last `n` buckets of data time; a slot is
//! reused (reset) when time moves past it. Memory is fixed by `n`, never
//! by traffic.

/// `n` buckets of `width_us` each, keyed by bucket index `t / width_us`.
#[derive(Debug, Clone)]
pub(crate) struct Ring<T> {
    width_us: i64,
    slots: Vec<Option<(i64, T)>>,
}

impl<T: Default> Ring<T> {
    pub fn new(width_us: i64, n: usize) -> Self {
        let mut slots = Vec::with_capacity(n.max(1));
        slots.resize_with(n.max(1), || None);
        Ring {
            width_us: width_us.max(1),
            slots,
        }
    }

    pub fn width_us(&self) -> i64 {
        self.width_us
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn index_of(&self, t_us: i64) -> i64 {
        t_us.div_euclid(self.width_us)
    }

    /// The bucket of time `t_us`, or `None` when the data is older than
    /// the ring remembers at `now_us` (or its slot holds a later bucket).
    pub fn at(&mut self, t_us: i64, now_us: i64) -> Option<&mut T> {
        let idx = self.index_of(t_us);
        let n = self.slots.len() as i64;
        if idx <= self.index_of(now_us) - n {
            return None;
        }
        let slot = &mut self.slots[idx.rem_euclid(n) as usize];
        match slot {
            Some((i, _)) if *i > idx => return None,
            Some((i, _)) if *i == idx => {}
            _ => *slot = Some((idx, T::default())),
        }
        slot.as_mut().map(|(_, v)| v)
    }

    /// Buckets whose index is in `(cur - to_back, cur - from_back]`, where
    /// `cur` is the bucket of `now_us`: `from_back = 0, to_back = k` is
    /// the last `k` buckets including the current one.
    pub fn range(&self, now_us: i64, from_back: usize, to_back: usize) -> impl Iterator<Item = &T> {
        let cur = self.index_of(now_us);
        let hi = cur - from_back as i64;
        let lo = cur - to_back.min(self.slots.len()) as i64;
        self.slots.iter().filter_map(move |s| match s {
            Some((i, v)) if *i > lo && *i <= hi => Some(v),
            _ => None,
        })
    }

    /// Every bucket held, with its index, in index order.
    pub fn entries(&self) -> Vec<(i64, &T)> {
        let mut v: Vec<(i64, &T)> = self
            .slots
            .iter()
            .filter_map(|s| s.as_ref().map(|(i, v)| (*i, v)))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }

    /// The last `k` buckets (the current one included).
    pub fn last(&self, now_us: i64, k: usize) -> impl Iterator<Item = &T> {
        self.range(now_us, 0, k)
    }

    /// How many buckets of `width_us` cover `span_us` (at least 1).
    pub fn slots_for(&self, span_us: i64) -> usize {
        ((span_us + self.width_us - 1) / self.width_us).max(1) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_data_is_refused_and_slots_are_reused() {
        let mut r: Ring<u32> = Ring::new(10, 3);
        *r.at(5, 5).unwrap() += 1; // bucket 0
        *r.at(15, 15).unwrap() += 1; // bucket 1
        *r.at(35, 35).unwrap() += 1; // bucket 3 reuses bucket 0's slot
        assert!(r.at(2, 35).is_none(), "bucket 0 is gone");
        assert!(r.at(5, 60).is_none(), "older than the ring at now");
        assert_eq!(r.last(35, 3).sum::<u32>(), 2); // buckets 1..=3
        assert_eq!(r.last(35, 1).sum::<u32>(), 1);
        assert_eq!(r.range(35, 1, 3).sum::<u32>(), 1); // bucket 1 (2 is empty)
        // Time moves on with no data: the window empties.
        assert_eq!(r.last(100, 3).sum::<u32>(), 0);
        assert_eq!(r.slots_for(25), 3);
    }
}
