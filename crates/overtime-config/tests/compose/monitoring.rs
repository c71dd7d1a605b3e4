//! Monitoring: Prometheus loads the promtool-tested rules, scrapes every
//! collector and alerts the compose Alertmanager; Alertmanager and Grafana
//! mount what their tests read.

use super::collectors::{collector_config, collectors, listen_port};
use super::yaml::{
    Mount, bind_at, compose, container_ports, host_path_of, host_port, mounts, read, read_path,
    rel, repo, same_file, service, strings, yaml,
};
use overtime_test_support::program::find_program;
use serde_norway::Value;
use std::collections::BTreeSet;

#[test]
fn prometheus_loads_the_tested_rules_and_scrapes_every_collector() {
    let c = compose();
    let prom = service(&c, "prometheus");
    let cfg_path = bind_at(&prom, "prometheus", "/etc/prometheus/prometheus.yml");
    let cfg = yaml(&read_path(&cfg_path), "prometheus.yml");

    // The rules: the file promtool's unit tests load.
    let shipped = repo().join("deploy/prometheus/overtime.rules.yml");
    let tests_dir = repo().join("deploy/prometheus/tests");
    let mut unit_tests = 0;
    for e in std::fs::read_dir(&tests_dir).unwrap() {
        let p = e.unwrap().path();
        let t = yaml(&read_path(&p), &rel(&p));
        for r in strings(&t["rule_files"]) {
            assert!(same_file(&tests_dir.join(&r), &shipped), "{}: {r}", rel(&p));
            unit_tests += 1;
        }
    }
    assert!(unit_tests > 0, "no promtool unit tests load the rules");
    let rules = strings(&cfg["rule_files"]);
    assert!(!rules.is_empty(), "{}: no rule_files", rel(&cfg_path));
    for r in &rules {
        let in_container = if r.starts_with('/') {
            r.clone()
        } else {
            format!("/etc/prometheus/{r}")
        };
        let host = host_path_of(&prom, &in_container)
            .unwrap_or_else(|| panic!("rule file {in_container} is not mounted"));
        assert!(
            same_file(&host, &shipped),
            "prometheus loads {} for {in_container}, not the tested deploy/prometheus/overtime.rules.yml",
            rel(&host)
        );
    }

    // Scrapes: every collector on the port its config listens on.
    let mut targets = BTreeSet::new();
    for job in cfg["scrape_configs"].as_sequence().unwrap() {
        for sc in job["static_configs"].as_sequence().unwrap() {
            targets.extend(strings(&sc["targets"]));
        }
    }
    let expected: BTreeSet<String> = collectors(&c)
        .iter()
        .map(|n| format!("{n}:{}", listen_port(&collector_config(&c, n).1)))
        .collect();
    assert_eq!(targets, expected, "scrape targets vs the collectors");

    // Alerts: the compose Alertmanager, on its port.
    let am_ports = container_ports(&service(&c, "alertmanager"));
    let mut ams = 0;
    for a in cfg["alerting"]["alertmanagers"].as_sequence().unwrap() {
        for sc in a["static_configs"].as_sequence().unwrap() {
            for t in strings(&sc["targets"]) {
                let (h, p) = host_port(&t);
                assert_eq!(h, "alertmanager");
                assert!(am_ports.contains(&p), "{t} vs {am_ports:?}");
                ams += 1;
            }
        }
    }
    assert!(ams > 0, "Prometheus sends its alerts nowhere");

    // Otherwise the shipped deploy/prometheus/prometheus.yml.
    let deploy = yaml(&read("deploy/prometheus/prometheus.yml"), "prometheus.yml");
    assert_eq!(
        cfg["global"], deploy["global"],
        "global differs from deploy/"
    );
    assert_eq!(cfg["rule_files"], deploy["rule_files"]);
    let jobs = |v: &Value| -> Vec<(Value, Value)> {
        v["scrape_configs"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|j| (j["job_name"].clone(), j["metrics_path"].clone()))
            .collect()
    };
    assert_eq!(jobs(&cfg), jobs(&deploy), "jobs differ from deploy/");
    assert!(container_ports(&prom).contains(&9090));

    // promtool on the container's /etc/prometheus as the mounts build it.
    let root = tempfile::tempdir().unwrap();
    for m in mounts(&prom) {
        if let Mount::Bind { host, target } = m {
            let dst = root.path().join(target.trim_start_matches('/'));
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&host, &dst).unwrap();
        }
    }
    let out = std::process::Command::new(find_program(&["promtool"], "prometheus"))
        .arg("check")
        .arg("config")
        .arg(root.path().join("etc/prometheus/prometheus.yml"))
        .output()
        .unwrap_or_else(|e| panic!("promtool: {e}"));
    assert!(
        out.status.success(),
        "promtool check config (compose mounts):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alertmanager_and_grafana_mount_what_their_tests_read() {
    let c = compose();
    let am = service(&c, "alertmanager");
    let cfg = bind_at(&am, "alertmanager", "/etc/alertmanager/alertmanager.yml");
    assert!(
        same_file(&cfg, &repo().join("deploy/alertmanager/alertmanager.yml")),
        "alertmanager mounts {}",
        rel(&cfg)
    );
    assert!(container_ports(&am).contains(&9093));

    let g = service(&c, "grafana");
    let ds_dir = bind_at(&g, "grafana", "/etc/grafana/provisioning/datasources");
    let db_dir = bind_at(&g, "grafana", "/etc/grafana/provisioning/dashboards");
    assert!(same_file(
        &ds_dir,
        &repo().join("dashboards/provisioning/datasources")
    ));
    assert!(same_file(
        &db_dir,
        &repo().join("dashboards/provisioning/dashboards")
    ));
    assert!(container_ports(&g).contains(&3000));

    // The datasource is the compose Prometheus.
    let ds = yaml(
        &read("dashboards/provisioning/datasources/prometheus.yml"),
        "ds",
    );
    let prom_ports = container_ports(&service(&c, "prometheus"));
    for d in ds["datasources"].as_sequence().unwrap() {
        let (h, p) = host_port(d["url"].as_str().unwrap());
        assert_eq!(h, "prometheus");
        assert!(prom_ports.contains(&p), "datasource port {p}");
    }

    // The Jaeger data source is a collector's Jaeger API, on the port its
    // config listens on.
    let jaeger = yaml(
        &read("dashboards/provisioning/datasources/jaeger.yml"),
        "jaeger",
    );
    for d in jaeger["datasources"].as_sequence().unwrap() {
        assert_eq!(d["type"].as_str(), Some("jaeger"));
        let url = d["url"].as_str().unwrap();
        assert!(
            url.ends_with("/jaeger"),
            "the Jaeger API is under /jaeger: {url}"
        );
        let (h, p) = host_port(url);
        assert!(collectors(&c).contains(&h), "{h} is not a collector");
        assert_eq!(p, listen_port(&collector_config(&c, &h).1), "{url}");
    }

    // The SQL datasource is a collector's PostgreSQL wire protocol, on the
    // port its config listens on (docs/postgres.md).
    let ds = yaml(
        &read("dashboards/provisioning/datasources/overtime-postgres.yml"),
        "pg ds",
    );
    let names = collectors(&c);
    for d in ds["datasources"].as_sequence().unwrap() {
        assert_eq!(d["type"].as_str(), Some("grafana-postgresql-datasource"));
        let (h, p) = host_port(d["url"].as_str().unwrap());
        assert!(names.contains(&h), "{h} is not a collector");
        let (_, cfg) = collector_config(&c, &h);
        let (lh, lp) = host_port(&cfg.sql.postgres.listen);
        assert_eq!(
            (lh.as_str(), lp),
            ("0.0.0.0", p),
            "{h}'s [sql.postgres] listen"
        );
    }

    // The dashboard provider's path is where dashboards/overtime is mounted.
    let prov = yaml(
        &read("dashboards/provisioning/dashboards/overtime.yml"),
        "prov",
    );
    let mut seen = 0;
    for p in prov["providers"].as_sequence().unwrap() {
        let path = p["options"]["path"].as_str().unwrap();
        let host = host_path_of(&g, path)
            .unwrap_or_else(|| panic!("provider path {path} is not mounted in grafana"));
        assert!(
            same_file(&host, &repo().join("dashboards/overtime")),
            "{path} is {}",
            rel(&host)
        );
        let n = std::fs::read_dir(&host)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("json".as_ref()))
            .count();
        assert!(n > 0, "no dashboards in {}", rel(&host));
        seen += 1;
    }
    assert!(seen > 0);
}
