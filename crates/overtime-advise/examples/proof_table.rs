//! Prints the README's table of the advice against known truth:
//! `cargo run -p overtime-advise --example proof_table`. The same laws,
//! sizes and seeds as the tests in `tests/proof.rs`.

use overtime_advise::stats::{Rng, percentile};
use overtime_advise::synth::{self, Cut, Law, SEED_CLASSES};
use overtime_advise::{Advice, AdviseOptions, advise};
use overtime_diagnose::{BUCKETS, bucket_of};

const LAW: Law = Law {
    base_ms: 800.0,
    a: 0.01,
    b: 0.6,
    sigma: 0.35,
    tokens: (10.0, 1_200.0),
};

fn cell(got: Option<f64>, truth: f64, ms: bool) -> String {
    match got {
        Some(g) => {
            let v = if ms {
                format!("{:.1} s", g / 1000.0)
            } else {
                format!("{g:.4}")
            };
            format!("{v} ({:+.1} %)", (g / truth - 1.0) * 100.0)
        }
        None => "—".into(),
    }
}

fn bucket_rec(a: &Advice, bucket: &str) -> Option<f64> {
    a.llm
        .iter()
        .find(|g| g.bucket.as_deref() == Some(bucket))
        .and_then(|g| g.recommended_ms)
}

fn main() {
    let opts = AdviseOptions::default();
    println!("| law | quantity | truth | fitted, no cut | fitted, 30 % cut |");
    println!("|---|---|---|---|---|");
    let plain = advise(&synth::seed_classes(4_000, Cut::Never, 1), &opts);
    let cut = advise(&synth::seed_classes(4_000, Cut::Share(0.3), 2), &opts);
    for c in SEED_CLASSES {
        let truth = c.law().quantile(0.99);
        println!(
            "| seed 000 classes | recommended timeout (P99), {} tokens | {:.1} s | {} | {} |",
            c.name,
            truth / 1000.0,
            cell(bucket_rec(&plain, c.name), truth, true),
            cell(bucket_rec(&cut, c.name), truth, true)
        );
    }
    let plain = advise(&synth::seed_law(8_000, LAW, Cut::Never, 5), &opts);
    let cut = advise(&synth::seed_law(8_000, LAW, Cut::Share(0.3), 6), &opts);
    let (mp, mc) = (&plain.models[0].fit, &cut.models[0].fit);
    for (name, t, p, c) in [
        ("base (ms)", LAW.base_ms, mp.base_ms, mc.base_ms),
        ("a (per token)", LAW.a, mp.a, mc.a),
        ("b (per gpu_load)", LAW.b, mp.b, mc.b),
        ("σ", LAW.sigma, mp.sigma, mc.sigma),
    ] {
        println!(
            "| seed 000 form | {name} | {t} | {} | {} |",
            cell(Some(p), t, false),
            cell(Some(c), t, false)
        );
    }
    let mut rng = Rng::new(99);
    let mut by: [Vec<f64>; 4] = Default::default();
    for _ in 0..400_000 {
        let (t, _, ms) = LAW.draw(&mut rng);
        by[bucket_of(t as i64)].push(ms);
    }
    for (b, v) in BUCKETS.iter().zip(by.iter()) {
        let truth = percentile(v, 0.99).unwrap();
        println!(
            "| seed 000 form | recommended timeout (P99), {b} tokens | {:.1} s | {} | {} |",
            truth / 1000.0,
            cell(bucket_rec(&plain, b), truth, true),
            cell(bucket_rec(&cut, b), truth, true)
        );
    }
}
