//! The advice against known truth: synthetic calls drawn from known
//! latency laws (seed 000's three input classes; seed 000's dynamic-timeout
//! form), with and without 30 % of the calls cut by a timeout. Fitted
//! coefficients and recommended per-bucket timeouts must land within 10 %
//! of the law's own values — computed from the law, never from the fit.

use overtime_advise::stats::{Rng, percentile};
use overtime_advise::synth::{self, Cut, Law, SEED_CLASSES};
use overtime_advise::{AdviseOptions, advise};
use overtime_advise::{Form, Method};

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got / want - 1.0).abs() <= tol
}

fn check_seed_classes(cut: Cut, seed: u64) -> Vec<String> {
    let ds = synth::seed_classes(4_000, cut, seed);
    let a = advise(&ds, &AdviseOptions::default());
    let mut problems = Vec::new();
    for class in SEED_CLASSES {
        let g = a
            .llm
            .iter()
            .find(|g| g.bucket.as_deref() == Some(class.name))
            .unwrap_or_else(|| panic!("no advice row for bucket {}", class.name));
        let truth = class.law().quantile(0.99);
        let got = g.recommended_ms.expect("a recommendation");
        if !within(got, truth, 0.10) {
            problems.push(format!(
                "{cut:?} {}: recommended {got:.0} ms vs true P99 {truth:.0} ms ({:?})",
                class.name, g.method
            ));
        }
        if matches!(cut, Cut::Share(_)) {
            let share = (g.timed_out + g.cut) as f64 / g.count as f64;
            assert!(
                (share - 0.3).abs() < 0.03,
                "{}: {share} of the calls cut",
                class.name
            );
            assert!(
                g.survival_ms.p99.is_none(),
                "{}: Kaplan–Meier cannot know the P99 beyond the cuts",
                class.name
            );
            assert_ne!(g.method, Some(Method::KaplanMeier), "{}", class.name);
        }
    }
    problems
}

#[test]
fn recommended_timeouts_for_seed_000s_input_classes_land_within_ten_percent_of_their_p99() {
    let mut problems = check_seed_classes(Cut::Never, 1);
    problems.extend(check_seed_classes(Cut::Share(0.3), 2));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

const LAW: Law = Law {
    base_ms: 800.0,
    a: 0.01,
    b: 0.6,
    sigma: 0.35,
    tokens: (10.0, 1_200.0),
};

/// The true P99 of each token bucket under `LAW` (a large sample of it).
fn bucket_truth() -> Vec<(&'static str, f64)> {
    let mut rng = Rng::new(99);
    let mut by: [Vec<f64>; 4] = Default::default();
    for _ in 0..400_000 {
        let (t, _, ms) = LAW.draw(&mut rng);
        by[overtime_diagnose::bucket_of(t as i64)].push(ms);
    }
    overtime_diagnose::BUCKETS
        .iter()
        .zip(by.iter())
        .map(|(b, v)| (*b, percentile(v, 0.99).unwrap()))
        .collect()
}

fn check_law(cut: Cut, seed: u64, truth: &[(&str, f64)]) -> Vec<String> {
    let ds = synth::seed_law(8_000, LAW, cut, seed);
    let a = advise(&ds, &AdviseOptions::default());
    let m = &a.models[0].fit;
    let mut problems = Vec::new();
    if m.form != Form::Seed {
        problems.push(format!("{cut:?}: form {:?}, the law is seed 000's", m.form));
    }
    for (name, got, want) in [
        ("base", m.base_ms, LAW.base_ms),
        ("a", m.a, LAW.a),
        ("b", m.b, LAW.b),
        ("sigma", m.sigma, LAW.sigma),
    ] {
        if !within(got, want, 0.10) {
            problems.push(format!("{cut:?}: {name} = {got:.5}, truth {want}"));
        }
    }
    // The per-request rule against the law's own P99 at a few points.
    for (tokens, load) in [(20.0, 0.1), (300.0, 0.5), (1_000.0, 0.9)] {
        let want = LAW.median_ms(tokens, load) * (LAW.sigma * 2.326_347_874).exp();
        let got = m.timeout_ms(tokens, load, 0.99);
        if !within(got, want, 0.10) {
            problems.push(format!(
                "{cut:?}: rule at {tokens} tokens, load {load}: {got:.0} vs {want:.0}"
            ));
        }
    }
    for (bucket, want) in truth {
        let g = a.llm.iter().find(|g| g.bucket.as_deref() == Some(*bucket));
        let got = g.and_then(|g| g.recommended_ms).unwrap_or(f64::NAN);
        if !within(got, *want, 0.10) {
            problems.push(format!(
                "{cut:?}: bucket {bucket}: recommended {got:.0} vs true P99 {want:.0} ({:?})",
                g.and_then(|g| g.method)
            ));
        }
    }
    problems
}

#[test]
fn the_seed_000_law_is_recovered_within_ten_percent_with_and_without_30_percent_cut() {
    let truth = bucket_truth();
    let mut problems = check_law(Cut::Never, 5, &truth);
    problems.extend(check_law(Cut::Share(0.3), 6, &truth));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_cut_call_is_never_counted_as_finishing_at_its_timeout() {
    let ds = synth::seed_classes(2_000, Cut::At(20_000.0), 8);
    let a = advise(&ds, &AdviseOptions::default());
    let long = a
        .llm
        .iter()
        .find(|g| g.bucket.as_deref() == Some(">500"))
        .unwrap();
    // Finished-call percentiles never reach the cut; the tail goes beyond.
    assert!(long.finished_ms.p99.unwrap() < 20_000.0);
    assert!(long.timed_out > 1_000, "{}", long.timed_out);
    let rec = long.recommended_ms.unwrap();
    let truth = SEED_CLASSES[2].law().quantile(0.99);
    assert!(
        rec > 40_000.0,
        "{rec}: the P99 lies far beyond the 20 s cut"
    );
    assert!(within(rec, truth, 0.25), "{rec} vs {truth}");
    assert_eq!(long.timeout.as_ref().unwrap().ms, 20_000.0);
    assert_eq!(long.change, "raise");
}
