//! The Advice page in a real headless Chromium against a real `overtime
//! serve` tailing incident A (seed 000): the advice per model and bucket
//! with the censored calls shown, then a what-if from the form whose
//! result links to the traces that change. Screenshots go to
//! `$CARGO_TARGET_DIR/ui-artifacts/`.

use super::page::{Server, artifacts, fixture};
use overtime_test_support::chromium::Browser;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Incident A happened on 2026-11-25 (UTC 07:05–07:47).
const FROM: &str = "2026-11-25T00:00:00";
const TO: &str = "2026-11-26T00:00:00";

/// `overtime serve` tailing incident A's gateway log and spans.
fn serve_incident_a() -> Server {
    let files = format!(
        "[[file]]\npath = {log:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"access\"\n\n\
         [[file]]\npath = {spans:?}\nkind = \"jsonl\"\n",
        log = fixture("a_prefill", "access.log"),
        spans = fixture("a_prefill", "spans.jsonl"),
    );
    Server::start(&files, None, |_| String::new())
}

/// Waits (bounded) until the store holds all of incident A.
fn wait_for_requests(serve: &Server, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let path = format!("/api/advice?from={FROM}Z&to={TO}Z");
    let mut last = Value::Null;
    while Instant::now() < deadline {
        if let Some((200, v)) = serve.api(&path) {
            if v["traces"].as_u64() == Some(want) {
                return;
            }
            last = v["traces"].clone();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("the store had {last} requests of incident A, not {want}, after 180 s");
}

#[test]
fn the_advice_page_shows_censored_calls_and_its_whatif_links_the_traces_that_change() {
    let serve = serve_incident_a();
    wait_for_requests(&serve, 334);
    let mut b = Browser::launch();
    b.goto(&format!("http://127.0.0.1:{}/#/advice", serve.port));
    b.wait_for("document.getElementById('advice-form')", "the advice form");
    assert_eq!(
        b.eval("document.getElementById('nav-advice').classList.contains('on')"),
        true
    );
    // The window of incident A, then Advise.
    b.eval(&format!(
        "document.getElementById('a-from').value = '{FROM}'; document.getElementById('a-to').value = '{TO}';
         document.getElementById('a-go').click(); true"
    ));
    b.wait_for(
        "document.querySelector('#advice-llm tr[data-bucket=\">500\"]')",
        "the row of long prompts",
    );
    let row = b.eval(
        "(() => { const r = document.querySelector('#advice-llm tr[data-bucket=\">500\"]');
          const bar = r.querySelector('.sharebar.cut i');
          return {text: r.innerText, bar: bar ? parseFloat(bar.style.width) : null,
                  rec: r.querySelector('td.rec').innerText}; })()",
    );
    assert!(
        row["bar"].as_f64().unwrap_or(0.0) > 10.0,
        "the cut calls show as a bar: {row}"
    );
    assert!(row["rec"].as_str().unwrap().contains("raise"), "{row}");
    assert!(
        row["text"].as_str().unwrap().contains("30.0 s"),
        "today's 30 s timeout: {row}"
    );
    let first = b.eval("(document.querySelector('.first-change') || {}).innerText || ''");
    assert!(
        first.as_str().unwrap().contains("gateway access"),
        "the layer to change first: {first}"
    );
    // The what-if form starts from the recommended values.
    let set = b.eval("document.getElementById('w-set').value");
    assert!(
        set.as_str()
            .unwrap()
            .contains("llm.deepseek-v4-pro.bucket."),
        "{set}"
    );
    let w = b
        .eval("document.documentElement.scrollWidth")
        .as_f64()
        .unwrap();
    assert!(w <= 1366.0, "the advice page is {w}px wide at 1366×768");
    b.screenshot(&artifacts().join("advice.png"), true);

    b.eval(
        "document.getElementById('w-set').value = 'llm.deepseek-v4-pro.timeout=130s\\nservice.budget=160s\\ngateway.access.read_timeout=180s';
         document.getElementById('w-go').click(); true",
    );
    b.wait_for(
        "document.querySelector('#whatif-changed tbody tr a')",
        "the traces that change",
    );
    let after = b.eval("document.getElementById('whatif-504').innerText");
    let after: f64 = after.as_str().unwrap().parse().unwrap();
    assert!(after <= 5.0, "504s after: {after}");
    let summary = b.eval("document.getElementById('whatif-summary').innerText");
    assert!(
        summary.as_str().unwrap().contains("would now finish"),
        "{summary}"
    );
    b.screenshot(&artifacts().join("whatif.png"), true);
    let href = b.eval("document.querySelector('#whatif-changed tbody tr a').getAttribute('href')");
    let href = href.as_str().unwrap().to_string();
    assert!(href.starts_with("#/trace/"), "{href}");
    b.eval("document.querySelector('#whatif-changed tbody tr a').click(); true");
    b.wait_for(
        "location.hash.startsWith('#/trace/') && document.querySelector('#waterfall')",
        "the changed trace's waterfall",
    );
    println!("screenshots: {}", artifacts().join("advice.png").display());
}
