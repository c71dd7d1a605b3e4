#!/usr/bin/env python3
"""`overtime diagnose` at 1, 4 and 10 GB, beside DuckDB on the same files.

    cargo build --release -p overtime
    python3 scripts/bench/diagnose_at_scale.py [--sizes 1,4,10] [--shaped 4]
        [--data /work/bench-data] [--bin target/release/overtime] [--threads 2] [--keep]

For each size S: `scripts/bench/gen_big.py` writes an `overtime`-format
access log of S GB and the JSONL spans of 10 % of its requests (2 % of the
requests are 504s); then, in the same run and on the same files:

- `overtime diagnose --parse-only`: reading and parsing alone, every core
  (the raw parse speed the diagnosis is held against);
- `overtime diagnose --json` at the default `--memory-limit`;
- DuckDB (PyPI `duckdb`, in a venv made on first use) joining the failing
  gateway lines to their spans by trace id and picking each failing trace's
  longest span (scripts/bench/duckdb_diagnose_peer.py), same threads.

Each is timed and its peak RSS taken by /usr/bin/time. `--shaped S` adds a
run on S GB of the harder shape: two gateway layers (the edge logs only the
request id), spans shuffled and 3 % duplicated, every log a rotated set with
gzipped old files. A size is skipped (and said so) when the disk has less
free space than it needs. Generated data is deleted after each size unless
`--keep` (a kept set is reused by the next run). Prints a Markdown table,
then the machine.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def duckdb_python(data):
    """A python with duckdb: this one, or a venv made next to the data."""
    try:
        import duckdb  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    venv = os.path.join(os.path.expanduser("~"), ".cache", "overtime-bench-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        print(f"bench: making a venv with PyPI duckdb in {venv}", file=sys.stderr)
        sh([sys.executable, "-m", "venv", venv])
        sh([py, "-m", "pip", "install", "--quiet", "duckdb"])
    return py


def timed(cmd, stdout=subprocess.DEVNULL, env=None):
    """(wall s, peak RSS MiB, stderr text) of a command."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", t.name] + cmd,
                           stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        wall, rss_kb = open(t.name).read().split()[-2:]
    return float(wall), int(rss_kb) / 1024, r.stderr


def free_gb(path):
    return shutil.disk_usage(path).free / 1e9


def counted(stderr, what):
    """Sum of `N <what> read` over overtime's per-file report lines."""
    n = 0
    for line in stderr.splitlines():
        marker = f" {what} read, "
        if marker in line:
            n += int(line.split(marker)[0].rsplit(" ", 1)[1])
    return n


def run_size(args, py, label, gb, shaped):
    out = os.path.join(args.data, label)
    need = gb * 3.2 + 4
    done = os.path.join(out, ".generated")
    if not os.path.exists(done) and free_gb(args.data) < need:
        return {"input": label, "skipped": f"{free_gb(args.data):.0f} GB free, needs ~{need:.0f} GB"}
    gen = [sys.executable, os.path.join(HERE, "gen_big.py"), out, str(gb * 1024), "0.1"]
    if shaped:
        gen += ["--layers", "2", "--shuffle", "200000", "--dup", "0.03", "--rotate", "4"]
    # A set generated (and kept) by an earlier run is reused: the generator
    # is seeded, so it would write the same bytes.
    if not os.path.exists(done):
        print(f"bench: generating {label} …", file=sys.stderr)
        shutil.rmtree(out, ignore_errors=True)
        sh(["nice", "-n", "19"] + gen, stdout=sys.stderr)
        open(done, "w").write(" ".join(gen[1:]) + "\n")
    files = sorted(f for f in os.listdir(out) if not f.startswith("."))
    logs = [os.path.join(out, f) for f in files if f.startswith(("edge.log", "access.log"))]
    spans = [os.path.join(out, "spans.jsonl")]
    on_disk = sum(os.path.getsize(p) for p in logs + spans)
    # Every engine reads the files from the page cache: the generator's
    # writes are on disk first, and the files are read once untimed (a
    # run right after generating, or after another size pushed them out of
    # the cache, measured the disk instead).
    os.sync()
    for p in logs + spans:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    args_in = []
    if shaped:
        args_in += ["--nginx-log", os.path.join(out, "edge.log*"), "--log-format", "overtime"]
    args_in += ["--nginx-log", os.path.join(out, "access.log*"), "--log-format", "overtime",
                "--spans", spans[0], "--threads", str(args.threads), "--quiet"]
    env = dict(os.environ, OVERTIME_PROFILE="1")
    parse_wall, parse_rss, _ = timed([args.bin, "diagnose", "--parse-only"] + args_in, env=env)
    wall, rss, err = timed([args.bin, "diagnose", "--json"] + args_in, env=env)
    text = on_disk
    for l in err.splitlines():
        if " text bytes " in l:
            words = l.split()
            text = int(words[words.index("text") - 1])
    lines, nspans = counted(err, "gateway lines"), counted(err, "spans")
    peer = [py, os.path.join(HERE, "duckdb_diagnose_peer.py"), "--log"] + logs + ["--spans"] + spans + [
        "--threads", str(args.threads)]
    with tempfile.TemporaryFile("w+") as o:
        dwall, drss, _ = timed(peer, stdout=o)
        o.seek(0)
        duck = json.loads(o.read())
    row = {
        "input": label, "on_disk_gb": on_disk / 1e9, "text_gb": text / 1e9, "lines": lines, "spans": nspans,
        "wall_s": wall, "mb_s": text / 1e6 / wall, "lines_s": lines / wall, "rss_mib": rss,
        "parse_wall_s": parse_wall, "parse_rss_mib": parse_rss,
        "duckdb_wall_s": dwall, "duckdb_rss_mib": drss, "duckdb": duck["engine"],
        "duckdb_failing": duck["failing_traces"],
        "profile": [l for l in err.splitlines() if "profile" in l or "traces (" in l],
    }
    if not args.keep:
        shutil.rmtree(out)
    return row


def table(rows, threads):
    print(f"| input | lines / spans | overtime diagnose | MB/s | lines/s | peak RSS | parse only "
          f"| DuckDB join + argmax ({threads} threads) | DuckDB RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['input']} | skipped: {r['skipped']} | | | | | | | |")
            continue
        print(f"| {r['input']} ({r['on_disk_gb']:.1f} GB on disk) | {r['lines']/1e6:.1f} M / {r['spans']/1e6:.1f} M "
              f"| {r['wall_s']:.1f} s | {r['mb_s']:.0f} | {r['lines_s']/1e6:.2f} M | {r['rss_mib']:.0f} MiB "
              f"| {r['parse_wall_s']:.1f} s ({r['wall_s']/r['parse_wall_s']:.1f}×) "
              f"| {r['duckdb_wall_s']:.1f} s ({r['duckdb_wall_s']/r['wall_s']:.1f}× overtime's) "
              f"| {r['duckdb_rss_mib']:.0f} MiB |")


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,10")
    ap.add_argument("--shaped", type=float, default=0, help="GB of the harder shape (0: none)")
    ap.add_argument("--data", default="/work/bench-data")
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                  "release", "overtime"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"bench: no binary at {args.bin}: cargo build --release -p overtime (or --bin)")
    os.makedirs(args.data, exist_ok=True)
    py = duckdb_python(args.data)
    rows = []
    for s in args.sizes.split(","):
        if s:
            rows.append(run_size(args, py, f"{s} GB", float(s), False))
    if args.shaped:
        rows.append(run_size(args, py, f"{args.shaped:g} GB shaped", args.shaped, True))
    print(json.dumps(rows, indent=1), file=sys.stderr)
    table(rows, args.threads)
    print(f"\nMachine: {machine()}.")


if __name__ == "__main__":
    main()
