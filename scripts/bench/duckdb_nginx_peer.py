#!/usr/bin/env python3
"""Peer for benches/nginx_to_arrow.rs: DuckDB reads the same `overtime`-format
(or, with --format ingress-nginx, ingress-nginx `upstreaminfo`) access log and
extracts the same fields into a typed table.

    python3 scripts/bench/duckdb_nginx_peer.py FILE [--runs 5] [--threads 1 2] [--format overtime|ingress-nginx]

One `read_csv` of whole lines, one `regexp_extract` with named groups per line
(all sixteen fields of docs/inputs.md#nginx-access-logs's format in a single pass), then casts: the
time as TIMESTAMPTZ, seconds to ms, the `$upstream_*` lists split on ", " and
" : " into typed lists with their sums, the trace id from `traceparent`, the
two duration headers. It does less than overtime (no `\\xHH` unescaping, no
per-line rejection bookkeeping), so the comparison favours DuckDB.

Prints one JSON object: {"file", "lines", "results": [{"engine", "threads",
"median_s", "lines_per_s", "runs_s"}]}. Installs PyPI `duckdb` with pip if it
is missing; exits non-zero with a clear message if it cannot.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time


def import_duckdb():
    try:
        import duckdb  # noqa: F401

        return duckdb
    except ImportError:
        pass
    print("duckdb_nginx_peer: PyPI `duckdb` missing, running pip install duckdb", file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "duckdb"])
    if r.returncode != 0:
        sys.exit("duckdb_nginx_peer: cannot install PyPI `duckdb` (pip exit %d); "
                 "install it with `pip install duckdb`" % r.returncode)
    import duckdb

    return duckdb


LINE_RE = (
    r'^(\S+) \[([^\]]+)\] "(.*)" (\d+) (\d+) rt=(\S+) uct="([^"]*)" uht="([^"]*)" '
    r'urt="([^"]*)" us="([^"]*)" ua="([^"]*)" rid=(\S+) tp="([^"]*)" mw="([^"]*)" '
    r'llm="([^"]*)" llmd="([^"]*)"$'
)
NAMES = ["remote_addr", "time", "request", "status", "bytes", "rt", "uct", "uht", "urt",
         "us", "ua", "rid", "tp", "mw", "llm", "llmd"]


def nullif_dash(e):
    return f"NULLIF({e}, '-')"


LAMBDA = "lambda x:"  # DuckDB >= 1.3; older versions only know `x ->`


def ms_list(e):
    return (f"list_transform(CASE WHEN {e} IN ('', '-') THEN [] ELSE regexp_split_to_array({e}, ', | : ') END, "
            f"{LAMBDA} TRY_CAST(NULLIF(x, '-') AS DOUBLE) * 1000)")


def duration_ms(e):
    return (f"TRY_CAST(regexp_extract({e}, '^([0-9.]+)', 1) AS DOUBLE) * "
            f"CASE WHEN {e} LIKE '%ms' THEN 1 WHEN {e} LIKE '%us' THEN 0.001 ELSE 1000 END")


# ingress-nginx's default format: the `$upstream_*` lists are unquoted, so
# each is matched as items joined by ", " or " : ".
ITEM = r"[^ ,]+"
LIST = rf"({ITEM}(?:(?:, | : ){ITEM})*)"
INGRESS_RE = (
    r'^(\S+) - (\S+) \[([^\]]+)\] "(.*)" (\d+) (\d+) "([^"]*)" "([^"]*)" (\d+) (\S+) '
    rf'\[([^\]]*)\] \[([^\]]*)\] {LIST} {LIST} {LIST} {LIST} (.*)$'
)
INGRESS_NAMES = ["remote_addr", "remote_user", "time", "request", "status", "bytes", "referer",
                 "agent", "request_length", "rt", "upstream_name", "alternative_name", "ua", "url",
                 "urt", "us", "req_id"]


def ingress_query(path):
    names = ", ".join(f"'{n}'" for n in INGRESS_NAMES)
    return f"""
CREATE OR REPLACE TABLE gateway_requests AS
WITH lines AS (
    SELECT line FROM read_csv('{path}', columns = {{'line': 'VARCHAR'}}, header = false,
        delim = '\x1f', quote = '', escape = '', auto_detect = false, strict_mode = false)
), m AS (
    SELECT regexp_extract(line, '{INGRESS_RE}', [{names}]) AS f FROM lines
), r AS (
    SELECT f, regexp_extract(f.request, '^([A-Z_-]+) (.*) (HTTP/\\S+)$', ['method', 'uri', 'protocol']) AS req,
        {ms_list('f.urt')} AS urt
    FROM m
)
SELECT
    f.remote_addr AS remote_addr,
    {nullif_dash('f.remote_user')} AS remote_user,
    strptime(f.time, '%d/%b/%Y:%H:%M:%S %z') AS time,
    NULLIF(req.method, '') AS method, NULLIF(req.uri, '') AS uri, NULLIF(req.protocol, '') AS protocol,
    TRY_CAST(f.status AS USMALLINT) AS status,
    TRY_CAST(f.bytes AS BIGINT) AS body_bytes_sent,
    {nullif_dash('f.referer')} AS http_referer,
    {nullif_dash('f.agent')} AS http_user_agent,
    TRY_CAST(f.request_length AS BIGINT) AS request_length,
    TRY_CAST(f.rt AS DOUBLE) * 1000 AS request_time_ms,
    NULLIF(f.upstream_name, '') AS proxy_upstream_name,
    NULLIF(f.alternative_name, '') AS proxy_alternative_upstream_name,
    CASE WHEN f.ua IN ('', '-') THEN [] ELSE regexp_split_to_array(f.ua, ', | : ') END AS upstream_addr,
    {nullif_dash('f.url')} AS upstream_response_length,
    urt AS upstream_response_ms, list_sum(urt) AS upstream_response_ms_sum,
    list_transform(CASE WHEN f.us IN ('', '-') THEN [] ELSE regexp_split_to_array(f.us, ', | : ') END,
        {LAMBDA} TRY_CAST(NULLIF(x, '-') AS USMALLINT)) AS upstream_status,
    {nullif_dash('f.req_id')} AS request_id
FROM r
"""


def query(path):
    names = ", ".join(f"'{n}'" for n in NAMES)
    return f"""
CREATE OR REPLACE TABLE gateway_requests AS
WITH lines AS (
    SELECT line FROM read_csv('{path}', columns = {{'line': 'VARCHAR'}}, header = false,
        delim = '\x1f', quote = '', escape = '', auto_detect = false, strict_mode = false)
), m AS (
    SELECT regexp_extract(line, '{LINE_RE}', [{names}]) AS f FROM lines
), r AS (
    SELECT f, regexp_extract(f.request, '^([A-Z_-]+) (.*) (HTTP/\\S+)$', ['method', 'uri', 'protocol']) AS req,
        {ms_list('f.uct')} AS uct, {ms_list('f.uht')} AS uht, {ms_list('f.urt')} AS urt
    FROM m
)
SELECT
    f.remote_addr AS remote_addr,
    TRY_CAST(f.time AS TIMESTAMPTZ) AS time,
    NULLIF(req.method, '') AS method, NULLIF(req.uri, '') AS uri, NULLIF(req.protocol, '') AS protocol,
    TRY_CAST(f.status AS USMALLINT) AS status,
    TRY_CAST(f.bytes AS BIGINT) AS body_bytes_sent,
    TRY_CAST(f.rt AS DOUBLE) * 1000 AS request_time_ms,
    uct AS upstream_connect_ms, uht AS upstream_header_ms, urt AS upstream_response_ms,
    list_sum(uct) AS upstream_connect_ms_sum, list_sum(uht) AS upstream_header_ms_sum,
    list_sum(urt) AS upstream_response_ms_sum,
    list_transform(CASE WHEN f.us IN ('', '-') THEN [] ELSE regexp_split_to_array(f.us, ', | : ') END,
        {LAMBDA} TRY_CAST(NULLIF(x, '-') AS USMALLINT)) AS upstream_status,
    {nullif_dash('f.us')} AS upstream_status_raw,
    CASE WHEN f.ua IN ('', '-') THEN [] ELSE regexp_split_to_array(f.ua, ', | : ') END AS upstream_addr,
    {nullif_dash('f.rid')} AS request_id,
    {nullif_dash('f.tp')} AS traceparent,
    lower(NULLIF(split_part(f.tp, '-', 2), '')) AS trace_id,
    {duration_ms('f.mw')} AS max_wait_ms,
    {nullif_dash('f.llm')} AS llm_reason,
    {duration_ms('f.llmd')} AS llm_duration_ms
FROM r
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--format", choices=["overtime", "ingress-nginx"], default="overtime")
    ap.add_argument("--db", help="a database file to write the table into (checkpointed each run), "
                                 "instead of memory")
    args = ap.parse_args()
    duckdb = import_duckdb()
    global LAMBDA
    if tuple(int(p) for p in duckdb.__version__.split(".")[:2] if p.isdigit()) < (1, 3):
        LAMBDA = "x ->"
    path = args.file.replace("'", "''")
    with open(args.file, "rb") as fh:
        lines = sum(1 for _ in fh)
    results = []
    for threads in args.threads:
        con = duckdb.connect(args.db or ":memory:")
        con.execute(f"SET threads = {threads}")
        q = ingress_query(path) if args.format == "ingress-nginx" else query(path)
        con.execute(q)  # warm-up (and page cache)
        got = con.execute("SELECT count(*), count(status) FROM gateway_requests").fetchone()
        if got[0] != lines or got[1] != lines:
            sys.exit(f"duckdb_nginx_peer: extracted {got} rows of {lines} lines: the regex does not match the file")
        runs = []
        for _ in range(args.runs):
            t = time.perf_counter()
            con.execute(q)
            if args.db:
                con.execute("CHECKPOINT")
            runs.append(time.perf_counter() - t)
        med = statistics.median(runs)
        results.append({
            "engine": f"DuckDB {duckdb.__version__} read_csv+regexp_extract" + (" → table file" if args.db else ""),
            "threads": threads,
            "median_s": med,
            "lines_per_s": lines / med,
            "runs_s": runs,
        })
        con.close()
    print(json.dumps({"file": args.file, "lines": lines, "results": results}))


if __name__ == "__main__":
    main()
