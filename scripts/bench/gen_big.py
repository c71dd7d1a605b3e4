#!/usr/bin/env python3
"""Writes a large synthetic incident for the end-to-end diagnose benchmark.

usage: gen_big.py OUT_DIR GATEWAY_MB SPAN_SHARE
  access.log  — `overtime` log_format lines, ~GATEWAY_MB megabytes
  spans.jsonl — 5 JSONL spans for SPAN_SHARE of the requests (0..1)
2 % of requests are 504s with a tool call that has no timeout.
"""
import os, random, sys

out, mb, share = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
os.makedirs(out, exist_ok=True)
rnd = random.Random(7)
target = int(mb * 1024 * 1024)
t0 = 1_764_410_400.0
gw = open(os.path.join(out, "access.log"), "w")
sp = open(os.path.join(out, "spans.jsonl"), "w")
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
            sp.write(repr(s).replace("'", '"').replace("None", "null") + "\n")
gw.close(); sp.close()
print(f"{i} requests, {size/1e6:.0f} MB gateway log, spans {os.path.getsize(os.path.join(out,'spans.jsonl'))/1e6:.0f} MB")
