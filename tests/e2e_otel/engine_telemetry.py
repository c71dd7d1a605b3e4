"""What real serving engines say about a request's phases, written exactly
as their source writes it (model_server.py's `flavor`):

- **vLLM** (`--otlp-traces-endpoint`): when a request *finishes*, one
  SERVER span `llm_request`, started at the request's arrival and
  continuing the caller's `traceparent`, with `gen_ai.latency.*` in
  seconds. Followed: vllm-project/vllm, vllm/tracing.py (SpanAttributes,
  extract_trace_context; commit 03b8a674ec7e654ab285df6f013a53a24381f941)
  and vllm/v1/engine/output_processor.py `OutputProcessor.do_tracing`
  (commit d07822605346f767b672503c9aae85aa23ef2d82): queued =
  scheduled_ts − queued_ts, prefill = first_token_ts − scheduled_ts,
  decode = last_token_ts − first_token_ts, inference = last_token_ts −
  scheduled_ts, e2e = now − arrival, ttft = first_token_ts − arrival;
  `gen_ai.response.finish_reasons` a JSON list; top_p / max_tokens /
  temperature / n only when the request set them. `process_outputs`
  traces only requests with a finish reason; an abort (the client went
  away) writes none — at that commit `abort_requests` calls `do_tracing`
  without the iteration stats it asserts, so no span leaves the engine.
- **SGLang** (`--enable-trace`, `--trace-module request`): per request a
  root span ` Req <rid[:8]>` (INTERNAL, the unified role's empty prefix
  kept) continuing the caller's `traceparent`, a thread span per process
  (`Scheduler [TP 0] (host:<8> | pid:<n>)`) and the stage slices under it
  (`request_process`, `prefill_waiting`, `prefill_forward`,
  `decode_loop`). The root gets the `gen_ai.*` attributes only at
  `trace_req_finish`; SGLang's gen_ai latency has **no time_in_queue** and
  its prefill runs from the dispatch to the first token (so it includes
  the wait): the queue is only the `prefill_waiting` slice. An aborted
  request's root span never ends (so is never exported); its thread span
  is closed by `abort()` with status ERROR and the abort reason (our
  reading of `TraceReqContext.abort` / `__del__`; the tokenizer manager's
  abort path was not traced through). Followed:
  sgl-project/sglang python/sglang/srt/observability/trace.py
  (`TraceReqContext.trace_req_start/finish`, `trace_slice_*`, `abort`;
  commit 02a580880ee625d1d4a8c317ad913dcc0506cf79),
  python/sglang/srt/managers/tokenizer_manager_components/request_tracing.py
  (`make_span_attrs`; commit 2d396b526f4fd2749397c0bc3f966e79f3f4ab71),
  `APIServerReqTimeStats.convert_to_gen_ai_span_attrs` and the stage names
  of python/sglang/srt/tracing/trace_metric_wrapper.py (`RequestStage`).
- **TGI**: response headers of a finished non-streaming request, in
  milliseconds (integers), from huggingface/text-generation-inference
  router/src/server.rs `generate_internal` (commit
  d957e32601a99f9ec458ff081dc3b4c6659da8a4): x-total-time,
  x-validation-time (queued − start), x-queue-time (batch start − queued),
  x-inference-time (now − batch start), x-time-per-token (inference /
  generated tokens), x-prompt-tokens, x-generated-tokens, plus
  x-compute-type, x-compute-time (seconds), x-compute-characters.
  A streamed answer gets none of the timing headers.

The OpenTelemetry SDK is the real one (the agent's venv): run.py puts it
on the path before a vLLM- or SGLang-flavoured server starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


@dataclass
class Timeline:
    """One request's engine timestamps (time.time() seconds)."""

    arrival: float
    queued: float
    scheduled: float = 0.0
    first_token: float = 0.0
    last_token: float = 0.0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    max_tokens: int | None = None
    temperature: float | None = None
    request_id: str = ""
    finish_reason: str = "stop"
    model: str = ""


def make_tracer(service_name, endpoint, scope="vllm.v1.engine.output_processor"):
    """A tracer as vLLM's `init_tracer` builds one: a TracerProvider with a
    BatchSpanProcessor and the OTLP exporter (http/protobuf here), with the
    service named as an SRE names it (`OTEL_SERVICE_NAME`)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=300))
    return provider, provider.get_tracer(scope)


def _context(headers):
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {h: headers[h] for h in ("traceparent", "tracestate") if headers.get(h)}
    return TraceContextTextMapPropagator().extract(carrier)


def vllm_span(tracer, headers, t: Timeline, end: float):
    """vLLM's `do_tracing` for a finished request."""
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.latency.time_to_first_token": t.first_token - t.arrival,
        "gen_ai.latency.e2e": end - t.arrival,
        "gen_ai.latency.time_in_queue": t.scheduled - t.queued,
        "gen_ai.usage.prompt_tokens": t.prompt_tokens,
        "gen_ai.usage.completion_tokens": t.generated_tokens,
        "gen_ai.latency.time_in_model_prefill": t.first_token - t.scheduled,
        "gen_ai.latency.time_in_model_decode": t.last_token - t.first_token,
        "gen_ai.latency.time_in_model_inference": t.last_token - t.scheduled,
        "gen_ai.request.id": t.request_id,
        "gen_ai.response.finish_reasons": json.dumps([t.finish_reason]),
    }
    if t.max_tokens:
        attributes["gen_ai.request.max_tokens"] = t.max_tokens
    if t.temperature:
        attributes["gen_ai.request.temperature"] = t.temperature
    span = tracer.start_span("llm_request", context=_context(headers), kind=SpanKind.SERVER,
                             attributes=attributes, start_time=int(t.arrival * 1e9))
    span.end(end_time=int(end * 1e9))


def sglang_spans(tracer, headers, t: Timeline, end: float, model, aborted=False):
    """SGLang's request trace (see the module header); `aborted`: the
    client went away at `end`."""
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode

    def ns(s):
        return int(s * 1e9)

    rid = t.request_id.split("-")[-1]
    root = tracer.start_span(f" Req {rid[:8]}", context=_context(headers), start_time=ns(t.arrival),
                             attributes={"rid": rid, "module": "sglang::request"})
    thread = tracer.start_span(f"Scheduler [TP 0] (host:{'0' * 8} | pid:{os.getpid()})",
                               context=otel_trace.set_span_in_context(root), start_time=ns(t.arrival),
                               attributes={"tp_rank": 0, "host_id": "0" * 32, "pid": os.getpid(), "thread_label": "Scheduler"})
    under = otel_trace.set_span_in_context(thread)
    stages = [("request_process", t.arrival, t.queued), ("prefill_waiting", t.queued, t.scheduled),
              ("prefill_forward", t.scheduled, t.first_token), ("decode_loop", t.first_token, t.last_token)]
    for name, a, b in stages:
        if not a or a >= end:
            break
        s = tracer.start_span(name, context=under, start_time=ns(a))
        s.end(end_time=ns(min(b, end) if b else end))
    if aborted:
        thread.set_status(Status(StatusCode.ERROR))
        thread.set_attributes({"reason": "have unclosed span, auto closed"})
        thread.end(end_time=ns(end))
        return  # the root span never ends: it is never exported
    thread.end(end_time=ns(end))
    attrs = {
        "gen_ai.usage.completion_tokens": t.generated_tokens,
        "gen_ai.usage.prompt_tokens": t.prompt_tokens,
        "gen_ai.usage.cached_tokens": 0,
        "gen_ai.request.id": rid,
        "gen_ai.response.model": model,
        "gen_ai.response.finish_reasons": json.dumps([t.finish_reason]),
        "gen_ai.latency.time_to_first_token": t.first_token - t.arrival,
        "gen_ai.latency.e2e": end - t.arrival,
        "gen_ai.latency.time_in_model_decode": end - t.first_token,
        "gen_ai.latency.time_in_model_inference": end - t.queued,
        "gen_ai.latency.time_in_model_prefill": t.first_token - t.queued,
    }
    if t.max_tokens:
        attrs["gen_ai.request.max_tokens"] = t.max_tokens
    if t.temperature:
        attrs["gen_ai.request.temperature"] = t.temperature
    root.set_attributes(attrs)
    root.end(end_time=ns(end))


def tgi_headers(t: Timeline, end: float, prompt_chars: int):
    """TGI's `generate_internal` response headers (ms)."""
    total = end - t.arrival
    validation = t.queued - t.arrival
    queue = t.scheduled - t.queued
    inference = end - t.scheduled
    per_token = inference / max(1, t.generated_tokens)

    def ms(s):
        return str(int(s * 1000))

    return {
        "x-compute-type": "gpu+optimized",
        "x-compute-time": repr(total),
        "x-compute-characters": str(prompt_chars),
        "x-total-time": ms(total),
        "x-validation-time": ms(validation),
        "x-queue-time": ms(queue),
        "x-inference-time": ms(inference),
        "x-time-per-token": ms(per_token),
        "x-prompt-tokens": str(t.prompt_tokens),
        "x-generated-tokens": str(t.generated_tokens),
    }
