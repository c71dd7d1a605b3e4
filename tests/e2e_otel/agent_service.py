"""The agent service: FastAPI on uvicorn, the official `openai` client for
its models, `httpx` and `requests` for its tools.

It carries no tracing code of its own: `run.py` starts it under
`opentelemetry-instrument` (FastAPI, httpx, requests, the OTLP/HTTP
exporter, all configured by `OTEL_*` environment variables). The one
thing an SRE has to choose in code is which OpenAI instrumentation to
turn on (all three packages register the entry point `openai`, so
auto-instrumentation is told to skip it, `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=openai,langchain`):
`AGENT_LLM_INSTRUMENTATION` = `genai` (opentelemetry-instrumentation-openai-v2),
`openinference` (openinference-instrumentation-openai) or `traceloop`
(Traceloop's opentelemetry-instrumentation-openai) or `langchain` (the
models called through LangChain's `ChatOpenAI`, tools as LangChain tools,
the judge as a named chain step, all instrumented by Traceloop's
opentelemetry-instrumentation-langchain; `langchain-oi`: the same app
under OpenInference's openinference-instrumentation-langchain). Tool calls are
wrapped the way each family's own helper writes them: `execute_tool
<name>` from opentelemetry-util-genai, a TOOL span from
openinference-instrumentation's tracer; under `traceloop` they stay bare
HTTP client spans.

A request body is a plan: `{"steps": [...], "budget_s": 4.0}`; steps are
`llm`, `judge`, `tool`, `parallel`, `pause` (see scenarios.py). A budget
makes the service answer 503 when it runs out, whether or not the client
is still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time

import httpx
import requests
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
import openai
from openai import AsyncOpenAI

VARIANT = os.environ.get("AGENT_LLM_INSTRUMENTATION", "genai")
LANGCHAIN = VARIANT in ("langchain", "langchain-oi")
MODEL_URL = os.environ["AGENT_MODEL_URL"]  # http://127.0.0.1:PORT/v1
LEGACY_MODEL_URL = os.environ.get("AGENT_LEGACY_MODEL_URL", MODEL_URL)
TOOLS = json.loads(os.environ.get("AGENT_TOOLS", "{}"))  # name -> base url
JUDGE_MODEL = os.environ.get("AGENT_JUDGE_MODEL", "qwen2.5-72b-instruct")
WORKERS = int(os.environ.get("AGENT_REPORT_WORKERS", "2"))
# The service's own answer log (what it answered, per X-Request-ID), as its
# application log would show it: the test's ground truth for what the
# client could not see once the gateway had cut.
ANSWER_LOG = os.environ.get("AGENT_ANSWER_LOG")


def _instrument_llm():
    if VARIANT == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif VARIANT == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    elif VARIANT == "traceloop":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    elif VARIANT == "langchain":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor as OpenAIInstrumentor
    elif VARIANT == "langchain-oi":
        from openinference.instrumentation.langchain import LangChainInstrumentor as OpenAIInstrumentor
    else:
        raise SystemExit(f"unknown AGENT_LLM_INSTRUMENTATION {VARIANT!r}")
    OpenAIInstrumentor().instrument()


_instrument_llm()

if VARIANT == "genai":
    from opentelemetry.util.genai.handler import get_telemetry_handler

    _genai = get_telemetry_handler()

    def tool_span(name):
        return _genai.tool(name, tool_type="function")

    def judge_span(name):
        return _genai.invoke_local_agent(agent_name=name)

elif VARIANT == "openinference":
    from openinference.instrumentation import OITracer, TraceConfig
    from opentelemetry import trace

    _oi = OITracer(trace.get_tracer("agent"), config=TraceConfig())

    @contextlib.contextmanager
    def tool_span(name):
        with _oi.start_as_current_span(name, openinference_span_kind="tool") as span:
            span.set_tool(name=name, parameters="{}")
            yield span

    @contextlib.contextmanager
    def judge_span(name):
        with _oi.start_as_current_span(name, openinference_span_kind="evaluator") as span:
            yield span

elif LANGCHAIN:
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    def tool_span(name):
        return contextlib.nullcontext()

    def judge_span(name):
        return contextlib.nullcontext()

else:

    def tool_span(name):
        return contextlib.nullcontext()

    def judge_span(name):
        return contextlib.nullcontext()


app = FastAPI()
MODEL_KEY = os.environ.get("AGENT_MODEL_API_KEY", "sk-local")  # a gateway's key (LiteLLM's master key)
llm_clients = {
    "main": AsyncOpenAI(base_url=MODEL_URL, api_key=MODEL_KEY, max_retries=0),
    "legacy": AsyncOpenAI(base_url=LEGACY_MODEL_URL, api_key="sk-local", max_retries=0),
}
tool_client = httpx.AsyncClient()
workers = asyncio.Semaphore(WORKERS)


class Relay:
    """Where a streamed answer's chunks go (None: not streaming)."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()

    async def put(self, text):
        await self.queue.put(text)


def _prompt(words):
    return " ".join(f"w{i % 97}" for i in range(max(1, int(words))))


async def langchain_llm(step, relay):
    """The model call as a LangChain app makes it: `ChatOpenAI`, its own
    timeout and retries, streamed with `astream`."""
    chat = ChatOpenAI(
        model=step["model"],
        base_url=MODEL_URL if step.get("server", "main") == "main" else LEGACY_MODEL_URL,
        api_key="sk-local",
        timeout=step.get("timeout", 30.0),
        max_retries=int(step.get("retries", 0)),
        max_tokens=int(step.get("max_tokens", 64)),
        default_headers={"X-Sim": json.dumps(step.get("sim", {}))},
        stream_usage=True,
    )
    messages = [HumanMessage(_prompt(step.get("prompt_words", 40)))]
    if step.get("stream"):
        async for chunk in chat.astream(messages):
            if relay and chunk.content:
                await relay.put(chunk.content)
        return
    r = await chat.ainvoke(messages)
    if relay:
        await relay.put(r.content)


async def llm_step(step, relay):
    if LANGCHAIN:
        return await langchain_llm(step, relay)
    client = llm_clients[step.get("server", "main")].with_options(
        timeout=step.get("timeout", 30.0), max_retries=int(step.get("retries", 0))
    )
    kw = dict(
        model=step["model"],
        messages=[{"role": "user", "content": _prompt(step.get("prompt_words", 40))}],
        max_tokens=int(step.get("max_tokens", 64)),
        extra_headers={"X-Sim": json.dumps(step.get("sim", {}))},
    )
    if step.get("stream"):
        stream = await client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
        async for chunk in stream:
            if relay and chunk.choices and chunk.choices[0].delta.content:
                await relay.put(chunk.choices[0].delta.content)
        return
    r = await client.chat.completions.create(**kw)
    if relay:
        await relay.put(r.choices[0].message.content)


async def tool_call(step):
    base = TOOLS[step["name"]]
    params = {"latency_s": step.get("latency_s", 0.05), "status": step.get("status", 200)}
    timeout = step.get("timeout")
    if step.get("client") == "requests":

        def call():
            r = requests.get(f"{base}/run", params=params, timeout=timeout)
            r.raise_for_status()
            return r.json()

        return await asyncio.to_thread(call)
    r = await tool_client.get(f"{base}/run", params=params, timeout=timeout)
    r.raise_for_status()
    return r.json()


async def invoke_tool(step):
    if LANGCHAIN:
        # A LangChain tool named for the API it calls.
        async def call():
            return await tool_call(step)

        lc_tool = StructuredTool.from_function(coroutine=call, name=step["name"], description=f"calls {step['name']}")
        return await lc_tool.ainvoke({})
    with tool_span(step["name"]):
        return await tool_call(step)


async def tool_step(step):
    attempts = int(step.get("attempts", 1))
    for a in range(attempts):
        try:
            return await invoke_tool(step)
        except (httpx.HTTPError, requests.RequestException):
            if a + 1 == attempts:
                if step.get("fallback"):
                    return await run_steps([step["fallback"]], None)
                raise


async def run_steps(steps, relay):
    for step in steps:
        op = step["op"]
        if op == "llm":
            await llm_step(step, relay)
        elif op == "judge":
            name = step.get("name", "answer_judge")
            judged = {**step, "model": step.get("model") or JUDGE_MODEL}
            if LANGCHAIN:
                # a chain step named for the judge, around the model call
                async def judge_chain(_):
                    await llm_step(judged, None)

                await RunnableLambda(judge_chain).with_config(run_name=name).ainvoke({})
            else:
                with judge_span(name):
                    await llm_step(judged, None)
        elif op == "tool":
            await tool_step(step)
        elif op == "parallel":
            await asyncio.gather(*(run_steps([s], None) for s in step["steps"]))
        elif op == "pause":
            await asyncio.sleep(float(step["s"]))
        else:
            raise ValueError(f"unknown step {op}")


async def plan_of(request: Request):
    try:
        plan = await request.json()
    except ValueError:
        return None
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list):
        return None
    return plan


def log_answer(request: Request, status: int):
    if ANSWER_LOG:
        line = json.dumps({"request_id": request.headers.get("x-request-id"), "status": status, "t": time.time()})
        with open(ANSWER_LOG, "a") as f:
            f.write(line + "\n")


async def answer(request: Request, plan):
    budget = plan.get("budget_s")
    try:
        if budget:
            await asyncio.wait_for(run_steps(plan["steps"], None), budget)
        else:
            await run_steps(plan["steps"], None)
        r = JSONResponse({"answer": "done"})
    except asyncio.TimeoutError:
        r = JSONResponse({"error": "the request's time budget ran out"}, status_code=503)
    except (httpx.TimeoutException, requests.Timeout, openai.APITimeoutError) as e:
        r = JSONResponse({"error": f"a dependency timed out: {type(e).__name__}"}, status_code=503)
    except Exception as e:  # noqa: BLE001 - an agent answers 502 for a failed dependency
        r = JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=502)
    log_answer(request, r.status_code)
    return r


@app.post("/v1/agent/run")
async def run(request: Request):
    plan = await plan_of(request)
    if plan is None:
        return JSONResponse({"error": "body must be {\"steps\": [...]}"}, status_code=400)
    return await answer(request, plan)


@app.post("/v1/agent/report")
async def report(request: Request):
    """Report jobs share a small pool of workers: a request waits for one
    before any work begins."""
    plan = await plan_of(request)
    if plan is None:
        return JSONResponse({"error": "body must be {\"steps\": [...]}"}, status_code=400)
    async with workers:
        return await answer(request, plan)


@app.post("/v1/agent/stream")
async def stream(request: Request):
    plan = await plan_of(request)
    if plan is None:
        return JSONResponse({"error": "body must be {\"steps\": [...]}"}, status_code=400)
    relay = Relay()
    log_answer(request, 200)

    async def work():
        try:
            await run_steps(plan["steps"], relay)
        finally:
            await relay.put(None)

    async def events():
        task = asyncio.create_task(work())
        try:
            while True:
                hb = plan.get("heartbeat_s")
                try:
                    item = await asyncio.wait_for(relay.queue.get(), hb) if hb else await relay.queue.get()
                except asyncio.TimeoutError:
                    yield ": heartbeat\n\n"
                    continue
                if item is None:
                    break
                yield f"data: {json.dumps({'delta': item})}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            if not task.done():
                task.cancel()

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/healthz")
async def healthz():
    return {"ok": True}
