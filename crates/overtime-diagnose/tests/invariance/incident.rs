//! One recorded incident: its inputs read exactly as `overtime diagnose`
//! reads them (`overtime_batch::offline`, from the arguments its
//! truth.json gives), the original diagnosis, and the traces sampled for
//! rewriting.
//!
//! A folder is an incident when it holds a `truth.json`; its `args` (or an
//! `args.json` beside it) are the `diagnose` arguments, relative to the
//! folder (`@file` means the file's contents) — a folder without them
//! fails the harness, it is never skipped. The truth the original is held
//! to is an incident's `failing` (trace id → kind, component, outcome) and
//! `ok_traces`, or an e2e harness's list of requests (`trace_id`,
//! `expect_kind`, `expect_component`, `expect_outcome`); a truth with
//! neither holds the rewrites to the original diagnosis alone.

use arrow::record_batch::RecordBatch;
use overtime_batch::offline::{self, Inputs, NginxLogInput};
use overtime_diagnose::{DiagnoseConfig, diagnose_tables};
use overtime_model::{SpanRecord, Verdict};
use overtime_parse::spans::SpanFormat;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// What a failing trace must be diagnosed as.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub kind: String,
    pub component: String,
    pub outcome: String,
    /// The span of the guilty call, when the truth names it.
    pub call_span: Option<String>,
}

pub struct Incident {
    /// The folder, relative to `tests/fixtures` (`incidents/a_prefill`).
    pub name: String,
    pub gateway: Vec<RecordBatch>,
    pub config: DiagnoseConfig,
    /// Every span read, each once, in input order.
    pub spans: Vec<SpanRecord>,
    /// The truth: failing traces and healthy ones (`None`: none given).
    pub failing: Option<BTreeMap<String, Expect>>,
    pub ok_traces: Option<Vec<String>>,
    /// The diagnosis of the inputs as they are, by trace id.
    pub original: BTreeMap<String, Verdict>,
}

fn flag_value(dir: &Path, v: &str) -> String {
    match v.strip_prefix('@') {
        Some(f) => std::fs::read_to_string(dir.join(f))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display())),
        None => v.to_string(),
    }
}

/// `diagnose`'s arguments (the subset truth files use) as [`Inputs`].
fn inputs(dir: &Path, args: &[String]) -> Inputs {
    let mut logs: Vec<PathBuf> = Vec::new();
    let (mut formats, mut confs, mut names, mut layers) = (vec![], vec![], vec![], vec![]);
    let mut a = Inputs {
        threads: Some(1),
        ..Default::default()
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--json" || flag == "--all" {
            continue;
        }
        let v = it
            .next()
            .unwrap_or_else(|| panic!("{}: {flag} without a value", dir.display()));
        let path = || dir.join(v);
        match flag.as_str() {
            "--nginx-log" => logs.push(path()),
            "--log-format" => formats.push(flag_value(dir, v)),
            "--nginx-conf" => confs.push(path()),
            "--format-name" => names.push(v.clone()),
            "--layer-name" => layers.push(v.clone()),
            "--spans" => a.spans.push((path(), SpanFormat::Jsonl)),
            "--otlp-json" => a.spans.push((path(), SpanFormat::OtlpJson)),
            "--otlp-proto" => a.spans.push((path(), SpanFormat::OtlpProto)),
            "--gateway-timeout" => a.gateway_timeouts_ms.push(
                overtime_parse::parse_duration_ms(v, 1000.0)
                    .unwrap_or_else(|| panic!("{}: {flag} {v}", dir.display())),
            ),
            "--budget" => a.config.default_budget_ms = overtime_parse::parse_duration_ms(v, 1000.0),
            other => panic!(
                "{}: truth.json's args hold {other}, which this harness does not read",
                dir.display()
            ),
        }
    }
    fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
        match v.len() {
            0 => None,
            1 => Some(v[0].clone()),
            _ => v.get(i).cloned(),
        }
    }
    a.nginx_logs = logs
        .into_iter()
        .enumerate()
        .map(|(i, path)| NginxLogInput {
            path,
            log_format: pick(&formats, i),
            nginx_conf: pick(&confs, i),
            format_name: pick(&names, i),
            layer: pick(&layers, i),
        })
        .collect();
    a
}

/// The verdict fields every comparison is about.
pub fn verdict_key(v: &Verdict) -> (String, String, String) {
    (
        v.root_cause.kind.as_str().to_string(),
        v.root_cause.component.clone(),
        v.outcome.as_str().to_string(),
    )
}

/// Reads one incident folder and diagnoses it as it is.
pub fn load(root: &Path, dir: &Path) -> Incident {
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("truth.json"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join("truth.json").display())),
    )
    .unwrap_or_else(|e| panic!("{}/truth.json: {e}", dir.display()));
    // The diagnose arguments: the truth's `args`, else an `args.json` beside it.
    let args_v = match truth["args"].as_array() {
        Some(a) => a.clone(),
        None => std::fs::read_to_string(dir.join("args.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<serde_json::Value>>(&t).ok())
            .unwrap_or_else(|| {
                panic!(
                    "{}: neither truth.json's `args` nor an args.json gives the `overtime diagnose` \
                     arguments (relative to the folder) this harness reads the incident with",
                    dir.display()
                )
            }),
    };
    let args: Vec<String> = args_v
        .iter()
        .map(|a| a.as_str().expect("args are strings").to_string())
        .collect();
    let loaded = offline::load(&inputs(dir, &args), Arc::new(AtomicBool::new(false)))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut seen = HashSet::new();
    let spans: Vec<SpanRecord> = loaded
        .spans
        .into_iter()
        .filter(|s| seen.insert((s.trace_id.clone(), s.span_id.clone())))
        .collect();
    let d = diagnose_tables(&loaded.gateway, spans.clone(), &loaded.config)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let original = d
        .verdicts
        .into_iter()
        .map(|v| (v.trace_id.clone(), v))
        .collect();
    let (failing, ok_traces) = truth_sets(&truth);
    Incident {
        name: dir.strip_prefix(root).unwrap_or(dir).display().to_string(),
        gateway: loaded.gateway,
        config: loaded.config,
        spans,
        failing,
        ok_traces,
        original,
    }
}

/// The failing and healthy traces of a truth: an incident's object
/// (`failing`: trace id → kind, component, outcome; `ok_traces`), or the
/// e2e harnesses' list of requests (`trace_id`, `expect_kind`,
/// `expect_component`, `expect_outcome`; requests with no trace id cannot
/// be told apart and are left out).
type Sets = (Option<BTreeMap<String, Expect>>, Option<Vec<String>>);

fn truth_sets(truth: &serde_json::Value) -> Sets {
    let s = |t: &serde_json::Value, k: &str| t[k].as_str().unwrap_or("").to_string();
    if let Some(list) = truth.as_array() {
        let mut failing = BTreeMap::new();
        let mut ok = Vec::new();
        for r in list {
            let Some(tid) = r["trace_id"].as_str() else {
                continue;
            };
            if s(r, "expect_outcome") == "ok" {
                ok.push(tid.to_string());
            } else if r["expect_kind"].is_string() {
                let e = Expect {
                    kind: s(r, "expect_kind"),
                    component: s(r, "expect_component"),
                    outcome: s(r, "expect_outcome"),
                    call_span: None,
                };
                failing.insert(tid.to_string(), e);
            }
        }
        return (Some(failing), Some(ok));
    }
    let failing = truth["failing"].as_object().map(|m| {
        m.iter()
            .map(|(tid, t)| {
                let e = Expect {
                    kind: s(t, "kind"),
                    component: s(t, "component"),
                    outcome: s(t, "outcome"),
                    call_span: t["call_span"].as_str().map(str::to_string),
                };
                (tid.clone(), e)
            })
            .collect()
    });
    let ok_traces = truth["ok_traces"].as_array().map(|a| {
        a.iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect()
    });
    (failing, ok_traces)
}

/// Every incident folder: `tests/fixtures/incidents/*` and every folder
/// under `tests/fixtures/e2e_*/` (two levels down at most) that holds a
/// truth.json.
pub fn folders(root: &Path) -> Vec<PathBuf> {
    fn walk(d: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        if d.join("truth.json").is_file() {
            out.push(d.to_path_buf());
            return;
        }
        if depth == 0 {
            return;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        for e in entries {
            walk(&e, depth - 1, out);
        }
    }
    let mut out = Vec::new();
    let mut tops: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n == "incidents" || n.starts_with("e2e_")
                })
        })
        .collect();
    tops.sort();
    for t in tops {
        walk(&t, 2, &mut out);
    }
    out
}
