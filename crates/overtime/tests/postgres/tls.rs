//! `[sql.postgres] tls_cert`/`tls_key`: psql gets TLS when it asks
//! (`sslmode=require`, and `verify-full` against the certificate), and a
//! client that does not ask is refused before it sends the password, and
//! counted.

use super::{TOKEN, metric};
use crate::support::{self, Serve};
use std::path::Path;
use std::process::Command;

/// A self-signed certificate for `localhost` (openssl, as an operator
/// would make one): (cert, key).
fn self_signed(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert.display().to_string(), key.display().to_string())
}

/// psql's answer to `sql` with `sslmode` (and the CA for verify-full):
/// (success, stdout, stderr).
fn psql(port: u16, sslmode: &str, ca: &str, sql: &str) -> (bool, String, String) {
    let conninfo = format!(
        "host=localhost port={port} user=overtime dbname=overtime sslmode={sslmode} sslrootcert={ca}"
    );
    let out = Command::new("psql")
        .args([conninfo.as_str(), "-X", "-A", "-t", "-c", sql])
        .env("PGPASSWORD", TOKEN)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql runs (apt-get install postgresql-client)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn with_tls_configured_psql_connects_over_tls_and_a_plain_client_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\ndata_dir = {data:?}\nfsync = false\n[otlp]\nhttp_listen = \"\"\ngrpc_listen = \"\"\n[sql.postgres]\nlisten = \"127.0.0.1:0\"\ntls_cert = {cert:?}\ntls_key = {key:?}\n",
        data = dir.path().join("data").display().to_string(),
    );
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(&cfg, config).unwrap();
    let mut cmd = support::serve_command(&cfg);
    cmd.env("OVERTIME_TOKEN", TOKEN);
    let s = Serve::start_command(cmd);
    let pg = s
        .postgres
        .expect("the ready file names the PostgreSQL address");

    // Over TLS, the certificate verified against itself as the CA.
    let (ok, out, err) = psql(pg, "verify-full", &cert, "SELECT count(*) FROM verdicts");
    assert!(ok, "psql sslmode=verify-full: {err}");
    assert_eq!(out.trim(), "0", "{out}");
    let (ok, out, err) = psql(pg, "require", &cert, "\\conninfo");
    assert!(ok, "psql sslmode=require: {err}");
    assert!(out.contains("SSL connection (protocol: TLSv1."), "{out}");

    // Without TLS: refused before the password, counted.
    let (ok, _, err) = psql(pg, "disable", &cert, "SELECT 1");
    assert!(!ok, "a plain connection was served");
    assert!(err.contains("TLS connections only"), "{err}");
    assert_eq!(
        metric(
            s.port,
            "overtime_postgres_connections_total{outcome=\"no_tls\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            s.port,
            "overtime_postgres_connections_total{outcome=\"accepted\"}"
        ),
        2
    );
}
