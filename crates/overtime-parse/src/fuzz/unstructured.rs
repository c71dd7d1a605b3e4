//! Turning fuzz bytes into structured values, for the round-trip targets
//! (a record generated from the bytes, rendered, parsed back).

/// Reads choices from fuzz bytes; once they run out every read is 0, so
/// any input (even empty) gives a valid value.
#[derive(Debug, Clone)]
pub struct Unstructured<'a> {
    data: &'a [u8],
}

impl<'a> Unstructured<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Unstructured { data }
    }

    /// The next byte (0 when exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next four bytes as a little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        let raw = (u64::from(self.u32()) << 32) | u64::from(self.u32());
        lo + raw % span
    }

    /// A choice among `n` (> 0) options from one byte.
    pub fn pick(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    /// One of `items`.
    pub fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.pick(items.len())]
    }

    /// Up to `max` characters from `alphabet`.
    pub fn text(&mut self, alphabet: &[u8], max: usize) -> String {
        let n = self.pick(max + 1);
        (0..n).map(|_| char::from(self.choose(alphabet))).collect()
    }

    /// A length-prefixed string of arbitrary bytes (lossy UTF-8), at most
    /// `max` bytes long: where the round trips put hostile values.
    pub fn any_string(&mut self, max: usize) -> String {
        let n = self.pick(max + 1).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        String::from_utf8_lossy(head).into_owned()
    }

    /// `n` lowercase hex digits.
    pub fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b"0123456789abcdef"[usize::from(self.byte() & 15)]))
            .collect()
    }

    /// Seconds with exactly three decimals as nginx writes them
    /// (`60.001`), and the same value in ms.
    pub fn nginx_secs(&mut self, max_ms: u64) -> (String, f64) {
        let ms = self.range(0, max_ms);
        (format!("{}.{:03}", ms / 1000, ms % 1000), ms as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_input_reads_zero() {
        let mut u = Unstructured::new(&[7]);
        assert_eq!(u.byte(), 7);
        assert_eq!((u.byte(), u.u32(), u.range(3, 9)), (0, 0, 3));
        assert_eq!(u.nginx_secs(10_000), ("0.000".to_string(), 0.0));
        assert_eq!(u.any_string(10), "");
    }
}
