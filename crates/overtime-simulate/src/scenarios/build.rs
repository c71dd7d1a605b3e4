//! The requests of each scenario: their steps and delays (nominal ms),
//! one builder per scenario, the `i`-th request of it.

use super::{GATEWAY_TIMEOUT_MS, PlanCtx, Planned};
use crate::clock::TimeScale;
use crate::steps::*;
use serde_json::json;

pub(super) fn run(steps: Vec<Step>) -> Planned {
    Planned::new("/v1/agent/run", steps)
}

pub(super) fn quick_chat(i: usize) -> Planned {
    let i = i as u32;
    run(vec![
        mem(400.0, "session_memory"),
        llm(100 + i % 50, 80 + i % 40),
    ])
}

pub(super) fn quick_chat_noise(i: usize, _: &PlanCtx) -> Planned {
    quick_chat(i)
}

/// Healthy traffic: 23 requests in a cycle (Python harness's healthy batch).
pub(super) fn healthy(i: usize, _: &PlanCtx) -> Planned {
    let k = i % 23;
    match k {
        0..=13 => everyday(k % 7, i),
        14..=20 => occasional(k - 14),
        21 if (i / 23).is_multiple_of(2) => {
            // The service rejects a body without steps: 400.
            let mut p = run(vec![]);
            p.body = Some(json!({"prompt": "no steps"}));
            p
        }
        21 => Planned {
            method: "GET",
            route: "/nope",
            body: None,
            ..run(vec![])
        },
        _ => Planned {
            user_agent: Some("Mozilla/5.0 (X11) \"quoted\" agent\\x"),
            ..run(vec![llm(50, 30)])
        },
    }
}

pub(super) fn everyday(k: usize, i: usize) -> Planned {
    let j = (i % 4) as u32;
    match k {
        0 => quick_chat(i),
        1 => run(vec![
            llm(40, 30),
            par(vec![
                tool("calc", 1600.0),
                tool("poi_search", 3000.0),
                mem(1200.0, "session_memory"),
            ]),
            llm(350 + 30 * j, 180),
        ]),
        2 => Planned::new(
            "/v2/agent/run",
            vec![
                llm(80, 60),
                with_tool(tool("weather_api", 2400.0), |t| t.dns_ms = Some(80.0)),
                llm(220, 150),
            ],
        ),
        3 => Planned::new(
            "/v1/agent/plan",
            vec![
                mem(600.0, "session_memory"),
                llm(150, 200),
                tool("crm_report", 6000.0),
                llm(150, 150),
            ],
        ),
        4 => run(vec![llm(120, 100), judge(183, 80, 1.0)]),
        5 => run(vec![
            mem(300.0, "session_memory"),
            with_llm(llm(60, 50), |l| {
                l.model = LLAMA.into();
                l.latency_ms = Some(5000.0);
            }),
        ]),
        _ => Planned::new("/v1/agent/stream", vec![llm_stream(100, 200)]),
    }
}

pub(super) fn occasional(k: usize) -> Planned {
    let report = || {
        vec![
            mem(600.0, "session_memory"),
            llm(120, 200),
            tool("calc", 2000.0),
        ]
    };
    match k {
        // Slow but within every timeout: a 900-token prefill (19 s), then a
        // 12 s report: 45 s of 60.
        0 => run(vec![llm(900, 400), tool("crm_report", 12_000.0)]),
        1 => heartbeat_stream(0, &PlanCtx::DEFAULT),
        // A retry that worked.
        2 => run(vec![
            llm(60, 40),
            with_tool(tool("crm_api", 4000.0), |t| t.fail_attempts = 1),
        ]),
        // Weather down twice, cached weather used: the user still gets 200.
        3 => run(vec![
            llm(60, 40),
            with_tool(tool("weather_api", 2000.0), |t| {
                t.status = 503;
                t.fallback = Some(MemoryStep {
                    name: "weather_cache".into(),
                    latency_ms: 200.0,
                    fallback: None,
                });
            }),
            llm(120, 100),
        ]),
        4 => Planned::new("/v1/agent/report", report()),
        5 => Planned::new("/v1/agent/export", report()),
        _ => run(vec![mem(400.0, "session_memory"), llm(100, 80)]).unsampled(),
    }
}

impl PlanCtx {
    const DEFAULT: PlanCtx = PlanCtx {
        scale: TimeScale::ONE,
    };
}

/// A long stream kept alive by heartbeats (no silence over 16 s).
pub(super) fn heartbeat_stream(_: usize, _: &PlanCtx) -> Planned {
    Planned::new(
        "/v1/agent/stream",
        vec![
            llm_stream(100, 150),
            heartbeat(tool("web_browse", 90_000.0), 16_000.0),
            llm_stream(150, 100),
        ],
    )
}

/// Real seconds the service must run on after the gateway's cut for
/// overtime to see it (1 s of tolerance plus `$time_iso8601`'s 1 s).
pub(super) const RUN_ON_REAL_S: f64 = 3.5;

pub(super) fn stream_gap(_: usize, ctx: &PlanCtx) -> Planned {
    let silent = f64::max(
        100_000.0,
        GATEWAY_TIMEOUT_MS + RUN_ON_REAL_S * 1000.0 * ctx.scale.factor(),
    );
    Planned::new(
        "/v1/agent/stream",
        vec![
            llm_stream(100, 200),
            tool("web_browse", silent),
            llm_stream(150, 150),
        ],
    )
}

pub(super) fn mismatch(_: usize, _: &PlanCtx) -> Planned {
    Planned::new(
        "/v1/agent/plan",
        vec![
            mem(1000.0, "session_memory"),
            llm(200, 500),
            tool("crm_report", 18_000.0),
            tool("poi_search", 10_000.0),
            llm(200, 500),
        ],
    )
}

pub(super) fn serial(_: usize, _: &PlanCtx) -> Planned {
    run(vec![
        mem(3000.0, "session_memory"),
        llm(150, 220),
        tool("calc", 6000.0),
        tool("poi_search", 8000.0),
        llm(150, 220),
        mem(3000.0, "user_profile"),
        with_tool(tool("weather_api", 7000.0), |t| t.dns_ms = Some(100.0)),
        llm(150, 220),
        tool("calc", 6000.0),
        llm(150, 220),
    ])
}

pub(super) fn pool(i: usize, _: &PlanCtx) -> Planned {
    let route = if (i / 12).is_multiple_of(2) {
        "/v1/agent/report"
    } else {
        "/v1/agent/export"
    };
    Planned::new(
        route,
        vec![
            mem(1000.0, "session_memory"),
            llm(120, 300),
            tool("calc", 4000.0),
        ],
    )
}

pub(super) fn judge_slow(_: usize, _: &PlanCtx) -> Planned {
    run(vec![llm(120, 200), judge(183, 300, 9.0)])
}

pub(super) fn queueing(_: usize, _: &PlanCtx) -> Planned {
    run(vec![mem(400.0, "session_memory"), llm(200, 600)])
}

pub(super) fn prefill(i: usize, _: &PlanCtx) -> Planned {
    let long = llm(1500, 150);
    match i % 3 {
        0 => run(vec![
            llm(60, 40),
            par(vec![
                tool("calc", 4000.0),
                tool("poi_search", 5000.0),
                mem(2000.0, "session_memory"),
            ]),
            long,
        ]),
        1 => Planned::new("/v2/agent/run", vec![llm(60, 40), long]),
        _ => run(vec![
            llm(60, 40),
            tool("calc", 3000.0),
            with_llm(long, |l| l.raw = true),
        ]),
    }
}

pub(super) fn decode(_: usize, _: &PlanCtx) -> Planned {
    run(vec![
        llm(60, 40),
        with_llm(llm(300, 2048), |l| l.max_tokens = 2048),
    ])
}

pub(super) fn llm_slow(_: usize, _: &PlanCtx) -> Planned {
    run(vec![
        mem(600.0, "session_memory"),
        with_llm(llm(80, 200), |l| {
            l.model = LLAMA.into();
            l.latency_ms = Some(70_000.0);
        }),
    ])
}

pub(super) fn connect(i: usize, _: &PlanCtx) -> Planned {
    if i.is_multiple_of(2) {
        let weather = with_tool(tool("weather_api", 12_000.0), |t| {
            t.dns_ms = Some(16_000.0);
            t.connect_ms = 1000.0;
            t.fallback = Some(MemoryStep {
                name: "weather_cache".into(),
                latency_ms: 200.0,
                fallback: None,
            });
        });
        run(vec![llm(60, 100), weather, llm(120, 200)])
    } else {
        let maps = with_tool(tool("maps_api", 8000.0), |t| {
            t.dns_ms = Some(40_000.0);
            t.connect_ms = 2000.0;
        });
        Planned {
            expect: Some(("upstream_connect_slow", "maps_api")),
            ..run(vec![llm(60, 100), maps, llm(120, 400)])
        }
    }
}

pub(super) fn retries(_: usize, _: &PlanCtx) -> Planned {
    run(vec![
        llm(60, 100),
        with_tool(tool("crm_api", 14_000.0), |t| t.fail_attempts = 9),
    ])
}

pub(super) fn no_timeout(i: usize, _: &PlanCtx) -> Planned {
    let p = run(vec![
        llm(60, 100),
        mem(1000.0, "session_memory"),
        tool("search_api", 120_000.0),
    ]);
    if i % 9 == 8 {
        Planned {
            expect: Some(("unknown", "—")),
            ..p.unsampled()
        }
    } else {
        p
    }
}

pub(super) fn tool_slow(i: usize, _: &PlanCtx) -> Planned {
    let route = if i.is_multiple_of(2) {
        "/v1/agent/run"
    } else {
        "/v2/agent/run"
    };
    Planned::new(route, vec![llm(60, 100), tool("crm_report", 70_000.0)])
}

/// A log-normal draw (median, σ of its log) from a seeded generator.
fn lognormal(rng: &mut fastrand::Rng, median: f64, sigma: f64) -> f64 {
    // Box–Muller; 1 - f64() keeps the logarithm finite.
    let (u1, u2) = (1.0 - rng.f64(), rng.f64());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    median * (sigma * z).exp()
}

/// A latency study: seed 000's three input classes on deepseek-v4-pro and
/// a search tool that hangs one call in twelve (seed 003), on the route
/// whose 120 s budget outlives the gateway. Request `i` is drawn from `i`
/// alone: every run sends the same requests, whatever `--set` changes.
pub(super) fn latency_law(i: usize, _: &PlanCtx) -> Planned {
    let mut rng =
        fastrand::Rng::with_seed(0x0ddb_1a5e ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let tokens = |rng: &mut fastrand::Rng, lo: u32, hi: u32| rng.u32(lo..=hi);
    let u = rng.f64();
    let steps = if u < 0.4 {
        vec![llm(tokens(&mut rng, 10, 49), tokens(&mut rng, 20, 80))]
    } else if u < 0.75 {
        let search = if rng.f64() < 1.0 / 12.0 {
            120_000.0
        } else {
            lognormal(&mut rng, 2_500.0, 0.8).min(60_000.0)
        };
        vec![
            llm(40, 30),
            tool("search_api", search),
            llm(tokens(&mut rng, 200, 500), tokens(&mut rng, 100, 300)),
        ]
    } else {
        vec![
            llm(60, 40),
            llm(tokens(&mut rng, 600, 1_600), tokens(&mut rng, 100, 300)),
        ]
    };
    Planned::new("/v1/agent/plan", steps)
}
