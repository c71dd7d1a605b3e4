//! The in-memory run (`diagnose_tables`: the join, assembly and passes
//! straight over the records) and the batch engine of `overtime diagnose`
//! (crate `overtime-batch`: the same steps over encoded partitions) give
//! the same diagnosis — verdicts byte for byte as `--json` prints them, incidents, the latency
//! table and the join's counts — on every recorded incident, with some
//! spans repeated, whether the engine holds everything in memory or
//! spills past a small budget on two workers.

use crate::invariance::incident;
use overtime_batch::{BatchOptions, Engine, ingest_in_memory};
use overtime_diagnose::{
    AssemblyStats, BucketRow, DiagnoseConfig, Diagnosis, IncidentReport, diagnose_tables,
};
use overtime_model::{SpanRecord, Verdict};
use std::path::Path;

/// What a run gives a user: its verdicts as `overtime diagnose --json`
/// prints them (each through a JSON value: keys sorted), its incidents,
/// latency table, join counts and the number of requests seen.
struct Answer {
    verdicts: Vec<u8>,
    incidents: Vec<IncidentReport>,
    latency: Vec<BucketRow>,
    assembly: AssemblyStats,
    requests: usize,
}

fn verdicts_json<'a>(vs: impl IntoIterator<Item = &'a Verdict>) -> Vec<u8> {
    let each: Vec<Vec<u8>> = vs
        .into_iter()
        .map(|v| serde_json::to_vec(&serde_json::to_value(v).expect("a value")).expect("bytes"))
        .collect();
    each.join(&b","[..])
}

fn in_memory(d: Diagnosis) -> Answer {
    Answer {
        verdicts: verdicts_json(&d.verdicts),
        incidents: d.incidents,
        latency: d.latency,
        assembly: d.assembly,
        requests: d.summaries_len,
    }
}

/// The engine's answer for the same records; whether it spilled.
fn by_engine(
    gateway: &[arrow::record_batch::RecordBatch],
    spans: &[SpanRecord],
    cfg: &DiagnoseConfig,
    memory_limit: usize,
    threads: usize,
) -> (Answer, bool) {
    let opts = BatchOptions {
        memory_limit,
        threads,
        ..Default::default()
    };
    let engine = Engine::new(cfg.clone(), opts);
    ingest_in_memory(&engine, gateway, spans).expect("routes");
    let out = engine.finish().expect("finishes");
    let mut verdicts = Vec::new();
    let spilled = out.spilled;
    let answer = Answer {
        incidents: out.incidents,
        latency: out.latency,
        assembly: out.stats,
        requests: out.summaries_len,
        verdicts: {
            out.verdicts.write_json(&mut verdicts).expect("written");
            verdicts
        },
    };
    (answer, spilled)
}

fn assert_same(name: &str, how: &str, mem: &Answer, engine: &Answer) {
    if mem.verdicts != engine.verdicts {
        let at = mem
            .verdicts
            .iter()
            .zip(&engine.verdicts)
            .position(|(a, b)| a != b)
            .unwrap_or(mem.verdicts.len().min(engine.verdicts.len()));
        let around = |b: &[u8]| {
            String::from_utf8_lossy(&b[at.saturating_sub(300)..(at + 200).min(b.len())]).to_string()
        };
        panic!(
            "{name} ({how}): the verdicts differ at byte {at}:\n in memory: …{}\n engine:    …{}",
            around(&mem.verdicts),
            around(&engine.verdicts)
        );
    }
    assert_eq!(mem.incidents, engine.incidents, "{name} ({how}): incidents");
    assert_eq!(mem.latency, engine.latency, "{name} ({how}): latency table");
    assert_eq!(mem.assembly, engine.assembly, "{name} ({how}): join counts");
    assert_eq!(
        mem.requests, engine.requests,
        "{name} ({how}): requests seen"
    );
}

#[test]
fn the_in_memory_run_gives_the_batch_engines_diagnosis_on_every_recorded_incident() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let dirs = incident::folders(&root);
    assert!(dirs.len() >= 10, "incidents under {}", root.display());
    let mut spilled_any = false;
    let mut failing = 0;
    for d in &dirs {
        let inc = incident::load(&root, d);
        // Every fifth span twice: the first copy wins in both.
        let mut spans = inc.spans.clone();
        spans.extend(inc.spans.iter().step_by(5).cloned());
        for all_verdicts in [false, true] {
            let cfg = DiagnoseConfig {
                all_verdicts,
                ..inc.config.clone()
            };
            let mem = diagnose_tables(&inc.gateway, spans.clone(), &cfg).expect("diagnoses");
            failing += mem
                .verdicts
                .iter()
                .filter(|v| v.outcome.as_str() != "ok")
                .count();
            let mem = in_memory(mem);
            let (whole, _) = by_engine(&inc.gateway, &spans, &cfg, usize::MAX / 4, 1);
            assert_same(&inc.name, "engine, in memory", &mem, &whole);
            let (small, spilled) = by_engine(&inc.gateway, &spans, &cfg, 96 << 10, 2);
            spilled_any |= spilled;
            assert_same(&inc.name, "engine, spilling", &mem, &small);
        }
    }
    assert!(
        failing > 100,
        "the incidents hold failing requests: {failing}"
    );
    assert!(spilled_any, "a 96 KiB budget spilled at least one incident");
}
