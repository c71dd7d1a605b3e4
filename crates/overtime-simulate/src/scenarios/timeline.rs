//! Scenarios that change with simulated time: a healthy warm-up, a
//! gradual ramp into one of the seeds' incidents, a hold at full strength;
//! and healthy, noisy traffic. What early warning is measured on.
//!
//! The *severity* `s` goes 0 → 1 over the ramp; each incident's knobs
//! (input tokens, a shared GPU pool's queue, a tool's latency, DNS misses)
//! follow it with lognormal noise, and the request rate grows with it
//! (`load_growth`). Arrivals are Poisson. Every request is planned from the
//! seed and its index alone, and sent at a time drawn from the seed: a
//! seeded run asks the platform for exactly the same thing every time
//! (only the platform's own timing varies).

use super::{Planned, Scenario};
use crate::steps::*;
use serde_json::json;

/// A scenario over simulated time.
#[derive(Debug)]
pub struct Timeline {
    /// The seed post-mortem it ramps into (`000`, `003`, `004`), or "".
    pub seed_incident: &'static str,
    /// Requests per simulated minute at the start.
    pub rate_per_min: f64,
    /// The rate at full severity, as a multiple of the start's.
    pub load_growth: f64,
    /// A slow wave on the rate: (relative amplitude, period in minutes).
    pub wave: Option<(f64, f64)>,
    /// Simulated minutes: healthy warm-up, ramp, hold at full severity.
    pub warmup_min: f64,
    /// Simulated minutes from healthy to full severity.
    pub ramp_min: f64,
    /// Simulated minutes held at full severity.
    pub hold_min: f64,
    plan: fn(f64, &mut fastrand::Rng) -> Planned,
}

/// The phases' lengths and the start rate of one run (defaults: the
/// timeline's; `--warmup`, `--ramp`, `--hold`, `--sim-rate` change them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelineSpec {
    /// Healthy warm-up (simulated ms).
    pub warmup_ms: f64,
    /// Ramp into the incident (simulated ms).
    pub ramp_ms: f64,
    /// Hold at full severity (simulated ms).
    pub hold_ms: f64,
    /// Requests per simulated minute at the start.
    pub rate_per_min: f64,
}

impl Timeline {
    /// The default spec.
    pub fn spec(&self) -> TimelineSpec {
        TimelineSpec {
            warmup_ms: self.warmup_min * 60_000.0,
            ramp_ms: self.ramp_min * 60_000.0,
            hold_ms: self.hold_min * 60_000.0,
            rate_per_min: self.rate_per_min,
        }
    }

    /// Severity at nominal time `t_ms` from the start: 0 during the
    /// warm-up, rising linearly over the ramp, 1 after.
    ///
    /// ```
    /// let t = overtime_simulate::scenarios::find("ramp_dns_retry").unwrap().timeline.unwrap();
    /// let spec = t.spec();
    /// assert_eq!(t.severity(spec.warmup_ms / 2.0, &spec), 0.0);
    /// assert_eq!(t.severity(spec.warmup_ms + spec.ramp_ms / 2.0, &spec), 0.5);
    /// assert_eq!(t.severity(spec.warmup_ms + spec.ramp_ms + 1.0, &spec), 1.0);
    /// ```
    pub fn severity(&self, t_ms: f64, spec: &TimelineSpec) -> f64 {
        if t_ms <= spec.warmup_ms {
            return 0.0;
        }
        if spec.ramp_ms <= 0.0 {
            return 1.0;
        }
        ((t_ms - spec.warmup_ms) / spec.ramp_ms).clamp(0.0, 1.0)
    }

    /// Requests per nominal minute at `t_ms`.
    fn rate_at(&self, t_ms: f64, spec: &TimelineSpec) -> f64 {
        let s = self.severity(t_ms, spec);
        let wave = self.wave.map_or(1.0, |(a, period)| {
            1.0 + a * (std::f64::consts::TAU * t_ms / (period * 60_000.0)).sin()
        });
        spec.rate_per_min * (1.0 + (self.load_growth - 1.0) * s) * wave
    }

    /// The send times (nominal ms from the start) of the whole run:
    /// Poisson arrivals at the current rate, drawn from `seed`.
    ///
    /// ```
    /// let t = overtime_simulate::scenarios::find("healthy_noisy").unwrap().timeline.unwrap();
    /// let spec = t.spec();
    /// let a = t.schedule(&spec, 7);
    /// assert_eq!(a, t.schedule(&spec, 7)); // seeded: the same run
    /// assert_ne!(a, t.schedule(&spec, 8));
    /// let minutes = (spec.warmup_ms + spec.ramp_ms + spec.hold_ms) / 60_000.0;
    /// let per_min = a.len() as f64 / minutes;
    /// assert!((per_min - spec.rate_per_min).abs() < 0.1 * spec.rate_per_min, "{per_min}");
    /// ```
    pub fn schedule(&self, spec: &TimelineSpec, seed: u64) -> Vec<f64> {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_71e5);
        let end = spec.warmup_ms + spec.ramp_ms + spec.hold_ms;
        let mut out = Vec::new();
        let mut t = 0.0;
        loop {
            let per_ms = self.rate_at(t, spec).max(1e-3) / 60_000.0;
            // Exponential gap; 1 - f64() is in (0, 1].
            t += -(1.0 - rng.f64()).ln() / per_ms;
            if t >= end {
                return out;
            }
            out.push(t);
        }
    }

    /// The `i`-th request, sent at `t_ms`: planned from the seed and `i`.
    pub fn plan_at(&self, i: usize, t_ms: f64, spec: &TimelineSpec, seed: u64) -> Planned {
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64);
        (self.plan)(self.severity(t_ms, spec), &mut rng)
    }
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut fastrand::Rng) -> f64 {
    let u = 1.0 - rng.f64();
    let v = rng.f64();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A lognormal factor with median 1.
fn jit(rng: &mut fastrand::Rng, sigma: f64) -> f64 {
    (sigma * normal(rng)).exp()
}

fn tokens(v: f64) -> u32 {
    v.round().clamp(5.0, 4000.0) as u32
}

fn run(route: &'static str, steps: Vec<Step>) -> Planned {
    Planned {
        method: "POST",
        route,
        body: Some(json!({ "steps": steps })),
        stream: route == "/v1/agent/stream",
        traceparent: super::Traceparent::Auto,
        user_agent: None,
        expect: None,
        noise: false,
    }
}

fn noise(mut p: Planned) -> Planned {
    p.noise = true;
    p
}

/// Everyday healthy traffic behind a 60 s gateway, jittered: quick chats,
/// multi-hop answers with parallel lookups, the aligned route, a judged
/// answer, the legacy model, a stream; now and then a retry that worked, a
/// cached fallback, a slow answer well within every timeout, a 404.
fn everyday(rng: &mut fastrand::Rng) -> Planned {
    let r = rng.f64();
    let ms = |rng: &mut fastrand::Rng, base: f64| base * jit(rng, 0.3);
    if r < 0.30 {
        run(
            "/v1/agent/run",
            vec![
                mem(ms(rng, 400.0), "session_memory"),
                llm(tokens(110.0 * jit(rng, 0.3)), tokens(90.0 * jit(rng, 0.3))),
            ],
        )
    } else if r < 0.50 {
        run(
            "/v1/agent/run",
            vec![
                llm(40, 30),
                par(vec![
                    tool("calc", ms(rng, 1600.0)),
                    tool("poi_search", ms(rng, 3000.0)),
                    mem(ms(rng, 1200.0), "session_memory"),
                ]),
                llm(tokens(350.0 * jit(rng, 0.2)), tokens(180.0 * jit(rng, 0.2))),
            ],
        )
    } else if r < 0.60 {
        run(
            "/v2/agent/run",
            vec![
                llm(80, 60),
                with_tool(tool("weather_api", ms(rng, 2400.0)), |t| {
                    t.dns_ms = Some(80.0)
                }),
                llm(tokens(220.0 * jit(rng, 0.2)), 150),
            ],
        )
    } else if r < 0.70 {
        let score = (0.91 + 0.03 * normal(rng)).clamp(0.0, 1.0);
        run(
            "/v1/agent/run",
            vec![
                llm(120, tokens(100.0 * jit(rng, 0.2))),
                with_llm(judge(183, 80, 1.0), |l| l.score = Some(score)),
            ],
        )
    } else if r < 0.78 {
        run(
            "/v1/agent/run",
            vec![
                mem(300.0, "session_memory"),
                with_llm(llm(60, 50), |l| {
                    l.model = LLAMA.into();
                    l.latency_ms = Some(ms(rng, 5000.0));
                }),
            ],
        )
    } else if r < 0.86 {
        run(
            "/v1/agent/stream",
            vec![llm_stream(100, tokens(200.0 * jit(rng, 0.2)))],
        )
    } else if r < 0.89 {
        // A retry that worked.
        run(
            "/v1/agent/run",
            vec![
                llm(60, 40),
                with_tool(tool("crm_api", ms(rng, 3000.0)), |t| t.fail_attempts = 1),
            ],
        )
    } else if r < 0.92 {
        // Weather down, cached weather used: the user still gets 200.
        run(
            "/v1/agent/run",
            vec![
                llm(60, 40),
                with_tool(tool("weather_api", ms(rng, 2000.0)), |t| {
                    t.status = 503;
                    t.fallback = Some(MemoryStep {
                        name: "weather_cache".into(),
                        latency_ms: 200.0,
                        fallback: None,
                    });
                }),
                llm(120, 100),
            ],
        )
    } else if r < 0.96 {
        // Slow, within every timeout: a long prefill and a report.
        run(
            "/v1/agent/run",
            vec![
                llm(tokens(700.0 * jit(rng, 0.1)), 300),
                tool("crm_report", ms(rng, 8000.0)),
            ],
        )
    } else if r < 0.98 {
        run(
            "/v1/agent/plan",
            vec![
                mem(600.0, "session_memory"),
                llm(150, 200),
                tool("crm_report", ms(rng, 6000.0)),
                llm(150, 150),
            ],
        )
    } else {
        Planned {
            method: "GET",
            route: "/nope",
            body: None,
            ..run("/v1/agent/run", vec![])
        }
    }
}

fn healthy_noisy(_: f64, rng: &mut fastrand::Rng) -> Planned {
    everyday(rng)
}

/// Seed 000: the attribution flow (intent call, three lookups in
/// parallel, the attribution call) as its inputs grow (400 → 1160 tokens
/// at the median: prefill 3.8 s → 32 s) and the shared GPU pool fills
/// (queue 0 → 16 s), two in three on the legacy route (the 60 s gateway
/// cuts), one in three on the aligned one (its LLM timeout fires: 503).
fn ramp_prefill(s: f64, rng: &mut fastrand::Rng) -> Planned {
    if rng.f64() < 0.4 {
        return noise(everyday(rng));
    }
    let route = if rng.f64() < 0.7 {
        "/v1/agent/run"
    } else {
        "/v2/agent/run"
    };
    let n = tokens(400.0 * (1.0 + 1.9 * s) * jit(rng, 0.2));
    let queue = 16_000.0 * s * s * jit(rng, 0.35);
    let mut p = run(
        route,
        vec![
            llm(60, 40),
            par(vec![
                tool("calc", 1600.0 * jit(rng, 0.3)),
                tool("poi_search", 3000.0 * jit(rng, 0.3)),
                mem(1200.0 * jit(rng, 0.3), "session_memory"),
            ]),
            with_llm(llm(n, 150), |l| l.queue_ms = queue),
        ],
    );
    p.expect = Some(("llm_prefill_slow", DS));
    p
}

/// Seed 000 tipping over: the attribution flow with steady inputs while
/// the shared GPU pool loses slots (32 → 5 over the ramp). While the slots
/// outnumber the calls in flight nothing queues; in the last fifth of the
/// ramp they no longer do and the queue fills within ~2 simulated minutes
/// of a 10 min ramp (0 → 45 s at the median): flat, then a tip-over.
fn tipover_gpu_slots(s: f64, rng: &mut fastrand::Rng) -> Planned {
    if rng.f64() < 0.4 {
        return noise(everyday(rng));
    }
    let route = if rng.f64() < 0.7 {
        "/v1/agent/run"
    } else {
        "/v2/agent/run"
    };
    let n = tokens(400.0 * jit(rng, 0.2));
    let over = ((s - 0.8) / 0.2).max(0.0);
    let queue = 45_000.0 * over * over * jit(rng, 0.3);
    let mut p = run(
        route,
        vec![
            llm(60, 40),
            par(vec![
                tool("calc", 1600.0 * jit(rng, 0.3)),
                tool("poi_search", 3000.0 * jit(rng, 0.3)),
                mem(1200.0 * jit(rng, 0.3), "session_memory"),
            ]),
            with_llm(llm(n, 150), |l| l.queue_ms = queue),
        ],
    );
    p.expect = Some(("llm_prefill_slow", DS));
    p
}

/// Seed 003: round one (an 8 s LLM call), a search tool with no timeout
/// whose API slows down (2.5 s → 61 s at the median, faster and faster),
/// round three under load (its queue 0 → 26 s): the 60 s gateway cuts.
fn ramp_tool_no_timeout(s: f64, rng: &mut fastrand::Rng) -> Planned {
    if rng.f64() < 0.4 {
        return noise(everyday(rng));
    }
    let search = 2500.0 * (3.2 * s.powf(1.5)).exp() * jit(rng, 0.2);
    let queue = 26_000.0 * s.sqrt() * jit(rng, 0.3);
    let mut p = run(
        "/v1/agent/run",
        vec![
            llm(
                tokens(300.0 * jit(rng, 0.15)),
                tokens(200.0 * jit(rng, 0.15)),
            ),
            mem(300.0, "session_memory"),
            tool("search_api", search),
            with_llm(
                llm(
                    tokens(300.0 * jit(rng, 0.15)),
                    tokens(200.0 * jit(rng, 0.15)),
                ),
                |l| l.queue_ms = queue,
            ),
        ],
    );
    p.expect = Some(("tool_no_timeout", "search_api"));
    p
}

/// Seed 004, behind a 10 s gateway: a quick LLM call, the weather tool
/// (5 s timeout at the tool service, 8 s and one retry at the
/// orchestrator), a cache fallback, a final LLM call. More and more DNS
/// lookups miss the cache and wait on a slow resolver (2.2 s → 4.5 s at
/// the median): first tries time out and retries, which find the name
/// cached, save the request; past mid-ramp the resolver saturates, retries
/// time out too, and 5.1 + 1 + 5.1 s plus the calls pass 10 s. One flow
/// in three does not retry: it answers from the cache (a 200, but not a
/// real answer).
fn ramp_dns_retry(s: f64, rng: &mut fastrand::Rng) -> Planned {
    if rng.f64() < 0.3 {
        return noise(run(
            "/v1/agent/run",
            vec![
                mem(100.0 * jit(rng, 0.3), "session_memory"),
                llm(tokens(80.0 * jit(rng, 0.2)), tokens(40.0 * jit(rng, 0.2))),
            ],
        ));
    }
    let slow = |rng: &mut fastrand::Rng| 2800.0 * (0.8 + 0.8 * s) * jit(rng, 0.3);
    let dns = if rng.f64() < (2.0 * s).min(1.0) {
        slow(rng)
    } else {
        40.0
    };
    let retry_dns = if rng.f64() < ((s - 0.6) / 0.4).max(0.0) {
        slow(rng)
    } else {
        40.0
    };
    let retries = if rng.f64() < 0.7 { 1 } else { 0 };
    let weather = with_tool(tool("weather_lookup", 400.0 * jit(rng, 0.25)), |t| {
        t.dns_ms = Some(dns);
        t.retry_dns_ms = Some(retry_dns);
        t.connect_ms = 100.0;
        t.retries = Some(retries);
        t.fallback = Some(MemoryStep {
            name: "weather_cache".into(),
            latency_ms: 200.0,
            fallback: None,
        });
    });
    let mut p = run(
        "/v1/agent/run",
        vec![
            llm(tokens(80.0 * jit(rng, 0.2)), tokens(22.0 * jit(rng, 0.2))),
            weather,
            llm(120, 15),
        ],
    );
    p.expect = Some(("upstream_connect_slow", "weather_lookup"));
    p
}

const fn timeline(
    seed_incident: &'static str,
    load_growth: f64,
    plan: fn(f64, &mut fastrand::Rng) -> Planned,
) -> Timeline {
    Timeline {
        seed_incident,
        rate_per_min: 30.0,
        load_growth,
        wave: None,
        warmup_min: 10.0,
        ramp_min: 30.0,
        hold_min: 5.0,
        plan,
    }
}

static PREFILL: Timeline = timeline("000", 1.6, ramp_prefill);
static TOOL: Timeline = timeline("003", 1.6, ramp_tool_no_timeout);
static DNS: Timeline = timeline("004", 1.6, ramp_dns_retry);
static TIPOVER: Timeline = Timeline {
    ramp_min: 10.0,
    load_growth: 1.0,
    ..timeline("000", 1.0, tipover_gpu_slots)
};
static NOISY: Timeline = Timeline {
    wave: Some((0.3, 12.0)),
    warmup_min: 36.0,
    ramp_min: 0.0,
    hold_min: 0.0,
    ..timeline("", 1.0, healthy_noisy)
};

fn unused(_: usize, _: &super::PlanCtx) -> Planned {
    run("/v1/agent/run", vec![])
}

const fn tl(
    name: &'static str,
    kind: Option<&'static str>,
    component: &'static str,
    how: &'static str,
    gateway_timeout_ms: f64,
    timeline: &'static Timeline,
) -> Scenario {
    Scenario {
        name,
        kind,
        component,
        how,
        // Open-loop arrivals: the cap is only a safety net.
        concurrency: 512,
        burst: 1,
        gateway_timeout_ms,
        make: unused,
        noise: None,
        timeline: Some(timeline),
    }
}

pub(super) static TIMELINES: &[Scenario] = &[
    tl(
        "ramp_prefill",
        Some("llm_prefill_slow"),
        DS,
        "Seed 000 as a 30 min ramp after 10 healthy minutes: the attribution flow's inputs grow (400 -> 1160 tokens at the median, prefill 3.8 s -> 32 s) while the shared GPU pool fills (queue 0 -> 16 s) and the load grows 1.6x; the 60 s gateway starts cutting mid-ramp. 40 % everyday traffic.",
        60_000.0,
        &PREFILL,
    ),
    tl(
        "ramp_tool_no_timeout",
        Some("tool_no_timeout"),
        "search_api",
        "Seed 003 as a 30 min ramp after 10 healthy minutes: the search API, called with no timeout between two LLM rounds, slows down ever faster (2.5 s -> 61 s at the median) while the second round queues under load (0 -> 26 s); the 60 s gateway cuts. 40 % everyday traffic.",
        60_000.0,
        &TOOL,
    ),
    tl(
        "ramp_dns_retry",
        Some("upstream_connect_slow"),
        "weather_lookup",
        "Seed 004 as a 30 min ramp after 10 healthy minutes, behind a 10 s gateway: ever more DNS lookups of the weather API miss the cache and wait on a slow resolver; the tool service's 5 s timeout fires, the orchestrator's retry (8 s, one) finds the name cached and saves the request, until the resolver saturates and retries time out too: 5.1 + 1 + 5.1 s and the calls pass 10 s. A third of the flows answer from the cache instead of retrying.",
        10_000.0,
        &DNS,
    ),
    tl(
        "tipover_gpu_slots",
        Some("llm_prefill_slow"),
        DS,
        "Seed 000 tipping over: 10 healthy minutes, then a 10 min ramp over which the shared GPU pool loses slots (32 -> 5) at a steady load and steady inputs; nothing queues while the slots outnumber the calls in flight, then the queue fills (0 -> 45 s) in the last 2 minutes and the 60 s gateway cuts. 40 % everyday traffic.",
        60_000.0,
        &TIPOVER,
    ),
    tl(
        "healthy_noisy",
        None,
        "—",
        "36 simulated minutes of everyday traffic with jittered latencies, the load in a +-30 % wave (12 min period), and now and then a retry that worked, a cached fallback, a slow answer within its timeouts, a stream, a judged answer, a 404: nothing an early warning should page on.",
        60_000.0,
        &NOISY,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::AgentRequest;

    #[test]
    fn a_seeded_plan_is_the_same_every_time_and_grows_with_the_ramp() {
        let t = &PREFILL;
        let spec = t.spec();
        let at = |i, s: f64| t.plan_at(i, spec.warmup_ms + s * spec.ramp_ms, &spec, 3);
        assert_eq!(at(5, 0.5), at(5, 0.5));
        // The attribution call's input tokens over many requests.
        let tokens = |s: f64| {
            let mut n = Vec::new();
            for i in 0..400 {
                let p = at(i, s);
                let Some(body) = p.body else { continue }; // the 404
                let r: AgentRequest = serde_json::from_value(body).unwrap();
                if let (Some(Step::Llm(l)), Some(_)) = (r.steps.last(), p.expect) {
                    n.push(l.input_tokens);
                }
            }
            n.sort_unstable();
            n[n.len() / 2]
        };
        let (start, end) = (tokens(0.0), tokens(1.0));
        assert!((350..450).contains(&start), "{start}");
        assert!((1000..1300).contains(&end), "{end}");
    }

    #[test]
    fn the_load_grows_with_the_ramp() {
        let t = &DNS;
        let spec = t.spec();
        let times = t.schedule(&spec, 1);
        let count = |from: f64, to: f64| times.iter().filter(|x| **x >= from && **x < to).count();
        let warm = count(0.0, spec.warmup_ms) as f64 / t.warmup_min;
        let end = spec.warmup_ms + spec.ramp_ms;
        let hold = count(end, end + spec.hold_ms) as f64 / t.hold_min;
        assert!((warm - 30.0).abs() < 5.0, "{warm}");
        assert!((hold / warm - 1.6).abs() < 0.35, "{hold} vs {warm}");
    }

    #[test]
    fn the_dns_ramp_retries_before_it_fails() {
        let t = &DNS;
        let spec = t.spec();
        let mut slow_first = [0; 2];
        let mut slow_retry = [0; 2];
        for (k, s) in [0.3, 0.55].into_iter().enumerate() {
            for i in 0..500 {
                let p = t.plan_at(i, spec.warmup_ms + s * spec.ramp_ms, &spec, 1);
                let Some(body) = p.body else { continue };
                let r: AgentRequest = serde_json::from_value(body).unwrap();
                if let Some(Step::Tool(w)) = r.steps.get(1) {
                    slow_first[k] += (w.dns_ms.unwrap_or(0.0) > 1000.0) as usize;
                    slow_retry[k] += (w.retry_dns_ms.unwrap_or(0.0) > 1000.0) as usize;
                }
            }
        }
        assert!(slow_first[0] > 150, "{slow_first:?}");
        assert_eq!(
            slow_retry,
            [0, 0],
            "retries find the name cached until 60 %"
        );
    }
}
