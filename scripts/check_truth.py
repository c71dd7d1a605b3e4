#!/usr/bin/env python3
"""Compares `overtime diagnose --json` with a fixture's truth.json.

usage: check_truth.py FIXTURE_DIR [OVERTIME_BIN]
Prints per-kind accuracy and every mismatch; exits 1 below 100 %.
"""
import json, os, subprocess, sys
from collections import Counter

d = sys.argv[1]
binary = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser("~/.cache/overtime-target/debug/overtime")
truth = json.load(open(os.path.join(d, "truth.json")))
args = list(truth["args"]) + ([] if "--json" in truth["args"] else ["--json"])
for i, a in enumerate(args):
    if a.startswith("@"):
        args[i] = open(os.path.join(d, a[1:])).read()
out = subprocess.run([binary, "diagnose", *args], cwd=d, capture_output=True, text=True)
if out.returncode != 0:
    print(out.stderr); sys.exit(1)
doc = json.loads(out.stdout)
got = {v["trace_id"]: v for v in doc["verdicts"]}
ok, bad = Counter(), []
for tid, t in truth.get("failing", {}).items():
    v = got.get(tid)
    exp = (t.get("kind"), t.get("component"), t.get("outcome"))
    have = (v["root_cause"]["kind"], v["root_cause"]["component"], v["outcome"]) if v else None
    if have == exp:
        ok[exp[0]] += 1
    else:
        bad.append((tid, exp, have, v["root_cause"]["evidence"] if v else None))
extra = [v for tid, v in got.items() if tid not in truth.get("failing", {}) and v["outcome"] != "ok"]
n = len(truth.get("failing", {}))
print(f"{d}: {sum(ok.values())}/{n} right {dict(ok)}; {len(extra)} unexpected failing verdicts; {len(doc['incidents'])} incidents")
for b in bad[:10]:
    print("  MISMATCH", b)
for v in extra[:5]:
    print("  EXTRA", v["trace_id"], v["outcome"], v["root_cause"]["kind"], v["root_cause"]["evidence"][:3])
sys.exit(0 if not bad and not extra else 1)
