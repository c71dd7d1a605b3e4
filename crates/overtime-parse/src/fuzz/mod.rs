//! Fuzz targets: property checks over arbitrary bytes, shared by the
//! coverage-guided cargo-fuzz binaries in `fuzz/` (nightly, libFuzzer) and
//! the bounded, deterministic runs under `cargo test`
//! (`tests/fuzz_bounded.rs`). See `docs/fuzzing.md`.
//!
//! Every `check_*` function panics when a property fails, which is how
//! both drivers see a failure. Beyond "no panic" they assert what a user
//! relies on: every input line is either a good record or a rejection with
//! a known reason (good + rejected == lines in), parsed durations are
//! finite and non-negative, ids are well formed, span ends never precede
//! starts, batches read back to the same records, and values rendered the
//! way nginx writes them parse back to what was rendered.
//!
//! ```
//! use overtime_parse::fuzz::{check_nginx_line, Rng};
//! check_nginx_line(b"\x00203.0.113.7 [2026-11-29T10:00:00+00:00] \"GET / HTTP/1.1\" 200 5 rt=0.001");
//! let mut rng = Rng::new(7);
//! let input = rng.mutate(&[b"abc".to_vec()], &[b"$status"], 64);
//! assert!(input.len() <= 64);
//! ```

mod formats;
mod lists;
mod nginx;
mod otlp_diff;
mod peer_seeds;
mod readings;
mod roundtrip;
mod seeds;
mod spans;
mod unstructured;
mod written;

pub use formats::check_nginx_formats;
pub use lists::{LIST_FORMATS, check_nginx_lists};
pub use nginx::{check_log_format, check_nginx_line, check_nginx_roundtrip};
pub use readings::nginx_readings;
pub use seeds::{dictionary, seeds};
pub use spans::{check_jsonl, check_llm_reason, check_otlp_json, check_otlp_proto};
pub use unstructured::Unstructured;
pub use written::{compare_written, default_escaped_bytes, kept_text};

/// A fuzz target: its name (the cargo-fuzz binary's) and its check.
#[derive(Clone, Copy)]
pub struct Target {
    /// The name of the cargo-fuzz binary and of its corpus directory.
    pub name: &'static str,
    /// The property check; panics on a failure.
    pub check: fn(&[u8]),
}

/// Every target, in the order docs/fuzzing.md lists them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "log_format",
        check: check_log_format,
    },
    Target {
        name: "nginx_line",
        check: check_nginx_line,
    },
    Target {
        name: "nginx_roundtrip",
        check: check_nginx_roundtrip,
    },
    Target {
        name: "nginx_lists",
        check: check_nginx_lists,
    },
    Target {
        name: "nginx_formats",
        check: check_nginx_formats,
    },
    Target {
        name: "llm_reason",
        check: check_llm_reason,
    },
    Target {
        name: "jsonl",
        check: check_jsonl,
    },
    Target {
        name: "otlp_json",
        check: check_otlp_json,
    },
    Target {
        name: "otlp_proto",
        check: check_otlp_proto,
    },
];

/// A small deterministic PRNG (xorshift64*) for the bounded runs: the
/// same seed gives the same inputs on every machine, so a CI failure
/// reproduces locally.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a fixed non-zero value).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `xs` (not empty), each as likely.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// A mutation of a random seed (or, one time in eight, fresh random
    /// bytes): one to eight byte flips, inserts, deletes, duplications,
    /// splices with another seed, or dictionary-token insertions, in the
    /// spirit of libFuzzer's mutators. The result is at most `max_len`.
    pub fn mutate(&mut self, seeds: &[Vec<u8>], dict: &[&[u8]], max_len: usize) -> Vec<u8> {
        if seeds.is_empty() || self.below(8) == 0 {
            let n = self.below(max_len.min(256) + 1);
            return (0..n).map(|_| self.next_u64() as u8).collect();
        }
        let mut v = seeds[self.below(seeds.len())].clone();
        for _ in 0..1 + self.below(8) {
            let at = self.below(v.len() + 1);
            match self.below(8) {
                0 if at < v.len() => v[at] ^= 1 << self.below(8),
                1 if at < v.len() => v[at] = self.next_u64() as u8,
                2 => v.insert(at, self.next_u64() as u8),
                3 if at < v.len() => {
                    let n = 1 + self.below((v.len() - at).min(16));
                    v.drain(at..at + n);
                }
                4 if at < v.len() => {
                    let n = 1 + self.below((v.len() - at).min(32));
                    let piece = v[at..at + n].to_vec();
                    let to = self.below(v.len() + 1);
                    v.splice(to..to, piece);
                }
                5 => {
                    let other = &seeds[self.below(seeds.len())];
                    let from = self.below(other.len() + 1);
                    let n = self.below(other.len() - from + 1);
                    v.splice(at..at, other[from..from + n].iter().copied());
                }
                6 | 7 if !dict.is_empty() => {
                    let token = dict[self.below(dict.len())];
                    if self.below(2) == 0 && at < v.len() {
                        let end = (at + token.len()).min(v.len());
                        v.splice(at..end, token.iter().copied());
                    } else {
                        v.splice(at..at, token.iter().copied());
                    }
                }
                _ => v.truncate(at),
            }
        }
        v.truncate(max_len);
        v
    }
}

/// What a bounded run did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunStats {
    /// Inputs checked (seeds and mutations).
    pub inputs: usize,
    /// The slowest single input, in seconds.
    pub slowest_s: f64,
}

/// Runs `target` on every seed, then on `iterations` mutations of them
/// drawn from a generator seeded by the target's name, and fails (naming
/// the input as a byte-string literal, to paste into a regression test)
/// when a check panics or one input takes longer than `per_input_limit_s`.
pub fn run_bounded(target: &Target, iterations: usize, per_input_limit_s: f64) -> RunStats {
    let seeds = seeds(target.name);
    let dict = dictionary(target.name);
    let seed = target.name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng::new(seed);
    let mut stats = RunStats {
        inputs: 0,
        slowest_s: 0.0,
    };
    let inputs = seeds
        .clone()
        .into_iter()
        .chain((0..iterations).map(|_| rng.mutate(&seeds, &dict, 4096)));
    for (i, input) in inputs.enumerate() {
        let t0 = std::time::Instant::now();
        let r = std::panic::catch_unwind(|| (target.check)(&input));
        let took = t0.elapsed().as_secs_f64();
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic)");
            panic!(
                "fuzz target {} failed on input #{i}: {msg}\ninput: b\"{}\"",
                target.name,
                input.escape_ascii()
            );
        }
        assert!(
            took <= per_input_limit_s,
            "fuzz target {} took {took:.2}s on input #{i} (limit {per_input_limit_s}s)\ninput: b\"{}\"",
            target.name,
            input.escape_ascii()
        );
        stats.inputs += 1;
        stats.slowest_s = stats.slowest_s.max(took);
    }
    stats
}

/// Asserts `v`, when present, is a finite number ≥ 0.
fn assert_duration(what: &str, v: Option<f64>) {
    if let Some(x) = v {
        assert!(x.is_finite() && x >= 0.0, "{what} = {x} is not a duration");
    }
}

/// Asserts `v`, when present, is finite.
fn assert_finite(what: &str, v: Option<f64>) {
    if let Some(x) = v {
        assert!(x.is_finite(), "{what} = {x} is not finite");
    }
}

/// Input lines as the parsers split them: on `\n`, a trailing `\r`
/// stripped, numbered from 1, with whether each one is blank (skipped).
fn lines(data: &[u8]) -> Vec<(u64, &[u8], bool)> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut n = 0;
    while !rest.is_empty() {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(k) => (&rest[..k], &rest[k + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        n += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.push((n, line, line.iter().all(u8::is_ascii_whitespace)));
        rest = next;
    }
    out
}
