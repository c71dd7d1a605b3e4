#!/usr/bin/env python3
"""End-to-end accuracy of `overtime diagnose` on spans written by real,
off-the-shelf instrumentation.

For each of four variants — the OpenAI instrumentation of OpenTelemetry
(`genai`), of OpenInference (`openinference`), of Traceloop
(`traceloop`), and a LangChain app under Traceloop's LangChain
instrumentation (`langchain`; `langchain-oi`, under OpenInference's, only
when named with --variants; so are `vllm`, `sglang`, `tgi` — a model
server that speaks as that engine does — and `litellm`, the real LiteLLM
proxy in front of it) — starts a FastAPI agent service on uvicorn under
`opentelemetry-instrument` (configured only by `OTEL_*` environment
variables), its OpenAI-compatible model servers and tool APIs, a small
OTLP/HTTP receiver, and real nginx in front (the layouts of tests/e2e);
runs the scenarios of scenarios.py against all of them at once, healthy
traffic mixed in; stops everything; runs `overtime diagnose` on the
access logs nginx wrote and the OTLP protobuf the exporter sent; scores
every failing request against the fault it was given.

usage: run.py [--check] [--install] [--install-only] [--venv DIR] [--out DIR]
              [--overtime BIN] [--only NAME ...] [--variants V ...]
              [--reanalyze DIR] [--markdown FILE] [--max-per-scenario N]
              [--score-json FILE] [--save-fixtures DIR]

--check exits 1 below 90 % kind+component, on any failing verdict or
incident from healthy traffic, on any failing request without a verdict,
or when semantic_mask's recall or precision is below 95 %; the opt-in
variants' numbers are held to scoreboard-optin.toml instead of 90 %.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]

import argparse  # noqa: E402
import hashlib  # noqa: E402
import http.client  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


nginx_layers = _load("e2e_nginx_layers", os.path.join(HERE, "..", "e2e", "nginx_layers.py"))
scenarios = _load("e2e_otel_scenarios", os.path.join(HERE, "scenarios.py"))
model_server = _load("e2e_otel_model_server", os.path.join(HERE, "model_server.py"))
tool_server = _load("e2e_otel_tool_server", os.path.join(HERE, "tool_server.py"))
receiver = _load("e2e_otel_receiver", os.path.join(HERE, "receiver.py"))
scoreboard = _load("scoreboard", os.path.join(HERE, "..", "..", "scripts", "scoreboard.py"))
scoring = _load("e2e_otel_scoring", os.path.join(HERE, "scoring.py"))
litellm_proxy = _load("e2e_otel_litellm_proxy", os.path.join(HERE, "litellm_proxy.py"))

REPO = os.path.dirname(os.path.dirname(HERE))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
DEFAULT_VENV = os.path.expanduser("~/.cache/overtime-e2e-otel/venv")
# Variant → the nginx layout of tests/e2e it runs behind.
VARIANTS = {"genai": "a", "openinference": "b", "traceloop": "a", "langchain": "b"}
# Run only when named (--variants): a second LangChain instrumentation,
# OpenInference's, whose HTTP attempts are also the LLM span's siblings.
EXTRA_VARIANTS = {"langchain-oi": "a", "vllm": "a", "sglang": "a", "tgi": "a", "litellm": "a"}
# The agent's OpenAI instrumentation where the variant names something else:
# the model server speaking as vLLM or TGI, the LiteLLM proxy in the path.
INSTRUMENTATION = {"vllm": "genai", "sglang": "genai", "tgi": "genai", "litellm": "genai"}
TGI_HEADERS = "x-queue-time,x-inference-time,x-time-per-token,x-validation-time,x-total-time,x-prompt-tokens,x-generated-tokens"
LITELLM_VENV = os.path.expanduser("~/.cache/overtime-e2e-otel/litellm-venv")
# The scoreboard of the opt-in variants (scripts/scoreboard.py --board).
OPTIN_BOARD = os.path.join(HERE, "scoreboard-optin.toml")
SERVICE = "agent-api"
CLIENT_TIMEOUT_S = 20
BATCH_TIMEOUT_S = 40
SETTLE_TIMEOUT_S = 12


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The Python environment


def install(venv, requirements=REQUIREMENTS):
    """Creates the venv and installs the pinned requirements, unless it
    already holds exactly them."""
    with open(requirements, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    marker = os.path.join(venv, ".requirements.sha256")
    if os.path.exists(marker) and open(marker).read().strip() == want:
        return
    log(f"installing {requirements} into {venv}")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    py = os.path.join(venv, "bin", "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", requirements],
                   check=True, timeout=1200)
    with open(marker, "w") as f:
        f.write(want + "\n")


# ---------------------------------------------------------------------------
# One deployment: a variant's platform behind nginx


class Deployment:
    def __init__(self, variant, root, venv, rng):
        self.variant = variant
        self.dir = os.path.join(root, variant)
        os.makedirs(self.dir, exist_ok=True)
        self.venv = venv
        self.rng = rng
        self.traces = os.path.join(self.dir, "traces.otlp.pb")
        self.answers = os.path.join(self.dir, "answers.jsonl")
        self.agent = None
        self.gw = None
        self.recv = self.model = self.legacy = None
        self.tools = {}
        self.proxy = self.engine_traces = None

    def engine_tracer(self, engine="vllm"):
        """The engine's tracer (engine_telemetry.make_tracer) from the
        agent's venv, exporting to the receiver as the engine would."""
        site = os.path.join(self.venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
        if site not in sys.path:
            sys.path.append(site)
        eng = sys.modules.get("e2e_otel_engine_telemetry") or _load("e2e_otel_engine_telemetry", os.path.join(HERE, "engine_telemetry.py"))
        scope = "vllm.v1.engine.output_processor" if engine == "vllm" else "sglang server"
        self.engine_traces, tracer = eng.make_tracer(engine, f"http://127.0.0.1:{self.recv.port}/v1/traces", scope)
        return tracer

    def start(self):
        self.recv = receiver.Receiver(self.traces)
        if self.variant in ("vllm", "litellm"):
            self.model = model_server.ModelServer(slots=16, flavor="vllm", tracer=self.engine_tracer())
        elif self.variant == "sglang":
            self.model = model_server.ModelServer(slots=16, flavor="sglang", tracer=self.engine_tracer("sglang"))
        elif self.variant == "tgi":
            self.model = model_server.ModelServer(slots=16, flavor="tgi")
        else:
            self.model = model_server.ModelServer(slots=16)
        model_url = f"http://127.0.0.1:{self.model.port}/v1"
        if self.variant == "litellm":
            groups = {m: {"timeout": 30, "num_retries": 0} for m in {scenarios.MAIN, scenarios.SMALL, scenarios.JUDGE["litellm"], scenarios.D_MODEL}}
            groups[scenarios.RETRY_MODEL] = {"timeout": 1.0, "num_retries": 2}
            groups[scenarios.FALLBACK_FROM] = {"timeout": 1.4, "num_retries": 0}
            self.proxy = litellm_proxy.LiteLLMProxy(
                LITELLM_VENV, self.dir, model_url, groups, {scenarios.FALLBACK_FROM: [scenarios.FALLBACK_TO]},
                f"http://127.0.0.1:{self.recv.port}/v1/traces")
            model_url = self.proxy.url
        self.legacy = model_server.ModelServer(reason_headers=False, slots=16)
        self.tools = {n: tool_server.ToolServer(n) for n in scenarios.TOOLS}
        # The agent's socket is bound here and handed to uvicorn (`--fd`):
        # no port is found free and let go for another process to take.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(511)
        self.port = sock.getsockname()[1]
        env = dict(os.environ)
        for k in [k for k in env if k.startswith(("OTEL_", "AGENT_", "TRACELOOP_", "OPENINFERENCE_"))]:
            del env[k]
        env.update({
            # What an SRE sets: the service's name, where to export, which
            # headers to capture, both HTTP conventions at once.
            "OTEL_SERVICE_NAME": SERVICE,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{self.recv.port}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
            "OTEL_BSP_SCHEDULE_DELAY": "300",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai,langchain",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "http/dup" if self.variant == "genai" else "http",
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST": "x-request-id,x-max-wait",
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE": "x-llm-reason,x-llm-duration"
            + ("," + TGI_HEADERS if self.variant == "tgi" else "")
            + (",x-litellm-attempted-retries,x-litellm-attempted-fallbacks,x-litellm-model-group,x-litellm-call-id"
               if self.variant == "litellm" else ""),
            "TRACELOOP_TRACE_CONTENT": "false",
            "OPENINFERENCE_HIDE_INPUTS": "true",
            "OPENINFERENCE_HIDE_OUTPUTS": "true",
            "AGENT_LLM_INSTRUMENTATION": INSTRUMENTATION.get(self.variant, self.variant),
            "AGENT_MODEL_URL": model_url,
            "AGENT_MODEL_API_KEY": self.proxy.key if self.proxy else "sk-local",
            "AGENT_LEGACY_MODEL_URL": f"http://127.0.0.1:{self.legacy.port}/v1",
            "AGENT_TOOLS": json.dumps({n: t.url for n, t in self.tools.items()}),
            "AGENT_JUDGE_MODEL": scenarios.JUDGE[self.variant],
            "AGENT_ANSWER_LOG": self.answers,
            "AGENT_REPORT_WORKERS": "1",
        })
        out = open(os.path.join(self.dir, "agent.log"), "w")
        bindir = os.path.join(self.venv, "bin")
        self.agent = subprocess.Popen(
            [os.path.join(bindir, "opentelemetry-instrument"), os.path.join(bindir, "uvicorn"), "agent_service:app",
             "--fd", str(sock.fileno()), "--no-access-log", "--timeout-graceful-shutdown", "3"],
            cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT, pass_fds=[sock.fileno()],
        )
        sock.close()  # uvicorn holds it now
        # The socket accepts from the start: the agent is up once uvicorn
        # says so (a request would be traced and exported with the rest).
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.agent.poll() is not None:
                raise RuntimeError(f"agent {self.variant} exited; see {out.name}")
            with open(out.name) as f:
                if "Application startup complete" in f.read():
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"agent {self.variant} did not start within 60 s; see {out.name}")
        make = nginx_layers.variant_a if {**VARIANTS, **EXTRA_VARIANTS}[self.variant] == "a" else nginx_layers.variant_b
        self.gw = make(self.dir, self.port)
        for n in self.gw["layers"]:
            n.start()
        return self

    def busy(self):
        return self.model.active + self.legacy.active + sum(t.active for t in self.tools.values())

    def settle(self):
        end = time.monotonic() + SETTLE_TIMEOUT_S
        while self.busy() and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(0.8)  # the batch span processor's delay, and a margin

    def snapshot(self):
        return {"traces": self.recv.file_size(), "logs": {n.log: n.log_size() for n in self.gw["layers"]}}

    def stop(self):
        if self.gw:
            for n in reversed(self.gw["layers"]):
                try:
                    n.stop()
                except Exception as e:  # noqa: BLE001
                    log(f"stopping nginx {n.name}: {e}")
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGINT)  # uvicorn shuts down; the SDK flushes at exit
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(5)
        if self.proxy:
            self.proxy.stop()
        if self.engine_traces:
            self.engine_traces.shutdown()  # the engine's last spans
        time.sleep(0.3)
        for s in [self.recv, self.model, self.legacy, *self.tools.values()]:
            if s:
                s.stop()

    def traceparent(self, mode):
        if mode == "no":
            return None, None
        tid = "%032x" % self.rng.getrandbits(128)
        sid = "%016x" % self.rng.getrandbits(64)
        return f"00-{tid}-{sid}-{'00' if mode == 'unsampled' else '01'}", tid

    def component(self, c):
        if c and c.startswith("tool:"):
            name = c[5:]
            return f"127.0.0.1:{self.tools[name].port}" if self.variant == "traceloop" else name
        if c == "judge":
            return scenarios.JUDGE[self.variant]
        if c and c.startswith("stream:"):
            # opentelemetry-instrumentation-openai-v2 ends a streamed chat
            # span only when the stream is read to its end: a stream the
            # gateway cut leaves only its HTTP attempt, named by address.
            return f"127.0.0.1:{self.model.port}" if INSTRUMENTATION.get(self.variant, self.variant) == "genai" else c[7:]
        return c


# ---------------------------------------------------------------------------
# The client


def send(port, req, tp):
    headers = {"Accept": "text/event-stream" if req.stream else "application/json", "Content-Type": "application/json"}
    if tp:
        headers["traceparent"] = tp
    out = {"status": None, "request_id": None, "complete": None, "error": None, "t_start": time.time()}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
    try:
        conn.request("POST", req.route, body=json.dumps(req.body).encode(), headers=headers)
        resp = conn.getresponse()
        out["status"] = resp.status
        out["request_id"] = resp.getheader("X-Request-ID")
        data = b""
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                data += line
        except Exception as e:  # noqa: BLE001 - a cut stream ends like this
            out["error"] = type(e).__name__
        out["complete"] = (b"data: [DONE]" in data) if req.stream else True
    except Exception as e:  # noqa: BLE001
        out["error"] = repr(e)
    finally:
        conn.close()
    out["t_end"] = time.time()
    return out


def expected_outcome(r):
    s = r["status"]
    if s == 504:
        return "gateway_timeout"
    if s == 503:
        return "service_timeout"
    if s is not None and s >= 500:
        return "error"
    if s == 200 and r["stream"] and not r["complete"]:
        return "gateway_timeout"  # nginx cut the stream and logged 200
    return "ok"


def run_batch(port, items, concurrency, gap_ms):
    sem = threading.Semaphore(concurrency)
    threads = []

    def one(req, tp, rec):
        try:
            rec.update(send(port, req, tp))
        finally:
            sem.release()

    for req, tp, rec in items:
        if not sem.acquire(timeout=BATCH_TIMEOUT_S):
            rec["error"] = "not sent: batch timed out"
            continue
        t = threading.Thread(target=one, args=(req, tp, rec), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(gap_ms / 1000)
    end = time.monotonic() + BATCH_TIMEOUT_S
    for t in threads:
        t.join(max(0.1, end - time.monotonic()))


def items_for(dep, sc, truth, counter):
    items = []
    for noise, reqs in ((False, sc.reqs), (True, sc.noise)):
        for req in reqs:
            i = counter[dep.variant]
            counter[dep.variant] += 1
            mode = req.tp if req.tp != "auto" else ("yes" if i % 5 in (0, 2, 3) else "no")
            tp, tid = dep.traceparent(mode)
            exp = (None, None) if noise or sc.kind is None else (req.expect or (sc.kind, sc.component))
            rec = {
                "variant": dep.variant, "scenario": sc.name, "route": req.route, "stream": req.stream,
                "traceparent": mode, "trace_id": tid if mode == "yes" else None, "sent_trace_id": tid,
                "expect_kind": exp[0], "expect_component": dep.component(exp[1]), "noise": noise,
            }
            truth.append(rec)
            items.append((req, tp, rec))
    return items


def run_platform(deps, only, max_per_scenario=None):
    truth, counter, marks = [], Counter(), {}
    plan = [scenarios.healthy()] + scenarios.failing() + scenarios.engine_failing() + scenarios.litellm_failing()
    names = {d.variant for d in deps}
    plan = [s for s in plan if s.kind is None or s.variants is None or names & set(s.variants)]
    if only:
        plan = [s for s in plan if s.name == "healthy" or any(o in s.name for o in only)]
    if max_per_scenario:
        for sc in plan:
            if sc.kind is not None:
                sc.reqs, sc.noise = sc.reqs[:max_per_scenario], sc.noise[:1]
    t0 = time.monotonic()
    for sc in plan:
        t1 = time.monotonic()
        batches = [(d, items_for(d, sc, truth, counter)) for d in deps
                   if sc.kind is None or sc.variants is None or d.variant in sc.variants]
        ths = [threading.Thread(target=run_batch, args=(d.gw["port"], items, sc.concurrency, sc.gap_ms), daemon=True)
               for d, items in batches]
        for t in ths:
            t.start()
        for t in ths:
            t.join(BATCH_TIMEOUT_S + 5)
        for d in deps:
            d.settle()
        if sc.kind is None:
            marks = {d.variant: d.snapshot() for d in deps}
        got = Counter(expected_outcome(r) for r in truth if r["scenario"] == sc.name)
        log(f"  {sc.name:<34} {time.monotonic() - t1:5.1f} s  {dict(got)}")
    log(f"scenarios done in {time.monotonic() - t0:.0f} s")
    return truth, marks


def run_deployments(deps, only, max_per_scenario, out_dir):
    """Starts every deployment, runs the scenarios, stops everything, and
    writes the run's truth.json and run.json; returns (truth, meta, seconds)."""
    t0 = time.monotonic()
    try:
        for d in deps:
            d.start()
        log("up: " + ", ".join(f"{d.variant} on :{d.gw['port']}" for d in deps) + f" ({out_dir})")
        truth, marks = run_platform(deps, only, max_per_scenario)
    finally:
        for d in deps:
            d.stop()
    took = time.monotonic() - t0
    for d in deps:
        answers = read_answers(d.answers)
        for r in truth:
            if r["variant"] != d.variant:
                continue
            r["expect_outcome"] = expected_outcome(r)
            svc = answers.get(r.get("request_id"))
            r["service_status"] = svc
            # The gateway hid the service's timeout answer behind its own
            # (before or after it): 503 behind 504, or the reverse.
            timeouts = (503, 504)
            r["expect_mask"] = bool(r["status"] in timeouts and svc in timeouts and svc != r["status"])
    meta = {d.variant: {"args": d.gw["args"], "args_noconf": d.gw["args_noconf"], "traces": d.traces,
                        "mark": marks.get(d.variant)} for d in deps}
    json.dump(truth, open(os.path.join(out_dir, "truth.json"), "w"), indent=1)
    json.dump(meta, open(os.path.join(out_dir, "run.json"), "w"), indent=1)
    return truth, meta, took


def read_answers(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                a = json.loads(line)
                if a.get("request_id"):
                    out[a["request_id"]] = a["status"]
    return out


# ---------------------------------------------------------------------------
# Diagnosis and scoring


def overtime(binary, args, traces):
    cmd = [binary, "diagnose", *args, "--otlp-proto", traces, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"overtime failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout), p.stderr.strip(), cmd


def healthy_prefix(variant, m, out_dir):
    """Copies of every file up to the end of the healthy phase."""
    mark = m["mark"]
    d = os.path.join(out_dir, f"healthy-{variant}")
    os.makedirs(d, exist_ok=True)
    args = list(m["args"])
    for src, size in mark["logs"].items():
        dst = os.path.join(d, os.path.basename(src))
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read(size))
        args[args.index(src)] = dst
    traces = os.path.join(d, "traces.otlp.pb")
    with open(m["traces"], "rb") as f, open(traces, "wb") as g:
        g.write(f.read(mark["traces"]))
    return args, traces


def has_mask(v):
    return any(f["kind"] == "semantic_mask" for f in v.get("findings", []))


def score(truth, docs):
    res = {"rows": defaultdict(Counter), "mismatches": [], "missing": [], "healthy_bad": [], "mask": Counter(), "mask_wrong": []}
    for variant, doc in docs.items():
        verdicts = doc["verdicts"]
        by_tid = {v["trace_id"]: v for v in verdicts}
        by_rid = {}
        for v in verdicts:
            if v.get("request_id"):
                by_rid.setdefault(v["request_id"], v)
        used = set()
        for r in (r for r in truth if r["variant"] == variant):
            v = by_tid.get(r["trace_id"]) if r["trace_id"] else None
            v = v or by_rid.get(r.get("request_id"))
            if v:
                used.add(v["trace_id"])
            failing = r["expect_outcome"] != "ok"
            if not failing:
                if v and v["outcome"] != "ok":
                    res["healthy_bad"].append((r, v))
                continue
            if r["expect_kind"] is None:
                res["healthy_bad"].append((r, v))  # meant to succeed, failed at the client
                continue
            row = res["rows"][r["expect_kind"]]
            row["n"] += 1
            row[f"n:{variant}"] += 1
            if v is None:
                res["missing"].append(r)
                res["mismatches"].append((r, None))
                continue
            right = (v["root_cause"]["kind"], v["root_cause"]["component"]) == (r["expect_kind"], r["expect_component"])
            row["ok"] += right
            row[f"ok:{variant}"] += right
            row["outcome_ok"] += v["outcome"] == r["expect_outcome"]
            if not right:
                res["mismatches"].append((r, v))
            got = has_mask(v)
            res["mask"][(r["expect_mask"], got)] += 1
            if got != r["expect_mask"]:
                res["mask_wrong"].append((r, v))
        for v in verdicts:
            if v["trace_id"] not in used and v["outcome"] != "ok":
                res["healthy_bad"].append(({"variant": variant, "scenario": "?", "route": "?"}, v))
    return res


def score_datasets(truth, docs, healthy_docs, suffix=""):
    """The score JSON's datasets (docs/testing.md, *Scoreboard*), one per
    variant: `e2e_otel/<variant><suffix>`. Findings: semantic_mask where
    the request expects it; false positives: failing verdicts for requests
    that did not fail, and failing verdicts or incidents of the healthy
    phase diagnosed alone."""
    out = {}
    for variant, doc in docs.items():
        d = scoreboard.empty()
        verdicts = doc["verdicts"]
        by_tid = {v["trace_id"]: v for v in verdicts}
        by_rid = {}
        for v in verdicts:
            if v.get("request_id"):
                by_rid.setdefault(v["request_id"], v)
        used = set()
        for r in (r for r in truth if r["variant"] == variant):
            v = (by_tid.get(r["trace_id"]) if r["trace_id"] else None) or by_rid.get(r.get("request_id"))
            if v:
                used.add(v["trace_id"])
            if r["expect_outcome"] == "ok" or r["expect_kind"] is None:
                d["false_positives"] += bool(r["expect_outcome"] == "ok" and v and v["outcome"] != "ok")
                continue
            d["failing"] += 1
            d["findings_expected"] += bool(r.get("expect_mask"))
            if v:
                kind = v["root_cause"]["kind"] == r["expect_kind"]
                d["with_verdict"] += v["outcome"] != "ok"
                d["kind_right"] += kind
                d["kind_component_right"] += kind and v["root_cause"]["component"] == r["expect_component"]
                d["outcome_right"] += v["outcome"] == r["expect_outcome"]
                d["findings_found"] += bool(r.get("expect_mask")) and has_mask(v)
        d["false_positives"] += sum(1 for v in verdicts if v["trace_id"] not in used and v["outcome"] != "ok")
        h = healthy_docs.get(variant)
        if h:
            d["false_positives"] += sum(v["outcome"] != "ok" for v in h["verdicts"]) + len(h["incidents"])
        out[f"e2e_otel/{variant}{suffix}"] = d
    return out


ORDER = ["stream_idle_gap", "gateway_timeout_mismatch", "serial_budget_exhaustion", "pool_saturation", "judge_slow",
         "llm_queueing", "llm_prefill_slow", "llm_decode_slow", "llm_slow", "upstream_connect_slow",
         "retry_amplification", "tool_no_timeout", "tool_slow", "unknown"]


def pct(a, n):
    return f"{100.0 * a / n:.0f} %" if n else "—"


def report(truth, docs, healthy_docs, variants):
    res = score(truth, docs)
    rows = res["rows"]
    kinds = [k for k in ORDER if k in rows] + sorted(k for k in rows if k not in ORDER)
    lines = ["| kind | failing requests | right kind+component | accuracy | " + " | ".join(variants) + " | outcome right |",
             "|---|---|---|---|" + "---|" * len(variants) + "---|"]
    tot = Counter()
    for k in kinds:
        c = rows[k]
        tot.update(c)
        per = " | ".join(f"{c[f'ok:{v}']}/{c[f'n:{v}']}" for v in variants)
        lines.append(f"| {k} | {c['n']} | {c['ok']} | {pct(c['ok'], c['n'])} | {per} | {c['outcome_ok']}/{c['n']} |")
    per = " | ".join(f"{tot[f'ok:{v}']}/{tot[f'n:{v}']} ({pct(tot[f'ok:{v}'], tot[f'n:{v}'])})" for v in variants)
    lines.append(f"| **all** | **{tot['n']}** | **{tot['ok']}** | **{pct(tot['ok'], tot['n'])}** | {per} | {tot['outcome_ok']}/{tot['n']} |")
    accuracy = tot["ok"] / tot["n"] if tot["n"] else 0.0
    m = res["mask"]
    tp, fp, fn = m[(True, True)], m[(False, True)], m[(True, False)]
    recall = tp / (tp + fn) if tp + fn else 1.0
    precision = tp / (tp + fp) if tp + fp else 1.0
    hl = []
    incidents = 0
    for variant, doc in healthy_docs.items():
        failing = [v for v in doc["verdicts"] if v["outcome"] != "ok"]
        incidents += len(doc["incidents"]) + len(failing)
        hl.append(f"- {variant}, healthy phase alone: {len(failing)} failing verdicts, {len(doc['incidents'])} incidents")
    n_ok = sum(1 for r in truth if r["expect_outcome"] == "ok")
    hl.append(f"- whole run: {n_ok} requests that succeeded; failing verdicts for requests that did not fail: {len(res['healthy_bad'])}")
    for r, v in res["healthy_bad"][:10]:
        what = f"{v['outcome']} {v['root_cause']['kind']}: {v['root_cause']['summary']}" if v else "no verdict"
        hl.append(f"  - {r['variant']} {r['scenario']} {r['route']} status {r.get('status')}: {what}")
    ml = []
    for r, v in res["mismatches"]:
        ml.append(f"- [{r['variant']}] {r['scenario']} (traceparent {r['traceparent']}, client saw {r['status']}, request {r.get('request_id')})")
        ml.append(f"  - expected: {r['expect_kind']} / {r['expect_component']} / {r['expect_outcome']}")
        if v is None:
            ml.append("  - overtime: no verdict")
            continue
        ml.append(f"  - overtime: {v['root_cause']['kind']} / {v['root_cause']['component']} / {v['outcome']}: {v['root_cause']['summary']}")
        for e in v["root_cause"]["evidence"]:
            ml.append(f"    - {e}")
    for r, v in res["mask_wrong"]:
        ml.append(f"- [{r['variant']}] {r['scenario']}: semantic_mask expected {r['expect_mask']}, found {has_mask(v)} "
                  f"(client {r['status']}, service {r.get('service_status')})")
    return {
        "table": "\n".join(lines), "accuracy": accuracy, "healthy": "\n".join(hl),
        "healthy_bad": len(res["healthy_bad"]) + incidents, "missing": len(res["missing"]),
        "mismatches": "\n".join(ml), "n_mismatches": len(res["mismatches"]),
        "mask": f"semantic_mask: {tp} found of {tp + fn} expected (recall {100 * recall:.0f} %), "
                f"{fp} found where it does not hold (precision {100 * precision:.0f} %)",
        "mask_recall": recall, "mask_precision": precision,
    }


def analyze(binary, meta, truth, out_dir):
    docs, healthy_docs, cmds = {}, {}, []
    for variant, m in meta.items():
        doc, err, cmd = overtime(binary, m["args"], m["traces"])
        docs[variant] = doc
        cmds.append(" ".join(cmd))
        with open(os.path.join(out_dir, f"verdicts-{variant}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        if m.get("mark"):
            hargs, htraces = healthy_prefix(variant, m, out_dir)
            healthy_docs[variant] = overtime(binary, hargs, htraces)[0]
    rep = report(truth, docs, healthy_docs, list(meta))
    rep["cmds"] = cmds
    rep["score"] = score_datasets(truth, docs, healthy_docs)
    rep["docs"], rep["healthy_docs"] = docs, healthy_docs
    # The same files with the log_format bodies on the command line and no
    # nginx.conf: read timeouts inferred from the 504s.
    noconf = {v: overtime(binary, m["args_noconf"], m["traces"])[0] for v, m in meta.items() if m.get("args_noconf")}
    if noconf:
        rep["score"].update(score_datasets(truth, noconf, {}, "-noconf"))
        res = score(truth, noconf)
        n = sum(r["n"] for r in res["rows"].values())
        ok = sum(r["ok"] for r in res["rows"].values())
        rep["noconf"] = (f"Without nginx.conf (format bodies on the command line, read timeouts inferred): "
                         f"{ok}/{n} right ({pct(ok, n)}), {len(res['missing'])} failing requests without a verdict, "
                         f"{len(res['healthy_bad'])} failing verdicts for requests that did not fail.")
    return rep


def render(rep, out_dir, took_s):
    return "\n".join([
        "## Accuracy (kind and component of every failing request)", "", rep["table"], "",
        f"Overall: {100 * rep['accuracy']:.1f} % right; failing requests without a verdict: {rep['missing']}; {rep['mask']}.",
        "", rep.get("noconf", ""),
        "", "## Healthy traffic", "", rep["healthy"], "",
        f"## Mismatches ({rep['n_mismatches']})", "", rep["mismatches"] or "none", "",
        "## Commands", "", "```", *rep["cmds"], "```", "",
        f"Run directory: {out_dir}" + (f"; the platform ran {took_s:.0f} s" if took_s else ""),
    ])


def build(binary):
    if binary:
        return binary
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/overtime-target"))
    log("building overtime (cargo build -p overtime)…")
    if subprocess.run(["cargo", "build", "-q", "-p", "overtime"], cwd=REPO, env=env, timeout=1800).returncode:
        sys.exit("cargo build failed")
    return os.path.join(env["CARGO_TARGET_DIR"], "debug", "overtime")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--install", action="store_true", help="create/update the venv from requirements.txt first")
    ap.add_argument("--install-only", action="store_true")
    ap.add_argument("--venv", default=DEFAULT_VENV)
    ap.add_argument("--out")
    ap.add_argument("--overtime")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--variants", nargs="*", choices=[*VARIANTS, *EXTRA_VARIANTS])
    ap.add_argument("--reanalyze", metavar="DIR")
    ap.add_argument("--markdown")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--max-per-scenario", type=int, help="send at most N requests of each scenario (a small run)")
    ap.add_argument("--score-json", metavar="FILE", help="write the score JSON (docs/testing.md, Scoreboard) here")
    ap.add_argument("--save-fixtures", metavar="DIR", help="copy each variant's input files and truth to DIR/<variant>/")
    a = ap.parse_args()
    if a.install or a.install_only:
        install(a.venv)
        install(LITELLM_VENV, litellm_proxy.REQUIREMENTS)
        if a.install_only:
            return
    took = None
    if a.reanalyze:
        run_dir = os.path.abspath(a.reanalyze)
        truth, meta = scoring.load_run(run_dir)
        # a fixture folder stays as committed: its outputs go to --out or a temp dir
        out_dir = os.path.abspath(a.out) if a.out else run_dir
        if isinstance(json.load(open(os.path.join(run_dir, "truth.json"))), dict) and not a.out:
            out_dir = tempfile.mkdtemp(prefix="overtime-reanalyze-")
        os.makedirs(out_dir, exist_ok=True)
        meta = {v: m for v, m in meta.items() if not a.variants or v in a.variants}
        truth = [r for r in truth if r["variant"] in meta]
    else:
        if not os.path.exists(nginx_layers.NGINX):
            sys.exit(f"nginx not found at {nginx_layers.NGINX} (apt-get install -y nginx)")
        if not os.path.exists(os.path.join(a.venv, "bin", "opentelemetry-instrument")):
            sys.exit(f"no venv at {a.venv}: run with --install")
        run_dir = out_dir = os.path.abspath(a.out or os.path.join("/tmp", f"overtime-e2e-otel-{time.strftime('%Y%m%d-%H%M%S')}"))
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        rng = random.Random(a.seed)
        deps = [Deployment(v, out_dir, a.venv, random.Random(rng.getrandbits(32))) for v in a.variants or VARIANTS]
        # The LiteLLM proxy is CPU-hungry (0.5–1 s of its own per call on a
        # busy 2-core machine): it runs after the others, not beside them.
        truth, meta, took = [], {}, 0.0
        for group in ([d for d in deps if d.variant != "litellm"], [d for d in deps if d.variant == "litellm"]):
            if group:
                t, m, s = run_deployments(group, a.only, a.max_per_scenario, out_dir)
                truth, meta, took = truth + t, {**meta, **m}, took + s
        json.dump(truth, open(os.path.join(out_dir, "truth.json"), "w"), indent=1)
        json.dump(meta, open(os.path.join(out_dir, "run.json"), "w"), indent=1)
    binary = build(a.overtime)
    rep = analyze(binary, meta, truth, out_dir)
    doc = render(rep, out_dir, took)
    print(doc)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(doc + "\n")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(doc + "\n")
    if a.score_json:
        scoreboard.write_scores(a.score_json, rep["score"])
    if a.save_fixtures:
        scoring.save_fixtures(a.save_fixtures, run_dir, truth, meta, a.venv, "tests/e2e_otel/run.py")
    if a.check:
        # The opt-in variants measure what overtime does not read yet
        # (docs/e2e-accuracy.md): their numbers must not fall below their
        # own board (OPTIN_BOARD; scripts/test's --complete board holds only
        # what scripts/test runs); the default variants' not below 90 %.
        extra = [v for v in meta if v in EXTRA_VARIANTS]
        floors = scoreboard.read_board(OPTIN_BOARD) if os.path.exists(OPTIN_BOARD) else {}
        floored = {k: v for k, v in rep["score"].items() if k.split("/")[1].removesuffix("-noconf") in extra}
        scoring.check(rep, 0.90, floored, floors, scoreboard.falls)


if __name__ == "__main__":
    main()
