#!/usr/bin/env python3
"""End-to-end accuracy of `overtime diagnose` on spans written by a Node.js
agent service and the npm packages its authors would pick.

The agent (agent_service.cjs: express, `fetch` and axios for tools, an LLM
SDK) runs under `node --require ./telemetry.cjs` — `@opentelemetry/sdk-node`
with `@opentelemetry/auto-instrumentations-node`, configured by `OTEL_*`
environment variables — in two variants: the official `openai` client
instrumented by OpenInference (`openinference`, behind tests/e2e's two nginx
layers) and the Vercel AI SDK with its own telemetry (`vercel-ai`, behind
one). Everything else is tests/e2e_otel's, reused as it is: the model
servers, tool servers, OTLP receiver, scenarios and their truth, the client,
the scoring; tests/e2e's nginx layouts.

usage: run.py [--check] [--install] [--install-only] [--out DIR] [--overtime BIN]
              [--only NAME ...] [--variants V ...] [--max-per-scenario N]
              [--reanalyze DIR] [--markdown FILE] [--score-json FILE]
              [--save-fixtures DIR]

--check exits 1 below the goal of issue 36 — 95 % kind+component — on any
failing verdict or incident from healthy traffic, on any failing request
without a verdict, or when semantic_mask's recall or precision is below 95 %.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


OTEL_DIR = os.path.join(HERE, "..", "e2e_otel")
otel = _load("e2e_otel_run", os.path.join(OTEL_DIR, "run.py"))
scoring = _load("e2e_otel_scoring", os.path.join(OTEL_DIR, "scoring.py"))
scenarios, nginx_layers, log = otel.scenarios, otel.nginx_layers, otel.log

DEFAULT_NODE_DIR = os.path.expanduser("~/.cache/overtime-e2e-node")
# Variant → the nginx layout of tests/e2e it runs behind.
VARIANTS = {"genai": "a", "openinference": "b", "vercel-ai": "a"}
JUDGE_MODEL = "qwen2.5-72b-instruct"
GOAL = 0.95


# ---------------------------------------------------------------------------
# The npm environment


def install(node_dir):
    """`npm ci` of the committed package-lock.json into node_dir, unless it
    already holds exactly it."""
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        sys.exit("node and npm are needed (apt-get install -y nodejs npm)")
    lock = os.path.join(HERE, "package-lock.json")
    with open(os.path.join(HERE, "package.json"), "rb") as f, open(lock, "rb") as g:
        want = hashlib.sha256(f.read() + g.read()).hexdigest()
    marker = os.path.join(node_dir, ".lock.sha256")
    if os.path.exists(marker) and open(marker).read().strip() == want:
        return
    log(f"npm ci of {lock} into {node_dir}")
    os.makedirs(node_dir, exist_ok=True)
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(HERE, f), os.path.join(node_dir, f))
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=node_dir, check=True, timeout=1200)
    with open(marker, "w") as f:
        f.write(want + "\n")


# ---------------------------------------------------------------------------
# One deployment: the Node.js agent of a variant behind nginx


class NodeDeployment(otel.Deployment):
    def __init__(self, variant, root, node_dir, rng):
        super().__init__(variant, root, None, rng)
        self.node_dir = node_dir

    def start(self):
        rx, ms, ts = otel.receiver, otel.model_server, otel.tool_server
        self.recv = rx.Receiver(self.traces)
        self.model = ms.ModelServer(slots=16)
        self.legacy = ms.ModelServer(reason_headers=False, slots=16)
        self.tools = {n: ts.ToolServer(n) for n in scenarios.TOOLS}
        # The agent's socket is bound here and handed to node (its fd in
        # AGENT_LISTEN_FD): no port is found free and let go for another
        # process to take.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(511)
        self.port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENT_", "NODE_"))}
        env.update({
            # What an SRE sets: the service's name and where to export; the
            # rest is each instrumentation's default.
            "OTEL_SERVICE_NAME": otel.SERVICE,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{self.recv.port}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
            "OTEL_BSP_SCHEDULE_DELAY": "300",
            "OTEL_NODE_RESOURCE_DETECTORS": "env,host,os,process",
            # OpenInference wraps the openai client itself: the
            # auto-instrumentations' own OpenAI instrumentation stays off.
            **({"OTEL_NODE_DISABLED_INSTRUMENTATIONS": "openai"} if self.variant == "openinference" else {}),
            "OPENINFERENCE_HIDE_INPUTS": "true",
            "OPENINFERENCE_HIDE_OUTPUTS": "true",
            "NODE_PATH": os.path.join(self.node_dir, "node_modules"),
            "AGENT_LISTEN_FD": str(sock.fileno()),
            "AGENT_LLM_SDK": self.variant,
            "AGENT_MODEL_URL": f"http://127.0.0.1:{self.model.port}/v1",
            "AGENT_LEGACY_MODEL_URL": f"http://127.0.0.1:{self.legacy.port}/v1",
            "AGENT_TOOLS": json.dumps({n: t.url for n, t in self.tools.items()}),
            "AGENT_JUDGE_MODEL": JUDGE_MODEL,
            "AGENT_ANSWER_LOG": self.answers,
            "AGENT_REPORT_WORKERS": "1",
        })
        out = open(os.path.join(self.dir, "agent.log"), "w")
        self.agent = subprocess.Popen(
            ["node", "--require", os.path.join(HERE, "telemetry.cjs"), os.path.join(HERE, "agent_service.cjs")],
            cwd=self.dir, env=env, stdout=out, stderr=subprocess.STDOUT, pass_fds=[sock.fileno()],
        )
        sock.close()  # node holds it now
        # The socket accepts from the start: the agent is up once it says so.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.agent.poll() is not None:
                raise RuntimeError(f"agent {self.variant} exited; see {out.name}")
            with open(out.name) as f:
                if "agent-api (" in f.read():
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"agent {self.variant} did not start within 60 s; see {out.name}")
        make = nginx_layers.variant_a if VARIANTS[self.variant] == "a" else nginx_layers.variant_b
        self.gw = make(self.dir, self.port)
        for n in self.gw["layers"]:
            n.start()
        return self

    def stop(self):
        if self.agent and self.agent.poll() is None:
            # telemetry.cjs flushes the exporter on SIGTERM; nginx stops after
            # it (super) so its logs hold every request
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(5)
        super().stop()

    def component(self, c):
        # openinference and vercel-ai name their tools (an OpenInference
        # TOOL span, an application span `tool.<name>`); under genai only
        # the tool's HTTP client span is there: its address. Every variant
        # runs the judge on JUDGE_MODEL.
        if c and c.startswith("tool:"):
            name = c[5:]
            return f"127.0.0.1:{self.tools[name].port}" if self.variant == "genai" else name
        if c == "judge":
            return JUDGE_MODEL
        if c and c.startswith("stream:"):
            # The AI SDK ends `ai.streamText` / `doStream` only when the
            # stream is read to its end: a stream the gateway cut leaves
            # only its fetch attempt, named by address.
            return f"127.0.0.1:{self.model.port}" if self.variant == "vercel-ai" else c[7:]
        return c


def fix_truth(deps, truth, out_dir):
    """What these libraries cannot show, taken out of the truth before
    scoring (README, "What the libraries emit"):
    - Node's HTTP server span ends when the client goes away, with
      `http.response.status_code` 200 (the response's default) and no error:
      a 503 the service writes after that is in no span, so `semantic_mask`
      is expected only where the agent logged that its status still reached
      the span (`span_sees`: set before the response's 'close', a race of a
      millisecond when its budget and nginx's timeout end together);
    - OpenInference's OpenAI instrumentation never ends the span of a call
      that failed: under `openinference` the timed-out model retries are
      bare HTTP attempts, nothing names the model, and the component is the
      model server's address."""
    ports = {d.variant: d.model.port for d in deps}
    seen = {}
    for d in deps:
        if os.path.exists(d.answers):
            with open(d.answers) as f:
                for line in f:
                    a = json.loads(line)
                    if a.get("request_id"):
                        seen[(d.variant, a["request_id"])] = bool(a.get("span_sees"))
    for r in truth:
        # e2e_otel's rule (a timeout status hid behind another), and the
        # span had to be able to carry the service's.
        r["expect_mask"] = bool(r.get("expect_mask") and seen.get((r["variant"], r.get("request_id"))))
        if r["variant"] == "openinference" and r["scenario"] == "retry_amplification (model)" and not r["noise"]:
            r["expect_component"] = f"127.0.0.1:{ports['openinference']}"
    with open(os.path.join(out_dir, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--install", action="store_true", help="npm ci from package-lock.json first, when it changed")
    ap.add_argument("--install-only", action="store_true")
    ap.add_argument("--node-dir", default=DEFAULT_NODE_DIR)
    ap.add_argument("--venv", default=otel.DEFAULT_VENV, help="tests/e2e_otel's venv (reads the OTLP files for --save-fixtures)")
    ap.add_argument("--out")
    ap.add_argument("--overtime")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--variants", nargs="*", choices=list(VARIANTS))
    ap.add_argument("--max-per-scenario", type=int, help="send at most N requests of each scenario (a small run)")
    ap.add_argument("--reanalyze", metavar="DIR", help="diagnose an earlier run's (or a fixture's) files again")
    ap.add_argument("--markdown")
    ap.add_argument("--score-json", metavar="FILE")
    ap.add_argument("--save-fixtures", metavar="DIR", help="copy each variant's input files and truth to DIR/<variant>/")
    ap.add_argument("--seed", type=int, default=20261207)
    a = ap.parse_args()
    if a.install or a.install_only:
        install(a.node_dir)
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
        if not os.path.exists(os.path.join(a.node_dir, "node_modules", "@opentelemetry", "sdk-node")):
            sys.exit(f"no npm packages in {a.node_dir}: run with --install")
        run_dir = out_dir = os.path.abspath(a.out or os.path.join("/tmp", f"overtime-e2e-node-{time.strftime('%Y%m%d-%H%M%S')}"))
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        rng = random.Random(a.seed)
        deps = [NodeDeployment(v, out_dir, a.node_dir, random.Random(rng.getrandbits(32))) for v in a.variants or VARIANTS]
        truth, meta, took = otel.run_deployments(deps, a.only, a.max_per_scenario, out_dir)
        fix_truth(deps, truth, out_dir)
    binary = otel.build(a.overtime)
    rep = otel.analyze(binary, meta, truth, out_dir)
    doc = otel.render(rep, out_dir, took)
    print(doc)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(doc + "\n")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(doc + "\n")
    if a.score_json:
        scoring.write_score_json(a.score_json, "e2e_node", truth, rep)
    if a.save_fixtures:
        scoring.save_fixtures(a.save_fixtures, run_dir, truth, meta, a.venv, "tests/e2e_node/run.py")
    if a.check:
        scoring.check(rep, GOAL)


if __name__ == "__main__":
    main()
