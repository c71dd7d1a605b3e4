//! Bad input to `overtime diagnose`: garbage lines and random bytes are
//! counted and rejected one by one while the good records are diagnosed;
//! a format or span file that matches almost nothing is an error naming
//! the likely cause, unless `--allow-rejects`.

use super::cli_usage::{fixture, overtime, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Deterministic bytes (xorshift), never `\n`.
fn noise(seed: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            match (*seed >> 24) as u8 {
                b'\n' => 0xfe,
                b => b,
            }
        })
        .collect()
}

fn random_lines(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::new();
    for i in 0..n {
        let len = 20 + (i * 37) % 180;
        let mut line = noise(&mut s, len);
        line[0] = b'#' ^ (i as u8 | 0x80); // never blank
        out.extend(line);
        out.push(b'\n');
    }
    out
}

fn tmp_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Exit 0, one JSON document on stdout, and a stderr line that says
/// `rejected` together with the count.
fn diagnose_tolerates(args: &[&str], rejected: usize) -> Value {
    let out = overtime(args);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "bad records must not fail the run: overtime {}\nstderr: {stderr}",
        args.join(" ")
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout must stay one JSON document: {e}"));
    let n = rejected.to_string();
    let reported = stderr.lines().any(|l| {
        l.to_lowercase().contains("rejected")
            && l.split(|c: char| !c.is_ascii_digit()).any(|tok| tok == n)
    });
    assert!(
        reported,
        "stderr must report {rejected} rejected records:\n{stderr}"
    );
    doc
}

fn truth_failing(name: &str) -> Vec<String> {
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name, "truth.json")).unwrap())
            .unwrap();
    t["failing"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn garbage_lines_among_good_ones_are_counted_and_the_good_ones_diagnosed() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture("a_prefill", "access.log")).unwrap();
    let good_lines: Vec<&[u8]> = good
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let healthy_line = good_lines[0];
    let mut garbage: Vec<Vec<u8>> = vec![
        healthy_line[..healthy_line.len() / 2].to_vec(), // truncated mid-line
        br#"127.0.0.1 - - [25/Nov/2026:15:20:01 +0800] "GET / HTTP/1.1" 200 612 "-" "curl/8.5.0""#
            .to_vec(), // another format
        br#"{"not":"an nginx line"}"#.to_vec(),
        b"GET /api/agent/execute HTTP/1.1".to_vec(),
        vec![b'x'; 5000],
        b"\t\t-\t-\t-".to_vec(),
        b"\xff\xfe\x00\x01 binary \xc3\x28 junk".to_vec(),
    ];
    let mut s = 7u64;
    for _ in 0..6 {
        let mut l = noise(&mut s, 90);
        l[0] = b'!';
        garbage.push(l);
    }
    let mut mixed = Vec::new();
    for (i, l) in good_lines.iter().enumerate() {
        mixed.extend_from_slice(l);
        mixed.push(b'\n');
        if i % 25 == 3
            && let Some(g) = garbage.get(i / 25)
        {
            mixed.extend_from_slice(g);
            mixed.push(b'\n');
        }
    }
    let inserted = (0..good_lines.len())
        .filter(|i| i % 25 == 3 && i / 25 < garbage.len())
        .count();
    assert_eq!(
        inserted,
        garbage.len(),
        "the test inserts every garbage line"
    );
    let log = tmp_file(dir.path(), "mixed.log", &mixed);
    let spans = fixture("a_prefill", "spans.jsonl");
    let doc = diagnose_tolerates(
        &[
            "diagnose",
            "--nginx-log",
            log.to_str().unwrap(),
            "--log-format",
            "overtime",
            "--spans",
            &spans,
            "--json",
        ],
        garbage.len(),
    );
    let got: Vec<&str> = doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["outcome"] == "gateway_timeout")
        .filter_map(|v| v["trace_id"].as_str())
        .collect();
    for tid in truth_failing("a_prefill") {
        assert!(
            got.contains(&tid.as_str()),
            "good record of {tid} lost among the garbage"
        );
    }
}

#[test]
fn a_log_of_random_bytes_is_rejected_line_by_line_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let log = tmp_file(
        dir.path(),
        "random.log",
        &random_lines(40, 0x9e3779b97f4a7c15),
    );
    let spans = fixture("a_prefill", "spans.jsonl");
    // A log that is all garbage looks like a wrong format: an error, unless
    // the user says to go on (see the next tests).
    diagnose_tolerates(
        &[
            "diagnose",
            "--nginx-log",
            log.to_str().unwrap(),
            "--log-format",
            "overtime",
            "--spans",
            &spans,
            "--json",
            "--allow-rejects",
        ],
        40,
    );
}

#[test]
fn a_format_that_matches_no_line_is_an_error_that_names_the_likely_format() {
    let log = fixture("a_prefill", "access.log");
    let spans = fixture("a_prefill", "spans.jsonl");
    let out = overtime(&[
        "diagnose",
        "--nginx-log",
        &log,
        "--log-format",
        "combined",
        "--spans",
        &spans,
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("334 of 334 lines do not match"), "{err}");
    assert!(err.contains("first rejected, line 1"), "{err}");
    assert!(
        err.contains("--log-format overtime"),
        "names the likely format: {err}"
    );
    assert!(err.contains("--allow-rejects"), "{err}");
    assert!(out.stdout.is_empty(), "no report from a wrong format");
}

#[test]
fn a_format_without_status_or_request_time_is_an_error() {
    let log = fixture("a_prefill", "access.log");
    let out = overtime(&[
        "diagnose",
        "--nginx-log",
        &log,
        "--log-format",
        "$remote_addr $bogus",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gives neither $status nor $request_time")
            && err.contains("--log-format overtime"),
        "{err}"
    );
}

#[test]
fn allow_rejects_diagnoses_a_mismatched_log_from_its_spans_and_counts_every_line() {
    let log = fixture("a_prefill", "access.log");
    let spans = fixture("a_prefill", "spans.jsonl");
    diagnose_tolerates(
        &[
            "diagnose",
            "--nginx-log",
            &log,
            "--log-format",
            "combined",
            "--spans",
            &spans,
            "--json",
            "--allow-rejects",
        ],
        334,
    );
}

#[test]
fn a_span_file_of_random_bytes_is_rejected_line_by_line_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let spans = tmp_file(
        dir.path(),
        "random.jsonl",
        &random_lines(25, 0x2545f4914f6cdd1d),
    );
    let log = fixture("a_prefill", "access.log");
    // A span file that is all garbage is an error (the next test), unless
    // the user says to go on.
    let doc = diagnose_tolerates(
        &[
            "diagnose",
            "--nginx-log",
            &log,
            "--log-format",
            "overtime",
            "--spans",
            spans.to_str().unwrap(),
            "--json",
            "--allow-rejects",
        ],
        25,
    );
    // The gateway records alone still show the 504s.
    let n504 = doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["gateway"]["status"] == 504)
        .count();
    assert_eq!(
        n504,
        truth_failing("a_prefill").len(),
        "every 504 still gets a verdict"
    );
}

#[test]
fn a_span_file_most_of_whose_records_are_rejected_is_an_error_naming_the_file_count_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    // Two good spans, then 25 lines of random bytes: most records rejected.
    let good: Vec<u8> = std::fs::read(fixture("a_prefill", "spans.jsonl"))
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .take(2)
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    let mut bytes = good;
    bytes.extend(random_lines(25, 0x2545f4914f6cdd1d));
    let spans = tmp_file(dir.path(), "mostly-garbage.jsonl", &bytes);
    let log = fixture("a_prefill", "access.log");
    let out = overtime(&[
        "diagnose",
        "--nginx-log",
        &log,
        "--log-format",
        "overtime",
        "--spans",
        spans.to_str().unwrap(),
        "--json",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("{}: ", spans.display())),
        "names the file: {err}"
    );
    assert!(err.contains("25 of 27 span records"), "the count: {err}");
    assert!(
        err.contains("first rejected, line 3: "),
        "the first rejected record's line: {err}"
    );
    let reason = err
        .split("first rejected, line 3: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_default();
    assert!(
        ["bad_json", "not_utf8"].contains(&reason),
        "the first rejected record's reason: {err}"
    );
    assert!(err.contains("--allow-rejects"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "no report from a file that is not spans"
    );
}

#[test]
fn a_metrics_export_beside_the_logs_puts_the_servers_load_in_the_incident_and_counts_its_bad_lines()
{
    let dir = tempfile::tempdir().unwrap();
    let log = fixture("a_prefill", "access.log");
    let spans = fixture("a_prefill", "spans.jsonl");
    let base = [
        "diagnose",
        "--nginx-log",
        &log,
        "--log-format",
        "overtime",
        "--spans",
        &spans,
        "--json",
    ];
    let out = overtime(&base);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let inc = &doc["incidents"][0];
    let at = |k: &str| {
        chrono::DateTime::parse_from_rfc3339(inc["window"][k].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    let (start, end) = (at("start"), at("end"));
    // promtool tsdb dump's shape: a sample a line, the name as a label.
    let mut dump = String::new();
    for (i, t) in (start..=end).step_by(15_000).enumerate() {
        dump += &format!(
            "{{__name__=\"vllm:num_requests_waiting\", instance=\"gpu-1:8000\", job=\"vllm\"}} {} {t}\n",
            10 + i % 3
        );
    }
    dump += "{__name__=\"vllm:num_requests_waiting\", instance=\"gpu-1:8000\" 12 0\n";
    let metrics = tmp_file(dir.path(), "vllm.dump", dump.as_bytes());
    let mut args = base.to_vec();
    args.extend(["--metrics", metrics.to_str().unwrap()]);
    let doc = diagnose_tolerates(&args, 1);
    let stats = &doc["incidents"][0]["cause_stats"];
    let q = &stats["model_server_queue_depth (gpu-1:8000)"];
    assert_eq!(q["max"], 12.0, "{stats}");
    // The verdicts are those of the run without metrics.
    let plain: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["verdicts"], plain["verdicts"]);
}
