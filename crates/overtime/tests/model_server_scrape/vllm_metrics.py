"""A stand-in for a vLLM server's /metrics, for overtime's scrape test.

The series are declared with the real Python `prometheus_client` (the
library vLLM itself uses) under vLLM's own names, types, help texts,
labels (`model_name`, `engine`) and latency buckets, as
vllm/v1/metrics/loggers.py (PrometheusStatLogger) declares them at
vllm-project/vllm commit 005a810bc40faa25b8870fbc8559c3462581eee3.

Every 100 ms one request "finishes": it spent QUEUE_S waiting, PREFILL_S
in prefill and DECODE_S in decode (the three histograms observe it, as
PrometheusStatLogger.record does for each finished request), and the
queue-depth and KV-cache gauges move. A line `stop` on stdin stops the
requests (the gauges keep their last values). The port is chosen by the
system and printed on stdout.

Usage: python3 vllm_metrics.py MODEL
"""

import sys
import threading
import time

import prometheus_client as pc

QUEUE_S, PREFILL_S, DECODE_S = 2.4, 0.3, 0.3

model = sys.argv[1]
registry = pc.CollectorRegistry()
labelnames = ["model_name", "engine"]
request_latency_buckets = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]


def gauge(name, doc):
    return pc.Gauge(name, doc, labelnames=labelnames, registry=registry).labels(model, "0")


def histogram(name, doc):
    return pc.Histogram(
        name, doc, labelnames=labelnames, buckets=request_latency_buckets, registry=registry
    ).labels(model, "0")


waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
kv_cache = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.")
queue = histogram(
    "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."
)
inference = histogram(
    "vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."
)
prefill = histogram(
    "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."
)
decode = histogram(
    "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."
)

stop = threading.Event()


def requests():
    i = 0
    while not stop.is_set():
        waiting.set(3 + i % 5)
        running.set(8)
        kv_cache.set(0.9 + 0.01 * (i % 6))
        queue.observe(QUEUE_S)
        prefill.observe(PREFILL_S)
        decode.observe(DECODE_S)
        inference.observe(PREFILL_S + DECODE_S)
        e2e.observe(QUEUE_S + PREFILL_S + DECODE_S)
        i += 1
        time.sleep(0.1)


server, _ = pc.start_http_server(0, addr="127.0.0.1", registry=registry)
threading.Thread(target=requests, daemon=True).start()
print(server.server_port, flush=True)
for line in sys.stdin:
    if line.strip() == "stop":
        stop.set()
        print("stopped", flush=True)
server.shutdown()
