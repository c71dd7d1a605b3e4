"""A small OpenAI-compatible model server (stdlib only, not instrumented:
it stands for a vendor's inference server).

`POST /v1/chat/completions`, non-streaming or SSE (`"stream": true`, with
the final `usage` chunk when `stream_options.include_usage`), answers with
a `usage` block and, unless started with `reason_headers=False`, the
phases it spent in `X-LLM-Reason` (`queue_wait=…s,kv_cache_build=…s,
decode_loop=…s,io_wait=…s`) and its total in `X-LLM-Duration`.

How long each phase takes is what a real server would see: a FIFO queue
on a fixed number of GPU slots per model, a prefill that grows with the
prompt, a decode of `max_tokens` at a fixed rate. A test steers the
extremes with the request header `X-Sim` (JSON, never captured by the
instrumentation): `queue_s`, `prefill_s`, `decode_s` (seconds, overriding
the model), `stall_after` / `stall_s` (a stream that stops after N chunks
for that long), `hang_s` (no answer at all for that long), `status`
(answer with that HTTP status instead). `models` holds per-model overrides of these, for a gateway
that sends one request on to several models.

`flavor` makes it speak as a real engine does instead of `X-LLM-Reason`
(engine_telemetry.py, each citing the source it follows): `vllm` (an
OTLP `llm_request` SERVER span per *finished* request, continuing the
caller's `traceparent`; `tracer` is required), `sglang` (its request
trace, `tracer` required) or `tgi` (TGI's `x-*-time`
response headers, ms). Like those engines, a flavoured server notices a
client that went away and aborts the request: vLLM then writes no span,
SGLang no root span, TGI sends no headers.
"""

from __future__ import annotations

import json
import select
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Seconds per prompt word of prefill, and decode tokens per second.
PREFILL_S_PER_TOKEN = 0.0004
DECODE_TOKENS_PER_S = 400.0


class _Slots:
    """A FIFO wait for one of `n` GPU slots."""

    def __init__(self, n):
        self.sem = threading.Semaphore(n)

    def acquire(self):
        t0 = time.monotonic()
        self.sem.acquire()
        return time.monotonic() - t0

    def release(self):
        self.sem.release()


def _engine():
    import importlib.util
    import os
    import sys

    if "e2e_otel_engine_telemetry" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "e2e_otel_engine_telemetry", os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_telemetry.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["e2e_otel_engine_telemetry"]


class ClientGone(Exception):
    """The client closed its connection while the request was being served."""


class ModelServer:
    def __init__(self, *, reason_headers=True, slots=8, flavor=None, tracer=None):
        self.flavor = flavor
        self.tracer = tracer
        self.aborted = 0
        self.reason_headers = reason_headers and flavor is None
        if flavor == "vllm" and tracer is None:
            raise ValueError("a vLLM-flavoured model server needs a tracer")
        self.slots = {}
        self.n_slots = slots
        self.lock = threading.Lock()
        self.active = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                with server.lock:
                    server.active += 1
                try:
                    server.handle(self)
                except (BrokenPipeError, ConnectionResetError, ClientGone) as e:
                    # the client gave up (its timeout, or the stream was cut)
                    tl = getattr(e, "timeline", None)
                    if server.flavor == "sglang" and tl is not None:
                        _engine().sglang_spans(server.tracer, self.headers, tl, time.time(), tl.model, aborted=True)
                finally:
                    with server.lock:
                        server.active -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def slots_for(self, model):
        with self.lock:
            if model not in self.slots:
                self.slots[model] = _Slots(self.n_slots)
            return self.slots[model]

    def wait(self, h, seconds):
        """Sleeps; a flavoured (engine) server watches the connection
        meanwhile and aborts when the client has gone (EOF on its socket),
        as vLLM and TGI cancel a request whose client disconnected."""
        if seconds <= 0:
            return
        if self.flavor is None:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([h.connection], [], [], min(left, 0.05))
            if r:
                try:
                    import socket

                    gone = h.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    with self.lock:
                        self.aborted += 1
                    raise ClientGone()
                time.sleep(min(left, 0.05))

    def handle(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        try:
            body = json.loads(h.rfile.read(n) or b"{}")
        except ValueError:
            body = {}
        sim = {}
        try:
            sim = json.loads(h.headers.get("X-Sim") or "{}")
        except ValueError:
            pass
        if h.path.rstrip("/") != "/v1/chat/completions":
            return self.reply(h, 404, {"error": {"message": "no such route"}}, {})
        model = body.get("model", "unknown")
        # Per-model overrides (a gateway sends one request on to several
        # models: its fallbacks): {"models": {"<model>": {...}}}.
        sim = {**sim, **(sim.pop("models", None) or {}).get(model, {})}
        arrival = time.time()
        if sim.get("hang_s"):
            self.wait(h, float(sim["hang_s"]))
        if sim.get("status"):
            return self.reply(h, int(sim["status"]), {"error": {"message": "overloaded", "type": "server_error"}}, {})
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        tin = max(1, len(prompt.split()))
        tout = int(body.get("max_tokens") or body.get("max_completion_tokens") or 64)
        slots = self.slots_for(model)
        t_start = time.monotonic()
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        tl = None
        if self.flavor:
            tl = _engine().Timeline(arrival=arrival, queued=time.time(), prompt_tokens=tin, generated_tokens=tout,
                                    max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
                                    temperature=body.get("temperature"), request_id=cid, model=model)
        waited = slots.acquire()
        try:
            self._serve(h, body, sim, model, prompt, tin, tout, t_start, cid, tl, waited)
        except (BrokenPipeError, ConnectionResetError, ClientGone) as e:
            e.timeline = tl
            raise
        finally:
            slots.release()

    def _serve(self, h, body, sim, model, prompt, tin, tout, t_start, cid, tl, waited):
        if sim.get("queue_s"):
            self.wait(h, float(sim["queue_s"]) - waited)
        queue = time.monotonic() - t_start
        prefill = float(sim.get("prefill_s", tin * PREFILL_S_PER_TOKEN))
        if tl:
            tl.scheduled = time.time()
        self.wait(h, prefill)
        if tl:
            tl.first_token = time.time()
        decode = float(sim.get("decode_s", tout / DECODE_TOKENS_PER_S))
        if body.get("stream"):
            self.stream(h, body, sim, model, tin, tout, queue, prefill, decode, cid)
            if tl:
                tl.last_token = time.time()
                self.finished(h, tl, None)
        else:
            self.wait(h, decode)
            total = time.monotonic() - t_start
            headers = self.reason(queue, prefill, decode, 0.001, total)
            if tl:
                tl.last_token = time.time()
                headers = self.finished(h, tl, len(prompt))
            self.reply(h, 200, self.completion(model, tin, tout, cid), headers)

    def finished(self, h, tl, prompt_chars):
        """What the engine says of a finished request: vLLM's span, or
        TGI's headers for a non-streamed answer."""
        eng = _engine()
        end = time.time()
        if self.flavor == "vllm":
            eng.vllm_span(self.tracer, h.headers, tl, end)
            return {}
        if self.flavor == "sglang":
            eng.sglang_spans(self.tracer, h.headers, tl, end, tl.model)
            return {}
        if self.flavor == "tgi" and prompt_chars is not None:
            return eng.tgi_headers(tl, end, prompt_chars)
        return {}

    def reason(self, queue, prefill, decode, io, total):
        if not self.reason_headers:
            return {}
        return {
            "X-LLM-Reason": f"queue_wait={queue:.3f}s,kv_cache_build={prefill:.3f}s,decode_loop={decode:.3f}s,io_wait={io:.3f}s",
            "X-LLM-Duration": f"{total:.3f}s",
        }

    @staticmethod
    def completion(model, tin, tout, cid):
        return {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * min(tout, 20)}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
        }

    @staticmethod
    def reply(h, status, doc, headers):
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def stream(self, h, body, sim, model, tin, tout, queue, prefill, decode, cid):
        # The phases known when the headers go out: queue and prefill; the
        # decode is the one planned.
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        for k, v in self.reason(queue, prefill, decode, 0.001, queue + prefill + decode).items():
            h.send_header(k, v)
        h.end_headers()
        chunks = 8
        stall_after = sim.get("stall_after")

        def send(doc):
            data = f"data: {doc}\n\n".encode() if isinstance(doc, str) else f"data: {json.dumps(doc)}\n\n".encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        for i in range(chunks):
            if stall_after is not None and i == int(stall_after):
                self.wait(h, float(sim.get("stall_s", 0)))
            self.wait(h, decode / chunks)
            send({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                  "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]})
        send({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
              "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            send({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model, "choices": [],
                  "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout}})
        send("[DONE]")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
