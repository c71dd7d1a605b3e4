//! No secret is ever written to logs (or the data dir, or an answer).
//! `overtime serve` runs with an API token, an OTLP receiver token and a
//! Jira API token (all from the environment), an Alertmanager URL
//! carrying basic-auth credentials
//! and a webhook URL carrying a token in its query string. Traffic drives
//! every path that talks about those: requests with no, wrong and
//! near-miss tokens, a failed UI sign-in, OTLP posts with the right and
//! with wrong tokens, and an incident whose Jira ticket, page and
//! webhook all fail (HTTP 500 / 503, retried). The servers receiving the
//! deliveries check the credentials did arrive (so a leak was possible).
//! Then the collector is stopped with SIGTERM, and its stdout, stderr,
//! every file of its data dir, `/metrics` and the API's answers are
//! searched for each secret, raw and base64-encoded as in a header.

use crate::support;

use overtime_test_support::net::{request, wait_for};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const API_TOKEN: &str = "apitok-SECRET-4f1d2c";
const OTLP_TOKEN: &str = "otlptok-SECRET-31e0f9";
const JIRA_TOKEN: &str = "jiratok-SECRET-9b8a7e";
const JIRA_EMAIL: &str = "sre-bot@example.com";
const AM_USER: &str = "am-user";
const AM_PASS: &str = "ampass-SECRET-c3d4e5";
const HOOK_TOKEN: &str = "hooktok-SECRET-77aa11";

fn b64(s: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An HTTP server that answers every request with `status` and records
/// each request's head.
fn stub(status: u16, body: &'static str) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let s = s.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                // The head, then as much body as Content-Length says.
                loop {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse().ok())?
                            })
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            match c.read(&mut chunk) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        s.lock().unwrap().push(head);
                        break;
                    }
                }
                let _ = write!(
                    c,
                    "HTTP/1.1 {status} Oops\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, seen)
}

fn all_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            all_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn no_secret_reaches_logs_data_or_answers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("access.log");
    std::fs::write(&log, "").unwrap();
    let (jira, jira_seen) = stub(
        500,
        r#"{"errorMessages":["Internal server error"],"errors":{}}"#,
    );
    let (am, am_seen) = stub(500, r#"{"code":500,"message":"storage unavailable"}"#);
    let (hook, hook_seen) = stub(503, "busy");
    let cfg = dir.path().join("overtime.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"FAULTS_API_TOKEN\"\n\
             [store]\ndata_dir = {data:?}\nflush_interval_ms = 1000\n\
             [otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"\"\ntoken_env = \"FAULTS_OTLP_TOKEN\"\n\
             [diagnose]\ngrace_ms = 300\n\
             [alerts]\nalertmanager_urls = [\"http://{AM_USER}:{AM_PASS}@127.0.0.1:{am}\"]\n\
             webhook_url = \"http://127.0.0.1:{hook}/hook?token={HOOK_TOKEN}\"\n\
             resend_interval_ms = 1000\nmax_attempts = 3\nbackoff_initial_ms = 100\nbackoff_max_ms = 200\n\
             [jira]\nenabled = true\nbase_url = \"http://127.0.0.1:{jira}\"\nproject_key = \"OPS\"\n\
             email = \"{JIRA_EMAIL}\"\ntoken_env = \"FAULTS_JIRA_TOKEN\"\nsearch_settle_secs = 0\n\
             [jira.retry]\nbase_backoff_ms = 100\nmax_backoff_secs = 1\n\n\
             [[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"edge\"\n",
            data = data.display().to_string(),
            log = log.display().to_string(),
        ),
    )
    .unwrap();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut cmd = serve_command(&cfg);
    cmd.env("FAULTS_API_TOKEN", API_TOKEN)
        .env("FAULTS_JIRA_TOKEN", JIRA_TOKEN)
        .env("FAULTS_OTLP_TOKEN", OTLP_TOKEN)
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()));
    let mut serve = Serve::start_command(cmd);
    let (api, otlp) = (serve.port, serve.otlp());

    // Failing traces seen by the gateway as 504s: an incident to page and
    // ticket. The exporters carry the OTLP token; wrong ones are refused.
    let bearer = format!("Bearer {API_TOKEN}");
    let otlp_bearer = format!("Bearer {OTLP_TOKEN}");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    for n in 0..20 {
        let (trace, body) = otlp_failing_trace(0x5ec2, n);
        let post = |authorization: &str| {
            request(
                otlp,
                "POST",
                "/v1/traces",
                &[
                    ("Content-Type", "application/json"),
                    ("Authorization", authorization),
                ],
                body.as_bytes(),
            )
            .unwrap()
        };
        // The API token is not the OTLP token, nor is a near miss.
        let near = &otlp_bearer[..otlp_bearer.len() - 1];
        for wrong in [bearer.as_str(), near] {
            let a = post(wrong);
            assert_eq!(a.status, 401, "{}", a.text());
        }
        let a = post(&otlp_bearer);
        assert_eq!(a.status, 200, "{}", a.text());
        f.write_all(overtime_line(&trace, "/v1/agent", 504).as_bytes())
            .unwrap();
    }
    // Wrong tokens in every form, and a failed sign-in.
    let near = &API_TOKEN[..API_TOKEN.len() - 1];
    for t in [
        format!("Bearer {near}"),
        format!("Bearer {API_TOKEN}x"),
        format!("Basic {}", b64(API_TOKEN)),
        API_TOKEN.to_string(),
    ] {
        for p in ["/api/traces", "/metrics", "/api/incidents"] {
            let a = request(api, "GET", p, &[("Authorization", t.as_str())], b"").unwrap();
            assert_eq!(a.status, 401);
        }
    }
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let a = request(
        api,
        "POST",
        "/ui/login",
        &form,
        format!("token={near}").as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 401);
    let a = sql_answer(api, Some(near), "SELECT 1").unwrap();
    assert_eq!(a.status, 401);

    // Every delivery fails, and is retried.
    let auth = [("Authorization", bearer.as_str())];
    wait_for(90, "the incident", || {
        request(api, "GET", "/api/incidents", &auth, b"")
            .unwrap()
            .json()["incidents"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    wait_for(
        120,
        "failed deliveries to Jira, Alertmanager and the webhook",
        || {
            jira_seen.lock().unwrap().len() >= 3
                && am_seen.lock().unwrap().len() >= 3
                && !hook_seen.lock().unwrap().is_empty()
        },
    );
    // (Jira delivers through the shared channel outbox, which logs each
    // failed attempt as "overtime: jira: … attempt N failed (…)".)
    wait_for(60, "the Jira failures logged", || {
        std::fs::read_to_string(&err_path)
            .unwrap_or_default()
            .contains("overtime: jira:")
    });
    // The secrets did reach the receivers (as headers, not in URLs).
    let jira_basic = b64(&format!("{JIRA_EMAIL}:{JIRA_TOKEN}"));
    let am_basic = b64(&format!("{AM_USER}:{AM_PASS}"));
    assert!(
        jira_seen.lock().unwrap()[0].contains(&jira_basic),
        "Jira got no credentials"
    );
    assert!(
        am_seen.lock().unwrap()[0].contains(&am_basic),
        "Alertmanager got no credentials"
    );
    assert!(
        hook_seen.lock().unwrap()[0].contains(HOOK_TOKEN),
        "the webhook got no token"
    );

    // What the API shows, with the right token.
    let mut answers = String::new();
    for p in [
        "/metrics",
        "/api/incidents",
        "/api/traces?limit=100",
        "/api/slo",
        "/",
        "/readyz",
        "/healthz",
    ] {
        let a = request(api, "GET", p, &auth, b"").unwrap();
        answers.push_str(&a.text());
        answers.push_str(&format!("{:?}", a.headers));
    }
    let id = request(api, "GET", "/api/incidents", &auth, b"")
        .unwrap()
        .json()["incidents"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    answers.push_str(
        &request(
            api,
            "GET",
            &format!("/api/incidents/{id}?format=markdown"),
            &auth,
            b"",
        )
        .unwrap()
        .text(),
    );

    // Stop it the way an operator does, so shutdown messages are written.
    let st = std::process::Command::new("kill")
        .args(["-TERM", &serve.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    wait_for(60, "overtime serve to stop on SIGTERM", || !serve.alive());

    let mut places: Vec<(String, Vec<u8>)> = vec![
        ("stdout".into(), std::fs::read(&out_path).unwrap()),
        ("stderr".into(), std::fs::read(&err_path).unwrap()),
        ("API answers".into(), answers.into_bytes()),
    ];
    let mut files = Vec::new();
    all_files(&data, &mut files);
    for p in &files {
        places.push((
            p.display().to_string(),
            std::fs::read(p).unwrap_or_default(),
        ));
    }
    let secrets = [
        API_TOKEN,
        OTLP_TOKEN,
        JIRA_TOKEN,
        AM_PASS,
        HOOK_TOKEN,
        &b64(API_TOKEN),
        &jira_basic,
        &am_basic,
        &format!("{AM_USER}:{AM_PASS}"),
    ];
    let mut leaks = Vec::new();
    for (place, bytes) in &places {
        for s in &secrets {
            if bytes.windows(s.len()).any(|w| w == s.as_bytes()) {
                leaks.push(format!("{s:?} in {place}"));
            }
        }
    }
    let stderr = String::from_utf8_lossy(&places[1].1).into_owned();
    assert!(
        leaks.is_empty(),
        "secrets leaked: {leaks:?}\nstderr:\n{stderr}"
    );
    eprintln!(
        "faults_secrets: {} places searched ({} data files, {} bytes of stderr) for {} secret forms: none found; \
         deliveries failed and retried: Jira {}, Alertmanager {}, webhook {}",
        places.len(),
        files.len(),
        places[1].1.len(),
        secrets.len(),
        jira_seen.lock().unwrap().len(),
        am_seen.lock().unwrap().len(),
        hook_seen.lock().unwrap().len()
    );
}
