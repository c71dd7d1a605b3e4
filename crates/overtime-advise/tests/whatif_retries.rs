//! What-if against an independent simulator of a client that retries.
//!
//! A small platform is simulated here, with its own random numbers and
//! nothing of the code under test: requests go through a tool (no timeout;
//! a few hang), then an LLM call made by a client with a timeout, retries
//! and a backoff (the openai Python client's, or a fixed one), behind a
//! gateway with a read timeout. The model takes the same time again on a
//! retry (same work) or a fresh draw. What instrumentation records — each
//! attempt's start and duration, a timeout written as a timeout, as a bare
//! error, or as an attempt that closed cleanly before its retry, and the
//! call's timeout only as the shortest fired attempt — is all what-if sees.
//! The same seeded workload is then run under each proposal; what-if's 504
//! and answered counts must land within 10 % (or ±2) of it, plus the
//! binomial noise of the requests whose outcome varies between what-if's
//! draws (none for a proposal that only cuts earlier).

use overtime_advise::{Attempt, CallFacts, Class, Dataset, End, LayerFacts, TraceFacts};
use overtime_advise::{Proposal, WhatIf, WhatIfOptions, whatif};
use overtime_diagnose::LayerTimeout;
use overtime_model::{Outcome, Stage};

/// splitmix64: the simulator's own generator.
struct Gen(u64);

impl Gen {
    fn new(seed: u64, stream: u64) -> Self {
        let mut g = Gen(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        g.next();
        g
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        let (u1, u2) = (self.unit().max(1e-12), self.unit());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median * (sigma * z).exp()
    }
}

#[derive(Clone, Copy, Debug)]
enum Wait {
    /// openai-python: min(0.5 s·2^(n−1), 8 s)·(1 − 0.25·U).
    Openai,
    Fixed(f64),
}

#[derive(Clone, Copy, Debug)]
enum Written {
    /// The attempt span's status says timeout.
    Timeout,
    /// The attempt span says error (no HTTP status).
    Error,
    /// Earlier attempts' spans close cleanly; only the call says timeout.
    Clean,
}

#[derive(Clone, Copy, Debug)]
struct Workload {
    seed: u64,
    requests: usize,
    model_median: f64,
    sigma: f64,
    same_work: bool,
}

#[derive(Clone, Copy, Debug)]
struct Settings {
    llm_timeout: f64,
    retries: usize,
    wait: Wait,
    tool_timeout: Option<f64>,
    gateway: f64,
}

struct Sim {
    status: u16,
    service_status: u16,
    service_end: f64,
    elapsed: f64,
    tool: (f64, f64, bool),
    attempts: Vec<(f64, f64, bool)>,
}

const PRE: f64 = 20.0;
const POST: f64 = 15.0;

fn simulate(w: &Workload, s: &Settings, i: usize) -> Sim {
    let mut work = Gen::new(w.seed, i as u64);
    let mut jitter = Gen::new(w.seed ^ 0x5eed, i as u64);
    let tool_ms = if work.unit() < 0.05 {
        9_000.0 + 2_000.0 * work.unit()
    } else {
        work.lognormal(200.0, 0.4)
    };
    let first = work.lognormal(w.model_median, w.sigma);
    let mut t = PRE;
    let mut attempts = Vec::new();
    let (tool_end, tool_ok) = match s.tool_timeout {
        Some(tt) if tool_ms > tt => (t + tt, false),
        _ => (t + tool_ms, true),
    };
    let tool = (t, tool_end - t, tool_ok);
    t = tool_end + 5.0;
    let mut ok = tool_ok;
    if tool_ok {
        ok = false;
        for k in 0..=s.retries {
            let lat = if k == 0 || w.same_work {
                first
            } else {
                work.lognormal(w.model_median, w.sigma)
            };
            if lat <= s.llm_timeout {
                attempts.push((t, lat, true));
                t += lat;
                ok = true;
                break;
            }
            let ran = s.llm_timeout + 6.0 * jitter.unit();
            attempts.push((t, ran, false));
            t += ran;
            if k < s.retries {
                t += match s.wait {
                    Wait::Openai => {
                        (500.0 * 2f64.powi(k as i32)).min(8_000.0) * (1.0 - 0.25 * jitter.unit())
                    }
                    Wait::Fixed(ms) => ms,
                } + 2.0;
            }
        }
    }
    let service_end = t + POST;
    let service_status = if ok { 200 } else { 503 };
    let (status, elapsed) = if service_end > s.gateway {
        (504, s.gateway)
    } else {
        (service_status, service_end + 1.0)
    };
    Sim {
        status,
        service_status,
        service_end,
        elapsed,
        tool,
        attempts,
    }
}

/// What instrumentation records of one simulated request.
fn recorded(i: usize, sim: &Sim, written: Written) -> TraceFacts {
    let n = sim.attempts.len();
    let attempts: Vec<Attempt> = sim
        .attempts
        .iter()
        .enumerate()
        .map(|(k, &(start_ms, ms, finished))| Attempt {
            start_ms,
            ms,
            end: match (finished, written) {
                (true, _) => End::Finished,
                (false, Written::Timeout) => End::TimedOut,
                (false, Written::Error) => End::Failed,
                (false, Written::Clean) if k + 1 < n => End::Finished,
                (false, Written::Clean) => End::TimedOut,
            },
            known_ms: None,
            answered: finished,
        })
        .collect();
    // Instrumentation that records no timeout: the call's is its shortest
    // fired attempt, as the diagnosis reads it.
    let fired = sim
        .attempts
        .iter()
        .filter(|a| !a.2)
        .map(|a| a.1)
        .reduce(f64::min);
    let mut calls = vec![CallFacts {
        class: Class::Tool,
        component: "search_api".into(),
        stage: Stage::Tool,
        tokens_in: None,
        gpu_load: None,
        in_flight: 0.0,
        attempts: vec![Attempt::finished(sim.tool.0, sim.tool.1)],
        timeout_ms: None,
        timeout_observed: false,
        remaining_budget_ms: None,
        critical: true,
        fallback_ms: None,
        abs_start_us: i as i64 * 1_000_000,
        gateway: None,
    }];
    if !attempts.is_empty() {
        calls.push(CallFacts {
            class: Class::Llm,
            component: "qwen2.5-72b-instruct".into(),
            stage: Stage::Llm,
            tokens_in: Some(300),
            gpu_load: None,
            in_flight: 0.0,
            attempts,
            timeout_ms: fired,
            timeout_observed: fired.is_some(),
            remaining_budget_ms: None,
            critical: true,
            fallback_ms: None,
            abs_start_us: i as i64 * 1_000_000 + 30_000,
            gateway: None,
        });
    }
    TraceFacts {
        trace_id: format!("{i:032x}"),
        start_us: i as i64 * 1_000_000,
        outcome: match sim.status {
            504 => Outcome::GatewayTimeout,
            503 => Outcome::ServiceTimeout,
            _ => Outcome::Ok,
        },
        status: Some(sim.status),
        layers: vec!["access".into()],
        elapsed_ms: sim.elapsed,
        service: Some("agent".into()),
        service_end_ms: Some(sim.service_end),
        service_status: Some(sim.service_status),
        budget_ms: None,
        stream_gap_ms: None,
        calls,
    }
}

fn dataset(w: &Workload, s: &Settings, written: Written) -> Dataset {
    let traces: Vec<TraceFacts> = (0..w.requests)
        .map(|i| recorded(i, &simulate(w, s, i), written))
        .collect();
    let mut ds = Dataset {
        layers: vec![LayerFacts {
            name: "access".into(),
            timeout: Some(LayerTimeout {
                ms: s.gateway,
                inferred: false,
                cluster: 0,
                of: 0,
                cut_streams: 0,
            }),
            requests: traces.iter().map(|t| (t.elapsed_ms, t.status)).collect(),
        }],
        traces,
        ..Default::default()
    };
    ds.settle_timeouts();
    ds
}

/// (504s, answered) when the workload really runs under `s`.
fn truth(w: &Workload, s: &Settings) -> (f64, f64) {
    let sims: Vec<Sim> = (0..w.requests).map(|i| simulate(w, s, i)).collect();
    (
        sims.iter().filter(|x| x.status == 504).count() as f64,
        sims.iter().filter(|x| x.status == 200).count() as f64,
    )
}

fn predict(ds: &Dataset, set: &[String]) -> WhatIf {
    let mut p = Proposal::default();
    for kv in set {
        p.set(kv).unwrap();
    }
    whatif(
        ds,
        &p,
        &WhatIfOptions {
            draws: 15,
            ..Default::default()
        },
    )
}

fn close(predicted: f64, real: f64) -> bool {
    (predicted - real).abs() <= (0.1 * real).max(2.0)
}

/// Every proposal the judge tries, on one workload under today's settings.
fn check_family(w: &Workload, today: &Settings, written: Written) -> Vec<String> {
    let ds = dataset(w, today, written);
    let mut misses = Vec::new();
    let base = predict(&ds, &["gateway.read_timeout=1000s".into()]);
    if base.today_reproduced != w.requests {
        misses.push(format!(
            "{w:?} {today:?} {written:?}: today replays to today for {} of {} ({:?})",
            base.today_reproduced, w.requests, base.warning
        ));
    }
    let m = "qwen2.5-72b-instruct";
    let proposals: Vec<(Vec<String>, Settings)> = vec![
        (
            vec!["retries=off".into()],
            Settings {
                retries: 0,
                ..*today
            },
        ),
        (
            vec![format!("llm.{m}.timeout={}ms", today.llm_timeout * 0.6)],
            Settings {
                llm_timeout: today.llm_timeout * 0.6,
                ..*today
            },
        ),
        (
            vec![format!("llm.{m}.timeout={}ms", today.llm_timeout * 2.0)],
            Settings {
                llm_timeout: today.llm_timeout * 2.0,
                ..*today
            },
        ),
        (
            vec!["tool.search_api.timeout=2s".into()],
            Settings {
                tool_timeout: Some(2_000.0),
                ..*today
            },
        ),
        (
            vec![format!(
                "gateway.edge.read_timeout={}ms",
                today.gateway * 1.5
            )],
            Settings {
                gateway: today.gateway * 1.5,
                ..*today
            },
        ),
    ];
    for (set, s) in proposals {
        let (r504, rok) = truth(w, &s);
        let p = predict(&ds, &set);
        let (p504, pok) = (p.after.gateway_timeout, p.after.ok + p.after.fallback);
        // A longer timeout lets calls cut today run on: how far rests on
        // draws from the law fitted beyond the cuts, and this workload's
        // own tail is one sample of that law. Each request whose outcome
        // varies between the draws could have gone either way in the real
        // run too: their binomial noise (two standard deviations) is
        // allowed on top.
        let noise = 2.0 * (p.uncertain as f64 * 0.25).sqrt();
        let close = |a: f64, b: f64| (a - b).abs() <= (0.1 * b).max(2.0) + noise;
        if !close(p504, r504) || !close(pok, rok) {
            misses.push(format!(
                "{set:?} on {today:?} {written:?} same_work={}: 504s predicted {p504:.1} real {r504}, answered predicted {pok:.1} real {rok}",
                w.same_work
            ));
        }
    }
    misses
}

#[test]
fn whatif_counts_match_an_independent_simulator_across_retry_counts_timeouts_and_backoffs() {
    let mut misses = Vec::new();
    let mut runs = 0;
    let mut seed = 7u64;
    // (timeout, retries, backoff, how a timeout is written, gateway over
    // what every attempt together takes: under 1 today's retries run into
    // the gateway's cut, over 1 they end in the service's 503).
    for (timeout, retries, wait, written, gateway_factor) in [
        (1_500.0, 2, Wait::Openai, Written::Timeout, 0.8),
        (1_000.0, 1, Wait::Openai, Written::Error, 1.6),
        (3_000.0, 3, Wait::Openai, Written::Clean, 0.8),
        (1_500.0, 2, Wait::Fixed(1_200.0), Written::Timeout, 1.6),
        (2_000.0, 1, Wait::Fixed(300.0), Written::Clean, 0.8),
        (800.0, 2, Wait::Openai, Written::Error, 1.2),
    ] {
        for same_work in [true, false] {
            seed += 1;
            let w = Workload {
                seed,
                requests: 800,
                model_median: timeout / 1.45,
                sigma: 0.5,
                same_work,
            };
            let today = Settings {
                llm_timeout: timeout,
                retries,
                wait,
                tool_timeout: None,
                gateway: ((retries + 1) as f64 * timeout * gateway_factor).max(4_000.0),
            };
            misses.extend(check_family(&w, &today, written));
            runs += 1;
        }
    }
    assert!(
        misses.is_empty(),
        "{} of {} workloads × 5 proposals missed:\n{}",
        misses.len(),
        runs,
        misses.join("\n")
    );
}

/// The first case: an openai client with a 1.5 s timeout and 2
/// retries whose earlier attempts' spans close cleanly; `retries=off`
/// answers only the requests whose first attempt finished — the attempt
/// that fired the timeout never counts as finished.
#[test]
fn retries_off_on_a_client_with_a_1_5s_timeout_and_2_retries_answers_what_really_would() {
    let w = Workload {
        seed: 38,
        requests: 600,
        model_median: 1_000.0,
        sigma: 0.6,
        same_work: false,
    };
    let today = Settings {
        llm_timeout: 1_500.0,
        retries: 2,
        wait: Wait::Openai,
        tool_timeout: None,
        gateway: 8_000.0,
    };
    let ds = dataset(&w, &today, Written::Clean);
    let p = predict(&ds, &["retries=off".into()]);
    assert_eq!(p.today_reproduced, w.requests, "{:?}", p.warning);
    assert_eq!(p.warning, None);
    let (_, real_ok) = truth(
        &w,
        &Settings {
            retries: 0,
            ..today
        },
    );
    let today_ok = p.before.ok;
    let predicted = p.after.ok + p.after.fallback;
    eprintln!("retries=off: answered today {today_ok}, predicted {predicted:.1}, really {real_ok}");
    assert!(
        real_ok < today_ok - 20.0,
        "retries answered {} more today",
        today_ok - real_ok
    );
    assert!(
        close(predicted, real_ok),
        "retries=off: predicted {predicted:.1} answered, {real_ok} really (today {today_ok})"
    );
    let rule = &p.retry_rules[0];
    assert_eq!((rule.attempts, rule.after_timeout), (3, true));
    assert_eq!(rule.backoff, overtime_advise::Backoff::OpenaiPython);
}

/// The second case: a 3 s model timeout with retries on, behind
/// an 8 s gateway: three attempts plus the backoff run past the gateway's
/// cut, so the slowest calls become 504s (not none).
#[test]
fn a_3s_model_timeout_with_retries_on_runs_past_the_gateway_into_504s() {
    let w = Workload {
        seed: 3,
        requests: 800,
        model_median: 1_000.0,
        sigma: 0.8,
        same_work: true,
    };
    let today = Settings {
        llm_timeout: 1_500.0,
        retries: 2,
        wait: Wait::Openai,
        tool_timeout: None,
        gateway: 8_000.0,
    };
    let ds = dataset(&w, &today, Written::Timeout);
    let p = predict(&ds, &["llm.qwen2.5-72b-instruct.timeout=3s".into()]);
    assert_eq!(p.today_reproduced, w.requests, "{:?}", p.warning);
    let (real_504, real_ok) = truth(
        &w,
        &Settings {
            llm_timeout: 3_000.0,
            ..today
        },
    );
    let tool_504 = p.before.gateway_timeout;
    assert!(
        real_504 > tool_504 + 20.0,
        "the longer timeout makes 504s of its own"
    );
    let (p504, pok) = (p.after.gateway_timeout, p.after.ok + p.after.fallback);
    eprintln!(
        "3 s timeout: 504s today {tool_504}, predicted {p504:.1}, really {real_504}; answered predicted {pok:.1}, really {real_ok}"
    );
    assert!(
        p504 > tool_504 + 20.0,
        "504s predicted {p504:.1}, {tool_504} of them the tool's as today"
    );
    let noise = 2.0 * (p.uncertain as f64 * 0.25).sqrt();
    assert!(
        (p504 - real_504).abs() <= (0.1 * real_504).max(2.0) + noise,
        "3 s timeout: predicted {p504:.1} 504s, {real_504} really"
    );
    assert!(
        (pok - real_ok).abs() <= (0.1 * real_ok).max(2.0) + noise,
        "3 s timeout: predicted {pok:.1} answered, {real_ok} really"
    );
}
