//! Runs every scenario, diagnoses its output with the overtime binary and
//! scores the verdicts against `--truth`:
//!
//! ```sh
//! cargo run -p overtime-simulate --example accuracy -- --overtime target/debug/overtime \
//!     [--time-scale 50] [--requests 12] [--nginx] [--out DIR] [--only NAME ...]
//! ```
//!
//! A failing request is right when its verdict names the expected kind and
//! component; healthy traffic must get no failing verdict.

use overtime_simulate::{SimulateArgs, scenarios, simulate};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, atomic::AtomicBool};

struct Opts {
    overtime: PathBuf,
    scale: String,
    requests: u64,
    nginx: bool,
    out: PathBuf,
    only: Vec<String>,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        overtime: PathBuf::new(),
        scale: "50".into(),
        requests: 12,
        nginx: false,
        out: std::env::temp_dir().join("overtime-simulate-accuracy"),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--overtime" => o.overtime = val()?.into(),
            "--time-scale" => o.scale = val()?,
            "--requests" => o.requests = val()?.parse().map_err(|e| format!("--requests: {e}"))?,
            "--nginx" => o.nginx = true,
            "--out" => o.out = val()?.into(),
            "--only" => o.only.push(val()?),
            _ => return Err(format!("unknown flag {a}")),
        }
    }
    if o.overtime.as_os_str().is_empty() {
        return Err("--overtime BIN is required".into());
    }
    Ok(o)
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("accuracy: {e}");
            std::process::exit(2);
        }
    };
    let mut rows = Vec::new();
    let (mut total, mut right) = (0, 0);
    for sc in scenarios::all() {
        if !o.only.is_empty() && !o.only.iter().any(|w| sc.name.contains(w.as_str())) {
            continue;
        }
        let dir = o.out.join(sc.name);
        std::fs::create_dir_all(&dir).expect("output dir");
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let n = if sc.burst > 1 {
            sc.burst.max(24) as u64
        } else {
            o.requests
        };
        let mut flags = vec![
            "--scenario".to_string(),
            sc.name.into(),
            "--time-scale".into(),
            o.scale.clone(),
            "--requests".into(),
            n.to_string(),
            "--duration".into(),
            "0".into(),
            "--rate".into(),
            "50".into(),
            "--no-otlp".into(),
            "--spans-out".into(),
            p("spans.jsonl"),
            "--access-log".into(),
            p("access.log"),
            "--truth".into(),
            p("truth.jsonl"),
            "--quiet".into(),
        ];
        if !o.nginx {
            flags.push("--no-nginx".into());
        }
        let args = SimulateArgs::from_flags(&flags).expect("flags");
        let summary = match simulate(&args, Arc::new(AtomicBool::new(false))) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{}: simulate failed: {e}", sc.name);
                continue;
            }
        };
        let out = Command::new(&o.overtime)
            .args([
                "diagnose",
                "--nginx-log",
                &p("access.log"),
                "--log-format",
                "overtime",
                "--otlp-json",
                &p("spans.jsonl"),
                "--json",
            ])
            .output()
            .expect("running overtime");
        if !out.status.success() {
            eprintln!(
                "{}: overtime diagnose failed: {}",
                sc.name,
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        }
        std::fs::write(dir.join("diagnosis.json"), &out.stdout).ok();
        let doc: Value = serde_json::from_slice(&out.stdout).expect("diagnose --json");
        let verdicts: HashMap<String, &Value> = doc["verdicts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((v["trace_id"].as_str()?.to_string(), v)))
            .collect();
        let truth = lines(&dir.join("truth.jsonl"));
        let (mut n_fail, mut ok, mut healthy_failed, mut false_alarms, mut wrong) =
            (0, 0, 0, 0, Vec::new());
        for t in &truth {
            let failed = t["outcome"] != "ok";
            let v = t["trace_id"].as_str().and_then(|id| verdicts.get(id));
            let got = v.map(|v| {
                (
                    v["root_cause"]["kind"].as_str().unwrap_or(""),
                    v["root_cause"]["component"].as_str().unwrap_or(""),
                )
            });
            let failing_verdict = v.is_some_and(|v| v["outcome"] != "ok");
            match (failed, t["expected_kind"].as_str()) {
                (true, Some(k)) => {
                    n_fail += 1;
                    let want = (k, t["expected_component"].as_str().unwrap_or(""));
                    if got == Some(want) {
                        ok += 1;
                    } else {
                        wrong.push(format!("{} {:?} -> {:?}", t["trace_id"], want, got));
                    }
                }
                (true, None) => healthy_failed += 1,
                (false, _) if failing_verdict => false_alarms += 1,
                _ => {}
            }
        }
        total += n_fail;
        right += ok;
        rows.push(format!(
            "| {} | {} | {} | {}/{} | {} | {} |",
            sc.name,
            summary.load.sent,
            summary
                .load
                .outcomes
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
            ok,
            n_fail,
            healthy_failed,
            false_alarms
        ));
        for w in wrong {
            eprintln!("{}: wrong: {w}", sc.name);
        }
    }
    println!(
        "| scenario | requests | outcomes | right kind+component | healthy/noise requests that failed | failing verdicts for requests that succeeded |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!(
        "\ntotal: {right}/{total} failing requests diagnosed right (time scale {}, {})",
        o.scale,
        if o.nginx { "nginx" } else { "built-in gateway" }
    );
}
