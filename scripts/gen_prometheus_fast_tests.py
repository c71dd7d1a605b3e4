#!/usr/bin/env python3
"""Regenerates the input series of deploy/prometheus/tests/early_warning_fast_keyed.yml (promtool
tests of the fast early warning per key, for the calls in flight and for
request_latency) from the generators below, keeping each test's
expectations as they are in the file.

    python3 scripts/gen_prometheus_fast_tests.py          # rewrite
    python3 scripts/gen_prometheus_fast_tests.py --check  # exit 1 if it differs

Every series is a counter of items, sums and squares (what /metrics
publishes), cumulated from one value a 30 s bucket.
"""
import math, os, random, re, sys

N = 220  # samples: 0..N-1 every 30 s (109.5 min)
ONSET = 161  # the first changed bucket ends at 80m30s

def fmt(x):
    r = round(x, 6)
    return str(int(r)) if r == int(r) else repr(r)

def cumul(incs):
    out, c = [0.0], 0.0
    for x in incs:
        c += x
        out.append(c)
    return ' '.join(fmt(v) for v in out)

def series(name, labels, incs):
    lab = ','.join(f'{k}="{v}"' for k, v in labels)
    return f"      - series: '{name}{{{lab}}}'\n        values: '{cumul(incs)}'\n"

def moments(n, mean, sd):
    return (n, n * mean, n * (mean * mean + sd * sd))

def signal_series(signal, key, buckets, inst="a"):
    """buckets: list of (n, sum, sq) for buckets 1..N-1."""
    fam = "overtime_early_signal_keyed" if key else "overtime_early_signal"
    labels = [("instance", inst)] + ([("key", key)] if key else []) + [("signal", signal)]
    out = ""
    for i, part in enumerate(["items", "sum", "squares"]):
        out += series(f"{fam}_{part}_total", labels, [b[i] for b in buckets])
    return out

def add(*bs):
    return tuple(sum(x) for x in zip(*bs))

def flows(changed, rise_of, rng=None):
    """request_timeout_use: flows a (30 at 40 %), b (10 at 50 %), quick
    (10 at 10 %) on one route; `changed` creeps by rise_of(bucket)."""
    base = {"calls a": (30, 0.4, 0.1), "calls b": (10, 0.5, 0.1), "calls quick": (10, 0.1, 0.05)}
    per = {k: [] for k in base}
    for i in range(1, N):
        for k, (n, m, sd) in base.items():
            if rng:
                n = max(3, n + rng.randint(-n // 4, n // 4))
                m = m * (1 + rng.gauss(0, 0.05))
            if k == changed:
                m += rise_of(i)
            per[k].append(moments(n, m, sd))
    route = [add(*(per[k][j] for k in per)) for j in range(N - 1)]
    out = signal_series("request_timeout_use", None, route)
    out += signal_series("request_timeout_use", "/v1/agent/run", route)
    for k in per:
        out += signal_series("request_timeout_use", k, per[k])
    return out

def creep(i):
    # +3 points a bucket from the onset, up to +12
    return 0.0 if i < ONSET else min(0.03 * (i - ONSET + 1), 0.12)

def in_flight(double, rng=None, secs=6.0):
    """LLM calls of 6 s: m1 14/18 calls a bucket (alternating), m2 4;
    m1's calls double from the onset when `double`."""
    per = {"m1": [], "m2": []}
    lat = {"m1": [], "m2": []}
    for i in range(1, N):
        for k in per:
            n = (14 if i % 2 else 18) if k == "m1" else 4
            if rng:
                n = max(1, n + rng.randint(-3, 3) if k == "m1" else n + rng.randint(-1, 1))
            if double and k == "m1" and i >= ONSET:
                n *= 2
            per[k].append((n, n * secs / 30, n * (secs / 30) ** 2))
            lat[k].append(moments(n, math.log(secs * 1000), 0.1))
    out = ""
    for sig, d in [("llm_in_flight", per), ("llm_latency", lat)]:
        out += signal_series(sig, None, [add(a, b) for a, b in zip(d["m1"], d["m2"])])
        for k in d:
            out += signal_series(sig, k, d[k])
    return out


def latency():
    """request_latency: 30 requests a bucket at 3 s (ln ms, sd 0.2), slowing
    10 % a bucket from the onset, to +50 %; one route."""
    b = []
    for i in range(1, N):
        m = math.log(3000.0)
        if i >= ONSET:
            m += math.log(1 + min(0.1 * (i - ONSET + 1), 0.5))
        b.append(moments(30, m, 0.2))
    return signal_series("request_latency", None, b) + signal_series("request_latency", "/v1/agent/run", b)


def inputs():
    """The input series of each test, in the file's order."""
    rng = random.Random(43)
    return [
        flows("calls b", creep),
        flows("calls quick", creep),
        in_flight(True),
        flows(None, lambda i: 0.0, rng) + in_flight(False, rng),
        latency(),
    ]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "deploy", "prometheus", "tests", "early_warning_fast_keyed.yml")
    text = open(path).read()
    # each test: its input_series block runs up to its first expectation
    parts = re.split(r"(    input_series:\n)", text)
    blocks = inputs()
    if (len(parts) - 1) // 2 != len(blocks):
        sys.exit(f"{path}: {(len(parts) - 1) // 2} tests, {len(blocks)} generators")
    out = parts[0]
    for k, block in enumerate(blocks):
        rest = parts[2 + 2 * k]
        m = re.search(r"^    (promql_expr_test|alert_rule_test):", rest, re.M)
        out += parts[1 + 2 * k] + block + rest[m.start():]
    if "--check" in sys.argv:
        if out != text:
            sys.exit(f"{path} differs from what its generator writes")
        return
    open(path, "w").write(out)


if __name__ == "__main__":
    main()
