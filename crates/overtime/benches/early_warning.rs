//! Early warning against reality: for each seed incident, a gradual ramp
//! on the real simulated platform (nginx when installed, the OpenTelemetry
//! SDK), replayed through the collector's live engine; the lead time from
//! the first early-warning alert to the outage's first 504 a client got
//! (the first 504 of the unbroken run — no pause over 3 simulated
//! minutes — into the busiest five minutes of 504s; strays before it are
//! counted beside), and the
//! alerts raised by healthy noisy traffic (false alarms). Prints the
//! README's table. The lead is read on the simulated clock (what the test
//! asserts); beside it, the same lead on the real clock × the scale — the
//! real-time figure, kept here only: it drifts with the machine's load.
//!
//! ```sh
//! cargo bench -p overtime --bench early_warning --profile dev
//! OVERTIME_EW_SEEDS=1,2,3 OVERTIME_EW_SCALE=20 cargo bench -p overtime --bench early_warning --profile dev
//! OVERTIME_EW_ONLY=ramp_prefill,healthy_noisy cargo bench -p overtime --bench early_warning --profile dev
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use support::early_warning::{Outcome, run};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seeds() -> Vec<u64> {
    std::env::var("OVERTIME_EW_SEEDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// `OVERTIME_EW_ONLY=ramp_prefill,healthy_noisy`: run only those.
fn wanted(scenario: &str) -> bool {
    std::env::var("OVERTIME_EW_ONLY")
        .map_or(true, |only| only.split(',').any(|s| s.trim() == scenario))
}

fn minute(o: &Outcome, t: Option<i64>) -> String {
    t.map_or("—".into(), |t| format!("{:.1}", o.minute_of(t)))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let scale: f64 = env_or("OVERTIME_EW_SCALE", 20.0);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "time scale {scale}: every time below is simulated (production) time, read on the \
         simulated clock (the simulator's stamps); the last column is the same lead read on the \
         real clock x the scale, which drifts from it when the machine is busy\n"
    );
    println!(
        "| seed incident | scenario | run seed | requests | 504s | first warning (min) | signal | outage from (min) | stray 504s | lead | lead on the real clock × scale |"
    );
    println!("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    let mut leads = Vec::new();
    for (incident, scenario) in [
        ("000", "ramp_prefill"),
        ("003", "ramp_tool_no_timeout"),
        ("004", "ramp_dns_retry"),
    ] {
        if !wanted(scenario) {
            continue;
        }
        for seed in seeds() {
            let o = run(dir.path(), scenario, seed, scale, &[]);
            let w = o.first_early();
            let lead = o.lead_minutes();
            leads.push((incident, lead));
            println!(
                "| {incident} | `{scenario}` | {seed} | {} | {} | {} | {} | {} | {} | {} | {} |",
                o.requests,
                o.gateway_timeouts,
                minute(&o, w.map(|w| w.at_us)),
                w.map_or("—".into(), |w| format!("`{}`", w.signal)),
                minute(&o, o.outage_us),
                o.stray_504s,
                lead.map_or("—".into(), |l| format!("{l:.1} min")),
                o.lead_minutes_real()
                    .map_or("—".into(), |l| format!("{l:.1} min")),
            );
            for r in &o.raised {
                eprintln!(
                    "    {scenario} seed {seed}: min {:.1} {} — {}",
                    o.minute_of(r.at_us),
                    r.name,
                    r.summary
                );
            }
        }
    }
    println!(
        "\n| healthy noisy traffic | run seed | simulated minutes | requests | early warnings raised | any alert raised |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for seed in seeds().into_iter().filter(|_| wanted("healthy_noisy")) {
        let o = run(dir.path(), "healthy_noisy", seed, scale, &[]);
        println!(
            "| `healthy_noisy` | {seed} | {:.0} | {} | {} | {} |",
            o.minutes,
            o.requests,
            o.early_raised(),
            o.raised.len()
        );
        for (signal, (d, z)) in &o.peaks {
            eprintln!(
                "    healthy_noisy seed {seed}: {signal} peaked at {:+.1} points, z {z:.1}",
                d * 100.0
            );
        }
        for r in &o.raised {
            eprintln!(
                "    healthy_noisy seed {seed}: min {:.1} {} — {}",
                o.minute_of(r.at_us),
                r.name,
                r.summary
            );
        }
    }
    let worst = leads
        .iter()
        .filter_map(|l| l.1)
        .fold(f64::INFINITY, f64::min);
    println!("\nshortest lead: {worst:.1} simulated minutes");
}
