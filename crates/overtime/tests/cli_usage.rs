//! The CLI's contract with its users (docs/interfaces.md, docs/inputs.md#bad-input): `--help` everywhere,
//! exit 2 with one clear line for unusable arguments, `nginx-format`, a
//! missing config. Bad input to `diagnose`: `cli_bad_input.rs`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn overtime<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(args)
        .output()
        .expect("run the overtime binary")
}

pub(crate) fn fixture(name: &str, file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
        .join(file)
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn text(b: &[u8]) -> String {
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
