//! The live diagnoser and `overtime diagnose` agree: the incident fixtures
//! fed to the live engine in shuffled chunks, spans of some traces arriving
//! after their gateway line was already diagnosed, end with exactly the
//! verdicts of the batch diagnosis.

use overtime_diagnose::live::LiveDiagnoser;
use overtime_diagnose::{DiagnoseConfig, LayerConfig, diagnose_tables};
use overtime_model::{GatewayRecord, SpanRecord, Verdict, gateway_records};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents")
        .join(name)
}

fn load(
    name: &str,
    format: LogFormat,
    spans_file: &str,
    span_format: SpanFormat,
) -> (Vec<GatewayRecord>, Vec<SpanRecord>) {
    let dir = fixture(name);
    let mut p = GatewayParser::new(format, "access", 0);
    p.push_bytes(&std::fs::read(dir.join("access.log")).unwrap(), 1);
    let (g, _) = p.finish();
    let spans = parse_span_bytes(
        span_format,
        &std::fs::read(dir.join(spans_file)).unwrap(),
        spans_file,
    );
    (gateway_records(&g).unwrap(), spans.spans)
}

fn by_trace(vs: impl IntoIterator<Item = Verdict>) -> BTreeMap<String, String> {
    vs.into_iter()
        .map(|v| (v.trace_id.clone(), serde_json::to_string(&v).unwrap()))
        .collect()
}

/// An incident fixture read as `overtime diagnose` reads it (its log
/// format, span file and layers): its gateway records, spans and config.
pub(crate) fn incident(name: &str) -> (Vec<GatewayRecord>, Vec<SpanRecord>, DiagnoseConfig) {
    let (format, spans_file, span_format, cfg) = match name {
        "b_tool_no_timeout" => {
            let conf = std::fs::read_to_string(fixture(name).join("nginx.conf")).unwrap();
            let cfg = DiagnoseConfig {
                layers: vec![LayerConfig {
                    name: "access".into(),
                    read_timeout_ms: Some(60_000.0),
                }],
                ..Default::default()
            };
            let format = LogFormat::from_nginx_conf(&conf, "agent_json").unwrap();
            (format, "traces.otlp.jsonl", SpanFormat::OtlpJson, cfg)
        }
        "c_dns_retry" => {
            let body = std::fs::read_to_string(fixture(name).join("log_format.txt")).unwrap();
            let format = LogFormat::compile(&body).unwrap();
            (
                format,
                "spans.jsonl",
                SpanFormat::Jsonl,
                DiagnoseConfig::default(),
            )
        }
        _ => (
            LogFormat::builtin("overtime").unwrap(),
            "spans.jsonl",
            SpanFormat::Jsonl,
            DiagnoseConfig::default(),
        ),
    };
    let (gateway, spans) = load(name, format, spans_file, span_format);
    (gateway, spans, cfg)
}

fn check(name: &str) {
    let (gateway, spans, cfg) = incident(name);
    live_equals_batch(name, gateway, spans, cfg, |s| {
        s.trace_id.as_bytes()[31] % 3 == 0
    });
}

/// Feeds `gateway` and `spans` to the live engine as `check` says — the
/// spans `late` picks only after the others were diagnosed — and asserts
/// it ends with the batch diagnosis' verdicts and incident headlines.
/// (A layer's inferred timeout says how many cuts it was inferred from as
/// of each verdict: `late` must not hold back the spans that show a cut
/// stream, or the counts of earlier verdicts differ.)
pub fn live_equals_batch(
    name: &str,
    gateway: Vec<GatewayRecord>,
    spans: Vec<SpanRecord>,
    cfg: DiagnoseConfig,
    late: impl Fn(&SpanRecord) -> bool,
) {
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    let batch = diagnose_tables(&[cols.finish()], spans.clone(), &cfg).unwrap();

    let mut live = LiveDiagnoser::new(cfg, 30_000, 600_000, 1_000_000);
    // Deterministic shuffle; the spans `late` picks arrive late.
    let mut gw: Vec<_> = gateway.into_iter().enumerate().collect();
    gw.sort_by_key(|(i, _)| (i * 7919) % 1009);
    let (late, early): (Vec<_>, Vec<_>) = spans.into_iter().partition(|s| late(s));
    let mut now = 0i64;
    for chunk in gw.chunks(37) {
        live.add_gateway(chunk.iter().map(|(_, g)| g.clone()).collect(), now);
        now += 1_000_000;
    }
    for chunk in early.chunks(101) {
        live.add_spans(chunk.to_vec(), now);
        now += 1_000_000;
    }
    live.tick(now + 60_000_000);
    now += 120_000_000;
    // Late spans, some twice (exporter retries): revisions follow.
    live.add_spans(late.clone(), now);
    live.add_spans(late[..late.len() / 2].to_vec(), now);
    let revised = live.tick(now + 60_000_000);
    assert!(!revised.is_empty(), "{name}: late spans revise verdicts");
    assert!(revised.iter().all(|r| r.revision <= 1));
    assert_eq!(live.pending_len(), 0);

    let got = by_trace(live.verdicts().map(|(_, v)| v.clone()));
    let want = by_trace(batch.verdicts);
    assert_eq!(got.len(), want.len(), "{name}: verdict count");
    for (id, v) in &want {
        assert_eq!(got.get(id), Some(v), "{name}: trace {id} differs");
    }
    let live_incidents: Vec<String> = live
        .incidents()
        .iter()
        .map(|i| i.headline.clone())
        .collect();
    let batch_incidents: Vec<String> = batch.incidents.iter().map(|i| i.headline.clone()).collect();
    assert_eq!(
        live_incidents, batch_incidents,
        "{name}: incident headlines"
    );
}

#[test]
fn live_equals_batch_on_incident_a() {
    check("a_prefill");
}

#[test]
fn live_equals_batch_on_incident_b() {
    check("b_tool_no_timeout");
}

#[test]
fn live_equals_batch_on_incident_c() {
    check("c_dns_retry");
}

/// The records fed as they were written — each gateway line at its time,
/// each span at its end — ten seconds of the incident at a time, each
/// batch judged before the next arrives: the first failing traces are
/// judged before their layer's timeout can be inferred (it takes three
/// 504s) or while it still moves. Once it moves they are judged again, and
/// end with the batch run's causes.
fn judged_as_written_end_with_the_batch_causes(name: &str) {
    let (gateway, spans, cfg) = match name {
        "short_gateway" => short_gateway(),
        _ => incident(name),
    };
    let mut cols = overtime_model::GatewayColumns::new();
    for g in &gateway {
        cols.append(g);
    }
    let batch = diagnose_tables(&[cols.finish()], spans.clone(), &cfg).unwrap();
    let mut live = LiveDiagnoser::new(cfg, 1_000, 3_600_000, 1_000_000);
    const STEP_US: i64 = 10_000_000;
    let mut at: BTreeMap<i64, (Vec<GatewayRecord>, Vec<SpanRecord>)> = BTreeMap::new();
    for g in gateway {
        at.entry(g.time_us.div_euclid(STEP_US))
            .or_default()
            .0
            .push(g);
    }
    for s in spans {
        at.entry(s.end_us.div_euclid(STEP_US))
            .or_default()
            .1
            .push(s);
    }
    let (mut now, mut revised) = (0i64, 0);
    for (_, (g, s)) in at {
        live.add_gateway(g, now);
        live.add_spans(s, now);
        now += 2_000_000;
        revised += live.tick(now).iter().filter(|v| v.revision > 0).count();
    }
    live.tick(now + 60_000_000);
    let cause = |v: &Verdict| {
        format!(
            "{:?} {:?} {:?} {}",
            v.outcome, v.root_cause.kind, v.root_cause.component, v.root_cause.summary
        )
    };
    let got: BTreeMap<String, String> = live
        .verdicts()
        .map(|(_, v)| (v.trace_id.clone(), cause(v)))
        .collect();
    let want: BTreeMap<String, String> = batch
        .verdicts
        .iter()
        .map(|v| (v.trace_id.clone(), cause(v)))
        .collect();
    assert_eq!(got, want, "{name}: causes ({revised} revisions)");
}

/// A gateway whose read timeout (10 s, not configured) is shorter than
/// the service's budget: 504s a minute apart, each ~10.2 s into a request
/// whose model call was within its own timeout. Until three 504s show the
/// timeout, a verdict can only say the gateway gave up at 10.2 s.
fn short_gateway() -> (Vec<GatewayRecord>, Vec<SpanRecord>, DiagnoseConfig) {
    use crate::common::Builder;
    use overtime_model::Stage;
    let (mut gateway, mut spans) = (Vec::new(), Vec::new());
    for n in 0..8u32 {
        let mut b = Builder::new(n).at(n as i64 * 60_000);
        let rt = 10_180.0 + 10.0 * n as f64;
        b.gateway(504, rt);
        b.root("agent-api", 2.0, rt + 5_000.0).budget_ms = Some(90_000.0);
        let llm = b.child("2", "agent-api", Stage::Llm, 5.0, rt + 4_000.0);
        llm.timeout_ms = Some(60_000.0);
        llm.model = Some("deepseek-v4-pro".into());
        gateway.append(&mut b.gateway);
        spans.append(&mut b.spans);
    }
    (gateway, spans, DiagnoseConfig::default())
}

#[test]
fn traces_judged_before_their_layers_timeout_was_known_end_with_the_batch_causes() {
    for name in [
        "short_gateway",
        "a_prefill",
        "b_tool_no_timeout",
        "c_dns_retry",
    ] {
        judged_as_written_end_with_the_batch_causes(name);
    }
}
