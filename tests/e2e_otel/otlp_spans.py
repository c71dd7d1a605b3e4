"""Reads what the OTLP exporter sent (receiver.py's file: varint
length-delimited `ExportTraceServiceRequest`s) with the real protobuf
classes of `opentelemetry-proto`, and turns it into plain dicts — one per
span — for the harnesses' tables of what each library emits and for the
fixtures' truth (which trace a request without a traceparent got).

Runs in the e2e_otel venv (it has opentelemetry-proto):

    ~/.cache/overtime-e2e-otel/venv/bin/python tests/e2e_otel/otlp_spans.py FILE > spans.jsonl
    ~/.cache/overtime-e2e-otel/venv/bin/python tests/e2e_otel/otlp_spans.py --table FILE   # what a library emits
    ~/.cache/overtime-e2e-otel/venv/bin/python tests/e2e_otel/otlp_spans.py --scrub SRC DST MARK OLD=NEW ...
"""

from __future__ import annotations

import json
import sys

from google.protobuf.internal.decoder import _DecodeVarint  # noqa: PLC2701 - the varint framing
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which) if which else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def requests(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        n, pos = _DecodeVarint(data, pos)
        req = ExportTraceServiceRequest()
        req.ParseFromString(data[pos:pos + n])
        pos += n
        yield req


def spans(path):
    for req in requests(path):
        for rs in req.resource_spans:
            res = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    yield {
                        "service": res.get("service.name"),
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None,
                        "name": s.name,
                        "kind": KINDS.get(s.kind, str(s.kind)),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "attributes": attrs(s.attributes),
                        "events": [{"name": e.name, "time_ns": e.time_unix_nano, "attributes": attrs(e.attributes)}
                                   for e in s.events],
                        "status": {"code": s.status.code, "message": s.status.message},
                    }


# Names that vary per call, folded in the table.
PLACEHOLDERS = {
    "<model>": ["deepseek-v4-pro", "qwen3-32b", "llama-3-8b-instruct", "judge-qwen2.5-72b", "qwen2.5-72b-instruct"],
    "<tool>": ["weather_api", "crm_api", "web_search", "poi_search", "calc"],
}


def fold(name):
    for ph, words in PLACEHOLDERS.items():
        for w in words:
            name = name.replace(w, ph)
    return name


def table(path):
    """Markdown: one row per (instrumentation scope, span kind, span name
    with models and tools folded), the spans' attribute keys (indexed keys
    such as `llm.input_messages.0.…` folded to `.N.`) and event names."""
    rows = {}
    for s in spans(path):
        k = (s["scope"], s["kind"], fold(s["name"]))
        r = rows.setdefault(k, [0, set(), set()])
        r[0] += 1
        r[1].update(".".join("N" if p.isdigit() else p for p in a.split(".")) for a in s["attributes"])
        r[2].update(e["name"] for e in s["events"])
    out = ["| scope | kind | span name | spans | attribute keys | events |", "|---|---|---|---|---|---|"]
    for (scope, kind, name), (n, keys, events) in sorted(rows.items()):
        out.append(f"| `{scope}` | {kind} | `{name}` | {n} | {', '.join(f'`{k}`' for k in sorted(keys)) or '—'} | "
                   f"{', '.join(f'`{e}`' for e in sorted(events)) or '—'} |")
    return "\n".join(out)


def _scrub_kvs(kvs, subs):
    for kv in kvs:
        _scrub_value(kv.value, subs)


def _scrub_value(v, subs):
    which = v.WhichOneof("value")
    if which == "string_value":
        text = v.string_value
        for old, new in subs:
            text = text.replace(old, new)
        v.string_value = text
    elif which == "array_value":
        for x in v.array_value.values:
            _scrub_value(x, subs)
    elif which == "kvlist_value":
        _scrub_kvs(v.kvlist_value.values, subs)


def scrub(src, dst, mark, subs):
    """Copies src to dst with the machine's paths replaced in every string
    value and status message (stack traces, process arguments): recorded runs kept in the repo name
    no directory of the machine that made them. Returns where byte offset
    `mark` of src (a request boundary) falls in dst."""
    out, new_mark, pos = bytearray(), None, 0
    data = open(src, "rb").read()
    while pos < len(data):
        if pos == mark:
            new_mark = len(out)
        n, start = _DecodeVarint(data, pos)
        req = ExportTraceServiceRequest()
        req.ParseFromString(data[start:start + n])
        pos = start + n
        for rs in req.resource_spans:
            _scrub_kvs(rs.resource.attributes, subs)
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    _scrub_kvs(sp.attributes, subs)
                    for e in sp.events:
                        _scrub_kvs(e.attributes, subs)
                    for old, new in subs:  # OpenInference puts the traceback there
                        sp.status.message = sp.status.message.replace(old, new)
        body = req.SerializeToString()
        out += _varint(len(body)) + body
    if pos == mark:
        new_mark = len(out)
    with open(dst, "wb") as f:
        f.write(out)
    return new_mark


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    elif sys.argv[1] == "--scrub":  # --scrub SRC DST MARK OLD=NEW ...: prints the new mark
        print(scrub(sys.argv[2], sys.argv[3], int(sys.argv[4]), [a.split("=", 1) for a in sys.argv[5:]]))
    else:
        for s in spans(sys.argv[1]):
            print(json.dumps(s))
