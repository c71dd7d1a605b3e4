"""What Grafana's built-in PostgreSQL data source sends, rebuilt from its
source so a test can send exactly that to overtime.

- expand(): the backend's query expansion, in the order Grafana runs it:
  the global substitutions of
  pkg/tsdb/grafana-postgresql-datasource/sqleng/sql_engine.go (`Interpolate`,
  grafana/grafana@e509a738db0902b79cd686c99609c9cb45af4fb3), then the
  PostgreSQL macros of pkg/tsdb/grafana-postgresql-datasource/macros.go
  (grafana/grafana@0577088076c3920f31aa0ca03cf8ac62e08f4d5b), non-TimescaleDB.
- SHOW_TABLES, get_schema(), GET_VERSION: the table picker's, the column
  picker's and the version probe's queries, from
  public/app/plugins/datasource/grafana-postgresql-datasource/postgresMetaQuery.ts
  (grafana/grafana@eb607c510fe9fe93ca209a4ca48935321fcd363f).
- The connection test is `db.Ping()` (sqleng/handler_checkhealth.go,
  grafana/grafana@f866413a361d43edc08ce612570a5ff35710e7a0); the tests
  send its equivalents `SELECT 1` and an empty query.
"""

import datetime as dt
import re

# macros.go: rsIdentifier, sExpr
S_EXPR = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")


def rfc3339nano(t):
    """Go's time.RFC3339Nano of a UTC time: fraction without trailing
    zeros (none at all when zero), 'Z' for UTC."""
    t = t.astimezone(dt.timezone.utc)
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        s += ("." + f"{t.microsecond:06d}").rstrip("0")
    return s + "Z"


def go_float(f):
    """Go's %v of a float64 (strconv 'g', shortest; no exponent below 1e21)."""
    if f == int(f) and abs(f) < 1e21:
        return str(int(f))
    return repr(f)


def parse_interval(s):
    """gtime.ParseInterval for the units a panel uses: ms, s, m, h, d, w."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d|w)", s)
    if not m:
        raise ValueError(f"error parsing interval {s}")
    n, unit = int(m.group(1)), m.group(2)
    return dt.timedelta(
        milliseconds=n if unit == "ms" else 0,
        seconds=n if unit == "s" else 0,
        minutes=n if unit == "m" else 0,
        hours=n if unit == "h" else 0,
        days=n * (7 if unit == "w" else 1) if unit in ("d", "w") else 0,
    )


def format_interval(td):
    """gtime.FormatInterval (grafana-plugin-sdk-go), for $__interval."""
    ms = int(td.total_seconds() * 1000)
    for unit, size in (("y", 31536000000), ("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            return f"{ms // size}{unit}"
    return "1ms"


def _macro(name, args, frm, to):
    if name == "__time":
        return f'{args[0]} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {args[0]}) as "time"'
    if name == "__timeFilter":
        return f"{args[0]} BETWEEN '{rfc3339nano(frm)}' AND '{rfc3339nano(to)}'"
    if name == "__timeFrom":
        return f"'{rfc3339nano(frm)}'"
    if name == "__timeTo":
        return f"'{rfc3339nano(to)}'"
    if name == "__timeGroup":
        if len(args) < 2:
            raise ValueError(f"macro {name} needs time column and interval and optional fill value")
        secs = go_float(parse_interval(args[1].strip("'")).total_seconds())
        return f"floor(extract(epoch from {args[0]})/{secs})*{secs}"
    if name == "__timeGroupAlias":
        return _macro("__timeGroup", args, frm, to) + ' AS "time"'
    if name == "__unixEpochFilter":
        a = args[0]
        return f"{a} >= {int(frm.timestamp())} AND {a} <= {int(to.timestamp())}"
    if name == "__unixEpochGroup":
        secs = go_float(parse_interval(args[1].strip("'")).total_seconds())
        return f"floor(({args[0]})/{secs})*{secs}"
    if name == "__unixEpochGroupAlias":
        return _macro("__unixEpochGroup", args, frm, to) + ' AS "time"'
    raise ValueError(f'unknown macro "{name}"')


def expand(sql, frm, to, interval=dt.timedelta(minutes=1)):
    """The SQL Grafana's backend sends for a panel's rawSql over [frm, to]."""
    # sqleng.Interpolate: the global substitutions.
    sql = sql.replace("$__interval_ms", str(int(interval.total_seconds() * 1000)))
    sql = sql.replace("$__interval", format_interval(interval))
    sql = sql.replace("$__unixEpochFrom()", str(int(frm.timestamp())))
    sql = sql.replace("$__unixEpochTo()", str(int(to.timestamp())))
    original = sql

    def one(m):
        name = m.group(1)
        # "$__timeGroup(...)," is the pre-5.3 form that also aliases.
        if name == "__timeGroup":
            i = original.find(m.group(0))
            if i >= 0 and len(original) > i + len(m.group(0)) and original[i + len(m.group(0))] == ",":
                name = "__timeGroupAlias"
        args = [a.strip(" ") for a in m.group(2).split(",")]
        return _macro(name, args, frm, to)

    return S_EXPR.sub(one, sql)


def _schema_constraint():
    return """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""


GET_VERSION = "SELECT current_setting('server_version_num')::int/100 as version"

SHOW_TABLES = f"""SELECT
    CASE WHEN {_schema_constraint()}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {_schema_constraint()} THEN 0 ELSE 1 END, 1"""


def get_schema(table):
    part = "'" + table.replace("'", "''") + "'"
    return f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident({part}),1) = 2
        THEN quote_ident(table_schema) = (parse_ident({part}))[1]
          AND quote_ident(table_name) = (parse_ident({part}))[2]
        ELSE quote_ident(table_name) = {part}
          AND {_schema_constraint()}
      END"""
