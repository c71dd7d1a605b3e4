#!/usr/bin/env python3
"""End-to-end accuracy harness for `overtime diagnose`.

Starts the agent platform (tests/e2e/platform.py, real OpenTelemetry SDK)
twice — variant A behind one real nginx, variant B behind two (edge →
internal) — runs the scenarios of tests/e2e/scenarios.py against both,
stops everything, runs `overtime diagnose --json` on the access logs nginx
really wrote and the OTLP JSON the exporters wrote, and compares every
failing trace with the ground truth the scenarios decided.

usage: run.py [--check] [--out DIR] [--overtime BIN] [--only NAME ...] [--markdown FILE]
              [--score-json FILE]

--check exits 1 if the overall kind+component accuracy is below 90 % or
healthy traffic got any failing verdict or incident.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# `platform.py` would shadow the stdlib module of that name: never import
# from this folder by path; load our modules under other names.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]

import argparse  # noqa: E402
import http.client  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


agent_platform = _load("agent_platform", "platform.py")
nginx_layers = _load("nginx_layers", "nginx_layers.py")
scenarios = _load("e2e_scenarios", "scenarios.py")
scoreboard = _load("scoreboard", os.path.join("..", "..", "scripts", "scoreboard.py"))

REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/overtime-target")), "debug", "overtime"
)
UAS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36",
    "agent-sdk-python/2.3.0",
    "curl/8.5.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2) Safari/605.1.15",
]
# The platform's two instrumentation styles.
STYLES = {
    # X-LLM-Reason copied onto the gen_ai chat span; the judge's chat span
    # carries gen_ai.agent.name=answer_judge.
    "A": {"reason_on_genai": True, "judge_wrapper": False},
    # X-LLM-Reason only on the HTTP client span under the chat span (as an
    # httpx instrumentation capturing response headers writes it); the
    # judge is an app span `judge_answer` around a plain chat span.
    "B": {"reason_on_genai": False, "judge_wrapper": True},
}
BATCH_TIMEOUT_S = 40
IDLE_TIMEOUT_S = 20


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Client


def send(port, req, tp_header, ua):
    """One client request through nginx. Returns what the client saw."""
    headers = {"User-Agent": ua, "Accept": "text/event-stream" if req.stream else "application/json"}
    if tp_header:
        headers["traceparent"] = tp_header
    body = json.dumps(req.body).encode() if req.body is not None else None
    if body is not None:
        headers["Content-Type"] = "application/json"
    out = {"status": None, "request_id": None, "complete": None, "error": None}
    t0 = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(req.method, req.route, body=body, headers=headers)
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
    out["t_start"] = t0
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
    if s == 200 and r.get("stream") and not r["complete"]:
        return "gateway_timeout"  # nginx cut the stream and logged 200
    return "ok"


def run_batch(port, items, concurrency, gap_ms):
    """items: [(Req, tp_header, ua, record)]; fills record with the result."""
    sem = threading.Semaphore(concurrency)
    threads = []

    def one(req, tp, ua, rec):
        try:
            rec.update(send(port, req, tp, ua))
        finally:
            sem.release()

    for req, tp, ua, rec in items:
        if not sem.acquire(timeout=BATCH_TIMEOUT_S):
            rec["error"] = "not sent: batch timed out"
            continue
        t = threading.Thread(target=one, args=(req, tp, ua, rec), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(gap_ms / 1000)
    end = time.monotonic() + BATCH_TIMEOUT_S
    for t in threads:
        t.join(max(0.1, end - time.monotonic()))


# ---------------------------------------------------------------------------
# The run


class Deployment:
    def __init__(self, name, root, rng):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.traces = os.path.join(self.dir, "traces.otlp.jsonl")
        self.rng = rng
        self.platform = None
        self.gw = None

    def start(self):
        self.platform = agent_platform.Platform(self.traces, STYLES[self.name], duplicate_every=17)
        make = nginx_layers.variant_a if self.name == "A" else nginx_layers.variant_b
        self.gw = make(self.dir, self.platform.agent.port)
        for n in self.gw["layers"]:
            n.start()
        return self

    def stop(self):
        if self.gw:
            for n in reversed(self.gw["layers"]):
                try:
                    n.stop()
                except Exception as e:  # noqa: BLE001
                    log(f"stopping nginx {n.name}: {e}")
        if self.platform:
            self.platform.stop()

    def tp(self, mode):
        if mode == "no":
            return None, None
        tid = "%032x" % self.rng.getrandbits(128)
        sid = "%016x" % self.rng.getrandbits(64)
        flags = "00" if mode == "unsampled" else "01"
        return f"00-{tid}-{sid}-{flags}", tid

    def snapshot(self):
        """Sizes of every file written so far (the healthy prefix)."""
        self.platform.sink.flush()
        return {
            "traces": self.platform.sink.size(),
            "logs": {n.log: n.log_size() for n in self.gw["layers"]},
        }


def items_for(dep, sc, truth, counter):
    items = []
    for kind_of, reqs in (("scenario", sc.reqs), ("noise", sc.noise)):
        for req in reqs:
            i = counter[dep.name]
            counter[dep.name] += 1
            mode = req.tp
            if mode == "auto":
                mode = "yes" if i % 5 in (0, 2, 3) else "no"
            tp, tid = dep.tp(mode)
            ua = req.ua or UAS[i % len(UAS)]
            if kind_of == "noise" or sc.kind is None:
                exp = (None, None)
            else:
                exp = req.expect or (sc.kind, sc.component)
            rec = {
                "variant": dep.name,
                "scenario": sc.name,
                "route": req.route,
                "stream": req.stream,
                "traceparent": mode,
                "trace_id": tid,
                "expect_kind": exp[0],
                "expect_component": exp[1],
                "noise": kind_of == "noise",
            }
            truth.append(rec)
            items.append((req, tp, ua, rec))
    return items


def run_platform(deps, out_dir, only):
    truth = []
    counter = Counter()
    marks = {}
    plan = [scenarios.healthy()] + scenarios.failing()
    if only:
        plan = [s for s in plan if s.name == "healthy" or any(o in s.name for o in only)]
    for d in deps:
        d.start()
    log(f"platform up: A on :{deps[0].gw['port']}, B on :{deps[1].gw['port']} ({out_dir})")
    # warm up both paths (kept in the logs: healthy traffic too)
    t_start = time.monotonic()
    for sc in plan:
        t0 = time.monotonic()
        batches = [(d, items_for(d, sc, truth, counter)) for d in deps]
        ths = [
            threading.Thread(target=run_batch, args=(d.gw["port"], items, sc.concurrency, sc.gap_ms), daemon=True)
            for d, items in batches
        ]
        for t in ths:
            t.start()
        for t in ths:
            t.join(BATCH_TIMEOUT_S + 5)
        for d in deps:
            if not d.platform.wait_idle(IDLE_TIMEOUT_S):
                log(f"  {d.name}: platform still busy after {IDLE_TIMEOUT_S} s")
        time.sleep(0.3)
        if sc.kind is None:
            marks = {d.name: d.snapshot() for d in deps}
        got = Counter(
            expected_outcome(r) for r in truth if r["scenario"] == sc.name
        )
        log(f"  {sc.name:<38} {time.monotonic() - t0:5.1f} s  {dict(got)}")
    log(f"scenarios done in {time.monotonic() - t_start:.0f} s")
    return truth, marks


def resolve_trace_ids(truth, deps):
    """Requests sent without traceparent: their trace id is the one of the
    agent-api server span that recorded their X-Request-ID."""
    for d in deps:
        by_rid = {}
        with open(d.traces) as f:
            for line in f:
                doc = json.loads(line)
                for rs in doc.get("resourceSpans", []):
                    for ss in rs.get("scopeSpans", []):
                        for sp in ss.get("spans", []):
                            for a in sp.get("attributes", []):
                                if a["key"] == "http.request.header.x-request-id":
                                    vals = a["value"].get("arrayValue", {}).get("values", [])
                                    if vals:
                                        by_rid[vals[0]["stringValue"]] = sp["traceId"]
        for r in truth:
            if r["variant"] == d.name and not r["trace_id"] and r.get("request_id"):
                r["trace_id"] = by_rid.get(r["request_id"])


def overtime(binary, args, traces):
    cmd = [binary, "diagnose", *args, "--otlp-json", traces, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"overtime failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout), p.stderr.strip(), cmd


def healthy_prefix(name, m, out_dir, args):
    """Copies of every file up to the end of the healthy phase."""
    mark = m["mark"]
    d = os.path.join(out_dir, f"healthy-{name}")
    os.makedirs(d, exist_ok=True)
    args = list(args)
    for src, size in mark["logs"].items():
        dst = os.path.join(d, os.path.basename(src))
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read(size))
        args[args.index(src)] = dst
    traces = os.path.join(d, "traces.otlp.jsonl")
    with open(m["traces"], "rb") as f, open(traces, "wb") as g:
        g.write(f.read(mark["traces"]))
    return args, traces


# ---------------------------------------------------------------------------
# Scoring


def shape(v, n=12):
    """The trace as an SRE would read it: the longest spans of the timeline."""
    rows = sorted(v.get("timeline", []), key=lambda e: -(e.get("critical_ms") or 0))[:n]
    rows.sort(key=lambda e: e["start_offset_ms"])
    out = []
    for e in rows:
        out.append(
            f"      {e['start_offset_ms']:8.0f} ms +{e['duration_ms']:7.0f} ms crit {e['critical_ms']:6.0f}  "
            f"{e['stage']:<8} {e.get('service', ''):<13} {e['name']:<34} comp={e['component']} "
            f"timeout={e.get('timeout_ms')} attempt={e.get('attempt')} status={e['status']}"
            + (f" phases={e['phases']}" if e.get("phases") else "")
        )
    return out


def score(truth, runs, meta):
    """Per kind and per diagnosis run: failing traces, right kind+component;
    mismatches, outcome disagreements and failing verdicts of no failing
    request (`extras`), for the primary runs."""
    res = {"rows": defaultdict(Counter), "mismatches": [], "extras": [], "outcome_wrong": [], "harness": [], "gw_wrong": []}
    for run in runs:
        label, variant, primary, doc = run["label"], run["variant"], run["primary"], run["doc"]
        verdicts = {v["trace_id"]: v for v in doc["verdicts"]}
        mine = [r for r in truth if r["variant"] == variant]
        failing_ids = set()
        by_rid = {r["request_id"]: r for r in mine if r.get("request_id")}
        for r in mine:
            if r["expect_outcome"] == "ok":
                continue
            if r["expect_kind"] is None:
                if primary:
                    res["harness"].append(r)  # a request meant to succeed failed
                continue
            row = res["rows"][r["expect_kind"]]
            row[f"n:{label}"] += 1
            v = verdicts.get(r["trace_id"]) if r["trace_id"] else None
            if r["trace_id"]:
                failing_ids.add(r["trace_id"])
            have = (v["root_cause"]["kind"], v["root_cause"]["component"]) if v else None
            right = have == (r["expect_kind"], r["expect_component"])
            row[f"ok:{label}"] += right
            if not primary:
                continue
            row["n"] += 1
            row["ok"] += right
            if not right:
                res["mismatches"].append((label, r, v))
            if v and v["outcome"] != r["expect_outcome"]:
                res["outcome_wrong"].append((label, r, v))
            elif v:
                row["outcome_ok"] += 1
            if v and r["expect_outcome"] == "gateway_timeout":
                # The layer that gave up first: its read timeout is the verdict's.
                row["gw_n"] += 1
                want = meta[variant]["read_timeout_ms"]
                have_t = (v.get("gateway") or {}).get("timeout_ms")
                if have_t == want:
                    row["gw_ok"] += 1
                else:
                    res["gw_wrong"].append((label, r, v, want))
        if not primary:
            continue
        for tid, v in verdicts.items():
            if tid in failing_ids or v["outcome"] == "ok":
                continue
            known = next((r for r in mine if r["trace_id"] == tid), None) or by_rid.get(v.get("request_id"))
            res["extras"].append((label, v, known))
    return res


def score_datasets(truth, runs, healthy_runs):
    """The score JSON's datasets (docs/testing.md, *Scoreboard*): one per
    diagnosis run, `e2e/A`, `e2e/A-noconf`… False positives: failing
    verdicts for requests that succeeded, and failing verdicts or
    incidents of the healthy phase diagnosed alone."""
    out = {}
    for run in runs:
        variant, doc = run["variant"], run["doc"]
        d = scoreboard.empty()
        verdicts = {v["trace_id"]: v for v in doc["verdicts"]}
        for r in truth:
            if r["variant"] != variant:
                continue
            v = verdicts.get(r["trace_id"]) if r["trace_id"] else None
            if r["expect_outcome"] == "ok":
                d["false_positives"] += bool(v and v["outcome"] != "ok")
                continue
            if r["expect_kind"] is None:
                continue  # meant to succeed, failed at the client: the harness's, not a score
            d["failing"] += 1
            if v:
                kind = v["root_cause"]["kind"] == r["expect_kind"]
                d["with_verdict"] += v["outcome"] != "ok"
                d["kind_right"] += kind
                d["kind_component_right"] += kind and v["root_cause"]["component"] == r["expect_component"]
                d["outcome_right"] += v["outcome"] == r["expect_outcome"]
        for h in healthy_runs:
            if h["label"] == run["label"]:
                hv = h["doc"]
                d["false_positives"] += sum(v["outcome"] != "ok" for v in hv["verdicts"]) + len(hv["incidents"])
        out["e2e/" + (variant if run["primary"] else f"{variant}-noconf")] = d
    return out


def fmt_pct(a, n):
    return f"{100.0 * a / n:.0f} %" if n else "—"


ORDER = [
    "stream_idle_gap", "gateway_timeout_mismatch", "serial_budget_exhaustion", "pool_saturation",
    "judge_slow", "llm_queueing", "llm_prefill_slow", "llm_decode_slow", "llm_slow",
    "upstream_connect_slow", "retry_amplification", "tool_no_timeout", "tool_slow", "unknown",
]


def report(truth, runs, healthy_runs, meta):
    res = score(truth, runs, meta)
    rows = res["rows"]
    kinds = [k for k in ORDER if k in rows] + sorted(k for k in rows if k not in ORDER)
    labels = [r["label"] for r in runs]
    lines = [
        "| kind | failing traces | right kind+component | accuracy | " + " | ".join(labels) + " | outcome right | gateway timeout right |",
        "|---|---|---|---|" + "---|" * len(labels) + "---|---|",
    ]
    tot = Counter()
    for k in kinds:
        c = rows[k]
        tot.update(c)
        per = " | ".join(f"{c[f'ok:{lb}']}/{c[f'n:{lb}']}" for lb in labels)
        gw = f"{c['gw_ok']}/{c['gw_n']}" if c["gw_n"] else "—"
        lines.append(f"| {k} | {c['n']} | {c['ok']} | {fmt_pct(c['ok'], c['n'])} | {per} | {c['outcome_ok']}/{c['n']} | {gw} |")
    per = " | ".join(f"{tot[f'ok:{lb}']}/{tot[f'n:{lb}']} ({fmt_pct(tot[f'ok:{lb}'], tot[f'n:{lb}'])})" for lb in labels)
    lines.append(
        f"| **all** | **{tot['n']}** | **{tot['ok']}** | **{fmt_pct(tot['ok'], tot['n'])}** | {per} | "
        f"{tot['outcome_ok']}/{tot['n']} | {tot['gw_ok']}/{tot['gw_n']} |"
    )
    accuracy = tot["ok"] / tot["n"] if tot["n"] else 0.0

    # Healthy traffic.
    hl = []
    healthy_bad = 0
    n_healthy = sum(1 for r in truth if r["expect_kind"] is None and r["expect_outcome"] == "ok")
    n_ok_fault = sum(1 for r in truth if r["expect_kind"] is not None and r["expect_outcome"] == "ok")
    for hr in healthy_runs:
        doc = hr["doc"]
        failing = [v for v in doc["verdicts"] if v["outcome"] != "ok"]
        if hr["primary"]:
            healthy_bad += len(failing) + len(doc["incidents"])
        n = sum(1 for r in truth if r["variant"] == hr["variant"] and r["scenario"] == "healthy")
        hl.append(
            f"- {hr['label']}, healthy phase only ({n} requests, its files cut where the phase ended): "
            f"{len(failing)} failing verdicts, {len(doc['incidents'])} incidents"
        )
        for v in failing[:5]:
            hl.append(f"  - {v['trace_id']} {v['outcome']} {v['root_cause']['kind']}: {v['root_cause']['summary']}")
    flagged = [(lb, v, r) for lb, v, r in res["extras"] if r is not None and r.get("expect_outcome") == "ok"]
    healthy_bad += len(flagged)
    hl.append(
        f"- whole run: {n_healthy} healthy requests and {n_ok_fault} requests of fault scenarios that succeeded "
        f"(in time or by luck of the queue): {len(flagged)} got a failing verdict"
    )
    for lb, v, r in flagged[:10]:
        hl.append(f"  - {lb} {v['trace_id']} ({r['scenario']}, {r['route']}): {v['outcome']} {v['root_cause']['kind']}: {v['root_cause']['summary']}")
    if res["harness"]:
        hl.append(f"- HARNESS: {len(res['harness'])} requests meant to succeed failed at the client (the data is wrong, not overtime):")
        for r in res["harness"][:10]:
            hl.append(f"  - {r['variant']} {r['scenario']} {r['route']} status {r['status']} complete={r['complete']} error={r['error']}")
    others = [(lb, v, r) for lb, v, r in res["extras"] if not (r is not None and r.get("expect_outcome") == "ok")]
    if others:
        hl.append(f"- {len(others)} other failing verdicts, for no failing trace of the ground truth:")
        for lb, v, r in others[:10]:
            what = (
                f"the request {r['request_id']} of {r['scenario']}, already judged as trace {r['trace_id']} (expected {r['expect_kind']})"
                if r
                else "no request of the ground truth"
            )
            hl.append(f"  - {lb}: verdict {v['trace_id']} {v['outcome']} {v['root_cause']['kind']}: {what}")

    # Mismatches.
    ml = []
    for lb, r, v in res["mismatches"]:
        exp = f"{r['expect_kind']} / {r['expect_component']} / {r['expect_outcome']}"
        if v is None:
            got = "no verdict" + ("" if r["trace_id"] else " (trace id unknown: no span recorded the request id)")
        else:
            got = f"{v['root_cause']['kind']} / {v['root_cause']['component']} / {v['outcome']}"
        ml.append(f"- [{lb}] {r['scenario']} trace {r['trace_id']} (traceparent {r['traceparent']}, client saw {r['status']}, {r['route']})")
        ml.append(f"  - expected: {exp}")
        ml.append(f"  - overtime: {got}")
        if v:
            ml.append(f"  - summary: {v['root_cause']['summary']}")
            for e in v["root_cause"]["evidence"]:
                ml.append(f"    - {e}")
            ml.append(f"  - gateway: {json.dumps(v.get('gateway'))}")
            ml.append("  - trace (offset, duration, critical-path ms; the spans holding the most critical time):")
            ml.append("```")
            ml.extend(shape(v))
            ml.append("```")
    ol = []
    for lb, r, v in res["outcome_wrong"]:
        ol.append(
            f"- [{lb}] {r['scenario']} {r['trace_id']}: client saw {r['status']} "
            f"(stream complete={r['complete']}) → expected {r['expect_outcome']}, overtime {v['outcome']}"
        )
    gl = []
    by = Counter()
    for lb, r, v, want in res["gw_wrong"]:
        g = v.get("gateway") or {}
        by[(lb, r["scenario"], g.get("source"), g.get("timeout_ms"), want)] += 1
    for (lb, sc, src, have_t, want), n in sorted(by.items(), key=str):
        gl.append(
            f"- [{lb}] {sc}: {n} verdicts name layer `{src}` with read timeout {have_t} ms; "
            f"the layer that gave up first had {want} ms"
        )
    return {
        "gateway": "\n".join(gl),
        "table": "\n".join(lines),
        "accuracy": accuracy,
        "healthy": "\n".join(hl),
        "healthy_bad": healthy_bad,
        "mismatches": "\n".join(ml),
        "n_mismatches": len(res["mismatches"]),
        "outcomes": "\n".join(ol),
    }


def build(binary_arg):
    if binary_arg:
        return binary_arg
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/overtime-target"))
    log("building overtime (cargo build -p overtime)…")
    p = subprocess.run(["cargo", "build", "-q", "-p", "overtime"], cwd=REPO, env=env, timeout=1800)
    if p.returncode != 0:
        sys.exit("cargo build failed")
    return os.path.join(env["CARGO_TARGET_DIR"], "debug", "overtime")


def analyze(binary, meta, truth, out_dir):
    """Runs overtime on the files of a run and scores it."""
    runs, healthy_runs, cmds, stderr = [], [], [], []
    for name, m in meta.items():
        for primary, args in ((True, m["args"]), (False, m["args_noconf"])):
            label = name if primary else f"{name}, no conf"
            doc, err, cmd = overtime(binary, args, m["traces"])
            runs.append({"label": label, "variant": name, "primary": primary, "doc": doc})
            cmds.append(" ".join(x if " " not in x else repr(x) for x in cmd))
            stderr.append(f"{label}: {err}")
            with open(os.path.join(out_dir, f"verdicts-{label.replace(', ', '-').replace(' ', '')}.json"), "w") as f:
                json.dump(doc, f, indent=1)
            if m.get("mark"):
                hargs, htraces = healthy_prefix(name, m, out_dir, args)
                healthy_runs.append(
                    {"label": label, "variant": name, "primary": primary, "doc": overtime(binary, hargs, htraces)[0]}
                )
    rep = report(truth, runs, healthy_runs, meta)
    rep["cmds"], rep["stderr"] = cmds, stderr
    rep["score"] = score_datasets(truth, runs, healthy_runs)
    return rep


def render(rep, out_dir):
    text = [
        "## Accuracy (kind and component of every failing trace)",
        "",
        rep["table"],
        "",
        f"Overall: {100 * rep['accuracy']:.1f} % of failing traces named with the right kind and component "
        "(runs A and B, each given its nginx.conf; the `no conf` runs read the same files with the "
        "log_format bodies on the command line and no conf, so the read timeouts are inferred).",
        "",
        "## Healthy traffic",
        "",
        rep["healthy"],
        "",
        f"## Mismatches ({rep['n_mismatches']})",
        "",
        rep["mismatches"] or "none",
        "",
        "## Outcome disagreements",
        "",
        rep["outcomes"] or "none",
        "",
        "## Gateway timeout named in the verdict (traces the gateway gave up on)",
        "",
        rep["gateway"] or "all right",
        "",
        "## Commands",
        "",
        "```",
        *rep["cmds"],
        *rep["stderr"],
        "```",
        "",
        f"Run directory: {out_dir}",
    ]
    return "\n".join(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 below 90 %% or on any failing verdict for healthy traffic")
    ap.add_argument("--out", help="run directory (default: a new temp dir)")
    ap.add_argument("--overtime", help="overtime binary (default: cargo build -p overtime)")
    ap.add_argument("--only", nargs="*", help="run only scenarios whose name contains one of these (plus healthy)")
    ap.add_argument("--reanalyze", metavar="DIR", help="skip the platform: diagnose the files of an earlier run again")
    ap.add_argument("--markdown", help="also write the report as Markdown to this file")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--score-json", help="write the score JSON (docs/testing.md, Scoreboard) here")
    a = ap.parse_args()
    binary = build(a.overtime)
    if a.reanalyze:
        out_dir = os.path.abspath(a.reanalyze)
        with open(os.path.join(out_dir, "truth.json")) as f:
            truth = json.load(f)
        with open(os.path.join(out_dir, "run.json")) as f:
            meta = json.load(f)
    else:
        if not os.path.exists(nginx_layers.NGINX):
            sys.exit(f"nginx not found at {nginx_layers.NGINX} (apt-get install -y nginx)")
        out_dir = os.path.abspath(a.out or os.path.join("/tmp", f"overtime-e2e-{time.strftime('%Y%m%d-%H%M%S')}"))
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        rng = random.Random(a.seed)
        deps = [Deployment(n, out_dir, random.Random(rng.getrandbits(32))) for n in ("A", "B")]
        try:
            truth, marks = run_platform(deps, out_dir, a.only)
            for d in deps:
                d.platform.wait_idle(IDLE_TIMEOUT_S)
        finally:
            for d in deps:
                d.stop()
        resolve_trace_ids(truth, deps)
        for r in truth:
            r["expect_outcome"] = expected_outcome(r)
        meta = {
            d.name: {
                "args": d.gw["args"],
                "args_noconf": d.gw["args_noconf"],
                "traces": d.traces,
                "mark": marks.get(d.name),
                "read_timeout_ms": d.gw["read_timeout_ms"],
            }
            for d in deps
        }
        with open(os.path.join(out_dir, "truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
        with open(os.path.join(out_dir, "run.json"), "w") as f:
            json.dump(meta, f, indent=1)
    rep = analyze(binary, meta, truth, out_dir)
    doc = render(rep, out_dir)
    print(doc)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(doc + "\n")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(doc + "\n")
    if a.score_json:
        scoreboard.write_scores(a.score_json, rep["score"])
    if a.check and (rep["accuracy"] < 0.9 or rep["healthy_bad"]):
        log(
            f"FAIL: accuracy {100 * rep['accuracy']:.1f} % (need 90 %), "
            f"{rep['healthy_bad']} failing verdicts/incidents on healthy traffic"
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
