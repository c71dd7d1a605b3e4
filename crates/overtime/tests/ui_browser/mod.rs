//! The UI in a real headless Chromium against a real `overtime serve`.
//!
//! The server tails incidents B (tool with no timeout, streams cut by the
//! read timeout) and C (slow DNS, retried) and a generated 2,000-span
//! trace; the browser is Debian's `chromium`, driven over the DevTools
//! protocol by `overtime_test_support::chromium` (a std-only WebSocket
//! client: no driver download, no Node, no new crate in the binary's
//! manifest). Screenshots
//! go to `$CARGO_TARGET_DIR/ui-artifacts/`; their paths are printed.

mod advice;
mod charts;
mod page;
mod phases;

use overtime_test_support::chromium::Browser;
use page::*;

#[test]
fn search_waterfall_incidents_and_keyboard_in_chromium() {
    let server = Server::start(&incidents_b_and_c(), None, |dir| {
        let p = dir.join("big.jsonl");
        std::fs::write(&p, big_trace_jsonl()).unwrap();
        format!(
            "[[file]]\npath = {:?}\nkind = \"jsonl\"\n",
            p.display().to_string()
        )
    });
    // B: 40 tool_no_timeout + 5 stream_idle_gap; C: 23; the big trace: 1.
    server.wait_for_verdicts(69);
    let tool = server.first_of_kind("tool_no_timeout");
    let tool_id = tool["trace_id"].as_str().unwrap().to_string();
    let stream_id = server.first_of_kind("stream_idle_gap")["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, tool_verdict) = server.api(&format!("/api/traces/{tool_id}")).unwrap();
    let out = artifacts();
    let mut b = Browser::launch();

    // Search by trace id, by keyboard: `/` focuses the search, Enter runs it.
    b.goto(&server.url("/"));
    b.wait_for(
        "document.querySelector('#results-table tbody tr')",
        "the trace list",
    );
    assert_fits(&mut b, "the trace list");
    assert_eq!(
        b.eval("document.getElementById('logout-form').hidden && document.getElementById('logout').offsetParent === null"),
        true,
        "no 'Sign out' when the server has no token"
    );
    b.press("/");
    assert_eq!(active(&mut b)["id"], "q-trace", "`/` focuses the search");
    b.type_text(&tool_id);
    b.press("Enter");
    b.wait_for(
        &format!("document.querySelectorAll('#results-table tbody tr').length === 1 && document.querySelector('#results-table tbody tr').dataset.id === '{tool_id}'"),
        "the search by trace id",
    );
    assert!(
        b.eval("location.hash")
            .as_str()
            .unwrap()
            .contains(&format!("trace_id={tool_id}")),
        "the search is in the URL"
    );
    b.screenshot(&out.join("search-by-trace-id.png"), false);

    // Tab order: the form, then the results.
    b.eval("document.getElementById('q-go').focus()");
    b.press("Tab");
    assert_eq!(
        active(&mut b)["row"],
        tool_id.as_str(),
        "Tab from the search button reaches the first result"
    );
    // Enter opens the row.
    b.press("Enter");
    b.wait_for(
        &format!("document.querySelector('#waterfall[data-trace=\"{tool_id}\"]')"),
        "the waterfall",
    );
    assert_eq!(
        active(&mut b)["id"],
        "waterfall",
        "the waterfall takes the focus"
    );

    // The verdict and the waterfall of incident B's tool call.
    assert_eq!(text(&mut b, "#rc-kind"), "tool_no_timeout");
    assert_eq!(text(&mut b, "#rc-component"), "search_api");
    assert_eq!(
        text(&mut b, "#rc-summary"),
        tool_verdict["root_cause"]["summary"].as_str().unwrap()
    );
    let evidence =
        b.eval("[...document.querySelectorAll('#evidence li')].map(li => li.textContent)");
    assert_eq!(
        &evidence, &tool_verdict["root_cause"]["evidence"],
        "every piece of evidence is shown"
    );
    assert_eq!(
        b.eval("document.querySelector('.vline.budget').dataset.ms"),
        "90000",
        "the deadline line sits at the 90 s budget"
    );
    assert_eq!(text(&mut b, ".axis .mark.budget"), "deadline 90.0 s");
    assert_eq!(text(&mut b, ".axis .mark.cut"), "gateway cut 60.0 s");
    let flagged = b.eval("[...document.querySelectorAll('.wf-row')].filter(r => r.querySelector('.flag:not(.retry):not(.status)')).map(r => r.querySelector('.wf-label').textContent)");
    assert_eq!(
        flagged.as_array().map(Vec::len),
        Some(1),
        "one call ran with no timeout: {flagged}"
    );
    assert!(
        flagged[0]
            .as_str()
            .unwrap()
            .contains("execute_tool search_api"),
        "{flagged}"
    );
    assert!(
        flagged[0].as_str().unwrap().contains("no timeout"),
        "{flagged}"
    );
    assert!(
        b.eval("document.querySelectorAll('.wf-row .tick').length > 3") == true,
        "timeouts are drawn on their bars"
    );
    assert!(b.eval("!!document.querySelector('.bar.hot') && [...document.querySelectorAll('.wf-row')].some(r => r.querySelector('.bar.hot') && r.textContent.includes('search_api'))") == true, "the critical call is highlighted");
    assert!(b.eval("document.querySelectorAll('.bar .ph-prefill').length >= 1 && document.querySelectorAll('.bar .ph-decode').length >= 1") == true, "LLM phases stack inside LLM bars");
    assert!(
        b.eval("document.querySelectorAll('.gw-seg.gw-nohdr').length === 1") == true,
        "a 504 has no response header"
    );
    assert!(text(&mut b, "#findings").contains("no_timeout"));
    assert_fits(&mut b, "the waterfall");
    assert_axis_readable(&mut b, "the tool trace");
    b.screenshot(&out.join("trace-tool-no-timeout.png"), true);

    // Keyboard in the waterfall: arrows, Enter for details, Escape back.
    b.press("ArrowDown");
    b.press("ArrowDown");
    b.press("Enter");
    b.wait_for("document.querySelector('#detail')", "the span details");
    b.press("Escape");
    b.wait_for("!document.querySelector('#detail')", "the details to close");
    b.press("Escape");
    b.wait_for(
        "document.querySelector('#results-table') && location.hash.startsWith('#/?')",
        "Escape back to the search",
    );
    b.wait_for(
        &format!(
            "document.activeElement.dataset && document.activeElement.dataset.id === '{tool_id}'"
        ),
        "the focus back on the opened row",
    );

    // Search by root-cause kind: the menu is the server's kinds, in rule order.
    let (_, kinds) = server.api("/api/kinds").unwrap();
    let names: Vec<&str> = kinds["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        b.eval("[...document.querySelectorAll('#q-kind option')].slice(1).map(o => o.value)"),
        serde_json::json!(names),
        "the root-cause menu lists GET /api/kinds"
    );
    b.eval("document.getElementById('q-trace').value = ''; document.getElementById('q-kind').value = 'upstream_connect_slow'; document.getElementById('q-trace').focus()");
    b.press("Enter");
    b.wait_for("document.querySelector('#result-count') && document.querySelector('#result-count').textContent.startsWith('23 of 23')", "the search by root cause");
    let kinds = b.eval("[...new Set([...document.querySelectorAll('#results-table tbody tr td.kind')].map(td => td.textContent))]");
    assert_eq!(kinds, serde_json::json!(["upstream_connect_slow"]));
    b.screenshot(&out.join("search-by-root-cause.png"), false);

    // Incident C's retried call: the attempts grouped, DNS drawn, 10 s deadline.
    b.press("ArrowDown");
    let c_id = active(&mut b)["row"]
        .as_str()
        .expect("a result row has the focus")
        .to_string();
    b.press("Enter");
    b.wait_for(
        &format!("document.querySelector('#waterfall[data-trace=\"{c_id}\"]')"),
        "incident C's waterfall",
    );
    assert_eq!(text(&mut b, "#rc-kind"), "upstream_connect_slow");
    assert_eq!(
        b.eval("document.querySelector('.vline.budget').dataset.ms"),
        "10000"
    );
    let group = text(&mut b, ".wf-row.grp .wf-label");
    assert!(
        group.contains("weather_api") && group.contains("2 attempts"),
        "{group}"
    );
    assert!(
        b.eval("document.querySelectorAll('.bar .dns').length") == 2,
        "DNS shown on both attempts"
    );
    assert_axis_readable(&mut b, "the retried DNS trace");
    b.screenshot(&out.join("trace-retry-dns.png"), true);

    // Incident B's cut stream: the silent gap beyond the read timeout.
    b.eval(&format!("location.hash = '#/trace/{stream_id}'"));
    b.wait_for(
        &format!("document.querySelector('#waterfall[data-trace=\"{stream_id}\"]')"),
        "the stream's waterfall",
    );
    assert_eq!(text(&mut b, "#rc-kind"), "stream_idle_gap");
    let gap = b.eval("Math.max(...[...document.querySelectorAll('#waterfall .gap.over')].map(g => Number(g.dataset.gapMs)))");
    assert!(
        gap.as_f64().unwrap() >= 60_000.0,
        "a stream gap at or over the 60 s read timeout is marked: {gap}"
    );
    assert!(
        b.eval("document.querySelectorAll('#waterfall .wf-row .ev').length > 3") == true,
        "the chunks are drawn"
    );
    assert_axis_readable(&mut b, "the stream trace");
    b.screenshot(&out.join("trace-stream-gap.png"), true);

    // Incidents: the list, then a report with its headline and LLM table.
    let (_, incidents) = server.api("/api/incidents").unwrap();
    let b_incident = incidents["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "tool_no_timeout")
        .expect("incident B is listed")
        .clone();
    b.eval("location.hash = '#/incidents'");
    b.wait_for(
        "document.querySelector('#incidents-table tbody tr')",
        "the incident list",
    );
    let n = b.eval("document.querySelectorAll('#incidents-table tbody tr').length");
    let listed = incidents["incidents"].as_array().unwrap().len();
    assert_eq!(n.as_u64(), Some(listed as u64));
    let line = b.eval("document.querySelector('.summary-line').textContent");
    let want = if listed == 1 {
        "1 incident (".to_string()
    } else {
        format!("{listed} incidents (")
    };
    assert!(
        line.as_str().unwrap().starts_with(&want),
        "the count agrees with its noun: {line}"
    );
    b.eval(&format!(
        "document.querySelector('#incidents-table tr[data-id={:?}]').focus()",
        b_incident["id"].as_str().unwrap()
    ));
    b.screenshot(&out.join("incidents.png"), false);
    b.press("Enter");
    b.wait_for(
        "document.querySelector('#incident-headline')",
        "the incident report",
    );
    assert_eq!(
        text(&mut b, "#incident-headline"),
        b_incident["headline"].as_str().unwrap()
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#llm-latency tbody tr').length"),
        4,
        "four input-token buckets"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#examples a[href^=\"#/trace/\"]').length")
            .as_u64()
            .map(|n| n > 0),
        Some(true)
    );
    assert_fits(&mut b, "the incident report");
    b.screenshot(&out.join("incident-report.png"), true);
    // An example opens its trace.
    b.eval("document.querySelector('#examples a').click()");
    b.wait_for("document.querySelector('#waterfall')", "an example trace");

    // The 2,000-span trace: timed from the click to the drawn rows.
    let r = b.eval(&format!(
        "(async () => {{ const t0 = performance.now(); location.hash = '#/trace/{BIG}';
           while (!document.querySelector('#waterfall[data-trace=\"{BIG}\"]')) await new Promise(r => setTimeout(r, 5));
           await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
           const wf = document.querySelector('#waterfall');
           return {{ total_ms: performance.now() - t0, draw_ms: Number(wf.dataset.renderMs), spans: Number(wf.dataset.spans),
                    rows: wf.querySelectorAll('.wf-body .wf-row').length, groups: wf.querySelectorAll('.wf-row.grp').length }}; }})()"
    ));
    println!(
        "2,000-span trace: {:.0} ms from navigation to painted rows (drawing {:.0} ms), {} rows",
        r["total_ms"].as_f64().unwrap(),
        r["draw_ms"].as_f64().unwrap(),
        r["rows"]
    );
    assert_eq!(r["spans"], 2000);
    assert_eq!(
        r["rows"].as_u64(),
        Some(2000 + r["groups"].as_u64().unwrap()),
        "one row per span plus one per retry group: {r}"
    );
    assert!(
        r["groups"].as_u64().unwrap() > 10,
        "the retried tools are grouped: {r}"
    );
    b.screenshot(&out.join("trace-2000-spans.png"), false);
    // Critical path only, by keyboard.
    b.eval("document.getElementById('waterfall').focus()");
    b.press("c");
    assert!(b.eval("document.getElementById('waterfall').classList.contains('crit-only')") == true);
}

#[test]
fn a_browser_signs_in_with_the_token() {
    const TOKEN: &str = "ui-test-token-7f3a";
    let c = format!(
        "[[file]]\npath = {:?}\nkind = \"nginx\"\nformat = {:?}\nlayer = \"access\"\n\n[[file]]\npath = {:?}\nkind = \"jsonl\"\n",
        fixture("c_dns_retry", "access.log"),
        std::fs::read_to_string(fixture("c_dns_retry", "log_format.txt")).unwrap(),
        fixture("c_dns_retry", "spans.jsonl"),
    );
    let server = Server::start(&c, Some(TOKEN), |_| String::new());
    server.wait_for_verdicts(23);
    let out = artifacts();
    let mut b = Browser::launch();

    b.goto(&server.url("/"));
    b.wait_for("document.querySelector('#login-token')", "the sign-in page");
    assert_eq!(
        b.eval("fetch('/api/traces').then(r => r.status)"),
        401,
        "the API is closed without the token"
    );
    assert_eq!(
        b.eval("fetch('/healthz').then(r => r.status)"),
        200,
        "health stays open"
    );
    b.screenshot(&out.join("sign-in.png"), false);

    b.eval("document.getElementById('login-token').focus()");
    b.type_text("not-the-token");
    b.press("Enter");
    b.wait_for("document.querySelector('#login-error')", "the refusal");
    assert_eq!(text(&mut b, "#login-error"), "that token is wrong");

    b.eval("document.getElementById('login-token').focus()");
    b.type_text(TOKEN);
    b.press("Enter");
    b.wait_for(
        "document.querySelector('#result-count')",
        "the app after signing in",
    );
    assert!(
        text(&mut b, "#result-count").contains("of 23"),
        "the API answers through the cookie"
    );
    assert_eq!(
        b.eval("document.cookie"),
        "",
        "the token cookie is HttpOnly"
    );
    assert_eq!(
        b.eval("document.getElementById('logout').offsetParent !== null"),
        true,
        "'Sign out' shows for a signed-in browser"
    );
    b.screenshot(&out.join("signed-in.png"), false);

    b.eval("document.getElementById('logout').click()");
    b.wait_for(
        "document.querySelector('#login-token')",
        "the sign-in page after signing out",
    );
    assert_eq!(b.eval("fetch('/api/traces').then(r => r.status)"), 401);
}

#[test]
fn the_first_view_is_useful_before_the_script_runs() {
    let server = Server::start(&incidents_b_and_c(), None, |_| String::new());
    server.wait_for_verdicts(68);
    let out = artifacts();
    let mut b = Browser::launch();
    // A browser that does not run the page's script (slow, blocked, off).
    b.call(
        "Emulation.setScriptExecutionDisabled",
        serde_json::json!({"value": true}),
    );
    b.goto(&server.url("/"));
    b.call(
        "Emulation.setScriptExecutionDisabled",
        serde_json::json!({"value": false}),
    );
    let links =
        b.eval("[...document.querySelectorAll('#first-view a')].map(a => a.getAttribute('href'))");
    for want in ["/api/incidents", "/api/traces?outcome=gateway_timeout"] {
        assert!(
            links.as_array().unwrap().iter().any(|l| l == want),
            "the first view links {want}: {links}"
        );
    }
    assert!(
        text(&mut b, "#first-view").contains("Where the time budget"),
        "it says what the page is"
    );
    b.screenshot(&out.join("first-view-without-script.png"), false);
    // The links it gives answer.
    let (st, _) = server.api("/api/incidents").unwrap();
    assert_eq!(st, 200);
}
