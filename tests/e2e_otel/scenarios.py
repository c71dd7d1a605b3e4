"""The scenarios: batches of requests, each with the fault it injects and
the diagnosis that fault must get, decided here by what was injected,
never by overtime.

Time is scaled down ~20×: nginx's read timeout is 3 s. Only faults that
off-the-shelf spans can show are here: instrumentation records no
configured timeout (so no `gateway_timeout_mismatch`) and no DNS/connect
phase (so no `upstream_connect_slow`).

Components: `agent-api` is the service; `tool:NAME` is the tool's name
where the variant's instrumentation names tools (GenAI `execute_tool`,
OpenInference TOOL spans) and the tool server's address where tools are
bare HTTP client spans (Traceloop); `judge` is the judge model of the
variant.
"""

from __future__ import annotations

MAIN = "deepseek-v4-pro"
SMALL = "qwen3-32b"
LEGACY = "llama-3-8b-instruct"
# The judge: under GenAI and OpenInference it runs inside the family's
# agent/evaluator span; Traceloop has none, so its model says it.
JUDGE = {"genai": "qwen2.5-72b-instruct", "openinference": "qwen2.5-72b-instruct", "traceloop": "judge-qwen2.5-72b",
         "langchain": "qwen2.5-72b-instruct", "langchain-oi": "qwen2.5-72b-instruct",
         "vllm": "qwen2.5-72b-instruct", "sglang": "qwen2.5-72b-instruct", "tgi": "qwen2.5-72b-instruct", "litellm": "qwen2.5-72b-instruct"}
TOOLS = ["weather_api", "crm_api", "web_search", "poi_search", "calc"]


def llm(model=MAIN, words=40, max_tokens=48, **kw):
    return {"op": "llm", "model": model, "prompt_words": words, "max_tokens": max_tokens, **kw}


def judge(**kw):
    return {"op": "judge", "name": "answer_judge", "prompt_words": 180, "max_tokens": 40, **kw}


def tool(name, latency_s=0.05, **kw):
    return {"op": "tool", "name": name, "latency_s": latency_s, **kw}


def par(*steps):
    return {"op": "parallel", "steps": list(steps)}


class Req:
    def __init__(self, route, steps=None, *, body=None, stream=False, tp="auto", expect=None, heartbeat_s=None, budget_s=None):
        self.route = route
        self.stream = stream
        self.tp = tp  # auto (3 in 5 send a traceparent), yes, no, unsampled
        self.expect = expect
        if body is None:
            body = {"steps": steps}
            if heartbeat_s:
                body["heartbeat_s"] = heartbeat_s
            if budget_s:
                body["budget_s"] = budget_s
        self.body = body


class Scenario:
    def __init__(self, name, kind, component, reqs, *, concurrency=6, gap_ms=40, noise=(), note="", variants=None):
        self.name = name
        # The variants that run it (None: the four instrumentation variants
        # and langchain-oi); healthy traffic runs everywhere.
        self.variants = variants
        self.kind = kind
        self.component = component
        self.reqs = reqs
        self.noise = list(noise)
        self.concurrency = concurrency
        self.gap_ms = gap_ms
        self.note = note


def rep(n, make):
    return [make(i) for i in range(n)]


def healthy() -> Scenario:
    reqs = []
    for i in range(3):
        reqs.append(Req("/v1/agent/run", [llm(words=60 + i * 10), tool("weather_api", 0.1)]))
        reqs.append(Req("/v1/agent/run", [llm(SMALL, 30, 24), par(tool("calc", 0.08), tool("poi_search", 0.15, client="requests")), llm(words=300, max_tokens=120)]))
        reqs.append(Req("/v1/agent/run", [llm(), judge(model=None)]))
        reqs.append(Req("/v1/agent/run", [llm(LEGACY, server="legacy", max_tokens=60)]))
        reqs.append(Req("/v1/agent/stream", [llm(stream=True, max_tokens=120)], stream=True))
        reqs.append(Req("/v1/agent/report", [llm(max_tokens=80), tool("crm_api", 0.2)]))
    for i in range(2):
        # slow but inside every timeout: 1.8 s of prefill, a 2 s tool
        reqs.append(Req("/v1/agent/run", [llm(words=1200, sim={"prefill_s": 1.2})]))
        reqs.append(Req("/v1/agent/run", [tool("web_search", 2.0, timeout=2.6)]))
        # a long stream kept alive by heartbeats (4.5 s > 3 s, never 3 s silent)
        reqs.append(Req("/v1/agent/stream", [llm(stream=True), tool("web_search", 3.5), llm(stream=True)], stream=True, heartbeat_s=0.5))
        # a tool that failed and had a fallback: the user still gets 200
        reqs.append(Req("/v1/agent/run", [tool("weather_api", 0.05, status=503, fallback=tool("calc", 0.02)), llm()]))
        # sampled out by the client: no spans at all
        reqs.append(Req("/v1/agent/run", [llm(), tool("calc")], tp="unsampled"))
    # 4xx: a body the service rejects
    reqs.append(Req("/v1/agent/run", body={"prompt": "no steps"}))
    return Scenario("healthy", None, None, reqs, concurrency=6, gap_ms=50, note="no failing verdict, no incident")


def failing() -> list[Scenario]:
    s = []
    s.append(Scenario(
        "stream_idle_gap", "stream_idle_gap", "agent-api",
        rep(3, lambda i: Req("/v1/agent/stream", [llm(stream=True), tool("web_search", 4.5), llm(stream=True)], stream=True))
        # the model's own stream stalls: what went silent is the model
        # (docs/diagnosis.md, "Names") — or, where the instrumentation never
        # exports the cut stream's chat span, the model server's address
        + rep(3, lambda i: Req("/v1/agent/stream", [llm(stream=True, sim={"stall_after": 3, "stall_s": 4.5})], stream=True,
                               expect=("stream_idle_gap", "stream:" + MAIN))),
        noise=[Req("/v1/agent/stream", [llm(stream=True), tool("web_search", 3.5), llm(stream=True)], stream=True, heartbeat_s=0.5)],
        note="the service's SSE goes silent (a 4.5 s tool call with no heartbeat, or the model stream stalling 4.5 s): nginx cuts it 3 s after the last byte and logs 200",
    ))
    s.append(Scenario(
        "serial_budget_exhaustion", "serial_budget_exhaustion", "agent-api",
        rep(6, lambda i: Req("/v1/agent/run", [llm(sim={"decode_s": 0.5}), tool("weather_api", 0.5), llm(SMALL, sim={"decode_s": 0.5}), tool("crm_api", 0.5),
                                               llm(sim={"decode_s": 0.5}), tool("calc", 0.5), llm(SMALL, sim={"decode_s": 0.5})])),
        note="seven calls of 0.5 s in series: 3.5 s > 3 s, none holds 40 %",
    ))
    s.append(Scenario(
        "pool_saturation", "pool_saturation", "agent-api",
        rep(9, lambda i: Req("/v1/agent/report", [llm(sim={"decode_s": 0.25}), tool("crm_api", 0.25)])),
        concurrency=9, gap_ms=10,
        note="9 report jobs at once on one worker, 0.5 s of work each: the later ones wait > 2.5 s for the worker before any work",
    ))
    s.append(Scenario(
        "judge_slow", "judge_slow", "judge",
        rep(6, lambda i: Req("/v1/agent/run", [llm(max_tokens=30), judge(model=None, sim={"decode_s": 3.4})])),
        note="the LLM-as-judge call takes 3.4 s",
    ))
    s.append(Scenario(
        "llm_queueing", "llm_queueing", MAIN,
        rep(6, lambda i: Req("/v1/agent/run", [tool("calc", 0.05), llm(sim={"queue_s": 3.3, "prefill_s": 0.1, "decode_s": 0.2})])),
        note="the model server queues the call 3.3 s for a GPU slot (X-LLM-Reason queue_wait)",
    ))
    s.append(Scenario(
        "llm_prefill_slow", "llm_prefill_slow", MAIN,
        rep(6, lambda i: Req("/v1/agent/run", [llm(words=2400, sim={"prefill_s": 3.4, "decode_s": 0.2})])),
        note="2,400-token prompts: 3.4 s of prefill (kv_cache_build)",
    ))
    s.append(Scenario(
        "llm_decode_slow", "llm_decode_slow", SMALL,
        rep(6, lambda i: Req("/v1/agent/run", [llm(SMALL, max_tokens=1400, sim={"decode_s": 3.4})])),
        note="1,400 output tokens: 3.4 s of decode",
    ))
    s.append(Scenario(
        "llm_slow", "llm_slow", LEGACY,
        rep(6, lambda i: Req("/v1/agent/run", [llm(LEGACY, server="legacy", sim={"decode_s": 3.5})])),
        note="a model server that reports no phases, 3.5 s",
    ))
    s.append(Scenario(
        "retry_amplification (model)", "retry_amplification", MAIN,
        rep(5, lambda i: Req("/v1/agent/run", [llm(timeout=1.0, retries=2, sim={"hang_s": 5})])),
        note="the openai client's own retries: 3 attempts of 1 s (read timeout) under one chat span",
    ))
    s.append(Scenario(
        "retry_amplification (tool)", "retry_amplification", "tool:crm_api",
        rep(5, lambda i: Req("/v1/agent/run", [tool("crm_api", 5, timeout=1.0, attempts=3)])),
        note="the agent retries crm_api three times, each cut by its 1 s timeout",
    ))
    s.append(Scenario(
        "tool_no_timeout", "tool_no_timeout", "tool:web_search",
        rep(6, lambda i: Req("/v1/agent/run", [llm(max_tokens=20), tool("web_search", 5)]))
        + [Req("/v1/agent/run", [tool("web_search", 5)], tp="unsampled", expect=("unknown", "—"))],
        note="web_search hangs 5 s and its client has no timeout; one request was sampled out (unknown)",
    ))
    s.append(Scenario(
        "tool_no_timeout (requests)", "tool_no_timeout", "tool:poi_search",
        rep(4, lambda i: Req("/v1/agent/run", [tool("poi_search", 5, client="requests")])),
        note="poi_search over requests, no timeout, hangs 5 s",
    ))
    s.append(Scenario(
        "tool_slow", "tool_slow", "tool:weather_api",
        rep(6, lambda i: Req("/v1/agent/run", [llm(max_tokens=20), tool("weather_api", 5, timeout=2.5)])),
        note="weather_api's 2.5 s timeout fires; the service answers 503 (service_timeout)",
    ))
    s.append(Scenario(
        "semantic_mask (tool_no_timeout)", "tool_no_timeout", "tool:web_search",
        rep(6, lambda i: Req("/v1/agent/run", [tool("web_search", 6)], budget_s=4.0)),
        note="the service's 4 s budget > nginx's 3 s: nginx answers 504 at 3 s, the service 503 at 4 s to a closed connection",
    ))
    return s


# ---------------------------------------------------------------------------
# Engines that say where the time went their own way (run.py's `vllm`,
# `sglang` and `tgi` variants; engine_telemetry.py), and the LiteLLM proxy (`litellm`).

ENGINE_VARIANTS = ("vllm", "sglang", "tgi")
# One model per phase incident: the finished calls a cut call's phases are
# inferred from are the same model's within five minutes (docs/diagnosis.md,
# "Phases of a cut call"), as an incident on one model would be.
Q_MODEL = "llama-3.3-70b"
P_MODEL = "deepseek-r1"
D_MODEL = "mixtral-8x22b"


def _phase(name, kind, model, cut, done, note):
    """Six calls cut by nginx at 3 s: three whose agent's call goes on and
    finishes (the engine's phases arrive after the 504), three whose agent
    gives up with its own 3.2 s timeout while the engine is still working
    (the engine aborts: vLLM writes no span, SGLang no root span, TGI sends
    no headers; the agent's 503 goes to a closed connection, a
    semantic_mask); and finished calls of the same model with the same
    shape, shorter (noise: they succeed). The agent's timeout comes after
    nginx's cut, so every run has the same outcomes."""
    reqs = rep(3, lambda i: Req("/v1/agent/run", [tool("calc", 0.05), cut()]))
    reqs += rep(3, lambda i: Req("/v1/agent/run", [tool("calc", 0.05), {**cut(), "timeout": 3.2}]))
    return Scenario(name, kind, model, reqs, noise=rep(4, lambda i: Req("/v1/agent/run", [done()])),
                    concurrency=10, gap_ms=30, variants=ENGINE_VARIANTS, note=note)


def engine_failing() -> list[Scenario]:
    return [
        _phase("engine llm_queueing", "llm_queueing", Q_MODEL,
               lambda: llm(Q_MODEL, sim={"queue_s": 3.3, "prefill_s": 0.1, "decode_s": 0.2}),
               lambda: llm(Q_MODEL, sim={"queue_s": 1.6, "prefill_s": 0.1, "decode_s": 0.2}),
               "3.3 s waiting for a GPU slot; finished neighbours waited 1.6 s"),
        _phase("engine llm_prefill_slow", "llm_prefill_slow", P_MODEL,
               lambda: llm(P_MODEL, words=2400, sim={"prefill_s": 3.4, "decode_s": 0.2}),
               lambda: llm(P_MODEL, words=1800, sim={"prefill_s": 1.8, "decode_s": 0.2}),
               "2,400-token prompts, 3.4 s of prefill; finished neighbours 1.8 s"),
        _phase("engine llm_decode_slow", "llm_decode_slow", D_MODEL,
               lambda: llm(D_MODEL, max_tokens=1400, sim={"prefill_s": 0.05, "decode_s": 3.4}),
               lambda: llm(D_MODEL, max_tokens=800, sim={"prefill_s": 0.05, "decode_s": 1.8}),
               "1,400 output tokens, 3.4 s of decode; finished neighbours 1.8 s"),
    ]


# The LiteLLM proxy's model groups (litellm_proxy.py writes its config): RETRY
# has a 1 s timeout and 2 retries; FALLBACK_FROM a 1.4 s timeout, no
# retries, and falls back to FALLBACK_TO.
RETRY_MODEL = "deepseek-v4-flash"
FALLBACK_FROM = "gpt-oss-120b"
FALLBACK_TO = SMALL


def litellm_failing() -> list[Scenario]:
    only = ("litellm",)
    return [
        Scenario("litellm retries", "retry_amplification", RETRY_MODEL,
                 rep(5, lambda i: Req("/v1/agent/run", [llm(RETRY_MODEL, sim={"hang_s": 5})])),
                 variants=only, note="the model hangs; LiteLLM's 1 s timeout fires and it retries twice: 3 s + backoff > nginx's 3 s"),
        Scenario("litellm fallback", "retry_amplification", FALLBACK_FROM,
                 rep(5, lambda i: Req("/v1/agent/run", [llm(FALLBACK_FROM, sim={"models": {
                     FALLBACK_FROM: {"hang_s": 5}, FALLBACK_TO: {"prefill_s": 0.1, "decode_s": 2.5}}})])),
                 variants=only, note="gpt-oss-120b hangs past LiteLLM's 1.4 s timeout; the fallback to qwen3-32b needs 2.6 s more: nginx cuts at 3 s"),
        Scenario("litellm llm_decode_slow", "llm_decode_slow", D_MODEL,
                 rep(4, lambda i: Req("/v1/agent/run", [llm(D_MODEL, max_tokens=1400, sim={"prefill_s": 0.05, "decode_s": 3.4})])),
                 noise=rep(3, lambda i: Req("/v1/agent/run", [llm(D_MODEL, max_tokens=800, sim={"prefill_s": 0.05, "decode_s": 1.8})])),
                 variants=only, note="a vLLM-style server behind LiteLLM decodes 3.4 s; its spans arrive in traces of their own"),
    ]
