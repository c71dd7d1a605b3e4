//! The bearer token on every route but health, against a real `overtime
//! serve`. The route list is read from the router's source (every
//! `.route("…", get|post(…))` in overtime-server and overtime-ui), so a
//! route added later is checked without touching this test; the routes
//! open by design are named here and nowhere else.
//!
//! For every protected route: 401 with `no_token` without a token, 401
//! with `bad_token` for a wrong one (also a wrong cookie, a token that is
//! a prefix of the right one, and the right one with another scheme), and
//! an answer that is not 401 with the right token (header or the sign-in
//! cookie). `/healthz` and `/readyz` answer 200 without a token; the
//! sign-in refuses a wrong token without setting a cookie. Path tricks
//! (`/metrics/`, `//metrics`, percent-encoding, a health path with a query)
//! never reach a protected handler without the token.

use crate::support;

use overtime_test_support::net::{get, http, request, wait_for};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use support::*;

const TOKEN: &str = "faults-auth-tok-7c1e";

/// Routes that are open on purpose: health for probes, and the sign-in
/// and sign-out forms (they take the token, or drop the cookie).
const OPEN: &[&str] = &["/healthz", "/readyz", "/ui/login", "/ui/logout"];

/// `(method, path)` of every `.route("<path>", <method>(…))` in the `.rs`
/// files under `dir`, outside `#[cfg(test)]` modules and doc comments.
fn routes_in(dir: &Path, out: &mut BTreeSet<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            routes_in(&p, out);
            continue;
        }
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(i) = rest.find(".route(\"") {
                rest = &rest[i + 8..];
                let end = rest.find('"').expect("a closed route literal");
                let path = rest[..end].to_string();
                let after = &rest[end..];
                for m in ["get", "post", "put", "delete", "patch"] {
                    if after.contains(&format!("{m}(")) {
                        out.insert((m.to_ascii_uppercase(), path.clone()));
                    }
                }
                rest = after;
            }
        }
    }
}

fn crate_src(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

fn auth(token: &str) -> String {
    format!("Bearer {token}")
}

/// Path parameters filled with things that exist (and a query a route
/// needs: a peer's unflushed rows are asked for one table).
fn concrete(path: &str, trace: &str, incident: &str) -> String {
    if path == "/api/cluster/unflushed" {
        return format!("{path}?table=spans");
    }
    // The Jaeger API's searches name a service, as Grafana's data source does.
    if path == "/jaeger/api/operations" || path == "/jaeger/api/traces" {
        return format!("{path}?service=agent-api");
    }
    path.replace("/api/traces/{id}", &format!("/api/traces/{trace}"))
        .replace("/api/incidents/{id}", &format!("/api/incidents/{incident}"))
        .replace("{file}", "app.js")
        .replace("{service}", "agent-api")
}

/// A body the route accepts once the token is right.
fn body_for(method: &str, path: &str) -> &'static [u8] {
    match (method, path) {
        ("POST", "/api/whatif") => b"{\"set\": [\"gateway.edge.read_timeout=120s\"]}",
        ("POST", _) => b"{\"sql\": \"SELECT 1 AS one\"}",
        _ => b"",
    }
}

#[test]
fn the_token_guards_every_route_but_health_and_sign_in() {
    let mut routes = BTreeSet::new();
    routes_in(&crate_src("overtime-server"), &mut routes);
    routes_in(&crate_src("overtime-ui"), &mut routes);
    // The scan must see the router it guards (else it silently checks nothing).
    for known in ["/api/sql", "/metrics", "/healthz", "/", "/api/traces/{id}"] {
        assert!(
            routes.iter().any(|(_, p)| p == known),
            "the route scan missed {known}: {routes:?}"
        );
    }
    for open in OPEN {
        assert!(
            routes.iter().any(|(_, p)| p == open),
            "{open} is listed as open but the router has no such route: {routes:?}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"FAULTS_AUTH_TOKEN\"\n\
             [store]\ndata_dir = {data:?}\n[otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\n\
             [diagnose]\ngrace_ms = 300\n",
            data = dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = serve_command(&cfg);
    cmd.env("FAULTS_AUTH_TOKEN", TOKEN);
    let serve = Serve::start_command(cmd);
    let (api, otlp) = (serve.port, serve.otlp());

    // One failing trace, so the {id} routes have something to show. The
    // OTLP receiver is a separate listener (exporters carry no API token).
    let (trace, body) = otlp_failing_trace(0xa0a0, 1);
    let (st, b) = http(
        otlp,
        "POST",
        "/v1/traces",
        "application/json",
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(st, 200, "{b}");
    let h = auth(TOKEN);
    let with = [("Authorization", h.as_str())];
    let mut incident = String::new();
    wait_for(60, "the trace's verdict and incident", || {
        let a = request(api, "GET", "/api/incidents", &with, b"").unwrap();
        incident = a.json()["incidents"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        !incident.is_empty()
            && request(api, "GET", &format!("/api/traces/{trace}"), &with, b"")
                .unwrap()
                .status
                == 200
    });

    let mut checked = Vec::new();
    for (method, path) in &routes {
        if OPEN.contains(&path.as_str()) {
            continue;
        }
        let p = concrete(path, &trace, &incident);
        let body = body_for(method, path);
        let json = [("Content-Type", "application/json")];
        // No token.
        let a = request(api, method, &p, &json, body).unwrap();
        assert_eq!(a.status, 401, "{method} {p} without a token: {}", a.text());
        if p != "/" {
            assert_eq!(a.json()["reason"], "no_token", "{method} {p}: {}", a.text());
        }
        // Wrong tokens: another value, a prefix, the right value with a
        // scheme the server does not take, and a wrong cookie.
        let wrong = [
            auth("nope"),
            auth(&TOKEN[..TOKEN.len() - 1]),
            format!("Basic {TOKEN}"),
            TOKEN.to_string(),
        ];
        for w in &wrong {
            let a = request(
                api,
                method,
                &p,
                &[("Authorization", w.as_str()), json[0]],
                body,
            )
            .unwrap();
            assert_eq!(a.status, 401, "{method} {p} with `{w}`: {}", a.text());
        }
        let a = request(
            api,
            method,
            &p,
            &[("Cookie", "overtime_token=nope"), json[0]],
            body,
        )
        .unwrap();
        assert_eq!(
            a.status,
            401,
            "{method} {p} with a wrong cookie: {}",
            a.text()
        );
        // The right token, as a header and as the sign-in cookie.
        let cookie = format!("overtime_token={TOKEN}");
        for hdr in [("Authorization", h.as_str()), ("Cookie", cookie.as_str())] {
            let a = request(api, method, &p, &[hdr, json[0]], body).unwrap();
            // Past the guard: an answer of the route itself (a what-if
            // proposal naming a layer this one trace lacks is its own 400).
            let routed = (200..400).contains(&a.status)
                || (a.status == 400 && a.json()["reason"] == "bad_proposal");
            assert!(
                routed,
                "{method} {p} with the right token ({}): {} {}",
                hdr.0,
                a.status,
                a.text()
            );
        }
        // HEAD of a GET route is guarded too.
        if method == "GET" {
            let a = request(api, "HEAD", &p, &[], b"").unwrap();
            assert_eq!(a.status, 401, "HEAD {p} without a token");
        }
        checked.push(format!("{method} {path}"));
    }
    assert!(checked.len() >= 10, "too few routes checked: {checked:?}");

    // Health stays open, with or without a (wrong) token.
    for p in ["/healthz", "/readyz"] {
        assert_eq!(get(api, p).unwrap().0, 200, "{p} without a token");
        let a = request(api, "GET", p, &[("Authorization", "Bearer nope")], b"").unwrap();
        assert_eq!(a.status, 200, "{p} with a wrong token");
    }
    // Sign-in: a wrong token sets no cookie; the right one does.
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let a = request(api, "POST", "/ui/login", &form, b"token=nope").unwrap();
    assert_eq!(a.status, 401, "{}", a.text());
    assert!(a.header("set-cookie").is_none(), "{:?}", a.headers);
    let a = request(
        api,
        "POST",
        "/ui/login",
        &form,
        format!("token={TOKEN}").as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 303, "{}", a.text());
    assert!(a.header("set-cookie").unwrap().contains("HttpOnly"));

    // Paths that are not a route, or a route spelled another way, answer
    // no data without the token.
    for p in [
        "/metrics/",
        "//metrics",
        "/%6detrics",
        "/METRICS",
        "/api/nope",
        "/healthz/../metrics",
        "/readyz?/metrics",
        "/api/traces/",
        "/api//traces",
    ] {
        let a = request(api, "GET", p, &[], b"").unwrap();
        let leaked =
            a.status == 200 && (a.text().contains("overtime_") || a.text().contains("traces"));
        assert!(
            !leaked,
            "GET {p} without a token leaked: {} {}",
            a.status,
            a.text()
        );
        if !p.starts_with("/readyz") {
            assert_ne!(a.status, 200, "GET {p} without a token: {}", a.text());
        }
    }
    eprintln!(
        "faults_auth: {} protected routes checked ({}); open: {OPEN:?}",
        checked.len(),
        checked.join(", ")
    );
    drop(serve);
}

/// The OTLP receivers' own token (`[otlp] token_env`), separate from the
/// API's: without it, with the API token, with a near miss or another
/// scheme an export is 401 and nothing is stored; with it, stored. The
/// API token still guards the API, and the OTLP token does not open it.
#[test]
fn the_otlp_token_guards_the_receiver_when_set() {
    const OTLP_TOKEN: &str = "faults-auth-otlp-9d2b";
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"FAULTS_AUTH_TOKEN\"\n\
             [store]\ndata_dir = {data:?}\nflush_interval_ms = 500\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\ntoken_env = \"FAULTS_OTLP_TOKEN\"\n",
            data = dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = serve_command(&cfg);
    cmd.env("FAULTS_AUTH_TOKEN", TOKEN)
        .env("FAULTS_OTLP_TOKEN", OTLP_TOKEN);
    let serve = Serve::start_command(cmd);
    let (api, otlp) = (serve.port, serve.otlp());

    let (trace, body) = otlp_failing_trace(0xa0a1, 1);
    let post = |headers: &[(&str, &str)]| {
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        request(otlp, "POST", "/v1/traces", &h, body.as_bytes()).unwrap()
    };
    let near = auth(&OTLP_TOKEN[..OTLP_TOKEN.len() - 1]);
    let api_bearer = auth(TOKEN);
    let basic = format!("Basic {OTLP_TOKEN}");
    for wrong in [
        vec![],
        vec![("Authorization", api_bearer.as_str())],
        vec![("Authorization", near.as_str())],
        vec![("Authorization", basic.as_str())],
    ] {
        let a = post(&wrong);
        assert_eq!(a.status, 401, "{wrong:?}: {}", a.text());
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
    }
    let otlp_bearer = auth(OTLP_TOKEN);
    let a = post(&[("Authorization", otlp_bearer.as_str())]);
    assert_eq!(a.status, 200, "{}", a.text());

    // The OTLP token does not open the API; the API token does.
    let a = request(
        api,
        "GET",
        "/api/traces",
        &[("Authorization", otlp_bearer.as_str())],
        b"",
    )
    .unwrap();
    assert_eq!(a.status, 401);
    let stored = |t: &str| {
        sql_count(
            api,
            Some(TOKEN),
            &format!("SELECT count(*) AS n FROM spans WHERE trace_id = '{t}'"),
        )
    };
    wait_for(30, "the admitted export's spans", || stored(&trace) > 0);
    let n = stored(&trace);
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(stored(&trace), n, "refused exports were stored later");
    let metrics = request(
        api,
        "GET",
        "/metrics",
        &[("Authorization", api_bearer.as_str())],
        b"",
    )
    .unwrap()
    .text();
    assert!(
        metrics.contains(
            "overtime_records_rejected_total{source=\"otlp_http\",reason=\"unauthorized\"} 4"
        ),
        "refusals not counted:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("otlp"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
