//! docker-compose.yml is honest by construction: no container engine runs
//! here, so this test reads the compose file the way `docker compose`
//! would and checks that what it mounts is what the other tests test and
//! that the names and ports agree across the configs:
//!
//! - every bind-mounted host path exists, every named volume is declared,
//!   every `depends_on` names a service (with a healthcheck when the
//!   condition is `service_healthy`);
//! - each collector's mounted config loads with `Config::load`, both read
//!   the topics kafka-init creates from the compose broker in one consumer
//!   group, page the compose Alertmanager, keep their store on their own
//!   volume, listen on the port they publish and the healthcheck probes,
//!   and differ only in `alerts.external_url`;
//! - every collector flushes its Parquet to one bucket prefix on the compose
//!   S3 service, with its credentials, after the init job made the bucket;
//! - Prometheus loads `deploy/prometheus/overtime.rules.yml` (the file the
//!   promtool tests test), scrapes every collector on its listen port,
//!   alerts the compose Alertmanager, and `promtool check config` accepts
//!   the container's /etc/prometheus rebuilt from the mounts;
//! - Alertmanager mounts `deploy/alertmanager/alertmanager.yml` and Grafana
//!   `dashboards/` as the dashboard tests read them;
//! - the producers (Vector for the gateway lines, the OpenTelemetry
//!   Collector for spans) write the collectors' topics on the compose
//!   broker, keyed by trace id with the same partitioner, from where the
//!   simulator writes them;
//! - the Dockerfile's image config loads and matches its EXPOSE, VOLUME,
//!   HEALTHCHECK and CMD.
//!
//! One module per area; the helpers that read the compose file and the
//! repository live in `yaml`, the Dockerfile's in `dockerfile`.

mod bucket;
mod collectors;
mod dockerfile;
mod monitoring;
mod producers;
mod yaml;

use dockerfile::stage;
use serde_norway::Value;
use std::collections::BTreeSet;
use yaml::{Mount, compose, mounts, rel, repo, services};

#[test]
fn every_mount_exists_every_volume_is_declared_every_dependency_is_a_service() {
    let c = compose();
    let all = services(&c);
    let declared: BTreeSet<String> = c["volumes"]
        .as_mapping()
        .map(|m| m.keys().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let mut binds = 0;
    for (name, svc) in &all {
        assert!(
            svc["image"].is_string() || svc["build"].is_mapping(),
            "{name}: neither image nor build"
        );
        for m in mounts(svc) {
            match m {
                Mount::Bind { host, target } => {
                    binds += 1;
                    assert!(
                        host.exists(),
                        "{name}: bind mount {} -> {target} does not exist",
                        rel(&host)
                    );
                }
                Mount::Volume { name: v, .. } => {
                    assert!(declared.contains(&v), "{name}: volume {v:?} not declared")
                }
            }
        }
        if let Some(b) = svc["build"].as_mapping() {
            let ctx = b
                .get("context")
                .and_then(Value::as_str)
                .expect("build.context");
            assert!(repo().join(ctx).join("Dockerfile").exists(), "{name}");
            let target = b.get("target").and_then(Value::as_str).expect("target");
            stage(target);
        }
        if let Some(deps) = svc["depends_on"].as_mapping() {
            for (dep, how) in deps {
                let dep = dep.as_str().unwrap();
                let d = all
                    .get(dep)
                    .unwrap_or_else(|| panic!("{name} depends on {dep:?}: no such service"));
                let cond = how["condition"].as_str().unwrap_or("service_started");
                assert!(
                    [
                        "service_started",
                        "service_healthy",
                        "service_completed_successfully"
                    ]
                    .contains(&cond),
                    "{name} -> {dep}: {cond}"
                );
                if cond == "service_healthy" {
                    assert!(
                        d["healthcheck"]["test"].is_sequence(),
                        "{name} waits for {dep} to be healthy: {dep} has no healthcheck"
                    );
                }
            }
        }
    }
    assert!(binds >= 10, "only {binds} bind mounts?");
}
