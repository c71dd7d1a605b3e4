//! `[sql.postgres]`: overtime's tables over the PostgreSQL wire protocol,
//! against a real `overtime serve` tailing incident C's gateway log and
//! span log (23 verdicts).
//!
//! - Real clients (tests/e2e_pg/clients.py): psycopg and pgcli from PyPI,
//!   psql, pgjdbc, and Grafana's PostgreSQL data source's own queries and
//!   the 504 dashboard's panels as Grafana expands them; each answer equal
//!   to `POST /api/sql`'s rows.
//! - Hostile clients, byte by byte ([`wire`]): a wrong password, a huge
//!   result, a query that never ends, a cancelled one, garbage, a message
//!   cut in half, one connection too many; each refused or bounded, and
//!   the collector keeps answering.

mod tls;
mod wire;

use crate::support::{self, Serve, fixture};
use overtime_test_support::monitoring::repo;
use overtime_test_support::net::{get, request, wait_for};
use std::io::Write;
use std::net::Shutdown;
use std::path::Path;
use std::process::Command;
use wire::*;

const TOKEN: &str = "pg-test-token";

/// `overtime serve` over incident C's files, the PostgreSQL front door
/// on port 0, the token set, with `extra` appended to the config.
fn serve(dir: &Path, extra: &str) -> Serve {
    let f = |n| fixture("c_dns_retry", n);
    let format = std::fs::read_to_string(f("log_format.txt")).unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n[otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[diagnose]\ngrace_ms = 1000\n{extra}\n[sql.postgres]\nlisten = \"127.0.0.1:0\"\nmax_connections = 8\n\n[[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = {format:?}\nlayer = \"access\"\n\n[[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
        data = dir.join("data").display().to_string(),
        log = f("access.log").display().to_string(),
        spans = f("spans.jsonl").display().to_string(),
    );
    let cfg = dir.join("overtime.toml");
    std::fs::write(&cfg, config).unwrap();
    let mut cmd = support::serve_command(&cfg);
    cmd.env("OVERTIME_TOKEN", TOKEN);
    let s = Serve::start_command(cmd);
    assert!(
        s.postgres.is_some(),
        "the ready file names the PostgreSQL address"
    );
    // Every failing trace has its verdict.
    wait_for(90, "incident C's 23 verdicts", || {
        let rows = support::sql_rows(s.port, Some(TOKEN), "SELECT count(*) AS n FROM verdicts");
        rows[0]["n"] == 23
    });
    s
}

fn metric(port: u16, series: &str) -> u64 {
    let auth = format!("Bearer {TOKEN}");
    let a = request(port, "GET", "/metrics", &[("Authorization", &auth)], b"").expect("/metrics");
    a.text()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no {series}"))
}

#[test]
fn psql_psycopg_pgcli_jdbc_and_grafanas_queries_get_the_rows_post_api_sql_gets() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), "[sql]\ntimeout_ms = 20000\n");
    let root = repo();
    let out = Command::new("python3")
        .arg(root.join("tests/e2e_pg/clients.py"))
        .arg("--pg")
        .arg(format!("127.0.0.1:{}", s.postgres.unwrap()))
        .arg("--api")
        .arg(format!("127.0.0.1:{}", s.port))
        .args(["--token", TOKEN])
        .arg("--queries")
        .arg(root.join("queries"))
        .arg("--dashboard")
        .arg(root.join("dashboards/overtime/overtime-504-root-causes.json"))
        .output()
        .expect("python3 runs (apt-get install python3)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "a client disagreed or failed:\n{text}"
    );
    for client in [
        "psycopg:",
        "pgcli:",
        "psql:",
        "JDBC (pgjdbc):",
        "Grafana panel",
    ] {
        assert!(text.contains(client), "{client} did not run:\n{text}");
    }
    assert_eq!(get(s.port, "/healthz").unwrap().0, 200);
}

#[test]
fn a_hostile_client_is_refused_or_bounded_and_the_collector_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), "[sql]\ntimeout_ms = 3000\nmax_rows = 1000\n");
    let pg = s.postgres.unwrap();

    // A wrong password: FATAL 28P01, the connection closed, counted; a
    // query sent after the refusal on the same socket is never run.
    let refused = sign_in(pg, "not-the-token").expect_err("a wrong password is refused");
    let (code, msg) = error_of(&refused).unwrap();
    assert_eq!(code, "28P01", "{msg}");
    assert!(msg.contains("password authentication failed"), "{msg}");
    {
        let mut c = connect(pg);
        c.write_all(&startup_bytes("mallory")).unwrap();
        read_msg(&mut c).unwrap();
        c.write_all(&password_bytes("guess")).unwrap();
        let _ = c.write_all(&query_bytes("SELECT * FROM verdicts"));
        let after = until_ready(&mut c);
        assert_eq!(rows(&after), 0, "rows after a refused password: {after:?}");
        assert!(closed_by_server(&mut c));
    }
    assert_eq!(
        metric(
            s.port,
            "overtime_postgres_connections_total{outcome=\"bad_password\"}"
        ),
        2
    );

    let (mut c, pid, secret) = sign_in(pg, TOKEN).expect("the token signs in");
    assert_eq!(rows(&simple(&mut c, "SELECT trace_id FROM verdicts")), 23);

    // A huge result: an error naming the bound, not a cut table.
    let huge = simple(&mut c, "SELECT * FROM generate_series(1, 10000000)");
    let (code, msg) = error_of(&huge).expect("an error for more than max_rows");
    assert_eq!(code, "54000", "{msg}");
    assert!(
        msg.contains("more than 1000 rows") && msg.contains("max_rows"),
        "{msg}"
    );
    assert_eq!(rows(&huge), 0);

    // A query that never ends: stopped by the time bound.
    let endless =
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r";
    let (code, msg) = error_of(&simple(&mut c, endless)).expect("the time bound");
    assert_eq!(code, "57014", "{msg}");
    assert!(
        msg.contains("statement timeout") && msg.contains("3000 ms"),
        "{msg}"
    );

    // ... and one cancelled by a CancelRequest before the bound.
    c.write_all(&query_bytes(endless)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    cancel(pg, pid, secret);
    let (code, msg) = error_of(&until_ready(&mut c)).expect("the cancel");
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("57014", "canceling statement due to user request")
    );
    assert_eq!(
        rows(&simple(&mut c, "SELECT 1")),
        1,
        "the connection goes on"
    );

    // Not read-only: refused.
    let (code, msg) = error_of(&simple(&mut c, "CREATE TABLE x AS SELECT 1")).unwrap();
    assert_eq!(code, "0A000", "{msg}");

    // Garbage instead of a startup message: closed.
    let mut g = connect(pg);
    g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(closed_by_server(&mut g), "garbage closes the connection");
    // A startup message cut in half, then the client goes: closed.
    let mut h = connect(pg);
    let st = startup_bytes("overtime");
    h.write_all(&st[..st.len() / 2]).unwrap();
    h.shutdown(Shutdown::Write).unwrap();
    assert!(closed_by_server(&mut h));
    // A query cut in half by a signed-in client that then goes: closed,
    // nothing run.
    let (mut q, _, _) = sign_in(pg, TOKEN).unwrap();
    let m = query_bytes("SELECT count(*) FROM spans");
    q.write_all(&m[..7]).unwrap();
    q.shutdown(Shutdown::Write).unwrap();
    assert!(closed_by_server(&mut q));
    // An unknown message type from a signed-in client: closed.
    let (mut u, _, _) = sign_in(pg, TOKEN).unwrap();
    u.write_all(&typed(b'~', b"\x00\x01\x02")).unwrap();
    assert!(
        closed_by_server(&mut u),
        "an unknown message closes the connection"
    );

    // One connection more than max_connections (8, `c` among them): the
    // extra one is closed at once, and counted.
    // The connections the server just closed give their slots back as
    // their tasks end, a moment after the client sees the close: each held
    // one is retried until a slot is free.
    let held: Vec<_> = (0..7)
        .map(|_| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match sign_in(pg, TOKEN) {
                    Ok(c) => break c,
                    Err(e) if std::time::Instant::now() > deadline => {
                        panic!("no slot for a held connection in 30 s: {e:?}")
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
            }
        })
        .collect();
    let mut extra = connect(pg);
    let _ = extra.write_all(&startup_bytes("overtime"));
    assert!(closed_by_server(&mut extra), "a 9th connection is closed");
    assert!(
        metric(
            s.port,
            "overtime_postgres_connections_total{outcome=\"too_many\"}"
        ) >= 1
    );
    drop(held);

    // The collector is unharmed: health, the HTTP SQL, the wire protocol.
    assert_eq!(get(s.port, "/healthz").unwrap().0, 200);
    let n = support::sql_rows(s.port, Some(TOKEN), "SELECT count(*) AS n FROM verdicts");
    assert_eq!(n[0]["n"], 23);
    wait_for(
        30,
        "a slot free again after the held connections closed",
        || sign_in(pg, TOKEN).is_ok(),
    );
    let (mut again, _, _) = sign_in(pg, TOKEN).unwrap();
    assert_eq!(
        rows(&simple(&mut again, "SELECT trace_id FROM verdicts")),
        23
    );
    assert!(
        metric(
            s.port,
            "overtime_postgres_queries_total{outcome=\"timeout\"}"
        ) >= 1
    );
    assert!(
        metric(
            s.port,
            "overtime_postgres_queries_total{outcome=\"too_many_rows\"}"
        ) >= 1
    );
}
