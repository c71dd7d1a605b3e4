"""DuckDB peer of the bucket bench (benches/bucket.rs): the same trace ids
and the same 504s-by-cause query against the same Parquet objects in the
same S3-compatible bucket. DuckDB reads the bucket through fsspec (PyPI
`s3fs`), registered as its filesystem for s3:// — its own httpfs extension
is downloaded at run time, which a closed network cannot. The object list
is globbed once, as a long-running server would, and Parquet metadata is
cached: DuckDB's best plan for repeated lookups.

    python3 duckdb_bucket.py 's3://bucket/prefix/spans/**/*.parquet' ids.txt QUERY expected.txt

Endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY. Prints one Markdown table row; exits non-zero when
the query's rows differ from expected.txt (overtime's answer).
"""
import os
import statistics
import sys
import time

import duckdb
import s3fs

from duckdb_lookup import lookup_ms


def main() -> None:
    glob, ids_path, query, expected_path = sys.argv[1:5]
    ids = [line.strip() for line in open(ids_path) if line.strip()]
    expected = [line for line in open(expected_path).read().splitlines() if line]
    fs = s3fs.S3FileSystem(
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        key=os.environ["AWS_ACCESS_KEY_ID"],
        secret=os.environ["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"region_name": os.environ.get("AWS_REGION", "us-east-1")},
    )
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    try:
        con.execute("SET parquet_metadata_cache = true")
    except duckdb.Error:
        con.execute("SET enable_object_cache = true")
    con.register_filesystem(fs)
    files = ["s3://" + f for f in fs.glob(glob[len("s3://"):])]
    assert files, f"no objects match {glob}"
    listing = ", ".join(f"'{f}'" for f in files)
    con.execute(f"CREATE VIEW spans AS SELECT * FROM read_parquet([{listing}])")

    p50, p99 = lookup_ms(con, ids, rows_each=8)
    print(f"duckdb_bucket: {len(ids)} lookups, p50 {p50:.2f} ms", file=sys.stderr)

    runs = []
    got = []
    for _ in range(5):
        t = time.perf_counter()
        got = con.execute(query).fetchall()
        runs.append(time.perf_counter() - t)
    try:
        # Where DuckDB's speed on a repeated query comes from: its
        # external file cache (on by default) serves the objects' bytes
        # from memory. The same query with it off, for the record.
        con.execute("SET enable_external_file_cache = false")
        cold = []
        for _ in range(3):
            t = time.perf_counter()
            con.execute(query).fetchall()
            cold.append(time.perf_counter() - t)
        print(
            f"duckdb_bucket: 504s by cause without the external file cache, "
            f"median {statistics.median(cold) * 1000:.0f} ms",
            file=sys.stderr,
        )
    except duckdb.Error as e:
        print(f"duckdb_bucket: no external file cache setting: {e}", file=sys.stderr)
    got = [",".join("" if v is None else str(v) for v in r) for r in got]
    if got != expected:
        sys.exit(f"DuckDB's 504s by cause differ from overtime's:\n{got}\n{expected}")
    print(
        f"| DuckDB {duckdb.__version__} over s3fs, same objects, same ids "
        f"| {p50:.2f} | {p99:.2f} | {statistics.median(runs) * 1000:.0f} |"
    )


if __name__ == "__main__":
    main()
