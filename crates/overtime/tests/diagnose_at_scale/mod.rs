//! `overtime diagnose` at any size gives one answer: the same bytes on one
//! thread, on every core, spilled to disk under a tiny `--memory-limit`
//! and with every gateway row kept whole (`OVERTIME_LEAN=off`), on every
//! fixture and on a shuffled two-layer day; rotated, gzipped and zstd logs
//! read as one, rows read back from them too; a broken `.gz` counted, not
//! fatal; Ctrl-C leaves no temp files behind.

mod day;

use crate::incidents::harness::fixture_args;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIXTURES: [&str; 4] = ["a_prefill", "b_tool_no_timeout", "c_dns_retry", "healthy"];

fn overtime(args: &[String], lean: bool) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(args)
        .env("OVERTIME_PROFILE", "1")
        .env("OVERTIME_LEAN", if lean { "on" } else { "off" })
        .output()
        .expect("run the overtime binary")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// stdout of a successful run (stderr shown when it failed).
fn ok(args: &[String]) -> (Vec<u8>, String) {
    ok_with(args, true)
}

/// [`ok`], with healthy rows routed lean or every row kept whole.
fn ok_with(args: &[String], lean: bool) -> (Vec<u8>, String) {
    let out = overtime(args, lean);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "overtime {} exited {:?}\n{stderr}",
        args.join(" "),
        out.status.code()
    );
    (out.stdout, stderr)
}

fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    let mut v = strings(&["diagnose"]);
    v.extend_from_slice(base);
    v.extend(strings(extra));
    v
}

/// The same output on one thread, on two, spilled (checked to have
/// spilled), and with every gateway row whole, for each output form; with
/// the first run's stderr.
fn same_every_way(inputs: &[String], what: &str, forms: &[&[&str]]) -> (Vec<u8>, String) {
    let mut first = (Vec::new(), String::new());
    for form in forms {
        let mut base = inputs.to_vec();
        base.extend(strings(form));
        let (one, e1) = ok(&with(&base, &["--threads", "1", "--memory-limit", "4G"]));
        let (two, _) = ok(&with(&base, &["--threads", "2", "--memory-limit", "4G"]));
        let (spilled, e3) = ok(&with(&base, &["--threads", "2", "--memory-limit", "1K"]));
        let (whole, _) = ok_with(
            &with(&base, &["--threads", "2", "--memory-limit", "1K"]),
            false,
        );
        assert!(!e1.contains("spilled"), "{what}: 4G is room enough:\n{e1}");
        assert!(
            e3.contains("spilled"),
            "{what}: a 1K limit must spill:\n{e3}"
        );
        assert!(!one.is_empty(), "{what}: no output");
        assert!(
            one == two,
            "{what} {form:?}: one thread and two threads differ"
        );
        assert!(
            one == spilled,
            "{what} {form:?}: spilled and in-memory runs differ"
        );
        assert!(
            one == whole,
            "{what} {form:?}: lean rows and rows kept whole differ"
        );
        if first.0.is_empty() {
            first = (one, e1);
        }
    }
    first
}

#[test]
fn every_fixture_gives_the_same_bytes_on_one_thread_on_every_core_and_spilled() {
    for name in FIXTURES {
        let forms: [&[&str]; 3] = [&["--json"], &["--markdown"], &["--json", "--all"]];
        let (json, _) = same_every_way(&fixture_args(name), name, &forms);
        let doc: Value = serde_json::from_slice(&json).unwrap();
        assert!(doc["verdicts"].is_array(), "{name}: a verdicts array");
    }
}

#[test]
fn a_shuffled_two_layer_day_gives_the_same_bytes_however_it_is_run() {
    let dir = tempfile::tempdir().unwrap();
    let day = day::write_day(dir.path(), 20_000, 7);
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let inputs = strings(&[
        "--nginx-log",
        &p(&day.edge),
        "--log-format",
        "overtime",
        "--nginx-log",
        &p(&day.internal),
        "--log-format",
        "overtime",
        "--spans",
        &p(&day.spans),
    ]);
    let (json, stderr) = same_every_way(&inputs, "generated day", &[&["--json"], &["--markdown"]]);
    // Requests with no spans that the edge failed while the internal layer
    // answered 499: their internal rows were routed lean and read back.
    assert!(stderr.contains("profile: read rows back"), "{stderr}");
    let doc: Value = serde_json::from_slice(&json).unwrap();
    let verdicts = doc["verdicts"].as_array().unwrap();
    assert!(verdicts.len() > 1000, "{} verdicts", verdicts.len());
    // The edge logged only request ids: its 504s were joined to their
    // traces through the spans or the internal layer, never left alone.
    for v in verdicts {
        let id = v["trace_id"].as_str().unwrap();
        assert!(!id.starts_with("request:"), "unjoined edge line {id}");
        assert_eq!(v["gateway"]["source"], "edge", "{id}");
    }
    let kinds: Vec<&str> = doc["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"tool_no_timeout"), "{kinds:?}");
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn fixture_file(name: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
        .join(file)
}

/// The fixture's arguments with its access log replaced by `log`.
fn args_with_log(name: &str, log: &str) -> Vec<String> {
    let mut args = fixture_args(name);
    let i = args.iter().position(|a| a == "--nginx-log").unwrap();
    args[i + 1] = log.to_string();
    args
}

/// Splits a log's lines into three parts at line boundaries.
fn thirds(text: &[u8]) -> [Vec<u8>; 3] {
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    let k = lines.len() / 3;
    [
        lines[..k].concat(),
        lines[k..2 * k].concat(),
        lines[2 * k..].concat(),
    ]
}

#[test]
fn a_rotated_set_of_gz_zst_and_plain_files_reads_as_the_one_log() {
    let name = "a_prefill";
    let whole = std::fs::read(fixture_file(name, "access.log")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let [oldest, older, live] = thirds(&whole);
    std::fs::write(dir.path().join("access.log.2.gz"), gz(&oldest)).unwrap();
    std::fs::write(
        dir.path().join("access.log.1.zst"),
        zstd::encode_all(&older[..], 3).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("access.log"), &live).unwrap();
    let reference = fixture_file(name, "access.log");
    let (expected, _) = ok(&with(
        &args_with_log(name, &reference.to_string_lossy()),
        &["--json"],
    ));
    let glob = dir.path().join("access.log*");
    for log in [glob, dir.path().to_path_buf()] {
        let (got, stderr) = ok(&with(
            &args_with_log(name, &log.to_string_lossy()),
            &["--json"],
        ));
        assert!(
            got == expected,
            "{}: differs from the one file",
            log.display()
        );
        // Oldest first, each file with its own line count.
        let order: Vec<usize> = ["access.log.2.gz", "access.log.1.zst", "access.log:"]
            .iter()
            .map(|f| {
                stderr
                    .find(f)
                    .unwrap_or_else(|| panic!("{f} not reported:\n{stderr}"))
            })
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{stderr}");
        let n = |part: &[u8]| part.iter().filter(|&&b| b == b'\n').count();
        assert!(
            stderr.contains(&format!(
                "access.log.2.gz: {} gateway lines read, 0 rejected",
                n(&oldest)
            )),
            "{stderr}"
        );
    }
}

#[test]
fn rows_read_back_from_a_rotated_gz_and_zst_set_give_the_bytes_of_the_plain_log() {
    let dir = tempfile::tempdir().unwrap();
    let day = day::write_day(dir.path(), 20_000, 5);
    let rotated = dir.path().join("rotated");
    std::fs::create_dir(&rotated).unwrap();
    let [oldest, older, live] = thirds(&std::fs::read(&day.internal).unwrap());
    std::fs::write(rotated.join("internal.log.2.gz"), gz(&oldest)).unwrap();
    std::fs::write(
        rotated.join("internal.log.1.zst"),
        zstd::encode_all(&older[..], 3).unwrap(),
    )
    .unwrap();
    std::fs::write(rotated.join("internal.log"), &live).unwrap();
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let run = |internal: &str| {
        ok(&with(
            &strings(&[
                "--nginx-log",
                &p(&day.edge),
                "--log-format",
                "overtime",
                "--nginx-log",
                internal,
                "--log-format",
                "overtime",
                "--spans",
                &p(&day.spans),
                "--memory-limit",
                "1K",
            ]),
            &["--json"],
        ))
    };
    let (plain, _) = run(&p(&day.internal));
    let (set, stderr) = run(&p(&rotated.join("internal.log*")));
    assert!(stderr.contains("profile: read rows back"), "{stderr}");
    assert!(plain == set, "the rotated set differs from the one log");
}

#[test]
fn a_truncated_gz_is_counted_and_what_it_held_still_diagnosed() {
    let name = "a_prefill";
    let whole = std::fs::read(fixture_file(name, "access.log")).unwrap();
    let packed = gz(&whole);
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("access.log.1.gz");
    std::fs::write(&cut, &packed[..packed.len() * 3 / 5]).unwrap();
    let (out, stderr) = ok(&with(
        &args_with_log(name, &cut.to_string_lossy()),
        &["--json"],
    ));
    assert!(stderr.contains("decode_error=1"), "{stderr}");
    assert!(stderr.contains("cannot decode the rest"), "{stderr}");
    let doc: Value = serde_json::from_slice(&out).unwrap();
    let lines = stderr
        .lines()
        .find(|l| l.contains("access.log.1.gz:") && l.contains("gateway lines read"))
        .unwrap();
    let read: usize = lines
        .split(": ")
        .nth(2)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let total = whole.iter().filter(|&&b| b == b'\n').count();
    assert!(
        read > total / 4 && read < total,
        "{read} of {total} lines kept"
    );
    assert!(doc["verdicts"].is_array());
}

#[test]
fn ctrl_c_stops_the_run_and_removes_its_temp_dir() {
    let dir = tempfile::tempdir().unwrap();
    let day = day::write_day(dir.path(), 150_000, 11);
    let temp = dir.path().join("spill");
    std::fs::create_dir(&temp).unwrap();
    let p = |p: &Path| p.to_string_lossy().into_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(strings(&[
            "diagnose",
            "--nginx-log",
            &p(&day.edge),
            "--log-format",
            "overtime",
            "--nginx-log",
            &p(&day.internal),
            "--log-format",
            "overtime",
            "--spans",
            &p(&day.spans),
            "--threads",
            "1",
            "--memory-limit",
            "1K",
            "--temp-dir",
            &p(&temp),
            "--json",
        ]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the run to spill, then interrupt it.
    loop {
        if std::fs::read_dir(&temp).unwrap().next().is_some() {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the run ended ({status}) before it spilled: the input is too small to interrupt"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success(), "kill -INT");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        panic!("the run finished before Ctrl-C reached it: make the input bigger\n{stderr}");
    }
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&temp).unwrap().flatten().collect();
    assert!(left.is_empty(), "temp files left behind: {left:?}");
}
