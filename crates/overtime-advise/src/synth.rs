//! Synthetic calls with known latency laws, seeded: what the advice is
//! proved against (its tests and the README's table). Two laws:
//!
//! - [`SEED_CLASSES`]: seed 000's three input classes (single hop < 50
//!   tokens, multi hop 200–500, long attribution > 500), each log-normal
//!   through the P50 and P99 the post-mortem measured;
//! - [`Law`]: seed 000's dynamic-timeout form
//!   `base × (1 + a·tokens) × (1 + b·gpu_load)` with log-normal noise.

use crate::extract::{Attempt, CallFacts, Class, Dataset, End, TraceFacts};
use crate::lognormal::LogNormal;
use crate::stats::{Rng, quantile_z};
use overtime_model::{Outcome, Stage};

/// One input class of seed 000's latency table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedClass {
    /// The class's name as seed 000 writes it (its input-token range).
    pub name: &'static str,
    /// Input tokens drawn uniformly in [lo, hi].
    pub tokens: (i64, i64),
    /// The class's median latency (ms).
    pub p50_ms: f64,
    /// The class's 99th-percentile latency (ms).
    pub p99_ms: f64,
}

impl SeedClass {
    /// The log-normal through this class's P50 and P99.
    pub fn law(&self) -> LogNormal {
        LogNormal {
            mu: self.p50_ms.ln(),
            sigma: (self.p99_ms / self.p50_ms).ln() / quantile_z(0.99),
        }
    }
}

/// Seed 000's table: P50 1.2 / 8.7 / 22.1 s, P99 5.1 / 32.6 / 58.7 s.
pub const SEED_CLASSES: [SeedClass; 3] = [
    SeedClass {
        name: "<50",
        tokens: (8, 49),
        p50_ms: 1_200.0,
        p99_ms: 5_100.0,
    },
    SeedClass {
        name: "200-500",
        tokens: (200, 500),
        p50_ms: 8_700.0,
        p99_ms: 32_600.0,
    },
    SeedClass {
        name: ">500",
        tokens: (501, 1_200),
        p50_ms: 22_100.0,
        p99_ms: 58_700.0,
    },
];

/// How the synthetic calls are cut.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cut {
    /// Every call finishes.
    Never,
    /// One timeout (ms) for every call.
    At(f64),
    /// Each class (or token bucket) cut at its own quantile, so that this
    /// share of its calls is censored.
    Share(f64),
}

/// The model name synthetic calls use.
pub const MODEL: &str = "deepseek-v4-pro";

fn call(tokens: i64, gpu: Option<f64>, ms: f64, cut_at: Option<f64>) -> CallFacts {
    let (ms, end) = match cut_at {
        Some(c) if ms > c => (c, End::TimedOut),
        _ => (ms, End::Finished),
    };
    CallFacts {
        class: Class::Llm,
        component: MODEL.into(),
        stage: Stage::Llm,
        tokens_in: Some(tokens),
        gpu_load: gpu,
        in_flight: 0.0,
        attempts: vec![Attempt {
            start_ms: 0.0,
            ms,
            end,
            known_ms: None,
            answered: end == End::Finished,
        }],
        timeout_ms: cut_at,
        timeout_observed: false,
        remaining_budget_ms: None,
        critical: true,
        fallback_ms: None,
        abs_start_us: 0,
        gateway: None,
    }
}

fn trace(i: usize, c: CallFacts) -> TraceFacts {
    let timed_out = c.attempts[0].end == End::TimedOut;
    let ms = c.attempts[0].ms;
    TraceFacts {
        trace_id: format!("{:032x}", i + 1),
        start_us: 1_700_000_000_000_000 + i as i64 * 1_000_000,
        outcome: if timed_out {
            Outcome::ServiceTimeout
        } else {
            Outcome::Ok
        },
        status: None,
        layers: vec![],
        elapsed_ms: ms,
        service: Some("agent".into()),
        service_end_ms: Some(ms),
        service_status: Some(if timed_out { 503 } else { 200 }),
        budget_ms: None,
        stream_gap_ms: None,
        calls: vec![c],
    }
}

/// `per_class` calls of each of seed 000's classes.
pub fn seed_classes(per_class: usize, cut: Cut, seed: u64) -> Dataset {
    let mut rng = Rng::new(seed);
    let mut traces = Vec::new();
    for class in SEED_CLASSES {
        let law = class.law();
        let cut_at = match cut {
            Cut::Never => None,
            Cut::At(ms) => Some(ms),
            Cut::Share(s) => Some(law.quantile(1.0 - s)),
        };
        for _ in 0..per_class {
            let tokens = rng.range(class.tokens.0 as f64, class.tokens.1 as f64 + 1.0) as i64;
            let ms = (law.mu + law.sigma * rng.normal()).exp();
            traces.push(trace(traces.len(), call(tokens, None, ms, cut_at)));
        }
    }
    Dataset {
        traces,
        ..Default::default()
    }
}

/// Seed 000's dynamic-timeout law with log-normal noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Law {
    /// Latency of an empty prompt on an idle server (ms).
    pub base_ms: f64,
    /// Per input token: `median = base × (1 + a·tokens) × (1 + b·load)`.
    pub a: f64,
    /// Per unit of load (0–1).
    pub b: f64,
    /// Spread of ln(latency) around the median.
    pub sigma: f64,
    /// Input tokens uniform in [lo, hi].
    pub tokens: (f64, f64),
}

impl Law {
    /// The law's median latency (ms) at `tokens` input tokens and `load`.
    pub fn median_ms(&self, tokens: f64, load: f64) -> f64 {
        self.base_ms * (1.0 + self.a * tokens) * (1.0 + self.b * load)
    }

    /// One call's latency.
    pub fn draw(&self, rng: &mut Rng) -> (f64, f64, f64) {
        let tokens = rng.range(self.tokens.0, self.tokens.1).round();
        let load = rng.uniform();
        let ms = self.median_ms(tokens, load) * (self.sigma * rng.normal()).exp();
        (tokens, load, ms)
    }
}

/// `n` calls under `law`, `gpu_load` uniform in [0, 1]; `Cut::Share`
/// cuts every call at the one timeout that censors that share overall.
pub fn seed_law(n: usize, law: Law, cut: Cut, seed: u64) -> Dataset {
    let mut rng = Rng::new(seed);
    let draws: Vec<(f64, f64, f64)> = (0..n).map(|_| law.draw(&mut rng)).collect();
    let cut_at = match cut {
        Cut::Never => None,
        Cut::At(ms) => Some(ms),
        Cut::Share(s) => {
            let mut v: Vec<f64> = draws.iter().map(|d| d.2).collect();
            v.sort_by(f64::total_cmp);
            Some(v[((1.0 - s) * n as f64) as usize])
        }
    };
    let traces = draws
        .into_iter()
        .enumerate()
        .map(|(i, (t, l, ms))| trace(i, call(t as i64, Some(l), ms, cut_at)))
        .collect();
    Dataset {
        traces,
        ..Default::default()
    }
}
