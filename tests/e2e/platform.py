"""A small agent platform on 127.0.0.1, instrumented with the real
OpenTelemetry Python SDK, for overtime's end-to-end accuracy harness.

Time is scaled down about 20x: nginx's `proxy_read_timeout 3s` stands for
60 s, a 2.6 s prefill for 52 s. Every service is a stdlib HTTP server in a
thread of this process, with its own TracerProvider (Resource
`service.name`), W3C `traceparent` propagation over real HTTP
(opentelemetry.propagate inject/extract) and a BatchSpanProcessor whose
exporter writes OTLP JSON lines exactly as the OpenTelemetry Collector's
file exporter does (one ExportTraceServiceRequest per line, hex ids).

Services (one `Platform` instance = one deployment):

- agent-api: the agent service behind nginx. Routes pick a timeout profile
  (legacy: no budget; aligned: 2.5 s budget < the 3 s gateway; misaligned:
  6 s budget > the gateway), `/v1/agent/stream` answers with SSE, and
  `/v1/agent/report` / `/v1/agent/export` run on a 2-worker pool.
- model-server: deepseek-v4-pro and qwen2.5-72b-instruct on FIFO "GPU
  slots"; queue wait, prefill (quadratic in input tokens) and decode (tokens
  / rate) are really slept and reported in `X-LLM-Reason` / `X-LLM-Duration`;
  streams SSE chunks.
- legacy-llm: llama-3-8b-instruct, no `X-LLM-Reason`.
- tool-gateway: calls third-party APIs with its own per-tool timeouts; the
  "DNS" of an external host is a sleep before connect, recorded as a `dns`
  span event (and `connect`), as an HTTP client hook would.
- memory-store: session memory / caches.
- external APIs (weather, maps, search, crm, browse, calc, poi): third
  party, not instrumented (no spans), latency and status per request.

What each request does comes from its JSON body (`steps`), which is how the
harness injects a fault into one request without touching the others; the
spans only show what a real platform would show.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import socket
import threading
import time
import urllib.parse
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from google.protobuf.json_format import MessageToDict
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode

# ---------------------------------------------------------------------------
# Export: OTLP JSON lines as the Collector's file exporter writes them.


def _hex(v: str) -> str:
    return base64.b64decode(v).hex() if v else v


def otlp_json_line(spans) -> str:
    """One ExportTraceServiceRequest as the Collector's file exporter writes
    it: protobuf JSON mapping (camelCase, int64 as strings, enums as ints)
    with trace/span ids in lowercase hex instead of base64."""
    d = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for rs in d.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in sp:
                        sp[k] = _hex(sp[k])
                for link in sp.get("links", []):
                    for k in ("traceId", "spanId"):
                        if k in link:
                            link[k] = _hex(link[k])
    return json.dumps(d, separators=(",", ":"))


class CollectorFileExporter(SpanExporter):
    """Appends one OTLP JSON line per export to a shared file. Every
    `duplicate_every`-th batch is written twice, as after an SDK retry whose
    first try the Collector had in fact received."""

    def __init__(self, sink: "TelemetrySink", duplicate_every: int = 0):
        self.sink = sink
        self.duplicate_every = duplicate_every
        self.n = 0

    def export(self, spans):
        line = otlp_json_line(spans)
        self.n += 1
        times = 2 if self.duplicate_every and self.n % self.duplicate_every == 0 else 1
        self.sink.write(line, times)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class TelemetrySink:
    """The Collector's file: one writer, many exporters."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.f = open(path, "a", encoding="utf-8")
        self.providers: list[TracerProvider] = []

    def write(self, line: str, times: int = 1):
        with self.lock:
            for _ in range(times):
                self.f.write(line + "\n")
            self.f.flush()

    def tracer(self, service: str, duplicate_every: int = 0) -> trace.Tracer:
        provider = TracerProvider(
            resource=Resource.create(
                {
                    "service.name": service,
                    "service.namespace": "agent-platform",
                    "deployment.environment.name": "e2e",
                }
            )
        )
        provider.add_span_processor(
            BatchSpanProcessor(
                CollectorFileExporter(self, duplicate_every),
                schedule_delay_millis=400,
                max_export_batch_size=256,
            )
        )
        self.providers.append(provider)
        return provider.get_tracer(f"agent_platform.{service}", "0.3.1")

    def flush(self):
        for p in self.providers:
            p.force_flush(10_000)
        with self.lock:
            self.f.flush()

    def size(self) -> int:
        with self.lock:
            self.f.flush()
            return self.f.tell()

    def close(self):
        for p in self.providers:
            p.shutdown()
        with self.lock:
            self.f.close()


# ---------------------------------------------------------------------------
# HTTP plumbing.


class CallTimeout(Exception):
    """A client-side timeout fired."""


class CallFailed(Exception):
    def __init__(self, status: int, msg: str = ""):
        super().__init__(msg or f"HTTP {status}")
        self.status = status


class ToolError(Exception):
    """A tool answered 5xx (after the retries)."""


class BudgetExhausted(Exception):
    pass


def _err_type(e: BaseException) -> str:
    return type(e).__name__


def traced_http(
    tracer,
    *,
    method: str,
    host: str,
    port: int,
    path: str,
    body=None,
    timeout_s: float | None = None,
    dns_s: float = 0.0,
    connect_s: float = 0.0,
    phase_events: bool = False,
    capture: tuple[str, ...] = (),
    on_line=None,
    headers: dict | None = None,
    attrs: dict | None = None,
):
    """An HTTP client call with a CLIENT span as an httpx/requests
    instrumentation writes it (`POST`, http.request.method, server.address,
    url.full, http.response.status_code, captured response headers as
    string arrays, error.type). `timeout_s` is a total deadline (DNS and
    connect included); `dns_s`/`connect_s` simulate a slow resolver and a
    slow handshake; with `phase_events` the span gets `dns` and `connect`
    events carrying their duration. `on_line` streams the body line by line.
    Returns (status, headers, body bytes)."""
    url = f"http://{host}:{port}{path}"
    a = {
        "http.request.method": method,
        "server.address": host,
        "server.port": port,
        "url.full": url,
    }
    a.update(attrs or {})
    span = tracer.start_span(method, kind=SpanKind.CLIENT, attributes=a)
    ctx = trace.set_span_in_context(span)
    t0 = time.monotonic()
    deadline = t0 + timeout_s if timeout_s else None

    def remaining():
        if deadline is None:
            return None
        r = deadline - time.monotonic()
        if r <= 0:
            raise TimeoutError("timed out")
        return r

    conn = None
    try:
        if dns_s or phase_events:
            d = dns_s if deadline is None else min(dns_s, max(0.0, deadline - time.monotonic()))
            time.sleep(d)
            if phase_events:
                span.add_event("dns", {"duration_ms": round(d * 1000, 3), "dns.question.name": host})
            if d < dns_s:
                raise TimeoutError(f"timed out resolving {host}")
        c0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=remaining())
        if connect_s:
            time.sleep(min(connect_s, remaining()))
        conn.connect()
        if phase_events:
            span.add_event("connect", {"duration_ms": round((time.monotonic() - c0) * 1000, 3)})
        h = {"Host": f"{host}:{port}", "User-Agent": "agent-platform/0.3.1 (python-http.client)"}
        h.update(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        inject(h, context=ctx)
        sock = conn.sock  # http.client drops conn.sock once a closing response is read
        conn.request(method, path, body=data, headers=h)
        sock.settimeout(remaining())
        resp = conn.getresponse()
        span.set_attribute("http.response.status_code", resp.status)
        for name in capture:
            v = resp.getheader(name)
            if v is not None:
                span.set_attribute(f"http.response.header.{name}", [v])
        if on_line is not None:
            while True:
                sock.settimeout(remaining())
                line = resp.readline()
                if not line:
                    break
                on_line(line.decode().rstrip("\r\n"))
            payload = b""
        else:
            payload = resp.read()
        if resp.status >= 500:
            span.set_attribute("error.type", str(resp.status))
            span.set_status(Status(StatusCode.ERROR))
        return resp.status, dict(resp.getheaders()), payload
    except (TimeoutError, socket.timeout) as e:
        span.record_exception(e)
        span.set_attribute("error.type", "TimeoutError")
        span.set_status(Status(StatusCode.ERROR, str(e) or "timed out"))
        raise CallTimeout(str(e)) from e
    except OSError as e:
        span.record_exception(e)
        span.set_attribute("error.type", _err_type(e))
        span.set_status(Status(StatusCode.ERROR, str(e)))
        raise
    finally:
        if conn is not None:
            conn.close()
        span.end()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


class Service:
    """A stdlib HTTP server on 127.0.0.1 with a server span per request
    (opentelemetry-instrumentation-wsgi style)."""

    name = "service"
    instrumented = True

    def __init__(self, sink: TelemetrySink | None, duplicate_every: int = 0):
        self.tracer = sink.tracer(self.name, duplicate_every) if (sink and self.instrumented) else None
        self.active = 0
        self.lock = threading.Lock()
        svc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = f"{self.name}/0.3"

            def log_message(self, *a):
                pass

            def do_GET(self):
                svc._dispatch(self, "GET")

            def do_POST(self):
                svc._dispatch(self, "POST")

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name=self.name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _dispatch(self, h, method):
        with self.lock:
            self.active += 1
        try:
            length = int(h.headers.get("Content-Length") or 0)
            raw = h.rfile.read(length) if length else b""
            path = h.path.split("?")[0]
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)
            if not self.instrumented:
                self.handle(h, method, path, query, raw, None)
                return
            ctx = extract({k.lower(): v for k, v in h.headers.items()})
            attrs = {
                "http.request.method": method,
                "url.path": path,
                "url.scheme": "http",
                "http.route": self.route_of(path),
                "server.address": self.name,
                "server.port": self.port,
                "client.address": h.client_address[0],
                "network.protocol.version": "1.0",
            }
            ua = h.headers.get("User-Agent")
            if ua:
                attrs["user_agent.original"] = ua
            rid = h.headers.get("X-Request-ID")
            if rid:
                attrs["http.request.header.x-request-id"] = [rid]
            span = self.tracer.start_span(
                f"{method} {self.route_of(path)}", context=ctx, kind=SpanKind.SERVER, attributes=attrs
            )
            token = otel_context.attach(trace.set_span_in_context(span, ctx))
            try:
                self.handle(h, method, path, query, raw, span)
            except Exception as e:  # noqa: BLE001 - a server never dies of a request
                span.record_exception(e)
                span.set_attribute("error.type", _err_type(e))
                span.set_status(Status(StatusCode.ERROR, str(e)))
                try:
                    self.respond(h, span, 500, {"error": str(e)})
                except OSError:
                    pass
            finally:
                otel_context.detach(token)
                span.end()
        finally:
            with self.lock:
                self.active -= 1

    def route_of(self, path):
        return path

    def respond(self, h, span, status, obj, headers=None):
        data = json.dumps(obj).encode()
        if span is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            for k, v in (headers or {}).items():
                if k.lower().startswith("x-llm"):
                    span.set_attribute(f"http.response.header.{k.lower()}", [v])
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except OSError as e:
            # The caller went away (nginx gave up, a client timed out).
            if span is not None:
                span.record_exception(e)
                span.set_attribute("error.type", _err_type(e))
                span.set_status(Status(StatusCode.ERROR, "client went away"))

    def handle(self, h, method, path, query, raw, span):
        raise NotImplementedError


class FifoSlots:
    """A FIFO semaphore: the GPU slots of one model."""

    def __init__(self, n: int):
        self.n = n
        self.cv = threading.Condition()
        self.queue: deque = deque()

    def acquire(self):
        me = object()
        with self.cv:
            self.queue.append(me)
            while not (self.n > 0 and self.queue[0] is me):
                self.cv.wait(0.05)
            self.queue.popleft()
            self.n -= 1
            self.cv.notify_all()

    def release(self):
        with self.cv:
            self.n += 1
            self.cv.notify_all()


# ---------------------------------------------------------------------------
# Model servers.

MODELS = {
    # prefill = base + coef * input_tokens^2 (0.3 s -> 2.1 s for 100 -> 300
    # tokens in production, /20); decode at `tps` tokens/s.
    "deepseek-v4-pro": {"slots": 6, "prefill_base": 0.004, "prefill_coef": 1.17e-6, "tps": 560.0},
    "qwen2.5-72b-instruct": {"slots": 4, "prefill_base": 0.004, "prefill_coef": 1.0e-6, "tps": 500.0},
}


def _count_tokens(messages) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages)


class ModelServer(Service):
    name = "model-server"

    def __init__(self, sink, **kw):
        super().__init__(sink, **kw)
        self.slots = {m: FifoSlots(c["slots"]) for m, c in MODELS.items()}

    def route_of(self, path):
        return "/v1/chat/completions"

    def handle(self, h, method, path, query, raw, span):
        req = json.loads(raw or b"{}")
        model = req.get("model", "deepseek-v4-pro")
        cfg = MODELS.get(model)
        if cfg is None:
            return self.respond(h, span, 404, {"error": f"model {model} not served"})
        sim = req.get("sim", {})
        tin = _count_tokens(req.get("messages", []))
        max_tokens = int(req.get("max_tokens") or 1024)
        tout = min(int(sim.get("output_tokens", 120)), max_tokens)
        slow = float(sim.get("slow", 1.0))
        span.set_attribute("gen_ai.request.model", model)
        span.set_attribute("gen_ai.usage.input_tokens", tin)
        t0 = time.monotonic()
        self.slots[model].acquire()
        try:
            queue = time.monotonic() - t0
            prefill = (cfg["prefill_base"] + cfg["prefill_coef"] * tin * tin) * float(sim.get("prefill_slow", 1.0))
            time.sleep(prefill)
            decode = tout / cfg["tps"] * slow
            if req.get("stream"):
                return self._stream(h, span, model, queue, prefill, decode, tout)
            time.sleep(decode)
            io = 0.004
            time.sleep(io)
        finally:
            if not req.get("stream"):
                self.slots[model].release()
        total = time.monotonic() - t0
        reason = f"queue_wait={queue:.3f}s,kv_cache_build={prefill:.3f}s,decode_loop={decode:.3f}s,io_wait={io:.3f}s"
        span.set_attribute("gen_ai.usage.output_tokens", tout)
        self.respond(
            h,
            span,
            200,
            {
                "model": model,
                "choices": [{"message": {"role": "assistant", "content": "ok " * min(tout, 20)}}],
                "usage": {"prompt_tokens": tin, "completion_tokens": tout},
            },
            headers={"X-LLM-Reason": reason, "X-LLM-Duration": f"{total:.3f}s"},
        )

    def _stream(self, h, span, model, queue, prefill, decode, tout):
        """SSE: headers once the first token is ready (queue and prefill
        known), then a chunk every ~1/10 of the decode."""
        try:
            reason = f"queue_wait={queue:.3f}s,kv_cache_build={prefill:.3f}s"
            span.set_attribute("http.response.status_code", 200)
            span.set_attribute("http.response.header.x-llm-reason", [reason])
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("X-LLM-Reason", reason)
            h.end_headers()
            n = 10
            for i in range(n):
                time.sleep(decode / n)
                h.wfile.write(f"data: {json.dumps({'i': i, 'delta': 'tok ' * (tout // n)})}\n\n".encode())
            h.wfile.write(b"data: [DONE]\n\n")
            span.set_attribute("gen_ai.usage.output_tokens", tout)
        except OSError as e:
            span.record_exception(e)
            span.set_attribute("error.type", _err_type(e))
            span.set_status(Status(StatusCode.ERROR))
        finally:
            self.slots[model].release()


class LegacyLLM(Service):
    """An older model server: no phases, no X-LLM-Reason."""

    name = "legacy-llm"

    def route_of(self, path):
        return "/v1/chat/completions"

    def handle(self, h, method, path, query, raw, span):
        req = json.loads(raw or b"{}")
        sim = req.get("sim", {})
        tin = _count_tokens(req.get("messages", []))
        tout = int(sim.get("output_tokens", 80))
        time.sleep(float(sim.get("latency_ms", 300)) / 1000)
        self.respond(
            h,
            span,
            200,
            {"model": req.get("model"), "usage": {"prompt_tokens": tin, "completion_tokens": tout}},
        )


# ---------------------------------------------------------------------------
# Tools.

# host alias, the tool gateway's own client timeout (ms; None: no timeout)
TOOL_GATEWAY = {
    "weather_api": ("api.weather.example", 1250),
    "maps_api": ("maps.example", 3000),
    "search_api": ("search.example", None),
    "crm_api": ("crm.internal.example", 1000),
    "crm_report": ("reports.crm.internal.example", 4000),
    "web_browse": ("browse.example", 8000),
    "calc": ("calc.internal.example", 500),
    "poi_search": ("poi.example", 1000),
}


class ExternalAPIs(Service):
    """Third-party APIs: not instrumented, so no spans."""

    name = "external-apis"
    instrumented = False

    def handle(self, h, method, path, query, raw, span):
        q = {k: v[0] for k, v in query.items()}
        time.sleep(float(q.get("latency_ms", 50)) / 1000)
        self.respond(h, None, int(q.get("status", 200)), {"tool": path.strip("/"), "ok": True})


class ToolGateway(Service):
    name = "tool-gateway"

    def __init__(self, sink, external: ExternalAPIs, **kw):
        super().__init__(sink, **kw)
        self.external = external

    def route_of(self, path):
        return "/tools/{name}"

    def handle(self, h, method, path, query, raw, span):
        tool = path.rsplit("/", 1)[-1]
        req = json.loads(raw or b"{}")
        sim = req.get("sim", {})
        host, timeout_ms = TOOL_GATEWAY.get(tool, ("unknown.example", 1000))
        span.set_attribute("gen_ai.tool.name", tool)
        status = int(sim.get("status", 200))
        if int(req.get("attempt", 0)) < int(sim.get("fail_attempts", 0)):
            status = int(sim.get("fail_status", 503))
        qs = urllib.parse.urlencode({"latency_ms": sim.get("latency_ms", 50), "status": status})
        attrs = {"peer.service": tool}
        if timeout_ms:
            attrs["agent.timeout_ms"] = timeout_ms
        try:
            st, _, body = traced_http(
                self.tracer,
                method="GET",
                host=host,
                port=self.external.port,
                path=f"/{tool}?{qs}",
                timeout_s=timeout_ms / 1000 if timeout_ms else None,
                dns_s=float(sim.get("dns_ms", 2)) / 1000,
                connect_s=float(sim.get("connect_ms", 0)) / 1000,
                phase_events=True,
                attrs=attrs,
            )
        except CallTimeout:
            return self.respond(h, span, 500, {"error": f"{tool}: upstream timeout after {timeout_ms} ms"})
        if st >= 500:
            return self.respond(h, span, 502, {"error": f"{tool}: upstream answered {st}"})
        self.respond(h, span, st, {"tool": tool, "result": json.loads(body or b"{}")})


class MemoryStore(Service):
    name = "memory-store"

    def route_of(self, path):
        return path

    def handle(self, h, method, path, query, raw, span):
        req = json.loads(raw or b"{}")
        span.set_attribute("db.system.name", "redis")
        time.sleep(float(req.get("latency_ms", 20)) / 1000)
        self.respond(h, span, 200, {"hits": 3})


# ---------------------------------------------------------------------------
# The agent service.

# The orchestrator's per-call timeout (ms; None: none) and retries on 5xx.
AGENT_TOOLS = {
    "weather_api": {"timeout_ms": 2000, "retries": 1},
    "maps_api": {"timeout_ms": 4000, "retries": 0},
    "search_api": {"timeout_ms": None, "retries": 0},
    "crm_api": {"timeout_ms": 1000, "retries": 4},
    "crm_report": {"timeout_ms": 4000, "retries": 0},
    "web_browse": {"timeout_ms": 8000, "retries": 0},
    "calc": {"timeout_ms": 500, "retries": 0},
    "poi_search": {"timeout_ms": 1000, "retries": 0},
}

PROFILES = {
    # No budget at all; the OpenAI client's default timeout (600 s / 20).
    "legacy": {"budget_ms": None, "llm_ms": 30000, "memory_ms": None},
    # After incident B's fix: one budget on a monotonic deadline, shorter
    # than the gateway's 3 s; calls get a share of what is left.
    "aligned": {"budget_ms": 2500, "llm_ms": 2000, "llm_frac": 0.8, "tool_frac": 0.5, "memory_ms": 300},
    # Every call has a timeout, but the budget (6 s) outlives the gateway.
    "misaligned": {"budget_ms": 6000, "llm_ms": 4000, "memory_ms": 500},
}

ROUTES = {
    "/v1/agent/run": ("legacy", None),
    "/v2/agent/run": ("aligned", None),
    "/v1/agent/plan": ("misaligned", None),
    "/v1/agent/stream": ("legacy", "stream"),
    "/v1/agent/report": ("legacy", "pool_queue_span"),
    "/v1/agent/export": ("legacy", "pool_gap"),
}


EVALUATION = {"gen_ai.evaluation.name": "answer_relevance", "gen_ai.evaluation.score.value": 0.91}


class Run:
    """One request's execution state."""

    def __init__(self, profile: dict):
        self.profile = profile
        self.t0 = time.monotonic()
        b = profile.get("budget_ms")
        self.deadline = self.t0 + b / 1000 if b else None
        self.emit = None  # SSE writer for streams

    def remaining_ms(self):
        if self.deadline is None:
            return None
        return (self.deadline - time.monotonic()) * 1000


class AgentAPI(Service):
    name = "agent-api"

    def __init__(self, sink, ports: dict, style: dict, **kw):
        super().__init__(sink, **kw)
        self.ports = ports
        # style: {"reason_on_genai": bool, "judge_wrapper": bool}
        self.style = style
        self.workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="report-worker")
        self.par = ThreadPoolExecutor(max_workers=64, thread_name_prefix="agent-par")

    def route_of(self, path):
        return path

    # -- calls -------------------------------------------------------------

    def _timeout(self, run: Run, kind: str, tool: str | None = None):
        p = run.profile
        rem = run.remaining_ms()
        if rem is not None and rem <= 0:
            raise BudgetExhausted("request budget exhausted")
        if kind == "llm":
            t = p["llm_ms"]
            if "llm_frac" in p and rem is not None:
                t = min(t, rem * p["llm_frac"])
        elif kind == "tool":
            t = AGENT_TOOLS.get(tool, {}).get("timeout_ms")
            if "tool_frac" in p and rem is not None:
                t = min(t or 1500, rem * p["tool_frac"])
        else:
            t = p.get("memory_ms")
            if t is not None and rem is not None:
                t = min(t, rem * 0.2)
        return (round(t) if t else None), rem

    def _budget_attrs(self, span, timeout_ms, rem):
        if timeout_ms is not None:
            span.set_attribute("agent.timeout_ms", timeout_ms)
        if rem is not None:
            span.set_attribute("agent.remaining_budget_ms", round(rem))

    def llm(self, run: Run, st: dict, judge: bool = False):
        model = st.get("model", "deepseek-v4-pro")
        legacy = model.startswith("llama")
        port = self.ports["legacy-llm" if legacy else "model-server"]
        host = "legacy-llm" if legacy else "model-server"
        timeout_ms, rem = self._timeout(run, "llm")
        tin = int(st.get("input_tokens", 120))
        messages = [
            {"role": "system", "content": "you are a helpful agent"},
            {"role": "user", "content": " ".join(["tok"] * max(1, tin - 5))},
        ]
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": int(st.get("max_tokens", 1024)),
            "stream": bool(st.get("stream")),
            "sim": {k: st[k] for k in ("output_tokens", "slow", "latency_ms", "prefill_slow") if k in st},
        }
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": body["max_tokens"],
            "gen_ai.request.temperature": 0.2,
            "server.address": host,
            "server.port": port,
            "agent.attempt": 0,
        }
        if judge and not self.style.get("judge_wrapper"):
            attrs["gen_ai.agent.name"] = "answer_judge"

        def call():
            with self.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs) as span:
                self._budget_attrs(span, timeout_ms, rem)
                first = []
                t0 = time.monotonic()

                def on_line(line):
                    if line.startswith("data:") and "[DONE]" not in line:
                        if not first:
                            first.append(time.monotonic() - t0)
                        if run.emit:
                            run.emit(line + "\n\n")

                try:
                    status, hdrs, payload = traced_http(
                        self.tracer,
                        method="POST",
                        host=host,
                        port=port,
                        path="/v1/chat/completions",
                        body=body,
                        timeout_s=timeout_ms / 1000 if timeout_ms else None,
                        capture=() if self.style.get("reason_on_genai") else ("x-llm-reason", "x-llm-duration"),
                        on_line=on_line if body["stream"] else None,
                    )
                except CallTimeout as e:
                    span.set_attribute("error.type", "TimeoutError")
                    raise e
                if first:
                    span.set_attribute("gen_ai.response.time_to_first_chunk", round(first[0], 4))
                reason = hdrs.get("X-LLM-Reason")
                if reason and self.style.get("reason_on_genai"):
                    span.set_attribute("http.response.header.x-llm-reason", [reason])
                if status >= 500:
                    span.set_attribute("error.type", str(status))
                    raise CallFailed(status)
                span.set_attribute("gen_ai.response.model", model)
                span.set_attribute("gen_ai.usage.input_tokens", tin)
                out = int(st.get("output_tokens", 120))
                if payload:
                    out = json.loads(payload).get("usage", {}).get("completion_tokens", out)
                span.set_attribute("gen_ai.usage.output_tokens", min(out, body["max_tokens"]))
                if judge and not self.style.get("judge_wrapper"):
                    span.add_event("gen_ai.evaluation.result", EVALUATION)

        def raw_call():
            # No GenAI instrumentation: the LLM gateway called with a plain
            # HTTP client (requests/httpx instrumentation capturing the
            # response headers); only the model server's span names the model.
            traced_http(
                self.tracer,
                method="POST",
                host=host,
                port=port,
                path="/v1/chat/completions",
                body=body,
                timeout_s=timeout_ms / 1000 if timeout_ms else None,
                capture=("x-llm-reason", "x-llm-duration"),
                attrs={"agent.timeout_ms": timeout_ms} if timeout_ms else None,
            )

        if st.get("raw"):
            raw_call()
        elif judge and self.style.get("judge_wrapper"):
            # An app span around the judge's chat call; the score is
            # recorded where the app parses the judge's answer.
            with self.tracer.start_as_current_span("judge_answer", attributes={"agent.judge.criteria": "relevance"}) as js:
                call()
                js.add_event("gen_ai.evaluation.result", EVALUATION)
        else:
            call()

    def tool(self, run: Run, st: dict):
        name = st["name"]
        retries = AGENT_TOOLS.get(name, {}).get("retries", 0)
        sim = {k: st[k] for k in ("latency_ms", "status", "dns_ms", "connect_ms", "fail_attempts", "fail_status") if k in st}
        for attempt in range(retries + 1):
            timeout_ms, rem = self._timeout(run, "tool", name)
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "extension",
                "agent.attempt": attempt,
            }
            with self.tracer.start_as_current_span(
                f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attrs,
                record_exception=False, set_status_on_exception=False,
            ) as span:
                self._budget_attrs(span, timeout_ms, rem)
                try:
                    status, _, _ = traced_http(
                        self.tracer,
                        method="POST",
                        host="tool-gateway",
                        port=self.ports["tool-gateway"],
                        path=f"/tools/{name}",
                        body={"args": {"q": "x"}, "attempt": attempt, "sim": sim},
                        timeout_s=timeout_ms / 1000 if timeout_ms else None,
                    )
                except CallTimeout as e:
                    span.record_exception(e)
                    span.set_attribute("error.type", "TimeoutError")
                    span.set_status(Status(StatusCode.ERROR, f"{name} timed out after {timeout_ms} ms"))
                    raise
                if status < 500:
                    return
                span.set_attribute("error.type", "ToolError")
                span.set_status(Status(StatusCode.ERROR, f"{name} answered {status}"))
            if attempt < retries:
                time.sleep(0.05 * (attempt + 1))
        if st.get("fallback"):
            fb = dict(st["fallback"])
            fb["fallback"] = "cache"
            return self.memory(run, fb)
        raise ToolError(f"{name} failed after {retries + 1} attempts")

    def memory(self, run: Run, st: dict):
        timeout_ms, rem = self._timeout(run, "memory")
        name = st.get("name", "session_memory")
        attrs = {"gen_ai.operation.name": "search_memory", "agent.memory.store": name}
        if st.get("fallback"):
            attrs["agent.fallback"] = st["fallback"]
            attrs["agent.fallback_accepted"] = True
        with self.tracer.start_as_current_span(f"search_memory {name}", kind=SpanKind.CLIENT, attributes=attrs) as span:
            self._budget_attrs(span, timeout_ms, rem)
            traced_http(
                self.tracer,
                method="POST",
                host="memory-store",
                port=self.ports["memory-store"],
                path="/search",
                body={"store": name, "latency_ms": st.get("latency_ms", 20)},
                timeout_s=timeout_ms / 1000 if timeout_ms else None,
            )

    def step(self, run: Run, st: dict):
        op = st["op"]
        if op == "think":
            time.sleep(st.get("ms", 5) / 1000)
        elif op == "llm":
            self.llm(run, st)
        elif op == "judge":
            self.llm(run, st, judge=True)
        elif op == "tool":
            self.tool(run, st)
        elif op == "memory":
            self.memory(run, st)
        elif op == "parallel":
            ctx = otel_context.get_current()

            def sub(s):
                tok = otel_context.attach(ctx)
                try:
                    self.step(run, s)
                finally:
                    otel_context.detach(tok)

            for f in [self.par.submit(sub, s) for s in st["steps"]]:
                f.result()
        elif op == "heartbeat_during":
            # Run the inner step while a heartbeat thread keeps the stream alive.
            stop = threading.Event()

            def beat():
                while not stop.wait(st.get("every_ms", 800) / 1000):
                    if run.emit:
                        run.emit(": ping\n\n", event="heartbeat")

            t = threading.Thread(target=beat, daemon=True)
            t.start()
            try:
                self.step(run, st["step"])
            finally:
                stop.set()
                t.join(2)
        else:
            raise ValueError(f"unknown step {op}")

    def agent(self, run: Run, steps: list):
        with self.tracer.start_as_current_span(
            "invoke_agent support-agent",
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent"},
        ):
            for st in steps:
                time.sleep(0.002)  # planning between calls
                self.step(run, st)

    # -- requests ------------------------------------------------------------

    def handle(self, h, method, path, query, raw, span):
        if path == "/healthz":
            return self.respond(h, span, 200, {"ok": True})
        if path not in ROUTES:
            return self.respond(h, span, 404, {"error": "no such route"})
        try:
            req = json.loads(raw or b"{}")
            steps = req["steps"]
            if not isinstance(steps, list) or not all(isinstance(x, dict) and "op" in x for x in steps):
                raise ValueError("steps must be a list of steps")
        except (ValueError, KeyError, TypeError) as e:
            span.set_attribute("error.type", "ValidationError")
            return self.respond(h, span, 400, {"error": f"bad request: {e}"})
        profile_name, mode = ROUTES[path]
        profile = PROFILES[profile_name]
        span.set_attribute("agent.profile", profile_name)
        if profile["budget_ms"]:
            span.set_attribute("agent.budget_ms", profile["budget_ms"])
        run = Run(profile)
        if mode == "stream":
            return self._stream(h, span, run, steps)
        try:
            if mode and mode.startswith("pool"):
                self._on_pool(run, steps, mode == "pool_queue_span")
            else:
                self.agent(run, steps)
        except (CallTimeout, BudgetExhausted) as e:
            span.record_exception(e)
            span.set_attribute("error.type", "TimeoutError")
            return self.respond(h, span, 503, {"error": f"timeout: {e}"})
        except (ToolError, CallFailed) as e:
            span.record_exception(e)
            span.set_attribute("error.type", _err_type(e))
            return self.respond(h, span, 502, {"error": str(e)})
        self.respond(h, span, 200, {"answer": "done", "steps": len(steps)})

    def _on_pool(self, run, steps, queue_span: bool):
        """The report worker pool: 2 workers, unbounded queue. With
        `queue_span` the wait is recorded as a `worker_pool.wait` span (the
        time from enqueue to a worker picking the job up); otherwise it only
        shows as the gap before the first child."""
        ctx = otel_context.get_current()
        enq = time.time_ns()

        def job():
            tok = otel_context.attach(ctx)
            try:
                if queue_span:
                    s = self.tracer.start_span(
                        "worker_pool.wait",
                        start_time=enq,
                        attributes={"agent.pool.name": "report-workers", "agent.pool.size": 2},
                    )
                    s.end()
                self.agent(run, steps)
            finally:
                otel_context.detach(tok)

        self.workers.submit(job).result(timeout=60)

    def _stream(self, h, span, run: Run, steps):
        lock = threading.Lock()
        gone = []

        def emit(text, event="chunk"):
            with lock:
                if gone:
                    return
                try:
                    h.wfile.write(text.encode())
                    span.add_event(event)
                except OSError as e:
                    gone.append(e)

        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("X-Accel-Buffering", "no")
            h.end_headers()
        except OSError:
            return
        span.set_attribute("http.response.status_code", 200)
        run.emit = emit
        try:
            self.agent(run, steps)
            emit('data: {"answer": "done"}\n\n')
            emit("data: [DONE]\n\n")
        except Exception as e:  # noqa: BLE001
            span.record_exception(e)
            span.set_attribute("error.type", _err_type(e))
            span.set_status(Status(StatusCode.ERROR, str(e)))
            emit(f'event: error\ndata: {json.dumps({"error": str(e)})}\n\n')
            return
        if gone:
            e = gone[0]
            span.record_exception(e)
            span.set_attribute("error.type", _err_type(e))
            span.set_status(Status(StatusCode.ERROR, "client went away mid-stream"))


# ---------------------------------------------------------------------------


class Platform:
    """One deployment: every service started, ports known, one telemetry file."""

    def __init__(self, traces_path: str, style: dict, duplicate_every: int = 0):
        self.sink = TelemetrySink(traces_path)
        self.external = ExternalAPIs(None).start()
        self.model = ModelServer(self.sink, duplicate_every=duplicate_every).start()
        self.legacy = LegacyLLM(self.sink, duplicate_every=duplicate_every).start()
        self.tools = ToolGateway(self.sink, self.external, duplicate_every=duplicate_every).start()
        self.mem = MemoryStore(self.sink, duplicate_every=duplicate_every).start()
        ports = {
            "model-server": self.model.port,
            "legacy-llm": self.legacy.port,
            "tool-gateway": self.tools.port,
            "memory-store": self.mem.port,
        }
        self.agent = AgentAPI(self.sink, ports, style, duplicate_every=duplicate_every).start()
        self.services = [self.agent, self.model, self.legacy, self.tools, self.mem, self.external]

    def busy(self) -> int:
        return sum(s.active for s in self.services)

    def wait_idle(self, timeout_s: float = 20.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.busy() == 0:
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        for s in self.services:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass
        self.agent.workers.shutdown(wait=False, cancel_futures=True)
        self.agent.par.shutdown(wait=False, cancel_futures=True)
        self.sink.flush()
        self.sink.close()
