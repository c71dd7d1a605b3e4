"""What the off-the-shelf harnesses (tests/e2e_otel, tests/e2e_node) share
after the platform has run: the `--check` gate, the score JSON every
accuracy harness writes (docs/e2e-accuracy.md, "The score JSON"), and
recorded runs kept as fixtures (tests/fixtures/e2e_*/<variant>/) that
diagnose again without the platform.

A fixture is one variant's input files as the run wrote them — the nginx
access logs and confs, the OTLP protobuf the exporter sent — with paths
relative to its folder, the harness's truth (`run.json`, `truth.json`'s
`requests`) and, for scripts/check_truth.py, `truth.json`'s `args` and
`failing` (trace id → kind, component, outcome).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

PATH_FLAGS = ("--nginx-log", "--nginx-conf")
FIXTURE_MAX_BYTES = 2 * 1024 * 1024


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# --check


def check(rep, goal, floored=None, board=None, falls=None):
    """Exits 1 below `goal` kind+component, on any failing verdict or incident
    from healthy traffic, on any failing request without a verdict, or when
    semantic_mask's recall or precision is below 95 %. Datasets in
    `floored` (score JSON datasets) are held to their `board` entry instead
    of `goal` (a dataset missing from the board fails): variants that
    measure what overtime does not read yet."""
    fails = []
    floored = floored or {}
    for name, d in floored.items():
        old = (board or {}).get(name)
        if old is None:
            fails.append(f"{name} is not on the board it is held to (record it with scripts/scoreboard.py update --board)")
        else:
            fails += [f"{name}: {f}" for f in falls(old, d)]
    accuracy = rep["accuracy"]
    if floored:
        rest = [d for k, d in rep["score"].items() if k not in floored and not k.endswith("-noconf")]
        n = sum(d["failing"] for d in rest)
        accuracy = sum(d["kind_component_right"] for d in rest) / n if n else None
    if accuracy is not None and accuracy < goal:
        fails.append(f"accuracy {100 * accuracy:.1f} % < {100 * goal:.0f} %")
    if rep["healthy_bad"]:
        fails.append(f"{rep['healthy_bad']} failing verdicts/incidents from healthy traffic")
    if rep["missing"]:
        fails.append(f"{rep['missing']} failing requests without a verdict")
    if rep["mask_recall"] < 0.95 or rep["mask_precision"] < 0.95:
        fails.append(rep["mask"])
    if fails:
        log("FAIL: " + "; ".join(fails))
        sys.exit(1)


# ---------------------------------------------------------------------------
# The score JSON


def _match(truth, verdicts):
    """Pairs each truth row with its verdict (by the trace id the client
    sent, else by the request id nginx gave it); returns the pairs and the
    verdicts no request claimed."""
    by_tid = {v["trace_id"]: v for v in verdicts}
    by_rid = {}
    for v in verdicts:
        if v.get("request_id"):
            by_rid.setdefault(v["request_id"], v)
    used, pairs = set(), []
    for r in truth:
        v = by_tid.get(r["trace_id"]) if r.get("trace_id") else None
        v = v or by_rid.get(r.get("request_id"))
        if v:
            used.add(v["trace_id"])
        pairs.append((r, v))
    return pairs, [v for v in verdicts if v["trace_id"] not in used]


def has_mask(v):
    return any(f["kind"] == "semantic_mask" for f in v.get("findings", []))


def dataset_scores(truth, doc, healthy_doc):
    """One variant's numbers in the score JSON's fields."""
    out = dict.fromkeys(["failing", "with_verdict", "kind_right", "kind_component_right", "outcome_right",
                         "findings_expected", "findings_found", "false_positives"], 0)
    pairs, unclaimed = _match(truth, doc["verdicts"])
    for r, v in pairs:
        if r["expect_outcome"] == "ok":
            out["false_positives"] += bool(v and v["outcome"] != "ok")
            continue
        if r["expect_kind"] is None:
            continue  # meant to succeed, failed at the client: the harness's --check reports it
        out["failing"] += 1
        out["findings_expected"] += bool(r.get("expect_mask"))
        if not v or v["outcome"] == "ok":
            continue
        out["with_verdict"] += 1
        kind_ok = v["root_cause"]["kind"] == r["expect_kind"]
        out["kind_right"] += kind_ok
        out["kind_component_right"] += kind_ok and v["root_cause"]["component"] == r["expect_component"]
        out["outcome_right"] += v["outcome"] == r["expect_outcome"]
        out["findings_found"] += bool(r.get("expect_mask") and has_mask(v))
    out["false_positives"] += sum(1 for v in unclaimed if v["outcome"] != "ok")
    if healthy_doc:
        out["false_positives"] += sum(1 for v in healthy_doc["verdicts"] if v["outcome"] != "ok")
        out["false_positives"] += len(healthy_doc["incidents"])
    return out


def write_score_json(path, harness, truth, rep):
    """Writes (or merges into) the score JSON: one dataset per variant,
    `<harness>/<variant>`."""
    doc = {"datasets": {}}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    for variant, vdoc in rep["docs"].items():
        rows = [r for r in truth if r["variant"] == variant]
        doc["datasets"][f"{harness}/{variant}"] = dataset_scores(rows, vdoc, rep["healthy_docs"].get(variant))
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    log(f"score JSON: {path}")


# ---------------------------------------------------------------------------
# Recorded runs as fixtures


def _abs(d, p):
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(d, p))


def _map_args(args, fn):
    out = list(args)
    for i in range(len(out) - 1):
        if out[i] in PATH_FLAGS:
            out[i + 1] = fn(out[i + 1])
    return out


def load_run(d):
    """truth rows and run meta of a run directory or a fixture folder, every
    path made absolute."""
    with open(os.path.join(d, "truth.json")) as f:
        truth = json.load(f)
    if isinstance(truth, dict):  # a fixture: check_truth's fields beside the harness's rows
        truth = truth["requests"]
    with open(os.path.join(d, "run.json")) as f:
        meta = json.load(f)
    for m in meta.values():
        m["args"] = _map_args(m["args"], lambda p: _abs(d, p))
        m["args_noconf"] = _map_args(m["args_noconf"], lambda p: _abs(d, p))
        m["traces"] = _abs(d, m["traces"])
        if m.get("mark"):
            m["mark"]["logs"] = {_abs(d, k): n for k, n in m["mark"]["logs"].items()}
    return truth, meta


def _trace_ids_by_request_id(venv, traces):
    """request id → trace id, from the agent's SERVER spans that captured
    the X-Request-ID nginx set (read with opentelemetry-proto)."""
    py = os.path.join(venv, "bin", "python")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "otlp_spans.py")
    p = subprocess.run([py, tool, traces], capture_output=True, text=True, timeout=300, check=True)
    out = {}
    for line in p.stdout.splitlines():
        s = json.loads(line)
        if s["kind"] != "SERVER":
            continue
        for k, v in s["attributes"].items():
            if k.replace("_", "-").endswith("header.x-request-id"):
                for rid in v if isinstance(v, list) else [v]:
                    out.setdefault(rid, s["trace_id"])
    return out


def _scrubbed_copy(venv, src, dst, mark):
    """The OTLP file without the machine's paths (the repo's checkout, the
    home directory) in stack traces and process arguments; returns where
    the healthy phase's end now falls."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    home = os.path.expanduser("~")
    subs = [f"{repo}/=", f"{home}/=~/"]
    py = os.path.join(venv, "bin", "python")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "otlp_spans.py")
    p = subprocess.run([py, tool, "--scrub", src, dst, str(mark), *subs], capture_output=True, text=True,
                       timeout=300, check=True)
    out = p.stdout.strip()
    if out == "None":
        raise ValueError(f"{src}: the healthy phase's end ({mark}) is not between two export requests")
    return int(out)


def save_fixtures(dest, out_dir, truth, meta, venv, generator):
    """Copies each variant's input files to dest/<variant>/ with relative
    paths, its truth rows, and check_truth.py's `args` and `failing`."""
    for variant, m in meta.items():
        src = os.path.join(out_dir, variant)
        vdir = os.path.join(dest, variant)
        if os.path.exists(vdir):
            shutil.rmtree(vdir)
        os.makedirs(vdir)

        def rel(p):
            r = os.path.relpath(p, src)
            if r.startswith(".."):
                raise ValueError(f"{p} is not inside {src}")
            return r

        files = [m["args"][i + 1] for i in range(len(m["args"]) - 1) if m["args"][i] in PATH_FLAGS]
        mark = dict(m["mark"]) if m.get("mark") else None
        new_mark = _scrubbed_copy(venv, m["traces"], os.path.join(vdir, rel(m["traces"])), mark["traces"] if mark else 0)
        if mark:
            mark["traces"] = new_mark
        for p in files:
            dst = os.path.join(vdir, rel(p))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if p.endswith(".conf"):
                # the conf's own paths (pid, temp dirs, logs) relative to the fixture
                with open(p) as f, open(dst, "w") as g:
                    g.write(f.read().replace(src + os.sep, ""))
            else:
                shutil.copy(p, dst)
        run = {variant: {
            "args": _map_args(m["args"], rel), "args_noconf": _map_args(m["args_noconf"], rel),
            "traces": rel(m["traces"]),
            "mark": mark and {"traces": mark["traces"], "logs": {rel(k): n for k, n in mark["logs"].items()}},
        }}
        with open(os.path.join(vdir, "run.json"), "w") as f:
            json.dump(run, f, indent=1)
        rows = [r for r in truth if r["variant"] == variant]
        tids = _trace_ids_by_request_id(venv, m["traces"])
        failing = {}
        for r in rows:
            if r["expect_outcome"] == "ok" or r["expect_kind"] is None:
                continue
            tid = r.get("sent_trace_id") if r["traceparent"] != "no" else tids.get(r.get("request_id"))
            if not tid:
                log(f"fixture {variant}: no trace id for request {r.get('request_id')} ({r['scenario']})")
                continue
            failing[tid] = {"kind": r["expect_kind"], "component": r["expect_component"],
                            "outcome": r["expect_outcome"], "request_id": r.get("request_id"),
                            "joined_by": "traceparent" if r["traceparent"] != "no" else "request_id",
                            "scenario": r["scenario"], "semantic_mask": r.get("expect_mask", False)}
        doc = {"fixture": variant, "generator": generator,
               "args": run[variant]["args"] + ["--otlp-proto", run[variant]["traces"]],
               "failing_count": len(failing), "failing": failing, "requests": rows}
        with open(os.path.join(vdir, "truth.json"), "w") as f:
            json.dump(doc, f, indent=1)
        size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(vdir) for fn in fns)
        log(f"fixture {vdir}: {len(failing)} failing requests, {size / 1e6:.2f} MB")
        if size > FIXTURE_MAX_BYTES:
            log(f"WARNING: {vdir} is over {FIXTURE_MAX_BYTES // 2**20} MB: use a smaller --max-per-scenario")
