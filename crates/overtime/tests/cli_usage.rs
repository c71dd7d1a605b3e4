//! The CLI's contract with its users (docs/interfaces.md, docs/inputs.md#bad-input): `--help` everywhere,
//! exit 2 with one clear line for unusable arguments, `nginx-format`, and
//! bad input that is counted and reported but never fatal.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn overtime<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(args)
        .output()
        .expect("run the overtime binary")
}

fn fixture(name: &str, file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
        .join(file)
        .to_string_lossy()
        .into_owned()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The recommended format, docs/inputs.md#nginx-access-logs, quoted pieces concatenated.
const OVERTIME_BODY: &str = concat!(
    r#"$remote_addr [$time_iso8601] "$request" $status "#,
    r#"$body_bytes_sent rt=$request_time uct="$upstream_connect_time" "#,
    r#"uht="$upstream_header_time" urt="$upstream_response_time" "#,
    r#"us="$upstream_status" ua="$upstream_addr" rid=$request_id "#,
    r#"tp="$http_traceparent" mw="$http_x_max_wait" "#,
    r#"llm="$upstream_http_x_llm_reason" llmd="$upstream_http_x_llm_duration""#,
);

/// The subcommands `overtime --help` lists (clap's "Commands:" section).
fn listed_subcommands() -> Vec<String> {
    let out = overtime(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "overtime --help must exit 0");
    let help = text(&out.stdout);
    let mut subs = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end().eq_ignore_ascii_case("commands:") {
            inside = true;
        } else if inside && line.starts_with("  ") {
            if let Some(name) = line.split_whitespace().next()
                && name != "help"
            {
                subs.push(name.to_string());
            }
        } else if inside && !line.trim().is_empty() {
            inside = false;
        }
    }
    subs
}

#[test]
fn help_on_every_subcommand_exits_0() {
    let subs = listed_subcommands();
    // docs/interfaces.md names serve, diagnose, query, nginx-format and simulate; the
    // ones that exist today must at least include these.
    for must in ["diagnose", "nginx-format"] {
        assert!(
            subs.iter().any(|s| s == must),
            "`overtime --help` lists no {must}: {subs:?}"
        );
    }
    let mut bad = Vec::new();
    for sub in &subs {
        let out = overtime(&[sub.as_str(), "--help"]);
        let stdout = text(&out.stdout);
        if out.status.code() != Some(0) || !stdout.to_lowercase().contains("usage") {
            bad.push(format!(
                "overtime {sub} --help: exit {:?}, stdout {:?}, stderr {:?}",
                out.status.code(),
                stdout.lines().next(),
                text(&out.stderr).lines().next()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "--help must work everywhere:\n{}",
        bad.join("\n")
    );
}

/// Exit 2, and stderr is one line that names `culprit`.
fn usage_error(args: &[&str], culprits: &[&str]) -> Option<String> {
    let out = overtime(args);
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let lower = stderr.to_lowercase();
    let problem = if out.status.code() != Some(2) {
        Some(format!("exit {:?}, expected 2", out.status.code()))
    } else if lines.len() != 1 {
        Some(format!("{} lines on stderr, expected one", lines.len()))
    } else if lower.contains("panicked") || lower.contains("backtrace") {
        Some("a panic is not a usage message".to_string())
    } else if !culprits.iter().any(|c| lower.contains(&c.to_lowercase())) {
        Some(format!("the message names none of {culprits:?}"))
    } else {
        None
    };
    problem.map(|p| format!("overtime {}: {p}; stderr: {stderr:?}", args.join(" ")))
}

#[test]
fn unusable_arguments_exit_2_with_one_clear_line() {
    let log = fixture("a_prefill", "access.log");
    let spans = fixture("a_prefill", "spans.jsonl");
    let missing = "/nonexistent/overtime/access.log";
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["diagnose", "--bogus-flag"], vec!["--bogus-flag"]),
        (vec!["frobnicate"], vec!["frobnicate"]),
        (
            vec!["diagnose", "--nginx-log", &log, "--spans", &spans, "--json"],
            vec!["--log-format", "log_format", "format"],
        ),
        (
            vec![
                "diagnose",
                "--nginx-log",
                missing,
                "--log-format",
                "overtime",
                "--json",
            ],
            vec![missing],
        ),
        (
            vec![
                "diagnose",
                "--nginx-log",
                &log,
                "--log-format",
                "overtime",
                "--spans",
                "/nonexistent/spans.jsonl",
                "--json",
            ],
            vec!["/nonexistent/spans.jsonl"],
        ),
        (
            vec![
                "diagnose",
                "--nginx-log",
                &log,
                "--log-format",
                "overtime",
                "--spans",
                &spans,
                "--json",
                "--markdown",
            ],
            vec!["--json", "--markdown"],
        ),
        (
            vec![
                "diagnose",
                "--nginx-log",
                &log,
                "--log-format",
                "'$remote_addr [$time_local] \"$request\" $status",
                "--json",
            ],
            vec!["quote", "unterminated", "unbalanced"],
        ),
    ];
    let bad: Vec<String> = cases
        .iter()
        .filter_map(|(args, culprits)| usage_error(args, culprits))
        .collect();
    assert!(bad.is_empty(), "usage errors:\n{}", bad.join("\n"));
}

#[test]
fn a_misspelt_builtin_format_is_a_usage_error_not_334_rejected_lines() {
    // A bare word with no `$variable` cannot parse any field: it is a typo
    // of a built-in name (`ovetime`), not a format to apply.
    let log = fixture("a_prefill", "access.log");
    let args = [
        "diagnose",
        "--nginx-log",
        &log,
        "--log-format",
        "ovetime",
        "--json",
    ];
    if let Some(problem) = usage_error(&args, &["ovetime"]) {
        panic!("{problem}");
    }
}

/// The single-quoted pieces of a `log_format` directive, concatenated.
fn quoted_pieces(directive: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for ch in directive.chars() {
        match (ch, inside) {
            ('\'', _) => inside = !inside,
            (c, true) => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn nginx_format_prints_the_overtime_directive() {
    let out = overtime(&["nginx-format"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let start = stdout
        .find("log_format overtime")
        .unwrap_or_else(|| panic!("no `log_format overtime` in:\n{stdout}"));
    let directive = &stdout[start..];
    let end = directive.find(';').expect("the directive ends with `;`");
    let directive = &directive[..=end];
    assert_eq!(
        quoted_pieces(directive),
        OVERTIME_BODY,
        "directive:\n{directive}"
    );
}

#[test]
fn the_printed_format_parses_what_the_builtin_parses() {
    let out = overtime(&["nginx-format"]);
    let stdout = text(&out.stdout);
    let start = stdout.find("log_format overtime").expect("directive");
    let rest = &stdout[start + "log_format overtime".len()..];
    let body = rest[..rest.find(';').expect(";")].trim();
    let log = fixture("a_prefill", "access.log");
    let spans = fixture("a_prefill", "spans.jsonl");
    let run = |fmt: &str| -> Value {
        let o = overtime(&[
            "diagnose",
            "--nginx-log",
            &log,
            "--log-format",
            fmt,
            "--spans",
            &spans,
            "--json",
        ]);
        assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("JSON")
    };
    let (a, b) = (run("overtime"), run(body));
    assert_eq!(
        a["verdicts"], b["verdicts"],
        "the printed body and the built-in must agree"
    );
}

// ------------------------------------------------------------------ bad input

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
fn a_missing_or_broken_config_is_a_usage_error_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[server]\nlisten = \n").unwrap();
    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "[server]\nlisten_on = \"127.0.0.1:1\"\n").unwrap();
    for (path, says) in [
        (PathBuf::from("/nonexistent/overtime.toml"), "No such file"),
        (broken, "broken.toml"),
        (unknown, "listen_on"),
    ] {
        let out = overtime(&["serve", "--config", path.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(says), "{path:?}: {err}");
        assert!(
            err.contains(path.to_str().unwrap()),
            "names the file: {err}"
        );
        assert_eq!(
            err.matches("os error").count(),
            err.contains("os error") as usize,
            "the OS error once: {err}"
        );
    }
}

#[test]
fn nginx_format_lists_every_builtin_and_prints_each_by_name() {
    let out = overtime(&["nginx-format", "--list"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for name in ["overtime", "ingress-nginx", "combined"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(name)),
            "{name} not listed:\n{stdout}"
        );
    }
    let out = overtime(&["nginx-format", "ingress-nginx"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("log_format upstreaminfo '$remote_addr - $remote_user [$time_local]"),
        "{stdout}"
    );
    assert!(stdout.contains("$upstream_status $req_id';"), "{stdout}");
    let out = overtime(&["nginx-format", "apache"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ingress-nginx"));
}
