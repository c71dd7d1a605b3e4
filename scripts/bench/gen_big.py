#!/usr/bin/env python3
"""Writes a large synthetic incident for the end-to-end diagnose benchmark.

usage: gen_big.py OUT_DIR GATEWAY_MB SPAN_SHARE [--layers 2] [--shuffle N]
                  [--dup SHARE] [--rotate N] [--seed S]
  access.log  — `overtime` log_format lines, ~GATEWAY_MB megabytes (all
                gateway files together)
  spans.jsonl — 4 JSONL spans for SPAN_SHARE of the requests (0..1)
2 % of requests are 504s with a tool call that has no timeout.

Options (without them the output is byte for byte what it always was):
  --layers 2    an outer layer too, `edge.log`, that logs only the request
                id (`tp="-"`); the inner `access.log` logs both
  --shuffle N   spans out of order: shuffled in windows of N spans, and 1 %
                of them held back to the end of the file
  --dup SHARE   that share of spans written twice (exporter retries)
  --rotate N    each gateway log as a rotated set of N files, oldest first:
                access.log.{N-1}.gz … access.log.2.gz, access.log.1, access.log
"""
import gzip, os, random, sys


def options(argv):
    pos, opt = [], {"layers": 1, "shuffle": 0, "dup": 0.0, "rotate": 1, "seed": 7}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key = a[2:]
            if key not in opt:
                sys.exit(f"gen_big.py: unknown option {a}")
            opt[key] = type(opt[key])(argv[i + 1])
            i += 2
        else:
            pos.append(a)
            i += 1
    if len(pos) != 3:
        sys.exit(__doc__)
    return pos, opt


class Rotating:
    """A log written as a rotated set: a new file every `part` bytes."""

    def __init__(self, out, name, n, part):
        self.names = [f"{name}.{k}.gz" for k in range(n - 1, 1, -1)]
        if n > 1:
            self.names.append(f"{name}.1")
        self.names.append(name)
        self.out, self.part, self.size, self.f = out, part, 0, None
        self.next()

    def next(self):
        if self.f:
            self.f.close()
        name = self.names.pop(0)
        path = os.path.join(self.out, name)
        self.f = gzip.open(path, "wt", compresslevel=1) if name.endswith(".gz") else open(path, "w")
        self.size = 0

    def write(self, line):
        if self.size >= self.part and self.names:
            self.next()
        self.f.write(line)
        self.size += len(line)

    def close(self):
        while self.names:
            self.next()
        self.f.close()


(out, mb, share), opt = options(sys.argv[1:])
mb, share = float(mb), float(share)
os.makedirs(out, exist_ok=True)
rnd = random.Random(opt["seed"])
target = int(mb * 1024 * 1024)
t0 = 1_764_410_400.0
layers = opt["layers"]
per_file = target // (layers * opt["rotate"]) + 1
gw = Rotating(out, "access.log", opt["rotate"], per_file)
edge = Rotating(out, "edge.log", opt["rotate"], per_file) if layers > 1 else None
sp = open(os.path.join(out, "spans.jsonl"), "w")
window, late = [], []


def put_span(line):
    if not opt["shuffle"]:
        sp.write(line)
        return
    if rnd.random() < 0.01:
        late.append(line)
    else:
        window.append(line)
    if len(window) >= opt["shuffle"]:
        rnd.shuffle(window)
        sp.writelines(window)
        window.clear()


size, i = 0, 0
while size < target:
    i += 1
    tid = "%032x" % rnd.getrandbits(128)
    fail = rnd.random() < 0.02
    start = t0 + i * 0.004
    rt = 60.003 if fail else rnd.uniform(0.5, 9.0)
    end = start + rt
    ts = "2025-11-29T%02d:%02d:%02d+00:00" % ((int(end) // 3600) % 24, (int(end) // 60) % 60, int(end) % 60)
    status = 504 if fail else 200
    hdr = "-" if fail else "%.3f" % (rt - 0.2)
    line = ('10.%d.%d.%d [%s] "POST /v1/agent/chat HTTP/1.1" %d %d rt=%.3f uct="0.001" uht="%s" urt="%.3f" '
            'us="%d" ua="10.0.0.7:8080" rid=%s tp="00-%s-%016x-01" mw="-" llm="-" llmd="-"\n') % (
        rnd.randrange(256), rnd.randrange(256), rnd.randrange(256), ts, status, 0 if fail else 1834, rt, hdr, rt,
        status, "%032x" % rnd.getrandbits(128), tid, rnd.getrandbits(64))
    gw.write(line)
    size += len(line)
    if edge:
        # The outer layer: same request, its own read timeout a little
        # later, only the request id to join by.
        e = line.split(' tp="', 1)[0] + ' tp="-" mw="-" llm="-" llmd="-"\n'
        e = e.replace("rt=%.3f" % rt, "rt=%.3f" % (rt + 0.001), 1)
        edge.write(e)
        size += len(e)
    if rnd.random() < share or fail:
        s_ms = int(start * 1000) + 2
        e_ms = s_ms + int(rt * 1000) + (15000 if fail else -5)
        root = "%016x" % rnd.getrandbits(64)
        spans = [
            dict(trace_id=tid, span_id=root, service="agent-api", name="POST /v1/agent/chat", stage="service",
                 start_time=s_ms, end_time=e_ms, status="ok", budget_ms=90000),
            dict(trace_id=tid, span_id="%016x" % rnd.getrandbits(64), parent_span_id=root, service="agent-api",
                 name="chat", stage="llm", start_time=s_ms + 5, duration_ms=300, model="qwen-72b", input_tokens=rnd.randrange(20, 900),
                 output_tokens=80, timeout_ms=30000, status="ok", llm_reason="kv_cache_build=0.1s,decode_loop=0.2s"),
            dict(trace_id=tid, span_id="%016x" % rnd.getrandbits(64), parent_span_id=root, service="agent-api",
                 name="execute_tool", stage="tool", tool="search_api", start_time=s_ms + 310,
                 end_time=e_ms - 10, timeout_ms=None if fail else 15000, status="ok"),
            dict(trace_id=tid, span_id="%016x" % rnd.getrandbits(64), parent_span_id=root, service="agent-api",
                 name="memory", stage="memory", tool="redis", start_time=s_ms + 1, duration_ms=2, timeout_ms=500, status="ok"),
        ]
        for s in spans:
            text = repr(s).replace("'", '"').replace("None", "null") + "\n"
            put_span(text)
            if opt["dup"] and rnd.random() < opt["dup"]:
                put_span(text)
rnd.shuffle(window)
sp.writelines(window)
sp.writelines(late)
gw.close()
if edge:
    edge.close()
sp.close()
print(f"{i} requests, {size/1e6:.0f} MB gateway log, spans {os.path.getsize(os.path.join(out,'spans.jsonl'))/1e6:.0f} MB")
