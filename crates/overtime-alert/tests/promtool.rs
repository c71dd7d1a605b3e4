//! The shipped Prometheus and Alertmanager files, checked by the real tools
//! (Debian `prometheus` for promtool, `prometheus-alertmanager` for amtool):
//! `promtool check rules`, `promtool test rules` on every unit test file,
//! `promtool check config`, `amtool check-config`; and the alert names and
//! severities of the rules against docs/metrics.md and the crate's catalog.

use overtime_test_support::monitoring::repo as repo_root;
use overtime_test_support::program::find_program;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

fn promtool() -> PathBuf {
    find_program(&["promtool"], "prometheus")
}

fn run(program: PathBuf, args: &[&str]) -> String {
    let out = Command::new(&program)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{text}",
        program.display(),
        args.join(" "),
        out.status
    );
    text
}

fn rules_text() -> String {
    std::fs::read_to_string(repo_root().join("deploy/prometheus/overtime.rules.yml")).unwrap()
}

fn unit_test_files() -> Vec<String> {
    let dir = repo_root().join("deploy/prometheus/tests");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .map(|p| {
            format!(
                "deploy/prometheus/tests/{}",
                p.file_name().unwrap().to_string_lossy()
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn promtool_checks_the_rules() {
    let out = run(
        promtool(),
        &["check", "rules", "deploy/prometheus/overtime.rules.yml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_unit_tests_of_the_rules_pass() {
    let files = unit_test_files();
    assert!(files.len() >= 4, "{files:?}");
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let out = run(promtool(), &args);
    assert_eq!(out.matches("SUCCESS").count(), files.len(), "{out}");
}

#[test]
fn promtool_checks_the_prometheus_config() {
    let out = run(
        promtool(),
        &["check", "config", "deploy/prometheus/prometheus.yml"],
    );
    assert!(out.contains("1 rule files found"), "{out}");
}

#[test]
fn amtool_checks_the_alertmanager_config() {
    let amtool = find_program(&["amtool"], "prometheus-alertmanager");
    let out = run(
        amtool,
        &["check-config", "deploy/alertmanager/alertmanager.yml"],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

/// `alert:` names of the rules with their `severity:` label.
fn rule_alerts() -> BTreeMap<String, String> {
    let mut alerts = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in rules_text().lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("- alert: ") {
            current = Some(name.trim().to_string());
        } else if t.starts_with("- record: ") {
            current = None;
        } else if let (Some(sev), Some(name)) = (t.strip_prefix("severity: "), &current) {
            alerts.insert(name.clone(), sev.trim().to_string());
        }
    }
    alerts
}

#[test]
fn rule_alerts_are_the_catalog_of_docs_metrics_md() {
    let docs = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    // the table of the "## Alerts" section
    let section = docs
        .split("\n## ")
        .find(|s| s.starts_with("Alerts"))
        .expect("docs/metrics.md has an Alerts section");
    let documented: BTreeMap<String, String> = section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            (name.starts_with("Overtime") && cells.len() > 3)
                .then(|| (name.to_string(), cells[2].to_string()))
        })
        .collect();
    let catalog: BTreeMap<String, String> = overtime_alert::CATALOG
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    assert_eq!(
        documented, catalog,
        "docs/metrics.md vs overtime_alert::CATALOG"
    );
    // the per-incident page needs the report's headline: collector only
    let mut expected = catalog;
    expected.remove(overtime_alert::INCIDENT);
    assert_eq!(rule_alerts(), expected, "overtime.rules.yml vs the catalog");
}

#[test]
fn every_alert_rule_is_tested_firing_and_not_firing() {
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for file in unit_test_files() {
        let text = std::fs::read_to_string(repo_root().join(&file)).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(name) = l.strip_prefix("alertname: ") else {
                continue;
            };
            match lines.get(i + 1) {
                Some(&"exp_alerts: []") => quiet.insert(name.to_string()),
                Some(&"exp_alerts:") => firing.insert(name.to_string()),
                other => panic!("{file}: alertname {name} followed by {other:?}"),
            };
        }
    }
    for name in rule_alerts().keys() {
        assert!(firing.contains(name), "no unit test sees {name} firing");
        assert!(quiet.contains(name), "no unit test sees {name} not firing");
    }
}

#[test]
fn recording_rules_follow_the_level_metric_operation_naming() {
    for line in rules_text().lines() {
        if let Some(name) = line.trim().strip_prefix("- record: ") {
            let parts: Vec<&str> = name.split(':').collect();
            assert_eq!(parts.len(), 3, "{name}");
            assert!(parts[0].starts_with("overtime"), "{name}");
            // The operations applied, newest first, with their window: a
            // rate or increase (the early warning's sums over a window,
            // its baseline's variance and bucket count are further
            // operations on those; the calls in flight's minimum shift
            // is a max_over_time of its baseline buckets).
            let op = parts[2];
            assert!(
                [
                    "rate",
                    "increase",
                    "stdvar",
                    "max_sum_over_time",
                    "max_over_time",
                    "count_over_time",
                    "const",
                ]
                .iter()
                .any(|o| op.starts_with(o)),
                "{name}"
            );
        }
    }
}
