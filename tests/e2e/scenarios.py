"""The scenarios: batches of requests, each with the fault it injects and
the diagnosis that fault must get (docs/diagnosis.md#root-cause-kinds), decided here — by what was
injected — never by overtime.

Times are scaled (~1/20): the gateway's read timeout is 3 s. Each failing
batch is shaped so that exactly one rule of docs/diagnosis.md#root-cause-kinds applies to the
requests that fail; the notes say why the earlier rules do not.
"""

from __future__ import annotations

DS = "deepseek-v4-pro"
JUDGE = "qwen2.5-72b-instruct"
LLAMA = "llama-3-8b-instruct"


def llm(tin=120, tout=120, model=DS, max_tokens=1024, **kw):
    return {"op": "llm", "model": model, "input_tokens": tin, "output_tokens": tout, "max_tokens": max_tokens, **kw}


def judge(tin=183, tout=300, slow=1.0):
    return {"op": "judge", "model": JUDGE, "input_tokens": tin, "output_tokens": tout, "max_tokens": 512, "slow": slow}


def tool(name, latency_ms=50, **kw):
    return {"op": "tool", "name": name, "latency_ms": latency_ms, **kw}


def mem(latency_ms=20, name="session_memory"):
    return {"op": "memory", "name": name, "latency_ms": latency_ms}


def par(*steps):
    return {"op": "parallel", "steps": list(steps)}


def heartbeat(step, every_ms=800):
    return {"op": "heartbeat_during", "step": step, "every_ms": every_ms}


class Req:
    """One request of a batch."""

    def __init__(self, route, steps=None, *, method="POST", body=None, stream=False, tp="auto", ua=None, expect=None):
        self.route = route
        self.expect = expect  # (kind, component) overriding the scenario's
        self.method = method
        self.body = body if body is not None else ({"steps": steps} if steps is not None else None)
        self.stream = stream
        self.tp = tp  # "auto" (by index), "yes", "no", "unsampled"
        self.ua = ua


class Scenario:
    def __init__(self, name, kind, component, reqs, *, concurrency=4, gap_ms=30, note="", noise=()):
        self.name = name
        self.kind = kind  # expected root cause of the requests that fail; None: healthy
        self.component = component
        self.reqs = reqs
        self.noise = list(noise)  # healthy requests sent alongside
        self.concurrency = concurrency
        self.gap_ms = gap_ms
        self.note = note


def rep(n, make):
    return [make(i) for i in range(n)]


def quick_chat(i=0):
    return Req("/v1/agent/run", [mem(20), llm(100 + i % 50, 80 + i % 40)])


def healthy() -> Scenario:
    reqs = []
    for i in range(4):
        reqs.append(quick_chat(i))
        # multi hop: intent, three lookups in parallel, answer on 200-500 tokens
        reqs.append(Req("/v1/agent/run", [llm(40, 30), par(tool("calc", 80), tool("poi_search", 150), mem(60)), llm(350 + 30 * i, 180)]))
        reqs.append(Req("/v2/agent/run", [llm(80, 60), tool("weather_api", 120, dns_ms=4), llm(220, 150)]))
        reqs.append(Req("/v1/agent/plan", [mem(30), llm(150, 200), tool("crm_report", 300), llm(150, 150)]))
        reqs.append(Req("/v1/agent/run", [llm(120, 100), judge(183, 80)]))
        reqs.append(Req("/v1/agent/run", [mem(15), llm(60, 50, model=LLAMA, latency_ms=250)]))
        reqs.append(Req("/v1/agent/stream", [llm(100, 200, stream=True)], stream=True))
    for i in range(2):
        # slow but within every timeout: 900-token prefill ~1 s, then a slow report
        reqs.append(Req("/v1/agent/run", [llm(900, 400), tool("crm_report", 600)]))
        # a long stream kept alive by heartbeats (5.5 s > 3 s, no silence > 0.8 s)
        reqs.append(Req("/v1/agent/stream", [llm(100, 150, stream=True), heartbeat(tool("web_browse", 4500)), llm(150, 150, stream=True)], stream=True))
        # a retry that worked (crm_api 503 once, then 200)
        reqs.append(Req("/v1/agent/run", [llm(60, 40), tool("crm_api", 200, fail_attempts=1)]))
        # weather down twice, cached weather used: the user still gets 200
        reqs.append(Req("/v1/agent/run", [llm(60, 40), tool("weather_api", 100, status=503, fallback=mem(10, "weather_cache")), llm(120, 100)]))
        reqs.append(Req("/v1/agent/report", [mem(30), llm(120, 200), tool("calc", 100)]))
        reqs.append(Req("/v1/agent/export", [mem(30), llm(120, 200), tool("calc", 100)]))
        # sampled out by the client (traceparent flags 00): no spans at all
        reqs.append(Req("/v1/agent/run", [mem(20), llm(100, 80)], tp="unsampled"))
    # 4xx: the service rejects a body, nginx has no such location
    reqs.append(Req("/v1/agent/run", body={"prompt": "no steps"}))
    reqs.append(Req("/v2/agent/run", body={"steps": "nope"}, tp="yes"))
    reqs.append(Req("/nope", method="GET", tp="no"))
    reqs.append(Req("/v1/agent/run", [llm(50, 30)], ua='Mozilla/5.0 (X11) "quoted" agent\\x'))
    return Scenario("healthy", None, None, reqs, concurrency=6, gap_ms=60, note="no verdict other than ok, no incident")


def failing() -> list[Scenario]:
    s = []
    s.append(Scenario(
        "stream_idle_gap", "stream_idle_gap", "agent-api",
        rep(6, lambda i: Req("/v1/agent/stream", [llm(100, 200, stream=True), tool("web_browse", 5000), llm(150, 150, stream=True)], stream=True)),
        concurrency=6,
        noise=[Req("/v1/agent/stream", [llm(100, 200, stream=True), heartbeat(tool("web_browse", 5000)), llm(150, 100, stream=True)], stream=True) for _ in range(2)],
        note="SSE relays chunks, then a 5 s web_browse with no heartbeat: nginx (3 s read timeout) cuts the stream and logs 200",
    ))
    s.append(Scenario(
        "gateway_timeout_mismatch", "gateway_timeout_mismatch", "gateway",
        rep(8, lambda i: Req("/v1/agent/plan", [mem(50), llm(200, 500), tool("crm_report", 900), tool("poi_search", 500), llm(200, 500)])),
        concurrency=4,
        note="budget 6 s > gateway 3 s; every call has a timeout (LLM 4 s, crm_report 4 s, poi 1 s, memory 0.5 s), none fires; 3.4 s of calls",
    ))
    s.append(Scenario(
        "serial_budget_exhaustion", "serial_budget_exhaustion", "agent-api",
        rep(8, lambda i: Req("/v1/agent/run", [
            mem(150), llm(150, 220), tool("calc", 300), tool("poi_search", 400), llm(150, 220), mem(150, "user_profile"),
            tool("weather_api", 350, dns_ms=5), llm(150, 220), tool("calc", 300), llm(150, 220)])),
        concurrency=4,
        note="ten calls of 0.15-0.45 s in series (legacy: no budget); the largest holds ~15 % of 3 s",
    ))
    s.append(Scenario(
        "pool_saturation (queue span)", "pool_saturation", "agent-api",
        rep(12, lambda i: Req("/v1/agent/report", [mem(50), llm(120, 300), tool("calc", 200)])),
        concurrency=12, gap_ms=5,
        note="12 at once on a 2-worker pool, 0.85 s of work each; the wait is a worker_pool.wait span",
    ))
    s.append(Scenario(
        "pool_saturation (gap)", "pool_saturation", "agent-api",
        rep(12, lambda i: Req("/v1/agent/export", [mem(50), llm(120, 300), tool("calc", 200)])),
        concurrency=12, gap_ms=5,
        note="same pool, no span for the wait: it shows as the server span's gap before its first child",
    ))
    s.append(Scenario(
        "judge_slow", "judge_slow", JUDGE,
        rep(8, lambda i: Req("/v1/agent/run", [llm(120, 200), judge(183, 300, slow=9.0)])),
        concurrency=4,
        note="the LLM-as-judge call (183 tokens) decodes 9x slower than usual: 5.4 s",
    ))
    s.append(Scenario(
        "llm_queueing", "llm_queueing", DS,
        rep(24, lambda i: Req("/v1/agent/run", [mem(20), llm(200, 600)])),
        concurrency=24, gap_ms=5,
        note="24 at once on 6 GPU slots, 1.1 s each: the 3rd and 4th waves wait 2.2-3.4 s in the model server's queue",
    ))
    s.append(Scenario(
        "llm_prefill_slow", "llm_prefill_slow", DS,
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 40), par(tool("calc", 200), tool("poi_search", 250), mem(100)), llm(1500, 150)])),
        concurrency=4,
        note="attribution call on 1500 input tokens: KV-cache build 2.6 s (legacy: no budget, LLM timeout 30 s)",
    ))
    s.append(Scenario(
        "llm_prefill_slow (aligned budget)", "llm_prefill_slow", DS,
        rep(6, lambda i: Req("/v2/agent/run", [llm(60, 40), llm(1500, 150)])),
        concurrency=3,
        note="budget 2.5 s: the LLM timeout (0.8 x remaining) fires at ~1.9 s, the service answers 503; phases only on the model server's span",
    ))
    s.append(Scenario(
        "llm_prefill_slow (plain HTTP client)", "llm_prefill_slow", DS,
        rep(6, lambda i: Req("/v1/agent/run", [llm(60, 40), tool("calc", 150), llm(1500, 150, raw=True)])),
        concurrency=3,
        note="the same prefill, but the agent calls the model with a plain HTTP client: no gen_ai span, only `POST` with the captured X-LLM-Reason and the model server's span naming the model",
    ))
    s.append(Scenario(
        "llm_decode_slow", "llm_decode_slow", DS,
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 40), llm(300, 2048, max_tokens=2048)])),
        concurrency=4,
        note="decode runs to max_tokens 2048: 3.7 s",
    ))
    s.append(Scenario(
        "llm_slow", "llm_slow", LLAMA,
        rep(8, lambda i: Req("/v1/agent/run", [mem(30), llm(80, 200, model=LLAMA, latency_ms=3500)])),
        concurrency=4,
        note="the legacy model server (no X-LLM-Reason) takes 3.5 s",
    ))
    s.append(Scenario(
        "upstream_connect_slow (DNS + retry)", "upstream_connect_slow", "weather_api",
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 100), tool("weather_api", 600, dns_ms=800, connect_ms=50, fallback=mem(10, "weather_cache")), llm(120, 200)])),
        concurrency=4,
        note="incident C: DNS 0.8 s + connect, the tool gateway's 1.25 s timeout fires (500), one retry, fallback to cache",
    ))
    s.append(Scenario(
        "upstream_connect_slow (DNS)", "upstream_connect_slow", "maps_api",
        rep(6, lambda i: Req("/v1/agent/run", [llm(60, 100), tool("maps_api", 400, dns_ms=2000, connect_ms=100), llm(120, 400)])),
        concurrency=3,
        note="one call, 2.1 s of its 2.5 s in DNS/connect",
    ))
    s.append(Scenario(
        "retry_amplification", "retry_amplification", "crm_api",
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 100), tool("crm_api", 700, fail_attempts=9)])),
        concurrency=4,
        note="crm_api answers 503 after 0.7 s; the orchestrator tries 5 times (timeout 1 s, never fires)",
    ))
    s.append(Scenario(
        "tool_no_timeout", "tool_no_timeout", "search_api",
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 100), mem(50), tool("search_api", 6000)])) + [Req("/v1/agent/run", [llm(60, 100), mem(50), tool("search_api", 6000)], tp="unsampled", expect=("unknown", "—"))],
        concurrency=9, gap_ms=20,
        noise=[quick_chat(i) for i in range(3)],
        note="incident B: search_api hangs 6 s; neither the orchestrator nor the tool gateway set a timeout. One request is sampled out (expected: unknown)",
    ))
    s.append(Scenario(
        "tool_slow", "tool_slow", "crm_report",
        rep(8, lambda i: Req("/v1/agent/run", [llm(60, 100), tool("crm_report", 3500)])),
        concurrency=4,
        noise=[quick_chat(i) for i in range(2)],
        note="crm_report takes 3.5 s within its 4 s timeout (legacy: no budget)",
    ))
    s.append(Scenario(
        "tool_slow (aligned budget)", "tool_slow", "crm_report",
        rep(6, lambda i: Req("/v2/agent/run", [llm(60, 100), tool("crm_report", 3500)])),
        concurrency=3,
        note="budget 2.5 s: the tool gets 0.5 x remaining (~1.15 s), that timeout fires, the service answers 503",
    ))
    return s
