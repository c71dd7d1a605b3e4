//! The scenarios: what each request asks of the platform, and the root
//! cause (docs/diagnosis.md#root-cause-kinds) a failing request must be given — decided here, by
//! the fault injected, never by overtime. Every number is nominal (the
//! production value: a 60 s gateway, 28 tokens/s decode); `--time-scale`
//! divides them all.
//!
//! Each fault scenario is shaped so that exactly one rule of docs/diagnosis.md applies
//! to the requests that fail; [`Scenario::how`] says how.

mod build;
pub mod timeline;

use crate::clock::TimeScale;
use crate::steps::Step;
use build::*;
use serde_json::{Value, json};

/// The gateway's read timeout every scenario runs behind (nominal ms): the
/// `proxy_read_timeout 60s` of incidents A and B.
pub const GATEWAY_TIMEOUT_MS: f64 = 60_000.0;

/// How the client sends `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traceparent {
    /// 3 requests in 5 carry one (sampled); the others join by `$request_id`.
    Auto,
    /// Sampled out by the client (flags `00`): no spans at all.
    Unsampled,
}

/// One request the load generator will send.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The HTTP method (`POST` but for deliberately bad requests).
    pub method: &'static str,
    /// The agent API route (`/v1/agent/run`, `/v1/agent/stream`…).
    pub route: &'static str,
    /// JSON body (`{"steps": [...]}` or a deliberately bad one).
    pub body: Option<Value>,
    /// Whether it asks for a streamed answer.
    pub stream: bool,
    /// Whether the client sends `traceparent`.
    pub traceparent: Traceparent,
    /// A User-Agent to use instead of the rotating ones.
    pub user_agent: Option<&'static str>,
    /// (kind, component) this request must be diagnosed as if it fails;
    /// `None` for healthy traffic.
    pub expect: Option<(&'static str, &'static str)>,
    /// Healthy traffic sent alongside a fault.
    pub noise: bool,
}

impl Planned {
    fn new(route: &'static str, steps: Vec<Step>) -> Self {
        Planned {
            method: "POST",
            route,
            body: Some(json!({ "steps": steps })),
            stream: route == "/v1/agent/stream",
            traceparent: Traceparent::Auto,
            user_agent: None,
            expect: None,
            noise: false,
        }
    }

    fn unsampled(mut self) -> Self {
        self.traceparent = Traceparent::Unsampled;
        self
    }
}

/// What the request builders may depend on besides the request index.
#[derive(Debug, Clone, Copy)]
pub struct PlanCtx {
    /// The run's time scale (nominal durations are divided by it).
    pub scale: TimeScale,
}

type Make = fn(usize, &PlanCtx) -> Planned;

/// A named batch of traffic with the root cause its failures must get.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// `--scenario` name.
    pub name: &'static str,
    /// Root-cause kind of the failing requests; `None`: healthy.
    pub kind: Option<&'static str>,
    /// The component the verdict must name.
    pub component: &'static str,
    /// How the fault produces exactly this cause (docs/simulate.md).
    pub how: &'static str,
    /// In-flight requests at most, unless `--concurrency` says otherwise.
    pub concurrency: usize,
    /// Requests sent at once; after a burst the generator waits for the
    /// platform to be idle again (queueing scenarios need the crowd).
    pub burst: usize,
    /// The gateway's read timeout (nominal ms).
    pub gateway_timeout_ms: f64,
    make: Make,
    /// One healthy request after every `n` faults.
    noise: Option<(usize, Make)>,
    /// A scenario over simulated time (a ramp into an incident, or
    /// healthy noisy traffic): its requests come from here, not `make`.
    pub timeline: Option<&'static timeline::Timeline>,
}

impl Scenario {
    /// The `i`-th request of this scenario.
    ///
    /// ```
    /// use overtime_simulate::scenarios::{find, PlanCtx};
    /// use overtime_simulate::TimeScale;
    /// let ctx = PlanCtx { scale: TimeScale::new(10.0).unwrap() };
    /// let s = find("tool_no_timeout").unwrap();
    /// let p = s.plan(0, &ctx);
    /// assert_eq!(p.expect, Some(("tool_no_timeout", "search_api")));
    /// ```
    pub fn plan(&self, i: usize, ctx: &PlanCtx) -> Planned {
        if let Some((n, noise)) = self.noise
            && i % (n + 1) == n
        {
            let mut p = noise(i / (n + 1), ctx);
            p.noise = true;
            p.expect = None;
            return p;
        }
        let i = match self.noise {
            Some((n, _)) => i - i / (n + 1),
            None => i,
        };
        let mut p = (self.make)(i, ctx);
        if let Some(kind) = self.kind
            && p.expect.is_none()
        {
            p.expect = Some((kind, self.component));
        }
        p
    }
}

/// Every scenario: `healthy` and one per root-cause kind of docs/diagnosis.md#root-cause-kinds
pub fn all() -> &'static [Scenario] {
    SCENARIOS
}

/// A scenario by name (the per-cause ones and the timelines).
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().chain(timelines()).find(|s| s.name == name)
}

/// The scenarios over simulated time: a gradual ramp into each seed
/// incident, and healthy noisy traffic.
pub fn timelines() -> &'static [Scenario] {
    timeline::TIMELINES
}

const fn sc(
    name: &'static str,
    component: &'static str,
    how: &'static str,
    make: Make,
) -> Scenario {
    Scenario {
        name,
        kind: Some(name),
        component,
        how,
        concurrency: 4,
        burst: 1,
        gateway_timeout_ms: GATEWAY_TIMEOUT_MS,
        make,
        noise: None,
        timeline: None,
    }
}

static SCENARIOS: &[Scenario] = &[
    Scenario {
        kind: None,
        concurrency: 6,
        ..sc(
            "healthy",
            "—",
            "Quick chats, multi-hop answers with parallel lookups, an aligned-budget route, a judge, a legacy model, streams (one kept alive by heartbeats through a 90 s browse), a retry that worked, a fallback to cache, the report worker pool, sampled-out requests and a few 4xx: slow at times, never over a timeout.",
            healthy,
        )
    },
    Scenario {
        kind: None,
        concurrency: 8,
        ..sc(
            "latency_law",
            "—",
            "A latency study for `overtime advise` and `whatif`: seed 000's three input classes (10–49, 200–500 and 600–1600 input tokens) on deepseek-v4-pro, and a search_api that hangs 120 s one call in twelve (seed 003), on /v1/agent/plan (budget 120 s > gateway 60 s). Each request is drawn from its index: every run sends the same requests; change the timeouts with --set.",
            latency_law,
        )
    },
    Scenario {
        concurrency: 6,
        noise: Some((3, heartbeat_stream)),
        ..sc(
            "stream_idle_gap",
            "agent-api",
            "An SSE answer relays the model's chunks, then browses the web for 100 s (stretched at high --time-scale so the service visibly runs on after the cut) with no heartbeat: the gateway's 60 s read timeout cuts the live stream and logs 200. Noise: the same stream with a heartbeat every 16 s, which survives.",
            stream_gap,
        )
    },
    sc(
        "gateway_timeout_mismatch",
        "gateway",
        "/v1/agent/plan has a 120 s budget, longer than the gateway's 60 s; every call has a timeout (LLM 80 s, crm_report 80 s, poi_search 20 s, memory 10 s) and none fires, but together they take 67 s.",
        mismatch,
    ),
    sc(
        "serial_budget_exhaustion",
        "agent-api",
        "Ten calls of 3-9 s in series on the legacy route (no budget): the request runs past 60 s while the largest call holds ~15 % of it.",
        serial,
    ),
    Scenario {
        concurrency: 12,
        burst: 12,
        ..sc(
            "pool_saturation",
            "agent-api",
            "Bursts of 12 report jobs (16 s of work each) on a 2-worker pool: the later jobs wait 48 s and more for a worker. Odd bursts record the wait as a worker_pool.wait span, even ones leave it as the gap before the first child.",
            pool,
        )
    },
    sc(
        "judge_slow",
        "qwen2.5-72b-instruct",
        "The LLM-as-judge call (183 tokens on qwen2.5-72b-instruct) decodes 9x slower than usual: 108 s.",
        judge_slow,
    ),
    Scenario {
        concurrency: 48,
        burst: 48,
        ..sc(
            "llm_queueing",
            "deepseek-v4-pro",
            "Bursts of 48 calls of 22 s on deepseek-v4-pro's 12 GPU slots: the third and fourth waves wait 45 s and more in the model server's queue (queue_wait in X-LLM-Reason).",
            queueing,
        )
    },
    sc(
        "llm_prefill_slow",
        "deepseek-v4-pro",
        "Incident A: an attribution call on 1500 input tokens builds its KV cache for 53 s. Three shapes in turn: the legacy route (the gateway cuts at 60 s), the aligned route (its LLM timeout fires, the service answers 503), and a plain HTTP client call (no GenAI span, X-LLM-Reason captured on `POST`).",
        prefill,
    ),
    sc(
        "llm_decode_slow",
        "deepseek-v4-pro",
        "Decode runs to max_tokens 2048 at 28 tokens/s: 73 s.",
        decode,
    ),
    sc(
        "llm_slow",
        "llama-3-8b-instruct",
        "The legacy model server (no X-LLM-Reason) takes 70 s.",
        llm_slow,
    ),
    sc(
        "upstream_connect_slow",
        "weather_api",
        "Incident C: the weather API's DNS takes 16 s; the tool gateway's 25 s timeout fires, the orchestrator retries once and falls back to the cache: 62 s. Every other request: maps_api with 42 s of its 50 s in DNS and connect.",
        connect,
    ),
    sc(
        "retry_amplification",
        "crm_api",
        "crm_api answers 503 after 14 s; the orchestrator tries 5 times (its 20 s timeout never fires): 80 s.",
        retries,
    ),
    Scenario {
        concurrency: 9,
        noise: Some((3, quick_chat_noise)),
        ..sc(
            "tool_no_timeout",
            "search_api",
            "Incident B: search_api hangs for 120 s and neither the orchestrator nor the tool gateway set a timeout. One request in nine is sampled out by its client (expected: unknown). Noise: quick chats.",
            no_timeout,
        )
    },
    Scenario {
        noise: Some((4, quick_chat_noise)),
        ..sc(
            "tool_slow",
            "crm_report",
            "crm_report takes 70 s within its 80 s timeout on the legacy route (the gateway cuts at 60 s); every other request runs on the aligned route, where the tool gets half the remaining budget (~23 s), that timeout fires and the service answers 503.",
            tool_slow,
        )
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::AgentRequest;

    const KINDS: [&str; 13] = [
        "stream_idle_gap",
        "gateway_timeout_mismatch",
        "serial_budget_exhaustion",
        "pool_saturation",
        "judge_slow",
        "llm_queueing",
        "llm_prefill_slow",
        "llm_decode_slow",
        "llm_slow",
        "upstream_connect_slow",
        "retry_amplification",
        "tool_no_timeout",
        "tool_slow",
    ];

    fn ctx() -> PlanCtx {
        PlanCtx {
            scale: TimeScale::new(100.0).unwrap(),
        }
    }

    #[test]
    fn one_scenario_per_root_cause_kind_plus_healthy_and_the_latency_study() {
        for k in KINDS {
            let s = find(k).unwrap_or_else(|| panic!("no scenario for {k}"));
            assert_eq!(s.kind, Some(k));
        }
        assert_eq!(find("healthy").unwrap().kind, None);
        assert_eq!(find("latency_law").unwrap().kind, None);
        assert_eq!(all().len(), KINDS.len() + 2);
    }

    #[test]
    fn healthy_requests_expect_nothing_and_fault_requests_their_kind() {
        let h = find("healthy").unwrap();
        for i in 0..46 {
            assert_eq!(h.plan(i, &ctx()).expect, None);
        }
        let t = find("tool_no_timeout").unwrap();
        let plans: Vec<_> = (0..40).map(|i| t.plan(i, &ctx())).collect();
        let noise = plans.iter().filter(|p| p.noise).count();
        assert_eq!(noise, 10, "one quick chat after every 3 faults");
        assert!(plans.iter().filter(|p| p.noise).all(|p| p.expect.is_none()));
        let unknown = plans
            .iter()
            .filter(|p| p.expect == Some(("unknown", "—")))
            .count();
        assert_eq!(unknown, 3, "every 9th fault is sampled out");
        assert!(
            plans
                .iter()
                .filter(|p| p.expect == Some(("unknown", "—")))
                .all(|p| p.traceparent == Traceparent::Unsampled)
        );
    }

    #[test]
    fn bodies_are_valid_agent_requests() {
        for s in all() {
            for i in 0..48 {
                let p = s.plan(i, &ctx());
                let Some(body) = p.body else { continue };
                if body.get("prompt").is_some() {
                    continue; // the deliberate 400
                }
                let r: AgentRequest =
                    serde_json::from_value(body).unwrap_or_else(|e| panic!("{} #{i}: {e}", s.name));
                assert!(!r.steps.is_empty(), "{} #{i}", s.name);
            }
        }
    }

    #[test]
    fn the_silent_browse_outlasts_the_cut_by_seconds_of_real_time() {
        for f in [1.0, 20.0, 100.0, 200.0] {
            let c = PlanCtx {
                scale: TimeScale::new(f).unwrap(),
            };
            let p = stream_gap(0, &c);
            let steps: AgentRequest = serde_json::from_value(p.body.unwrap()).unwrap();
            let Step::Tool(t) = &steps.steps[1] else {
                panic!()
            };
            assert!(t.latency_ms >= 100_000.0);
            let after_cut_real_s = (t.latency_ms - GATEWAY_TIMEOUT_MS) / 1000.0 / f;
            assert!(after_cut_real_s >= RUN_ON_REAL_S, "{f}: {after_cut_real_s}");
        }
    }
}
