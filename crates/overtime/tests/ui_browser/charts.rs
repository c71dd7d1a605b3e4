//! The charts over time in a real headless Chromium against a real
//! `overtime serve` tailing incident C: the incident page's failures per
//! minute by cause (window marked) and its dominant call's P50/P99, and the
//! overview's requests, failures, chain health and alerts. Each drawn mark
//! is read back (its data attributes and its height on the drawn scale)
//! and held against the API's series. Screenshots go to
//! `$CARGO_TARGET_DIR/ui-artifacts/`.

use super::page::{Server, artifacts, fixture};
use overtime_test_support::chromium::Browser;
use serde_json::Value;

/// `overtime serve` tailing incident C's gateway log and spans.
fn serve_incident_c() -> Server {
    let files = format!(
        "[[file]]\npath = {:?}\nkind = \"nginx\"\nformat = {:?}\nlayer = \"access\"\n\n[[file]]\npath = {:?}\nkind = \"jsonl\"\n",
        fixture("c_dns_retry", "access.log"),
        std::fs::read_to_string(fixture("c_dns_retry", "log_format.txt")).unwrap(),
        fixture("c_dns_retry", "spans.jsonl"),
    );
    Server::start(&files, None, |_| String::new())
}

/// The drawn marks of `svg` (bars or points) as JSON, with the chart's
/// scale: the values they carry and their geometry as the browser laid
/// them out (`getBBox`, so a style that overrides a mark's size shows).
fn drawn(b: &mut Browser, svg: &str, mark: &str) -> Value {
    b.eval(&format!(
        "(() => {{ const s = document.querySelector('{svg}');
           return {{ ymax: Number(s.dataset.ymax), ph: Number(s.dataset.plotHeight), top: Number(s.dataset.plotTop),
             marks: [...s.querySelectorAll('{mark}')].map(m => {{ const r = m.getBBox();
               return {{ t: Number(m.dataset.t), key: m.dataset.cause || m.dataset.series, v: Number(m.dataset.n ?? m.dataset.v),
                 h: r.height, y: r.y, cy: r.y + r.height / 2 }}; }}) }}; }})()"
    ))
}

/// Every bar's height is its value on the drawn scale.
fn assert_heights(d: &Value, what: &str) {
    let (ymax, ph) = (d["ymax"].as_f64().unwrap(), d["ph"].as_f64().unwrap());
    let base = d["top"].as_f64().unwrap() + ph;
    // Stacked: a minute's bars pile up from the axis without gaps.
    let mut tops: std::collections::BTreeMap<i64, f64> = Default::default();
    for m in d["marks"].as_array().unwrap() {
        let bottom = m["y"].as_f64().unwrap() + m["h"].as_f64().unwrap();
        let expect = tops.get(&m["t"].as_i64().unwrap()).copied().unwrap_or(base);
        assert!(
            (bottom - expect).abs() < 0.05,
            "{what}: a bar of {} ends at {bottom}, not {expect}",
            m["v"]
        );
        tops.insert(m["t"].as_i64().unwrap(), m["y"].as_f64().unwrap());
    }
    for m in d["marks"].as_array().unwrap() {
        let want = m["v"].as_f64().unwrap() / ymax * ph;
        assert!(
            (m["h"].as_f64().unwrap() - want).abs() < 0.05,
            "{what}: a bar of {} drawn {} px high, not {want:.2}",
            m["v"],
            m["h"]
        );
    }
}

#[test]
fn the_incident_and_overview_charts_draw_the_apis_minutes_in_chromium() {
    let server = serve_incident_c();
    server.wait_for_verdicts(23);
    let (_, incidents) = server.api("/api/incidents").unwrap();
    let id = incidents["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "upstream_connect_slow")
        .expect("incident C is listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, t) = server
        .api(&format!("/api/incidents/{id}/timeline"))
        .unwrap();
    let mut b = Browser::launch();
    b.goto(&server.url(&format!("/#/incidents/{id}")));
    b.wait_for(
        "document.querySelector('#incident-charts[data-ready]')",
        "the incident's charts",
    );

    // Failures per minute by cause: one bar per non-zero (minute, cause).
    let bars = drawn(&mut b, "#chart-failures", "rect.cbar");
    let times = t["t_ms"].as_array().unwrap();
    let mut want = Vec::new();
    for c in t["causes"].as_array().unwrap() {
        for (i, n) in c["failures"].as_array().unwrap().iter().enumerate() {
            if n.as_i64().unwrap() > 0 {
                want.push((
                    times[i].as_i64().unwrap(),
                    c["kind"].as_str().unwrap().to_string(),
                    n.as_f64().unwrap(),
                ));
            }
        }
    }
    let mut got: Vec<(i64, String, f64)> = bars["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["t"].as_i64().unwrap(),
                m["key"].as_str().unwrap().to_string(),
                m["v"].as_f64().unwrap(),
            )
        })
        .collect();
    got.sort_by(|a, c| a.partial_cmp(c).unwrap());
    want.sort_by(|a, c| a.partial_cmp(c).unwrap());
    assert_eq!(got, want, "the bars are the API's failures by cause");
    assert_eq!(
        got.iter().map(|g| g.2).sum::<f64>(),
        23.0,
        "incident C's 23 failures"
    );
    assert_heights(&bars, "failures");
    // Each cause in the colour its rule gives it (GET /api/kinds).
    let (_, kinds) = server.api("/api/kinds").unwrap();
    let fills = b.eval("Object.fromEntries([...document.querySelectorAll('#chart-failures rect.cbar')].map(r => [r.dataset.cause, r.getAttribute('fill')]))");
    for (cause, fill) in fills.as_object().unwrap() {
        let kind = kinds["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| &k["name"] == cause);
        assert_eq!(
            Some(fill),
            kind.map(|k| &k["color"]),
            "the colour of {cause}"
        );
    }
    // The window is marked where the API puts it, and the failures sit in it.
    let band = b.eval(
        "(() => { const g = document.querySelector('#chart-failures g.window'); const r = g.querySelector('rect');
          return {start: Number(g.dataset.start), end: Number(g.dataset.end), x: Number(r.getAttribute('x')), w: Number(r.getAttribute('width'))}; })()",
    );
    assert_eq!(band["start"], t["window"]["start_ms"]);
    assert_eq!(band["end"], t["window"]["end_ms"]);
    let xs = b.eval("[...document.querySelectorAll('#chart-failures rect.cbar')].map(r => [Number(r.getAttribute('x')), Number(r.getAttribute('width'))])");
    let (x0, x1) = (
        band["x"].as_f64().unwrap(),
        band["x"].as_f64().unwrap() + band["w"].as_f64().unwrap(),
    );
    assert!(
        xs.as_array().unwrap().iter().all(|b| {
            let (x, w) = (b[0].as_f64().unwrap(), b[1].as_f64().unwrap());
            x + w >= x0 && x <= x1
        }),
        "every failure's minute is in the marked window [{x0}, {x1}]: {xs}"
    );
    let course = b.eval("document.getElementById('incident-course').textContent");
    assert!(
        course.as_str().unwrap().starts_with("First failure"),
        "{course}"
    );
    assert!(
        course.as_str().unwrap().contains("no failure in the"),
        "C is over: {course}"
    );

    // The dominant call's P50/P99: one point per minute with calls.
    let pts = drawn(&mut b, "#chart-latency", "circle.pt");
    for series in ["p50", "p99"] {
        let want: Vec<(i64, f64)> = t["dominant"][format!("{series}_ms")]
            .as_array()
            .unwrap()
            .iter()
            .zip(times)
            .filter_map(|(v, tm)| Some((tm.as_i64().unwrap(), v.as_f64()?)))
            .collect();
        let got: Vec<(i64, f64)> = pts["marks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["key"] == series)
            .map(|m| (m["t"].as_i64().unwrap(), m["v"].as_f64().unwrap()))
            .collect();
        assert_eq!(got, want, "{series}");
        assert!(!got.is_empty());
    }
    b.screenshot(&artifacts().join("incident-charts.png"), true);

    // The overview over the two hours before the newest data.
    // At a fixed end, so the page and the API chart the same minutes.
    let (_, o) = server.api("/api/overview?hours=2").unwrap();
    let to = o["to_ms"].as_i64().unwrap();
    let (_, o) = server
        .api(&format!("/api/overview?hours=2&to={to}"))
        .unwrap();
    b.eval(&format!("location.hash = '#/overview?hours=2&to={to}'"));
    b.wait_for(
        "document.querySelector('#overview[data-ready]')",
        "the overview",
    );
    assert_eq!(
        b.eval("document.getElementById('nav-overview').classList.contains('on')"),
        true
    );
    let req = drawn(&mut b, "#chart-requests", "rect.cbar");
    assert_heights(&req, "requests");
    let total = |key: &str| -> f64 {
        req["marks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["key"] == key)
            .map(|m| m["v"].as_f64().unwrap())
            .sum()
    };
    let sum = |v: &Value| -> f64 {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .sum()
    };
    assert_eq!(total("failed"), sum(&o["failed"]));
    assert_eq!(total("ok") + total("failed"), sum(&o["requests"]));
    assert!(total("failed") >= 23.0);
    let health = drawn(&mut b, "#chart-health", "circle.pt");
    let want: Vec<(i64, f64)> = o["chain_health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["t_ms"].as_i64().unwrap(), h["value"].as_f64().unwrap()))
        .collect();
    let got: Vec<(i64, f64)> = health["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["t"].as_i64().unwrap(), m["v"].as_f64().unwrap()))
        .collect();
    assert_eq!(got, want, "chain health per minute");
    assert!(!got.is_empty());
    // A point's height is its value on the 0–1 scale.
    let (top, ph) = (
        health["top"].as_f64().unwrap(),
        health["ph"].as_f64().unwrap(),
    );
    for m in health["marks"].as_array().unwrap() {
        let drawn_v = (top + ph - m["cy"].as_f64().unwrap()) / ph;
        assert!(
            (drawn_v - m["v"].as_f64().unwrap().min(1.0)).abs() < 0.01,
            "{m}"
        );
    }
    // Every alert that fired is marked on both charts and listed.
    let alerts = o["alerts"].as_array().unwrap();
    let marked = b.eval("[...document.querySelectorAll('#chart-requests g.alert')].map(g => [g.dataset.alert, g.dataset.early === 'true'])");
    let want: Vec<Value> = alerts
        .iter()
        .map(|a| serde_json::json!([a["name"], a["early_warning"]]))
        .collect();
    assert_eq!(marked, Value::Array(want));
    assert_eq!(
        b.eval("document.querySelectorAll('#chart-health g.alert').length")
            .as_u64(),
        Some(alerts.len() as u64)
    );
    assert!(
        !alerts.is_empty(),
        "incident C burns the timeout budget: {o}"
    );
    b.screenshot(&artifacts().join("overview.png"), true);
}
