//! The Grafana dashboards and their provisioning: every dashboard's JSON
//! structure, every panel target's PromQL parsed by the real promtool, and
//! every metric and label it uses checked against docs/metrics.md and the
//! recording rules. (Running each query against a live Prometheus fed by
//! `overtime serve` is crates/overtime/tests/prometheus_e2e.rs.)

use overtime_test_support::monitoring::repo as repo_root;
use overtime_test_support::program::find_program;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Every dashboard file: (file name, parsed JSON).
fn dashboards() -> Vec<(String, Value)> {
    let dir = repo_root().join("dashboards/overtime");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Panels, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        out.push(p);
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter());
        }
    }
    out
}

/// A panel reading overtime's tables over the PostgreSQL wire protocol
/// (docs/postgres.md) rather than Prometheus.
fn is_sql(p: &Value) -> bool {
    p["datasource"]["type"] == "grafana-postgresql-datasource"
}

/// Each target's PromQL with Grafana's variables replaced the way Grafana
/// would for a short range: (dashboard, panel title, expr).
fn queries() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (file, d) in dashboards() {
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if is_sql(p) {
                    continue; // run as Grafana expands it: crates/overtime/tests/postgres
                }
                let expr = t["expr"].as_str().unwrap_or_default();
                out.push((
                    file.clone(),
                    p["title"].as_str().unwrap_or_default().to_string(),
                    expr.replace("$__rate_interval", "1m")
                        .replace("$__range", "1h")
                        .replace("$__interval", "1m")
                        .replace("$model", ".*"),
                ));
            }
        }
    }
    out
}

#[test]
fn the_four_dashboards_are_there_with_unique_uids() {
    let ds = dashboards();
    let uids: BTreeSet<&str> = ds.iter().map(|(_, d)| d["uid"].as_str().unwrap()).collect();
    assert_eq!(
        uids,
        [
            "overtime-504-root-causes",
            "overtime-agent-health",
            "overtime-llm-latency",
            "overtime-stages"
        ]
        .into_iter()
        .collect()
    );
    for (file, d) in &ds {
        assert_eq!(format!("{}.json", d["uid"].as_str().unwrap()), *file);
        assert!(
            d["title"].as_str().unwrap().starts_with("overtime — "),
            "{file}"
        );
        assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "{file}");
        assert!(
            d["tags"].as_array().unwrap().contains(&"overtime".into()),
            "{file}"
        );
        assert!(
            d.get("id").is_none_or(Value::is_null),
            "{file}: provisioned dashboards carry no id"
        );
    }
}

#[test]
fn every_panel_is_placed_and_queries_prometheus_or_overtimes_sql_through_a_datasource_variable() {
    for (file, d) in dashboards() {
        let vars: Vec<&Value> = d["templating"]["list"].as_array().unwrap().iter().collect();
        let ds = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{file}: no datasource variable"));
        assert_eq!(
            (ds["type"].as_str(), ds["query"].as_str()),
            (Some("datasource"), Some("prometheus"))
        );
        let mut ids = BTreeSet::new();
        let mut cells = BTreeSet::new();
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap();
            assert!(
                ids.insert(p["id"].as_u64().unwrap()),
                "{file}: duplicate id at {title}"
            );
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_u64().unwrap(),
                g["y"].as_u64().unwrap(),
                g["w"].as_u64().unwrap(),
                g["h"].as_u64().unwrap(),
            );
            assert!(
                x + w <= 24 && w > 0 && h > 0,
                "{file}: {title} outside the grid"
            );
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(
                        cells.insert((cx, cy)),
                        "{file}: {title} overlaps another panel at ({cx},{cy})"
                    );
                }
            }
            if p["type"] == "row" {
                continue;
            }
            assert!(
                !p["description"].as_str().unwrap_or_default().is_empty(),
                "{file}: {title} has no description"
            );
            let targets = p["targets"].as_array().unwrap();
            if is_sql(p) {
                // Through the `postgres` variable, SQL in every target.
                let v = vars
                    .iter()
                    .find(|v| v["name"] == "postgres")
                    .unwrap_or_else(|| panic!("{file}: {title}: no postgres variable"));
                assert_eq!(v["query"], "grafana-postgresql-datasource", "{file}");
                assert_eq!(p["datasource"]["uid"], "${postgres}", "{file}: {title}");
                assert!(!targets.is_empty(), "{file}: {title} has no query");
                for t in targets {
                    assert!(
                        !t["rawSql"].as_str().unwrap_or_default().trim().is_empty(),
                        "{file}: {title}"
                    );
                    assert_eq!(t["datasource"]["uid"], "${postgres}", "{file}: {title}");
                }
                continue;
            }
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}: {title}");
            assert_eq!(p["datasource"]["type"], "prometheus", "{file}: {title}");
            assert!(!targets.is_empty(), "{file}: {title} has no query");
            let refs: BTreeSet<&str> = targets
                .iter()
                .map(|t| t["refId"].as_str().unwrap())
                .collect();
            assert_eq!(
                refs.len(),
                targets.len(),
                "{file}: {title}: duplicate refId"
            );
            for t in targets {
                assert!(
                    !t["expr"].as_str().unwrap_or_default().trim().is_empty(),
                    "{file}: {title}"
                );
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{file}: {title}");
            }
        }
    }
}

/// Metric name → labels, from docs/metrics.md's tables; histograms also
/// under their `_bucket` (+ `le`), `_count` and `_sum` series.
fn documented_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let docs = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in docs.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(name) = cells
            .get(1)
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
            .filter(|n| n.starts_with("overtime_"))
        else {
            continue;
        };
        // tables: name | type | labels | meaning, or name | labels | meaning
        let (kind, labels_cell) = if cells.len() >= 6 {
            (cells[2], cells[3])
        } else {
            ("gauge", cells[2])
        };
        let labels: BTreeSet<String> = labels_cell
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        if kind == "histogram" {
            let mut with_le = labels.clone();
            with_le.insert("le".into());
            out.insert(format!("{name}_bucket"), with_le);
            out.insert(format!("{name}_count"), labels.clone());
            out.insert(format!("{name}_sum"), labels.clone());
        }
        out.insert(name.to_string(), labels);
    }
    assert!(out.len() > 40, "docs/metrics.md tables not found: {out:?}");
    out
}

/// Recording rule name → the labels its result keeps (`by (...)`, or none).
fn recorded() -> BTreeMap<String, BTreeSet<String>> {
    let rules =
        std::fs::read_to_string(repo_root().join("deploy/prometheus/overtime.rules.yml")).unwrap();
    let mut out = BTreeMap::new();
    let mut lines = rules.lines().map(str::trim).peekable();
    while let Some(l) = lines.next() {
        if let Some(name) = l.strip_prefix("- record: ") {
            let expr = lines.peek().copied().unwrap_or_default();
            let labels = expr
                .split_once("by (")
                .map(|(_, rest)| {
                    rest.split(')')
                        .next()
                        .unwrap()
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .collect()
                })
                .unwrap_or_default();
            out.insert(name.to_string(), labels);
        }
    }
    out
}

/// The `overtime…` names in an expression and the label names of the
/// selector right after each, if any.
fn metrics_used(expr: &str) -> Vec<(String, Vec<String>)> {
    let b = expr.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if word(b[i]) && (i == 0 || !word(b[i - 1])) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let name = &expr[start..i];
            if !name.starts_with("overtime") {
                continue;
            }
            let mut labels = Vec::new();
            if b.get(i) == Some(&b'{') {
                let end = expr[i..].find('}').unwrap() + i;
                for matcher in expr[i + 1..end].split(',') {
                    let label: String = matcher
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !label.is_empty() {
                        labels.push(label);
                    }
                }
                i = end;
            }
            out.push((name.to_string(), labels));
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn every_metric_and_label_a_panel_uses_exists() {
    let docs = documented_metrics();
    let rules = recorded();
    let mut seen = BTreeSet::new();
    for (file, title, expr) in queries() {
        let used = metrics_used(&expr);
        assert!(
            !used.is_empty(),
            "{file}: {title}: no overtime metric in {expr}"
        );
        for (name, labels) in used {
            let known = docs
                .get(&name)
                .or_else(|| rules.get(&name))
                .unwrap_or_else(|| {
                    panic!(
                        "{file}: {title}: {name} is neither in docs/metrics.md nor a recording rule"
                    )
                });
            for l in labels {
                assert!(
                    known.contains(&l),
                    "{file}: {title}: {name} has no label {l} (it has {known:?})"
                );
            }
            seen.insert(name);
        }
    }
    // the headline SLIs of the issue are all on a dashboard
    for must in [
        "overtime:chain_health:rate1m",
        "overtime:semantic_success_ratio:rate5m",
        "overtime:ttft_p99_seconds:rate5m",
        "overtime:timeout_budget_burn_rate:rate3d",
        "overtime:fallback_acceptance_ratio:rate30m",
        "overtime_model_breaker",
        "overtime_root_causes_total",
        "overtime_llm_call_duration_seconds_bucket",
        "overtime_stage_timeouts_total",
        "overtime_budget_left_seconds_bucket",
    ] {
        assert!(seen.contains(must), "no panel shows {must}");
    }
}

#[test]
fn promtool_parses_every_panel_query() {
    let promtool = find_program(&["promtool"], "prometheus");
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("groups:\n  - name: dashboard-queries\n    rules:\n");
    let qs = queries();
    for (i, (_, _, expr)) in qs.iter().enumerate() {
        let quoted = serde_json::to_string(expr).unwrap(); // a JSON string is a YAML string
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}:check\n        expr: {quoted}\n"
        ));
    }
    let path = dir.path().join("dashboard-queries.yml");
    std::fs::write(&path, &yaml).unwrap();
    let out = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool rejects a dashboard query:\n{text}\n{yaml}"
    );
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", qs.len())),
        "{text}"
    );
}

#[test]
fn provisioning_points_grafana_at_prometheus_and_the_dashboard_folder() {
    let ds = std::fs::read_to_string(
        repo_root().join("dashboards/provisioning/datasources/prometheus.yml"),
    )
    .unwrap();
    for needle in [
        "apiVersion: 1",
        "type: prometheus",
        "uid: prometheus",
        "url: http://prometheus:9090",
    ] {
        assert!(
            ds.contains(needle),
            "datasource provisioning lacks {needle:?}"
        );
    }
    let dash = std::fs::read_to_string(
        repo_root().join("dashboards/provisioning/dashboards/overtime.yml"),
    )
    .unwrap();
    for needle in [
        "apiVersion: 1",
        "type: file",
        "path: /var/lib/grafana/dashboards/overtime",
    ] {
        assert!(
            dash.contains(needle),
            "dashboard provisioning lacks {needle:?}"
        );
    }
}
