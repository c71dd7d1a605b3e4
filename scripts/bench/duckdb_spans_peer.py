#!/usr/bin/env python3
"""Peer for crates/overtime-ingest/benches/collector.rs: DuckDB bulk-loads
the same spans (docs/inputs.md#spans JSON lines) into a table in a database file and
checkpoints it to disk — one bulk load, no network and no per-request
durability, so the comparison favours DuckDB.

    python3 scripts/bench/duckdb_spans_peer.py SPANS.jsonl DB_FILE [--runs 3]

Prints one JSON object: {"engine", "spans", "median_s", "spans_per_s"}.
"""
import argparse
import json
import os
import statistics
import time

import duckdb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("db")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    path = a.jsonl.replace("'", "''")
    runs, n = [], 0
    for _ in range(a.runs):
        if os.path.exists(a.db):
            os.remove(a.db)
        con = duckdb.connect(a.db)
        con.execute("SET threads = 2")
        t = time.perf_counter()
        con.execute(f"CREATE TABLE spans AS SELECT * FROM read_json('{path}', format = 'newline_delimited')")
        con.execute("CHECKPOINT")
        runs.append(time.perf_counter() - t)
        n = con.execute("SELECT count(*) FROM spans").fetchone()[0]
        con.close()
    med = statistics.median(runs)
    print(json.dumps({"engine": f"DuckDB {duckdb.__version__} read_json → table file, 2 threads",
                      "spans": n, "median_s": med, "spans_per_s": n / med}))


if __name__ == "__main__":
    main()
