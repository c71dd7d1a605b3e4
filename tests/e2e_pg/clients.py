#!/usr/bin/env python3
"""Real PostgreSQL clients against a running `overtime serve`'s wire
protocol ([sql.postgres]), each answer checked against POST /api/sql's rows
for the same SQL. Run by crates/overtime/tests/postgres.rs.

usage: clients.py --install-only [--venv DIR]
       clients.py --pg HOST:PORT --api HOST:PORT --token TOKEN --queries DIR
                  --dashboard FILE [--venv DIR]

Each client connects with the token as the password, lists the tables,
runs every file in queries/, a parameterised query and a long query it
cancels:
- psycopg 3 (PyPI, pinned in requirements.txt), as a notebook uses it;
- pgcli's PGExecute (PyPI): the catalog queries pgcli runs for completion,
  and its query path;
- psql (Debian's postgresql-client): \\dt, \\d, \\d verdicts, CSV output,
  SIGINT cancel;
- pgjdbc (Debian's libpostgresql-jdbc-java) through JdbcClient.java:
  DatabaseMetaData, Statement, PreparedStatement, Statement.cancel().
Then Grafana's PostgreSQL data source: its connection test, table and
column pickers and version probe, and every panel of the 504 dashboard that
reads PostgreSQL, expanded as Grafana expands it (grafana.py), over the
extended protocol with binary results as Grafana's pgx driver asks.

A missing tool is an error naming what to install; nothing is skipped.
Prints one line per check; exits 1 on the first failure.
"""

import argparse
import datetime as dt
import decimal
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
DEFAULT_VENV = os.path.expanduser("~/.cache/overtime-e2e-pg/venv")
JDBC_JAR = "/usr/share/java/postgresql.jar"
TABLES = {"gateway_requests", "spans", "rejected", "verdicts", "incidents", "model_server_metrics"}
# Runs until a bound stops it: one row per recursion, nothing to hold.
ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
PARAM_SQL = "SELECT count(*) AS n FROM verdicts WHERE outcome = {} AND elapsed_ms >= {}"


def log(msg):
    print(f"e2e_pg: {msg}", flush=True)


def fail(msg):
    print(f"e2e_pg: FAILED: {msg}", flush=True)
    sys.exit(1)


def install(venv):
    """Creates the venv and installs the pinned requirements, unless it
    already holds exactly them."""
    want = hashlib.sha256(open(REQUIREMENTS, "rb").read()).hexdigest()
    marker = os.path.join(venv, ".requirements.sha256")
    if os.path.exists(marker) and open(marker).read() == want:
        return
    log(f"installing {REQUIREMENTS} into {venv}")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    py = os.path.join(venv, "bin", "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", REQUIREMENTS],
                   check=True, timeout=900)
    with open(marker, "w") as f:
        f.write(want)


# ---- comparing values from different clients


def _as_time(v):
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
    if isinstance(v, str) and re.match(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d", v):
        s = v.replace(" ", "T", 1)
        s = re.sub(r"Z$", "+00:00", s)
        s = re.sub(r"([+-]\d\d)$", r"\1:00", s)
        try:
            t = dt.datetime.fromisoformat(s)
        except ValueError:
            return None
        return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
    return None


def _as_number(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def same(a, b):
    """Whether two clients' renderings of one value agree: JSON from the
    HTTP API, Python objects from psycopg, text from psql and JDBC."""
    if a is None or b is None:
        return a is None and b is None or a == "" and b is None or a is None and b == ""
    if isinstance(a, bool) or isinstance(b, bool):
        truth = {True: True, False: False, "t": True, "f": False, "true": True, "false": False}
        return truth.get(a if not isinstance(a, str) else a.lower()) == truth.get(b if not isinstance(b, str) else b.lower())
    ta, tb = _as_time(a), _as_time(b)
    if ta is not None and tb is not None:
        return ta == tb
    na, nb = _as_number(a), _as_number(b)
    if na is not None and nb is not None:
        return na == nb or abs(na - nb) <= 1e-9 * max(abs(na), abs(nb))
    return str(a) == str(b)


def compare(client, name, ref, columns, rows):
    """Fails unless `rows` (lists, in `columns` order) are `ref`'s rows."""
    if [c.lower() for c in columns] != [c.lower() for c in ref["columns"]] and ref["rows"]:
        fail(f"{client} {name}: columns {columns} != POST /api/sql's {ref['columns']}")
    if len(rows) != len(ref["rows"]):
        fail(f"{client} {name}: {len(rows)} rows, POST /api/sql {len(ref['rows'])}")
    for i, (row, want) in enumerate(zip(rows, ref["rows"])):
        for c, v in zip(ref["columns"], row):
            if not same(want.get(c), v):
                fail(f"{client} {name}: row {i} column {c}: {v!r} != POST /api/sql's {want.get(c)!r}")


# ---- the HTTP API: the reference


def api_sql(api, token, sql):
    req = urllib.request.Request(f"http://{api}/api/sql", data=json.dumps({"sql": sql}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        doc = json.load(r)
    if doc.get("truncated"):
        fail(f"POST /api/sql truncated {sql[:60]!r}: a reference must be whole")
    return doc


def pg_counter(api, token, outcome):
    req = urllib.request.Request(f"http://{api}/metrics", headers={"Authorization": f"Bearer {token}"})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    m = re.search(r'^overtime_postgres_connections_total\{outcome="%s"\} (\d+)' % outcome, text, re.M)
    return int(m.group(1)) if m else None


# ---- the clients


def check_psycopg(a, queries, refs):
    import psycopg

    conn = psycopg.connect(host=a.host, port=a.port, user="overtime", password=a.token, dbname="overtime",
                           sslmode="disable", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")
        tables = {r[0] for r in cur.fetchall()}
        if tables != TABLES:
            fail(f"psycopg: information_schema.tables lists {sorted(tables)}, not {sorted(TABLES)}")
        for name, sql in queries:
            cur.execute(sql)
            compare("psycopg", name, refs[name], [d.name for d in cur.description], cur.fetchall())
        # Parameters bound by the server (psycopg 3's extended protocol),
        # once plainly and once prepared, then in binary.
        want = api_sql(a.api, a.token, PARAM_SQL.format("'gateway_timeout'", "0"))
        for kw in ({}, {"prepare": True}, {"binary": True}):
            cur.execute(PARAM_SQL.format("%s", "%s"), ("gateway_timeout", 0.0), **kw)
            compare("psycopg", f"parameterised {kw}", want, [d.name for d in cur.description], cur.fetchall())
    log(f"psycopg: tables listed, {len(queries)} queries and a parameterised one equal POST /api/sql")

    # conn.cancel() from another thread while the query runs.
    result = {}

    def endless():
        try:
            with conn.cursor() as c:
                c.execute(ENDLESS)
            result["error"] = None
        except psycopg.Error as e:
            result["error"] = e

    t = threading.Thread(target=endless)
    t.start()
    for _ in range(20):
        t.join(1.0)
        if not t.is_alive():
            break
        conn.cancel()
    t.join()
    e = result.get("error")
    if not isinstance(e, psycopg.errors.QueryCanceled) or "user request" not in str(e):
        fail(f"psycopg: a cancelled query answered {e!r}, not 57014 'canceling statement due to user request'")
    with conn.cursor() as cur:
        cur.execute("SET statement_timeout = '1500ms'")
        try:
            cur.execute(ENDLESS)
            fail("psycopg: a query that never ends came back with rows")
        except psycopg.errors.QueryCanceled as e:
            if "statement timeout" not in str(e):
                fail(f"psycopg: the time bound answered {e!r}")
        cur.execute("SHOW statement_timeout")
        shown = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM verdicts")
        cur.fetchone()
    log(f"psycopg: cancel -> 57014 user request; statement_timeout {shown} -> 57014 statement timeout; still answers")
    conn.close()


def check_pgcli(a, queries, refs):
    from pgcli.pgexecute import PGExecute

    pge = PGExecute(database="overtime", user="overtime", password=a.token, host=a.host, port=a.port,
                    sslmode="disable")
    tables = {t for s, t in pge.tables() if s == "public"}
    if tables != TABLES:
        fail(f"pgcli: PGExecute.tables() lists {sorted(tables)} in public, not {sorted(TABLES)}")
    cols = {c[2] for c in pge.table_columns() if c[1] == "verdicts"}
    for want in ("trace_id", "started_at", "kind", "component", "share"):
        if want not in cols:
            fail(f"pgcli: PGExecute.table_columns() has no verdicts.{want}: {sorted(cols)}")
    schemata = list(pge.schemata())
    if "public" not in schemata:
        fail(f"pgcli: schemata {schemata}")
    search_path = pge.search_path()
    for name, sql in queries:
        results = list(pge.run(sql))
        _title, rows, headers, _status, *_ = results[-1]
        compare("pgcli", name, refs[name], headers, [list(r) for r in rows])
    log(f"pgcli: tables, columns, schemata {schemata}, search_path {search_path}; {len(queries)} queries equal POST /api/sql")
    # Parameterised and cancelled, through pgcli's own connection.
    want = api_sql(a.api, a.token, PARAM_SQL.format("'gateway_timeout'", "0"))
    with pge.conn.cursor() as cur:
        cur.execute(PARAM_SQL.format("%s", "%s"), ("gateway_timeout", 0))
        compare("pgcli", "parameterised", want, [d.name for d in cur.description], cur.fetchall())
    import psycopg

    err = {}

    def endless():
        try:
            list(pge.run(ENDLESS))
        except psycopg.Error as e:
            err["e"] = e

    t = threading.Thread(target=endless)
    t.start()
    for _ in range(20):
        t.join(1.0)
        if not t.is_alive():
            break
        pge.conn.cancel()
    t.join()
    if "user request" not in str(err.get("e")):
        fail(f"pgcli: a cancelled query answered {err.get('e')!r}")
    log("pgcli: a parameterised query equals POST /api/sql; a cancelled one -> 57014 user request")


def csv_rows(text):
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], [[None if v == "" else v for v in r] for r in rows[1:]]


def check_psql(a, queries, refs):
    psql = shutil.which("psql")
    if not psql:
        fail("psql is missing: apt-get install postgresql-client")
    conninfo = f"host={a.host} port={a.port} user=overtime dbname=overtime sslmode=disable"
    env = dict(os.environ, PGPASSWORD=a.token, PGCONNECT_TIMEOUT="10")

    def run(*args, ok=True, stdin=None):
        p = subprocess.run([psql, conninfo, "-X", "-v", "ON_ERROR_STOP=1", *args], env=env, input=stdin,
                           capture_output=True, text=True, timeout=120)
        if ok and p.returncode != 0:
            fail(f"psql {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    out = run("-c", "\\dt").stdout
    for t in TABLES:
        if not re.search(rf"\b{t}\b", out):
            fail(f"psql \\dt does not list {t}:\n{out}")
    out = run("-c", "\\d").stdout
    if "verdicts" not in out:
        fail(f"psql \\d:\n{out}")
    out = run("-c", "\\d verdicts").stdout
    for col in ("trace_id", "started_at", "component"):
        if col not in out:
            fail(f"psql \\d verdicts has no {col}:\n{out}")
    for name, sql in queries:
        header, rows = csv_rows(run("--csv", "-c", sql).stdout)
        compare("psql", name, refs[name], header, rows)
    # psql 15 has no \bind (16 has); its variables are interpolated by psql
    # in a script (not in -c, which goes to the server as is).
    want = api_sql(a.api, a.token, PARAM_SQL.format("'gateway_timeout'", "0"))
    header, rows = csv_rows(run("--csv", "-v", "outcome=gateway_timeout", "-v", "least=0", "-f", "-",
                                stdin=PARAM_SQL.format(":'outcome'", ":least") + ";\n").stdout)
    compare("psql", "parameterised", want, header, rows)
    # Ctrl-C: psql sends a CancelRequest.
    p = subprocess.Popen([psql, conninfo, "-X", "-c", ENDLESS], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(20):
            try:
                p.wait(1.0)
                break
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    if "canceling statement due to user request" not in err:
        fail(f"psql: Ctrl-C on a long query answered {err.strip()!r}")
    log(f"psql: \\dt, \\d, \\d verdicts; {len(queries)} queries and a parameterised one equal POST /api/sql; Ctrl-C cancels")


def check_jdbc(a, queries, refs):
    java = shutil.which("java")
    if not java:
        fail("java is missing: apt-get install default-jdk-headless")
    modules = subprocess.run([java, "--list-modules"], capture_output=True, text=True, timeout=60).stdout
    if "jdk.compiler@" not in modules:
        fail("java cannot run JdbcClient.java (no jdk.compiler, a JRE only): apt-get install default-jdk-headless")
    if not os.path.exists(JDBC_JAR):
        fail(f"{JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java")
    files = [os.path.join(a.queries, n) for n, _ in queries]
    p = subprocess.run([java, "-cp", JDBC_JAR, os.path.join(HERE, "JdbcClient.java"), a.host, str(a.port), a.token,
                        *files], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"JDBC client: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    docs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    by = {}
    for d in docs:
        by.setdefault(d["what"], []).append(d)
    tables = {r[d_idx] for d in by["tables"] for d_idx in [d["columns"].index("TABLE_NAME")] for r in d["rows"]}
    if tables != TABLES:
        fail(f"JDBC getTables lists {sorted(tables)}")
    cols = {r[by["columns"][0]["columns"].index("COLUMN_NAME")] for r in by["columns"][0]["rows"]}
    if not {"trace_id", "started_at", "kind"} <= cols:
        fail(f"JDBC getColumns(verdicts) lists {sorted(cols)}")
    for d in by["query"]:
        compare("JDBC", d["name"], refs[d["name"]], d["columns"], d["rows"])
    if len(by["query"]) != len(queries):
        fail(f"JDBC ran {len(by['query'])} of {len(queries)} queries")
    want = api_sql(a.api, a.token, PARAM_SQL.format("'gateway_timeout'", "0"))
    compare("JDBC", "PreparedStatement", want, by["param"][0]["columns"], by["param"][0]["rows"])
    c = by["cancel"][0]
    if c["sqlstate"] != "57014" or "user request" not in c["message"]:
        fail(f"JDBC Statement.cancel(): {c}")
    log(f"JDBC (pgjdbc): getTables, getColumns; {len(queries)} queries and a PreparedStatement equal POST /api/sql; cancel -> 57014")


def panels(dashboard):
    """Every PostgreSQL target of the dashboard: (title, format, rawSql)."""
    doc = json.load(open(dashboard))
    out = []
    for p in doc.get("panels", []):
        for t in p.get("targets", []):
            ds = t.get("datasource") or p.get("datasource") or {}
            if isinstance(ds, dict) and ds.get("type") == "grafana-postgresql-datasource" and t.get("rawSql"):
                out.append((p.get("title", "?"), t.get("format", "time_series"), t["rawSql"]))
    return out


def check_grafana(a):
    import psycopg

    import grafana

    conn = psycopg.connect(host=a.host, port=a.port, user="overtime", password=a.token, dbname="overtime",
                           sslmode="disable", autocommit=True)
    with conn.cursor() as cur:
        # The connection test (db.Ping: an empty statement) and SELECT 1.
        cur.execute("-- ping")
        cur.execute("SELECT 1")
        cur.execute(grafana.GET_VERSION)
        version = cur.fetchone()[0]
        cur.execute(grafana.SHOW_TABLES)
        picked = [r[0] for r in cur.fetchall()]
        if not {t.split(".")[-1] for t in picked} >= TABLES:
            fail(f"Grafana's table picker lists {picked}")
        verdicts = next(t for t in picked if t.split(".")[-1] == "verdicts")
        cur.execute(grafana.get_schema(verdicts))
        columns = {r[0]: r[1] for r in cur.fetchall()}
        if "started_at" not in columns or "kind" not in columns:
            fail(f"Grafana's column picker for {verdicts} lists {columns}")
    log(f"Grafana: connection test, version {version}, table picker {picked}, column picker ({len(columns)} columns of {verdicts})")
    # The time range: the incident's, as an SRE would pick it.
    span = api_sql(a.api, a.token, "SELECT min(started_at) AS lo, max(started_at) AS hi FROM verdicts")["rows"][0]
    lo, hi = _as_time(span["lo"]), _as_time(span["hi"])
    frm, to = lo - dt.timedelta(minutes=5), hi + dt.timedelta(minutes=5)
    found = panels(a.dashboard)
    if not found:
        fail(f"{a.dashboard} has no PostgreSQL panel")
    with conn.cursor() as cur:
        for title, fmt, raw in found:
            sql = grafana.expand(raw, frm, to)
            # pgx: extended protocol, binary results.
            cur.execute(sql, binary=True)
            rows = cur.fetchall()
            if not rows:
                fail(f"Grafana panel {title!r}: no rows for\n{sql}")
            names = [d.name for d in cur.description]
            if fmt == "time_series" and "time" not in names:
                fail(f"Grafana panel {title!r}: a time series without a time column: {names}")
            log(f"Grafana panel {title!r} ({fmt}): {len(rows)} rows, columns {names}")
    conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--install-only", action="store_true")
    ap.add_argument("--venv", default=DEFAULT_VENV)
    ap.add_argument("--pg")
    ap.add_argument("--api")
    ap.add_argument("--token")
    ap.add_argument("--queries")
    ap.add_argument("--dashboard")
    a = ap.parse_args()
    if a.install_only:
        install(a.venv)
        return
    py = os.path.join(a.venv, "bin", "python")
    if os.path.realpath(sys.prefix) != os.path.realpath(a.venv):
        if not os.path.exists(py):
            fail(f"no venv at {a.venv}: run python3 tests/e2e_pg/clients.py --install-only")
        os.execv(py, [py, *sys.argv])
    a.host, port = a.pg.rsplit(":", 1)
    a.port = int(port)
    names = sorted(n for n in os.listdir(a.queries) if n.endswith(".sql"))
    queries = [(n, open(os.path.join(a.queries, n)).read()) for n in names]
    refs = {n: api_sql(a.api, a.token, sql) for n, sql in queries}
    counts = ", ".join(f"{n} {len(r['rows'])} rows" for n, r in refs.items())
    log(f"POST /api/sql: {counts}")
    sys.path.insert(0, HERE)
    t0 = time.monotonic()
    check_psycopg(a, queries, refs)
    check_pgcli(a, queries, refs)
    check_psql(a, queries, refs)
    check_jdbc(a, queries, refs)
    check_grafana(a)
    log(f"all clients agree with POST /api/sql ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
