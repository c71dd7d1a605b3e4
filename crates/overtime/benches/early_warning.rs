//! Early warning against reality: ramps of several speeds into each seed
//! incident, and a sharp tip-over, on the real simulated platform (nginx
//! when installed, the OpenTelemetry SDK), replayed through the
//! collector's live engine; the lead time from each signal's first
//! warning to the outage's first 504 a client got (the first 504 of the
//! unbroken run — no pause over 3 simulated minutes — into the busiest
//! five minutes of 504s; strays before it are counted beside), and the
//! alerts raised by healthy noisy traffic (false alarms per hour), also
//! across a collector restart. Prints the README's tables. Every time is
//! read on the simulated clock (the simulator's stamps): the lead does
//! not depend on how fast the machine ran the ramp.
//!
//! ```sh
//! cargo bench -p overtime --bench early_warning --profile dev
//! OVERTIME_EW_SEEDS=1,2 OVERTIME_EW_SCALE=20 cargo bench -p overtime --bench early_warning --profile dev
//! OVERTIME_EW_ONLY=ramp_prefill,healthy_noisy cargo bench -p overtime --bench early_warning --profile dev
//! # tuning: keep the runs, then replay them without simulating, with
//! # every signal's CUSUM printed once a bucket
//! OVERTIME_EW_RAMPS=5m OVERTIME_EW_KEEP=/tmp/ew cargo bench -p overtime --bench early_warning --profile dev
//! OVERTIME_EW_REUSE=1 OVERTIME_EW_TRACE=1 OVERTIME_EW_KEEP=/tmp/ew cargo bench …
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use support::early_warning::{EARLY, Outcome, gateway_timeout_ms, run, run_with};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seeds() -> Vec<u64> {
    std::env::var("OVERTIME_EW_SEEDS")
        .unwrap_or_else(|_| "1".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// `OVERTIME_EW_ONLY=ramp_prefill,healthy_noisy`: run only those.
fn wanted(scenario: &str) -> bool {
    std::env::var("OVERTIME_EW_ONLY")
        .map_or(true, |only| only.split(',').any(|s| s.trim() == scenario))
}

/// `OVERTIME_EW_RAMPS=5m,10m`: run only ramps of those lengths.
fn wanted_ramp(ramp: &str) -> bool {
    std::env::var("OVERTIME_EW_RAMPS")
        .map_or(true, |only| only.split(',').any(|s| s.trim() == ramp))
}

/// Where the runs' files go: `OVERTIME_EW_KEEP` (kept, one folder a run,
/// so `OVERTIME_EW_REUSE=1` replays them again without simulating), else
/// a temporary folder.
fn run_dir(base: &std::path::Path, name: &str) -> std::path::PathBuf {
    let d = base.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The warm-up every ramp starts with (simulated minutes).
const WARMUP_MIN: f64 = 10.0;

/// Per early-warning signal, its first warning (simulated µs).
fn first_by_signal(o: &Outcome) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for r in o.raised.iter().filter(|r| EARLY.contains(&r.name.as_str())) {
        m.entry(r.signal.clone()).or_insert(r.at_us);
    }
    m
}

fn main() {
    let scale: f64 = env_or("OVERTIME_EW_SCALE", 20.0);
    let tmp = tempfile::tempdir().unwrap();
    let keep = std::env::var("OVERTIME_EW_KEEP")
        .ok()
        .map(std::path::PathBuf::from);
    let base = keep.as_deref().unwrap_or(tmp.path());
    println!(
        "time scale {scale} (10x behind seed 004's 10 s gateway); every time is simulated, \
         read on the simulated clock; the ramp begins at minute {WARMUP_MIN}\n"
    );
    println!(
        "| seed incident | scenario | ramp | run seed | onset → first 504 (min) | stray 504s | first warning | lead (min) | lead by signal (min) |"
    );
    println!("|---|---|---:|---:|---:|---:|---|---:|---|");
    let ramps: [(&str, &str, &[&str]); 4] = [
        ("000", "ramp_prefill", &["18m", "9m", "5m"]),
        ("003", "ramp_tool_no_timeout", &["16m", "8m", "5m"]),
        ("004", "ramp_dns_retry", &["20m", "10m", "6m"]),
        ("000", "tipover_gpu_slots", &["10m"]),
    ];
    for (incident, scenario, lengths) in ramps {
        if !wanted(scenario) {
            continue;
        }
        let s = scale.min(gateway_timeout_ms(scenario) / 1000.0);
        for ramp in lengths.iter().filter(|r| wanted_ramp(r)) {
            for seed in seeds() {
                let o = run(
                    &run_dir(base, &format!("{scenario}-{ramp}-{seed}")),
                    scenario,
                    seed,
                    s,
                    &["--warmup", "10m", "--ramp", ramp, "--hold", "3m"],
                );
                let by = first_by_signal(&o);
                let lead = |t: i64| o.outage_us.map(|f| (f - t) as f64 / 60e6);
                let creep = o.outage_us.map(|f| f as f64 / 60e6 - WARMUP_MIN);
                let w = o.first_early();
                let mut per: Vec<String> = by
                    .iter()
                    .map(|(sig, t)| {
                        format!(
                            "{sig} {}",
                            lead(*t).map_or("—".into(), |l| format!("{l:.1}"))
                        )
                    })
                    .collect();
                per.sort();
                println!(
                    "| {incident} | `{scenario}` | {ramp} | {seed} | {} | {} | {} | {} | {} |",
                    creep.map_or("no 504".into(), |c| format!("{c:.1}")),
                    o.stray_504s,
                    w.map_or("—".into(), |w| format!(
                        "`{}` at min {:.1}",
                        w.signal,
                        o.minute_of(w.at_us)
                    )),
                    o.lead_minutes()
                        .map_or("—".into(), |l| format!("**{l:.1}**")),
                    per.join(", "),
                );
                for r in &o.raised {
                    eprintln!(
                        "    {scenario} {ramp} seed {seed}: min {:.1} {} — {}",
                        o.minute_of(r.at_us),
                        r.name,
                        r.summary
                    );
                }
            }
        }
    }
    println!(
        "\n| healthy noisy traffic | run seed | collector restarted at (min) | simulated minutes | requests | early warnings | per hour | any alert raised | largest CUSUM (threshold 5) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for restart in [None, Some(15.0)] {
        for seed in seeds().into_iter().filter(|_| wanted("healthy_noisy")) {
            let dir = run_dir(base, &format!("healthy_noisy-{seed}"));
            let o = run_with(&dir, "healthy_noisy", seed, scale, &[], restart);
            let mut peaks: Vec<(&str, f64)> = o.fast_peaks.iter().map(|(k, v)| (*k, *v)).collect();
            peaks.sort_by(|a, b| b.1.total_cmp(&a.1));
            let peaks: Vec<String> = peaks
                .iter()
                .take(3)
                .map(|(k, v)| format!("{k} {v:.1}"))
                .collect();
            println!(
                "| `healthy_noisy` | {seed} | {} | {:.0} | {} | {} | {:.1} | {} | {} |",
                restart.map_or("—".into(), |m| format!("{m:.0}")),
                o.minutes,
                o.requests,
                o.early_raised(),
                o.early_raised() as f64 / o.minutes * 60.0,
                o.raised.len(),
                peaks.join(", ")
            );
            for r in &o.raised {
                eprintln!(
                    "    healthy_noisy seed {seed}: min {:.1} {} — {}",
                    o.minute_of(r.at_us),
                    r.name,
                    r.summary
                );
            }
        }
    }
}
