//! The file tail against an in-memory sink: appends, partial lines,
//! rotation by rename and by copytruncate mid-stream, restarts from the
//! checkpoint (also across a rotation while down), and backpressure.

use overtime_ingest::file_tail::{
    FilePosition, FileSourceConfig, FileTail, source_name, spawn_file_tail,
};
use overtime_model::Table;
use overtime_parse::nginx::LogFormat;
use overtime_parse::record::RecordFormat;
use overtime_parse::spans::SpanFormat;
use overtime_test_support::net::wait_for;
use overtime_test_support::sink::RecordingSink;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use tokio_util::sync::CancellationToken;

/// Seconds a wait for the tail to catch up may take before the test calls
/// it a hang: generous, so a slow, loaded machine still passes.
const PATIENCE_SECS: u64 = 60;

fn nginx_kind() -> RecordFormat {
    RecordFormat::nginx(
        LogFormat::compile("'$status $request_id'").unwrap(),
        "edge",
        0,
    )
}

fn config(path: &Path) -> FileSourceConfig {
    FileSourceConfig {
        batch_lines: 7,
        poll_interval_ms: 10,
        rotate_wait_ms: 100,
        ..FileSourceConfig::new(path, nginx_kind())
    }
}

fn start(cfg: FileSourceConfig, sink: &Arc<RecordingSink>) -> (FileTail, CancellationToken) {
    let stop = CancellationToken::new();
    let tail = spawn_file_tail(cfg, sink.clone(), stop.clone());
    (tail, stop)
}

fn stop(tail: FileTail, token: CancellationToken) {
    token.cancel();
    tail.join().unwrap();
}

fn append(path: &Path, from: u32, to: u32) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let text: String = (from..to).map(|i| format!("200 r{i}\n")).collect();
    f.write_all(text.as_bytes()).unwrap();
}

/// How many rows each request id has.
fn counts(sink: &RecordingSink) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in sink.gateway() {
        *m.entry(r.request_id.unwrap()).or_insert(0) += 1;
    }
    m
}

/// Every id in `from..to` exactly once, and nothing else.
fn assert_exactly_once(sink: &RecordingSink, from: u32, to: u32) {
    let c = counts(sink);
    let expected: BTreeMap<String, usize> = (from..to).map(|i| (format!("r{i}"), 1)).collect();
    assert_eq!(c, expected);
}

fn rows(sink: &RecordingSink) -> usize {
    sink.rows(Table::GatewayRequests)
}

fn position(sink: &RecordingSink, path: &Path) -> FilePosition {
    sink.checkpoint_of(path)
}

trait CheckpointOf {
    fn checkpoint_of(&self, path: &Path) -> FilePosition;
}

impl CheckpointOf for RecordingSink {
    fn checkpoint_of(&self, path: &Path) -> FilePosition {
        use overtime_model::RecordSink;
        self.checkpoint(&source_name(path))
            .unwrap()
            .parse()
            .unwrap()
    }
}

fn log_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("access.log")
}

#[test]
fn appends_and_partial_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    append(&path, 0, 20);
    let sink = Arc::new(RecordingSink::new());
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "first 20 rows", || rows(&sink) == 20);
    // A line written in two pieces is read only once it is whole.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"503 r2").unwrap();
    f.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(rows(&sink), 20, "a partial line was parsed");
    f.write_all(b"0\n").unwrap();
    append(&path, 21, 30);
    wait_for(PATIENCE_SECS, "all rows", || rows(&sink) == 30);
    assert_exactly_once(&sink, 0, 30);
    let g = sink.gateway();
    let r20 = g.iter().find(|r| r.request_id.as_deref() == Some("r20"));
    assert_eq!(r20.unwrap().status, Some(503));
    assert_eq!(r20.unwrap().line, 21);
    let len = fs::metadata(&path).unwrap().len();
    let p = position(&sink, &path);
    assert_eq!((p.offset, p.line), (len, 30));
    // Batches respect batch_lines, every good batch carries a checkpoint.
    for w in sink.writes() {
        assert!(w.batch.num_rows() <= 7);
        assert!(w.checkpoint.is_some());
    }
    // A bad line is rejected, counted by reason, and costs no good line.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"not a status line at all\n200 r30\n")
        .unwrap();
    wait_for(PATIENCE_SECS, "the line after the bad one", || {
        rows(&sink) == 31
    });
    assert_eq!(sink.rejected().len(), 1);
    assert_eq!(sink.rejected()[0].line, 31);
    // Words after the format's last value are text outside the format.
    assert_eq!(tail.stats().rejected_by_reason()["format_mismatch"], 1);
    assert_eq!(tail.stats().lines(), 32);
    stop(tail, token);
}

#[test]
fn rotation_by_rename_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    append(&path, 0, 10);
    let sink = Arc::new(RecordingSink::new());
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "first rows", || rows(&sink) == 10);
    // The writer keeps its handle: lines written after the rename still go
    // to the old file (as nginx does until reopen), and a partial line
    // there is finished later.
    let mut old = OpenOptions::new().append(true).open(&path).unwrap();
    fs::rename(&path, dir.path().join("access.log.1")).unwrap();
    old.write_all(b"200 r10\n200 r1").unwrap();
    append(&path, 20, 30);
    std::thread::sleep(std::time::Duration::from_millis(40));
    old.write_all(b"1\n").unwrap();
    append(&dir.path().join("access.log.1"), 12, 20);
    wait_for(PATIENCE_SECS, "all rows", || rows(&sink) == 30);
    assert_exactly_once(&sink, 0, 30);
    assert_eq!(tail.stats().rotations.load(Relaxed), 1);
    let p = position(&sink, &path);
    assert_eq!(p.inode, fs::metadata(&path).unwrap().ino());
    assert_eq!(p.line, 10);
    stop(tail, token);
}

#[test]
fn copytruncate_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    append(&path, 0, 15);
    let sink = Arc::new(RecordingSink::new());
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "first rows", || rows(&sink) == 15);
    // What logrotate's copytruncate does: copy, then truncate in place.
    fs::copy(&path, dir.path().join("access.log.1")).unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    wait_for(PATIENCE_SECS, "truncation seen", || {
        tail.stats().truncations.load(Relaxed) == 1
    });
    append(&path, 15, 25);
    wait_for(PATIENCE_SECS, "rows after truncation", || rows(&sink) == 25);
    assert_exactly_once(&sink, 0, 25);
    let p = position(&sink, &path);
    assert_eq!((p.line, p.offset), (10, fs::metadata(&path).unwrap().len()));
    stop(tail, token);
}

#[test]
fn restart_resumes_from_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    append(&path, 0, 50);
    let sink = Arc::new(RecordingSink::new());
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "rows", || rows(&sink) == 50);
    stop(tail, token);
    // Written while the tail is down, plus a partial line.
    append(&path, 50, 80);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"200 r8")
        .unwrap();
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "rows after restart", || rows(&sink) == 80);
    // Stopped again while the sink is full: the undelivered batch is read
    // again after the restart, not lost and not doubled.
    sink.set_full(true);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"0\n200 r81\n")
        .unwrap();
    wait_for(PATIENCE_SECS, "a full answer", || {
        sink.full_answers.load(Relaxed) > 0
    });
    stop(tail, token);
    sink.set_full(false);
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "rows after the second restart", || {
        rows(&sink) == 82
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_exactly_once(&sink, 0, 82);
    let lines: Vec<u64> = sink.gateway().iter().map(|r| r.line).collect();
    assert_eq!(lines, (1..=82).collect::<Vec<_>>());
    stop(tail, token);
}

#[test]
fn restart_after_rotation_while_down() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    append(&path, 0, 30);
    let sink = Arc::new(RecordingSink::new());
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "rows", || rows(&sink) == 30);
    stop(tail, token);
    // While down: more lines, rotation, lines in the new file.
    append(&path, 30, 40);
    fs::rename(&path, dir.path().join("access.log.1")).unwrap();
    append(&path, 40, 55);
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "rows after restart", || rows(&sink) == 55);
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_exactly_once(&sink, 0, 55);
    assert_eq!(tail.stats().lost_positions.load(Relaxed), 0);
    assert_eq!(position(&sink, &path).line, 15);
    stop(tail, token);
}

#[test]
fn full_sink_waits_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(&dir);
    let sink = Arc::new(RecordingSink::new());
    sink.retry_after_ms.store(30, Relaxed);
    sink.set_full(true);
    append(&path, 0, 20);
    let (tail, token) = start(config(&path), &sink);
    wait_for(PATIENCE_SECS, "three full answers", || {
        sink.full_answers.load(Relaxed) >= 3
    });
    assert_eq!(rows(&sink), 0);
    let waits = tail.stats().backpressure_waits.load(Relaxed);
    assert!(waits >= 3, "{waits}");
    // While full the tail does not read on: one batch is held, the rest
    // stays in the file.
    assert!(tail.stats().lines() <= 7);
    sink.set_full(false);
    append(&path, 20, 40);
    wait_for(PATIENCE_SECS, "rows after the sink drained", || {
        rows(&sink) == 40
    });
    assert_exactly_once(&sink, 0, 40);
    assert!(tail.stats().backpressure_ms.load(Relaxed) >= 90);
    stop(tail, token);
}

#[test]
fn span_files_and_bad_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans.jsonl");
    let span = |i: u32| {
        format!(
            "{{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"{i:016x}\",\
             \"service\":\"agent\",\"name\":\"s{i}\",\"start_time\":1714561200000,\"duration_ms\":5}}\n"
        )
    };
    let text: String = (1..=5).map(span).collect::<String>() + "{\"oops\n";
    fs::write(&path, text).unwrap();
    let sink = Arc::new(RecordingSink::new());
    let cfg = FileSourceConfig {
        poll_interval_ms: 10,
        ..FileSourceConfig::new(&path, RecordFormat::Spans(SpanFormat::Jsonl))
    };
    let (tail, token) = start(cfg.clone(), &sink);
    wait_for(PATIENCE_SECS, "spans and the rejection", || {
        sink.rows(Table::Spans) == 5 && sink.rows(Table::Rejected) == 1
    });
    assert_eq!(sink.rejected()[0].reason, "bad_json");
    assert_eq!(sink.spans()[4].line, 5);
    stop(tail, token);

    // A checkpoint the tail cannot read stops it with an error instead of
    // guessing where to start.
    use overtime_model::{Checkpoint, RecordSink};
    let bad = Arc::new(RecordingSink::new());
    let empty = arrow::record_batch::RecordBatch::new_empty(overtime_model::span_schema());
    let cp = Checkpoint {
        source: source_name(&path),
        position: "somewhere".into(),
    };
    bad.write(Table::Spans, empty, Some(cp)).unwrap();
    let (tail, _token) = start(cfg, &bad);
    wait_for(PATIENCE_SECS, "the tail to stop", || tail.is_finished());
    let err = tail.join().unwrap_err();
    assert!(err.to_string().contains("somewhere"), "{err}");
}
