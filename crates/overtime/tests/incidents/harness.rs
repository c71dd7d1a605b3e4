//! Running the real `overtime` binary on a fixture.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
}

pub fn truth(name: &str) -> Value {
    let p = fixture_dir(name).join("truth.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The fixture's `diagnose` arguments (truth.json `args`): paths made
/// absolute, `@file` replaced by the file's contents.
pub fn fixture_args(name: &str) -> Vec<String> {
    let dir = fixture_dir(name);
    let t = truth(name);
    let args = t["args"].as_array().expect("truth.json has args");
    let mut out = Vec::new();
    let mut prev_is_path = false;
    for a in args {
        let a = a.as_str().unwrap();
        if let Some(file) = a.strip_prefix('@') {
            let body = std::fs::read_to_string(dir.join(file)).unwrap();
            out.push(body.trim_end().to_string());
        } else if prev_is_path {
            out.push(dir.join(a).to_string_lossy().into_owned());
        } else {
            out.push(a.to_string());
        }
        prev_is_path = matches!(
            a,
            "--nginx-log" | "--nginx-conf" | "--spans" | "--otlp-json"
        );
    }
    out
}

pub fn overtime(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(args)
        .output()
        .expect("run the overtime binary")
}

pub fn diagnose(args: &[String]) -> Value {
    let mut full = vec!["diagnose".to_string()];
    full.extend_from_slice(args);
    full.push("--json".into());
    let out = overtime(&full);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "overtime {} exited {:?}\nstderr:\n{stderr}",
        full.join(" "),
        out.status.code()
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "--json must print one JSON document: {e}\nstdout starts: {}\nstderr:\n{stderr}",
            String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(400)])
        )
    });
    assert!(
        doc["verdicts"].is_array(),
        "document has a `verdicts` array"
    );
    assert!(
        doc["incidents"].is_array(),
        "document has an `incidents` array"
    );
    doc
}

/// `diagnose --json` on a fixture, run once per test binary.
pub fn doc(name: &str) -> &'static Value {
    static A: OnceLock<Value> = OnceLock::new();
    static B: OnceLock<Value> = OnceLock::new();
    static C: OnceLock<Value> = OnceLock::new();
    static H: OnceLock<Value> = OnceLock::new();
    let cell = match name {
        "a_prefill" => &A,
        "b_tool_no_timeout" => &B,
        "c_dns_retry" => &C,
        "healthy" => &H,
        _ => unreachable!(),
    };
    cell.get_or_init(|| diagnose(&fixture_args(name)))
}
