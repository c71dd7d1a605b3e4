"""DuckDB peer of the lookup bench: the same trace ids against the same
Parquet files. Prints one Markdown table row: | DuckDB … | p50 ms | p99 ms |.

    python3 duckdb_lookup.py '<data_dir>/parquet/spans/*.parquet' ids.txt
"""
import sys
import time

import duckdb


def lookup_ms(con, ids, rows_each=None):
    """p50 and p99 (ms) of `SELECT * FROM spans WHERE trace_id = ?` over
    `ids`, after one warm-up; each answer must have rows (`rows_each` of
    them when given). The bucket bench's DuckDB peer uses it too."""
    con.execute("SELECT * FROM spans WHERE trace_id = ?", [ids[0]]).fetchall()  # warm-up
    lat = []
    for tid in ids:
        t = time.perf_counter()
        rows = con.execute("SELECT * FROM spans WHERE trace_id = ?", [tid]).fetchall()
        lat.append(time.perf_counter() - t)
        assert rows and rows_each in (None, len(rows)), (tid, len(rows))
    lat.sort()

    def pct(p: float) -> float:
        return lat[round((len(lat) - 1) * p)] * 1000

    return pct(0.5), pct(0.99)


def main() -> None:
    glob, ids_path = sys.argv[1], sys.argv[2]
    ids = [line.strip() for line in open(ids_path) if line.strip()]
    con = duckdb.connect()
    # A view so the file list is globbed once, as a long-running server would.
    con.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet('{glob}')")
    p50, p99 = lookup_ms(con, ids)
    print(f"| DuckDB {duckdb.__version__} read_parquet, same files, same ids | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
