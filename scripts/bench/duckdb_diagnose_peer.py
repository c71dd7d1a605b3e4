#!/usr/bin/env python3
"""Peer for the diagnose-at-scale bench (scripts/bench/diagnose_at_scale.py):
what an SRE would otherwise run on the same files — DuckDB reading the
gateway logs and the JSONL spans, joining the failing requests (status >= 500)
to their spans by trace id, and picking per failing trace the span that holds
the most time (its dominant child).

    python3 scripts/bench/duckdb_diagnose_peer.py --log FILE... --spans FILE... [--threads 2]

DuckDB's best plan for these files: the log read as one text column with
string functions (no regex: `split_part` is several times faster than
`regexp_extract`), only the needed span fields read (`columns=`), failing
trace ids filtered before the join, `arg_max` for the dominant span. `.gz`
logs are read as they are. It does far less than overtime (no critical path,
no verdict rules, no incidents), so the comparison favours DuckDB.

Prints one JSON object: {"engine", "threads", "wall_s", "failing_traces",
"by_dominant": {span name: traces}}.
"""

import argparse
import json
import time

import duckdb


def quote_list(paths):
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", nargs="+", required=True)
    ap.add_argument("--spans", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {a.threads}")
    con.execute("SET preserve_insertion_order = false")
    q = f"""
WITH failing AS (
    SELECT DISTINCT split_part(split_part(line, 'tp="00-', 2), '-', 1) AS trace_id
    FROM read_csv({quote_list(a.log)}, columns = {{'line': 'VARCHAR'}}, header = false,
        delim = '\\x1f', quote = '', escape = '', auto_detect = false, strict_mode = false)
    WHERE TRY_CAST(split_part(split_part(line, '" ', 2), ' ', 1) AS INTEGER) >= 500
      AND contains(line, 'tp="00-')
), spans AS (
    SELECT trace_id, name, coalesce(duration_ms, end_time - start_time) AS dur
    FROM read_json({quote_list(a.spans)}, format = 'newline_delimited',
        columns = {{'trace_id': 'VARCHAR', 'name': 'VARCHAR', 'parent_span_id': 'VARCHAR',
                   'start_time': 'BIGINT', 'end_time': 'BIGINT', 'duration_ms': 'DOUBLE'}})
    WHERE parent_span_id IS NOT NULL
), dominant AS (
    SELECT f.trace_id, arg_max(s.name, s.dur) AS name, max(s.dur) AS ms
    FROM failing f JOIN spans s USING (trace_id)
    GROUP BY f.trace_id
)
SELECT name, count(*) FROM dominant GROUP BY name ORDER BY 2 DESC
"""
    t = time.perf_counter()
    rows = con.execute(q).fetchall()
    wall = time.perf_counter() - t
    print(json.dumps({
        "engine": f"DuckDB {duckdb.__version__}",
        "threads": a.threads,
        "wall_s": wall,
        "failing_traces": sum(n for _, n in rows),
        "by_dominant": {name: n for name, n in rows},
    }))


if __name__ == "__main__":
    main()
