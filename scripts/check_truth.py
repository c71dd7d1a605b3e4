#!/usr/bin/env python3
"""Compares `overtime diagnose --json` with each fixture's truth.json.

usage: check_truth.py [--overtime BIN] [--score-json PATH] FIXTURE_DIR... [OVERTIME_BIN]

Prints per-kind accuracy and every mismatch per fixture; exits 1 below
100 % or on a failing verdict for a trace that did not fail. With
--score-json, writes the score JSON of docs/testing.md (*Scoreboard*), one
dataset `fixtures/<folder>` per fixture: kind, kind+component and outcome
of every failing trace of the truth, the findings it expects (those on
every failing trace, those of its kind, and those expected somewhere in
the run) and the failing verdicts for traces that did not fail.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


def _scoreboard():
    spec = importlib.util.spec_from_file_location("scoreboard", os.path.join(HERE, "scoreboard.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kinds(x):
    return {f["kind"] for f in x.get("findings") or []}


def check(d, binary):
    """Diagnoses one fixture: (lines to print, all right?, score dataset)."""
    truth = json.load(open(os.path.join(d, "truth.json")))
    args = list(truth["args"]) + ([] if "--json" in truth["args"] else ["--json"])
    for i, a in enumerate(args):
        if a.startswith("@"):
            args[i] = open(os.path.join(d, a[1:])).read()
    out = subprocess.run([binary, "diagnose", *args], cwd=d, capture_output=True, text=True)
    if out.returncode != 0:
        return [f"{d}: overtime diagnose failed ({out.returncode})", out.stderr], False, None
    doc = json.loads(out.stdout)
    got = {v["trace_id"]: v for v in doc["verdicts"]}
    failing = truth.get("failing", {})
    score = {
        "failing": len(failing), "with_verdict": 0, "kind_right": 0, "kind_component_right": 0,
        "outcome_right": 0, "findings_expected": 0, "findings_found": 0, "false_positives": 0,
    }
    ok, bad = Counter(), []
    for tid, t in failing.items():
        v = got.get(tid)
        exp = (t.get("kind"), t.get("component"), t.get("outcome"))
        have = (v["root_cause"]["kind"], v["root_cause"]["component"], v["outcome"]) if v else None
        want_findings = list(truth.get("findings_every_failing", [])) + list(
            (truth.get("findings_by_kind") or {}).get(t.get("kind"), [])
        )
        score["findings_expected"] += len(want_findings)
        if v:
            score["with_verdict"] += v["outcome"] != "ok"
            score["kind_right"] += have[0] == exp[0]
            score["kind_component_right"] += have[:2] == exp[:2]
            score["outcome_right"] += have[2] == exp[2]
            score["findings_found"] += sum(k in kinds(v) for k in want_findings)
        if have == exp:
            ok[exp[0]] += 1
        else:
            bad.append((tid, exp, have, v["root_cause"]["evidence"] if v else None))
    everywhere = set()
    for x in doc["verdicts"] + doc["incidents"]:
        everywhere |= kinds(x)
    expected = truth.get("findings_expected", [])
    score["findings_expected"] += len(expected)
    score["findings_found"] += sum(k in everywhere for k in expected)
    extra = [v for tid, v in got.items() if tid not in failing and v["outcome"] != "ok"]
    score["false_positives"] = len(extra) + (len(doc["incidents"]) if not failing else 0)
    n = len(failing)
    lines = [
        f"{d}: {sum(ok.values())}/{n} right {dict(ok)}; {len(extra)} unexpected failing verdicts; "
        f"{len(doc['incidents'])} incidents; findings {score['findings_found']}/{score['findings_expected']}"
    ]
    lines += [f"  MISMATCH {b}" for b in bad[:10]]
    lines += [f"  EXTRA {v['trace_id']} {v['outcome']} {v['root_cause']['kind']} {v['root_cause']['evidence'][:3]}" for v in extra[:5]]
    return lines, not bad and not extra, score


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="fixture folders (a last argument that is a file is the binary)")
    ap.add_argument("--overtime", help="the overtime binary")
    ap.add_argument("--score-json", help="write the score JSON here")
    a = ap.parse_intermixed_args()
    dirs = list(a.paths)
    binary = a.overtime
    if binary is None and len(dirs) > 1 and os.path.isfile(dirs[-1]):
        binary = dirs.pop()
    binary = binary or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/overtime-target")), "debug", "overtime"
    )
    if not os.access(binary, os.X_OK):
        sys.exit(f"no overtime binary at {binary} (cargo build -p overtime, or --overtime BIN)")
    all_right, datasets = True, {}
    for d in dirs:
        lines, right, score = check(os.path.abspath(d), binary)
        print("\n".join(lines))
        all_right &= right
        if score is None:
            all_right = False
            continue
        datasets[f"fixtures/{os.path.basename(os.path.normpath(d))}"] = score
    if a.score_json:
        _scoreboard().write_scores(a.score_json, datasets)
        print(f"score written to {a.score_json}")
    sys.exit(0 if all_right else 1)


if __name__ == "__main__":
    main()
