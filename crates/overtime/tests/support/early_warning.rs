//! Early warning measured against reality: `overtime simulate` plays a
//! ramp into a seed incident (or healthy noisy traffic) on the real
//! simulated platform behind nginx; its access log, spans and model-server
//! scrapes (`--model-metrics`: vLLM's queue depth every 15 s) are then fed,
//! in the order they were written, through what `overtime serve` runs
//! live — the live diagnosis (`LiveDiagnoser`, grace periods scaled like
//! everything else) and the metrics with their SLO and early-warning
//! alerts (`Metrics`) — ticking a clock in data time as the collector's
//! loop does. The time of each alert is the clock when the collector
//! would have raised it; the first 504 is when the client got it (the
//! simulator's ground truth).
//!
//! Times are real (the wall clock, delays scaled) in the files. Every
//! result is read on the *simulated* clock, from the stamps the simulator
//! writes: each truth line pairs the moment a request was sent with its
//! simulated time (`sim_ms`: the time the ramp planned it for), and a
//! wall-clock moment reads as the simulated time of the last request sent
//! by then ([`SimClock`]). An alert and a 504 are read the same way, so a
//! busy machine that sends late, or stalls, moves both alike, and the lead
//! between them does not depend on the machine's speed. The real-clock
//! reading (real × scale, what a fast idle machine would give too) is kept
//! beside it for the benchmark only.

use super::BIN;
use overtime_config::SloConfig;
use overtime_diagnose::live::LiveDiagnoser;
use overtime_diagnose::{DiagnoseConfig, LayerConfig};
use overtime_model::{GatewayRecord, MetricSample, SpanRecord, gateway_records, span_records};
use overtime_parse::metrics::read_metrics;
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use overtime_server::Metrics;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The early-warning alerts (severity `warning`).
pub const EARLY: [&str; 4] = [
    overtime_slo::CHAIN_HEALTH_FALLING,
    overtime_slo::NEAR_TIMEOUT_RISING,
    overtime_slo::LLM_WAIT_RISING,
    overtime_slo::SEMANTIC_SUCCESS_FALLING,
];

/// The collector's defaults (real time), scaled with the simulation.
const GRACE_MS: f64 = 30_000.0;
const FAILURE_GRACE_MS: f64 = 2_000.0;
const TICK_MS: f64 = 500.0;
/// The OTLP batch exporter's delay before spans reach the collector.
const EXPORT_DELAY_MS: f64 = 2_000.0;

/// One alert as the collector raised it.
#[derive(Debug, Clone)]
pub struct Raised {
    pub name: String,
    pub signal: String,
    /// When it was first seen firing, on the simulated clock (µs from the
    /// run's start).
    pub at_us: i64,
    /// The same moment on the real clock × the time scale (µs from the
    /// run's start): the benchmark's second reading.
    pub at_real_us: i64,
    pub summary: String,
}

/// The simulated clock of a run, read off the simulator's stamps: every
/// truth line's (sent at, real µs) and (`sim_ms`, simulated).
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    /// (real µs, simulated µs from the start) by real time; the simulated
    /// times are running maxima, so the clock never goes back.
    points: Vec<(i64, i64)>,
}

impl SimClock {
    /// The clock of these (real µs, simulated µs) stamps.
    pub fn new(mut stamps: Vec<(i64, i64)>) -> SimClock {
        stamps.sort_unstable();
        let mut high = 0;
        for p in &mut stamps {
            high = high.max(p.1);
            p.1 = high;
        }
        SimClock { points: stamps }
    }

    /// Simulated µs from the start at real moment `real_us`: the
    /// simulated time of the last request sent by then (0 before any).
    pub fn at(&self, real_us: i64) -> i64 {
        match self.points.partition_point(|p| p.0 <= real_us) {
            0 => 0,
            n => self.points[n - 1].1,
        }
    }
}

/// What one run showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: String,
    pub seed: u64,
    pub time_scale: f64,
    pub requests: usize,
    pub gateway_timeouts: usize,
    /// When each 504 reached its client, on the simulated clock (µs from
    /// the start, sorted, from the ground truth).
    pub times_504: Vec<i64>,
    /// When the outage began ([`outage_onset`]: the first 504 of the
    /// unbroken run into the peak 504 rate), on the simulated clock. 504s
    /// before it are strays (a starved test machine stretches a request
    /// past a scaled 10 s gateway), not the incident.
    pub outage_us: Option<i64>,
    /// 504s before the outage began.
    pub stray_504s: usize,
    /// When the outage began on the real clock × the time scale (µs from
    /// the start): the benchmark's second reading.
    pub outage_real_us: Option<i64>,
    /// Every alert that went from quiet to firing, in order (a flapping
    /// alert counts each time: each is a page someone gets).
    pub raised: Vec<Raised>,
    /// Simulated minutes of traffic.
    pub minutes: f64,
    /// Per signal, the largest move the wrong way from its baseline and the
    /// largest z seen (with enough traffic on both sides): how close the
    /// run came to a warning.
    pub peaks: BTreeMap<&'static str, (f64, f64)>,
    /// Per fast signal, the largest CUSUM statistic seen (a key's less its
    /// penalty), against `cusum_threshold`: how close a quiet run came.
    pub fast_peaks: BTreeMap<&'static str, f64>,
}

impl Outcome {
    /// When the first client got a 504 (µs).
    pub fn first_504_us(&self) -> Option<i64> {
        self.times_504.first().copied()
    }

    /// The first early-warning alert.
    pub fn first_early(&self) -> Option<&Raised> {
        self.raised
            .iter()
            .find(|r| EARLY.contains(&r.name.as_str()))
    }

    /// Simulated minutes from the first early warning to the outage's
    /// first 504, both read on the simulated clock (negative: the warning
    /// came late).
    pub fn lead_minutes(&self) -> Option<f64> {
        let (w, f) = (self.first_early()?, self.outage_us?);
        Some((f - w.at_us) as f64 / 60e6)
    }

    /// The same lead on the real clock × the time scale: what it was
    /// measured as before the simulated clock, and drifts from it on a
    /// busy machine. For the benchmark only; nothing asserts it.
    pub fn lead_minutes_real(&self) -> Option<f64> {
        let (w, f) = (self.first_early()?, self.outage_real_us?);
        Some((f - w.at_real_us) as f64 / 60e6)
    }

    /// Simulated minutes from the start to `t_us` (simulated µs).
    pub fn minute_of(&self, t_us: i64) -> f64 {
        t_us as f64 / 60e6
    }

    /// Early-warning alerts raised (false alarms on healthy traffic).
    pub fn early_raised(&self) -> usize {
        self.raised
            .iter()
            .filter(|r| EARLY.contains(&r.name.as_str()))
            .count()
    }
}

/// Runs `overtime simulate --scenario <scenario>` into `dir` and replays
/// what it wrote through the collector's live engine.
pub fn run(dir: &Path, scenario: &str, seed: u64, time_scale: f64, extra: &[&str]) -> Outcome {
    run_with(dir, scenario, seed, time_scale, extra, None)
}

/// [`run`], with the collector restarted at simulated minute
/// `restart_at_min`: a new live engine and metrics, given what
/// `overtime serve` replays from its store on start (every record of the
/// last `keep_ms`, 10 minutes), then the live traffic.
pub fn run_with(
    dir: &Path,
    scenario: &str,
    seed: u64,
    time_scale: f64,
    extra: &[&str],
    restart_at_min: Option<f64>,
) -> Outcome {
    // `OVERTIME_EW_NO_TIMEOUT=1` (the benchmark): the gateway's timeout
    // not configured.
    let configured = std::env::var("OVERTIME_EW_NO_TIMEOUT").map_or(true, |v| v != "1");
    run_configured(
        dir,
        scenario,
        seed,
        time_scale,
        extra,
        restart_at_min,
        configured,
    )
}

/// [`run_with`], the gateway's read timeout given to the collector
/// (`timeout_configured`) or not: then it knows it only once the 504s let
/// it be inferred, as a collector started without nginx.conf.
pub fn run_configured(
    dir: &Path,
    scenario: &str,
    seed: u64,
    time_scale: f64,
    extra: &[&str],
    restart_at_min: Option<f64>,
    timeout_configured: bool,
) -> Outcome {
    let access = dir.join(format!("{scenario}-{seed}.access.log"));
    let spans = dir.join(format!("{scenario}-{seed}.spans.jsonl"));
    let truth = dir.join(format!("{scenario}-{seed}.truth.jsonl"));
    let model = dir.join(format!("{scenario}-{seed}.model.prom"));
    let scale = time_scale.to_string();
    let seed_s = seed.to_string();
    let mut args = vec![
        "simulate",
        "--scenario",
        scenario,
        "--time-scale",
        &scale,
        "--seed",
        &seed_s,
        "--no-otlp",
        "-q",
    ];
    args.extend_from_slice(extra);
    // `OVERTIME_EW_REUSE=1` (the benchmark's tuning loop): replay what an
    // earlier run left in `dir` instead of simulating again.
    let reuse = std::env::var("OVERTIME_EW_REUSE").is_ok_and(|v| v == "1") && truth.exists();
    if !reuse {
        simulate(&args, &access, &spans, &truth, &model);
    }
    replay(
        scenario,
        seed,
        time_scale,
        timeout_configured.then(|| gateway_timeout_ms(scenario)),
        &access,
        &spans,
        &truth,
        Some(&model),
        restart_at_min,
    )
}

fn simulate(args: &[&str], access: &Path, spans: &Path, truth: &Path, model: &Path) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--access-log")
        .arg(access)
        .arg("--spans-out")
        .arg(spans)
        .arg("--truth")
        .arg(truth)
        .arg("--model-metrics")
        .arg(model)
        .output()
        .expect("running overtime simulate");
    assert!(
        out.status.success(),
        "overtime simulate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The read timeout of the gateway in front of `scenario`'s platform
/// (nominal ms): 10 s for seed 004's ramp, 60 s for the others.
pub fn gateway_timeout_ms(scenario: &str) -> f64 {
    if scenario == "ramp_dns_retry" {
        10_000.0
    } else {
        60_000.0
    }
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Simulated minutes over which the peak 504 rate is counted.
pub const OUTAGE_WINDOW_MIN: f64 = 5.0;
/// The longest pause between two of the outage's 504s, simulated minutes.
pub const OUTAGE_MAX_PAUSE_MIN: f64 = 3.0;
/// The fewest 504s in a window that can make an outage.
pub const OUTAGE_BURST: usize = 3;

/// The outage's first 504 and how many 504s came before it (strays), in
/// `times` (sorted µs of nominal time).
///
/// The outage is the run of 504s that leads, with no pause longer than
/// [`OUTAGE_MAX_PAUSE_MIN`] simulated minutes, into the busiest
/// [`OUTAGE_WINDOW_MIN`] minutes of 504s (at least [`OUTAGE_BURST`] of
/// them); it begins with that run's first 504. 504s before it are strays:
/// a test machine starved for a moment stretches scaled time past the
/// gateway's timeout for the few requests in flight — a handful of 504s
/// at one instant, minutes before the ramp fails anything — and that is
/// not the incident.
pub fn outage_onset(times: &[i64]) -> (Option<i64>, usize) {
    let us = |min: f64| (min * 60e6) as i64;
    let ahead = |i: usize| times[i..].partition_point(|t| *t - times[i] < us(OUTAGE_WINDOW_MIN));
    let Some(peak) = (0..times.len()).max_by_key(|i| (ahead(*i), std::cmp::Reverse(*i))) else {
        return (None, 0);
    };
    if ahead(peak) < OUTAGE_BURST {
        return (None, times.len());
    }
    let mut first = peak;
    while first > 0 && times[first] - times[first - 1] <= us(OUTAGE_MAX_PAUSE_MIN) {
        first -= 1;
    }
    (Some(times[first]), first)
}

/// What the ground truth says about a run.
struct Truth {
    requests: usize,
    /// The simulated clock its stamps give.
    clock: SimClock,
    /// When each 504 reached its client (real µs, sorted).
    times_504: Vec<i64>,
    /// When the first request was sent (real µs).
    start_us: i64,
}

fn truth(path: &Path) -> Truth {
    let text = String::from_utf8(read(path)).unwrap();
    let (mut requests, mut times_504, mut stamps) = (0, Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        requests += 1;
        let began = chrono::DateTime::parse_from_rfc3339(v["started_at"].as_str().unwrap())
            .unwrap()
            .timestamp_micros();
        let sim_ms = v["sim_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: a truth line without sim_ms: {line}", path.display()));
        stamps.push((began, (sim_ms * 1000.0) as i64));
        if v["status"] == 504 {
            times_504.push(began + (v["elapsed_ms"].as_f64().unwrap_or(0.0) * 1000.0) as i64);
        }
    }
    times_504.sort_unstable();
    let start_us = stamps.iter().map(|s| s.0).min().unwrap_or(0);
    Truth {
        requests,
        clock: SimClock::new(stamps),
        times_504,
        start_us,
    }
}

/// What `overtime serve` replays from its store on start (its `keep_ms`).
const STORE_REPLAY_MS: f64 = 600_000.0;

/// Replays a run's files through the live diagnosis and the metrics
/// (restarting the collector at simulated minute `restart_at_min`).
#[allow(clippy::too_many_arguments)]
pub fn replay(
    scenario: &str,
    seed: u64,
    time_scale: f64,
    gateway_timeout_ms: Option<f64>,
    access: &Path,
    spans: &Path,
    truth: &Path,
    model_metrics: Option<&Path>,
    restart_at_min: Option<f64>,
) -> Outcome {
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "access", 0);
    p.push_bytes(&read(access), 1);
    assert_eq!(p.rejected_rows(), 0, "{}: rejected lines", access.display());
    let (batch, _) = p.finish();
    let gateway: Vec<GatewayRecord> = gateway_records(&batch).unwrap();
    let parsed = parse_span_bytes(SpanFormat::OtlpJson, &read(spans), "spans");
    assert!(
        parsed.rejected.is_empty(),
        "{}: rejected spans",
        spans.display()
    );
    let (span_batch, _) = parsed.to_batches();
    let spans: Vec<SpanRecord> = span_records(&span_batch).unwrap();

    // The model server's scrapes (`--model-metrics`), as the collector's
    // `[[model_server]]` scrape would have taken them.
    let scraped: Vec<MetricSample> = model_metrics.map_or_else(Vec::new, |p| {
        let text = String::from_utf8(read(p)).unwrap();
        let m = read_metrics(&text);
        assert!(m.rejected.is_empty(), "{}: {:?}", p.display(), m.rejected);
        m.samples
    });

    // Arrival order: a gateway line when written, a span when exported, a
    // scrape when taken.
    let scaled = |ms: f64| (ms / time_scale * 1000.0) as i64;
    #[derive(Clone)]
    enum Rec {
        G(Box<GatewayRecord>),
        S(Box<SpanRecord>),
        M(Box<MetricSample>),
    }
    let mut recs: Vec<(i64, Rec)> = gateway
        .into_iter()
        .map(|g| (g.time_us, Rec::G(Box::new(g))))
        .chain(
            spans
                .into_iter()
                .map(|s| (s.end_us + scaled(EXPORT_DELAY_MS), Rec::S(Box::new(s)))),
        )
        .chain(
            scraped
                .into_iter()
                .map(|m| (m.time_us, Rec::M(Box::new(m)))),
        )
        .collect();
    recs.sort_by_key(|r| r.0);
    let last_us = recs.last().map_or(0, |r| r.0);

    let cfg = DiagnoseConfig {
        layers: vec![LayerConfig {
            name: "access".into(),
            read_timeout_ms: gateway_timeout_ms.map(|t| t / time_scale),
        }],
        ..Default::default()
    };
    let ms = |v: f64| (v / time_scale).round().max(1.0) as u64;
    let new_live = || {
        LiveDiagnoser::new(cfg.clone(), ms(GRACE_MS), ms(STORE_REPLAY_MS), 10_000)
            .with_failure_grace(ms(FAILURE_GRACE_MS))
    };
    let new_metrics = || {
        Metrics::new(SloConfig {
            window_scale: 1.0 / time_scale,
            ..Default::default()
        })
    };
    let (mut live, mut metrics) = (new_live(), new_metrics());
    let t = self::truth(truth);
    let restart_us = restart_at_min.map(|m| t.start_us + (m * 60e6 / time_scale) as i64);
    let mut seen: Vec<(i64, Rec)> = Vec::new();
    // The 504s on the simulated clock, and on the real one × the scale.
    let real = |us: i64| ((us - t.start_us) as f64 * time_scale) as i64;
    let times_504: Vec<i64> = t.times_504.iter().map(|r| t.clock.at(*r)).collect();
    let (outage_us, stray_504s) = outage_onset(&times_504);
    let real_504: Vec<i64> = t.times_504.iter().map(|r| real(*r)).collect();
    let outage_real_us = outage_onset(&real_504).0;
    let tick = scaled(TICK_MS).max(1);
    let end = recs.last().map_or(0, |r| r.0) + scaled(GRACE_MS) * 2;
    let mut clock = recs.first().map_or(0, |r| r.0);
    let mut it = recs.into_iter().peekable();
    let mut firing: BTreeMap<String, bool> = BTreeMap::new();
    let mut raised = Vec::new();
    let mut peaks: BTreeMap<&'static str, (f64, f64)> = BTreeMap::new();
    let mut fast_peaks: BTreeMap<&'static str, f64> = BTreeMap::new();
    let ew = SloConfig::default().early_warning;
    let trace = std::env::var("OVERTIME_EW_TRACE").is_ok_and(|v| v == "1");
    let bucket_us = scaled(30_000.0).max(1);
    while clock <= end {
        let (mut g, mut s, mut m) = (Vec::new(), Vec::new(), Vec::new());
        if restart_us.is_some_and(|r| clock >= r && clock - tick < r) {
            // A new collector: what the store holds of the last keep_ms.
            (live, metrics) = (new_live(), new_metrics());
            let from = clock - scaled(STORE_REPLAY_MS);
            for (_, r) in &seen {
                match r {
                    Rec::G(x) if x.time_us >= from => g.push((**x).clone()),
                    Rec::S(x) if x.start_us >= from => s.push((**x).clone()),
                    Rec::M(x) if x.time_us >= from => m.push((**x).clone()),
                    _ => {}
                }
            }
        }
        while it.peek().is_some_and(|r| r.0 <= clock) {
            let r = it.next().unwrap();
            if restart_us.is_some() {
                seen.push(r.clone());
            }
            match r.1 {
                Rec::G(x) => g.push(*x),
                Rec::S(x) => s.push(*x),
                Rec::M(x) => m.push(*x),
            }
        }
        // As the collector's sink: a scrape reaches the SLOs when stored.
        metrics.observe_server_metrics(&m);
        live.add_gateway(g, clock);
        live.add_spans(s, clock);
        let verdicts = live.tick(clock);
        // As the collector's tick: provisional observations (requests just
        // over, for the fast early warning), then the final ones.
        let mut observed = live.drain_provisional();
        observed.extend(live.drain_observations());
        metrics.record(&verdicts, &live.drain_settled(), observed);
        let now: BTreeMap<String, overtime_slo::Alert> = metrics
            .alerts()
            .into_iter()
            .map(|a| (format!("{:?}", a.labels), a))
            .collect();
        for (key, a) in &now {
            if !firing.get(key).copied().unwrap_or(false) {
                raised.push(Raised {
                    name: a.name().to_string(),
                    signal: a.label("signal").unwrap_or("").to_string(),
                    at_us: t.clock.at(clock),
                    at_real_us: real(clock),
                    summary: a.summary().to_string(),
                });
            }
        }
        let v = metrics.slo_snapshot().early_warning;
        // `OVERTIME_EW_TRACE=1`: every signal's CUSUM once a bucket, to
        // look at before tuning (stderr).
        if trace && clock / bucket_us != (clock - tick) / bucket_us {
            let line: Vec<String> = v
                .fast
                .iter()
                .map(|d| {
                    format!(
                        "{}{}={:.1}",
                        d.signal.as_str(),
                        d.key.as_ref().map_or(String::new(), |k| format!("[{k}]")),
                        d.stat
                    )
                })
                .collect();
            eprintln!(
                "  trace {scenario} seed {seed} restart {restart_at_min:?} min {:.1}: {}",
                t.clock.at(clock) as f64 / 60e6,
                line.join(" ")
            );
        }
        for d in &v.fast {
            let p = fast_peaks.entry(d.signal.as_str()).or_insert(0.0f64);
            *p = p.max(d.stat);
        }
        for (signal, sv, up, min) in [
            ("chain_health", &v.chain_healthy, false, ew.min_requests),
            ("near_timeout", &v.near_timeout, true, ew.min_calls),
            ("llm_queue_prefill", &v.llm_wait_share, true, ew.min_calls),
            (
                "semantic_success",
                &v.semantic_success,
                false,
                ew.min_requests,
            ),
        ] {
            if let (Some(x), Some(b), true) = (
                sv.value,
                sv.baseline,
                sv.count >= min
                    && sv.baseline_count >= overtime_slo::early::BASELINE_MULTIPLE * min,
            ) {
                let d = if up { x - b } else { b - x };
                let p = peaks.entry(signal).or_insert((f64::MIN, f64::MIN));
                p.0 = p.0.max(d);
                p.1 = p.1.max(sv.z.unwrap_or(f64::MIN));
            }
        }
        for v in firing.values_mut() {
            *v = false;
        }
        for key in now.keys() {
            firing.insert(key.clone(), true);
        }
        clock += tick;
    }
    Outcome {
        scenario: scenario.to_string(),
        seed,
        time_scale,
        requests: t.requests,
        gateway_timeouts: times_504.len(),
        times_504,
        outage_us,
        stray_504s,
        outage_real_us,
        raised,
        minutes: t.clock.at(last_us) as f64 / 60e6,
        peaks,
        fast_peaks,
    }
}
