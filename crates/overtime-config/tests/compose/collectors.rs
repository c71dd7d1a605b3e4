//! The collectors: each loads its mounted config, reads the topics
//! kafka-init creates from the compose broker in one consumer group, pages
//! the compose Alertmanager, has its own store volume and port, and differs
//! from the others only in `alerts.external_url`.

use super::dockerfile::{exec_form, instruction};
use super::yaml::{
    Mount, bind_at, compose, container_ports, created_topics, host_port, kafka_listeners, mounts,
    published, rel, service, services, strings,
};
use overtime_config::Config;
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The collectors: services built from the Dockerfile's collector stage.
pub fn collectors(c: &Value) -> Vec<String> {
    let names: Vec<String> = services(c)
        .into_iter()
        .filter(|(_, s)| s["build"]["target"].as_str() == Some("collector"))
        .map(|(n, _)| n)
        .collect();
    assert!(
        names.len() >= 2,
        "the scale-out deployment runs at least two collectors: {names:?}"
    );
    names
}

/// The config file the collector image's CMD reads (compose may override
/// the command).
pub fn config_path_in_container(svc: &Value) -> String {
    let cmd = if svc["command"].is_null() {
        exec_form(&instruction("collector", "CMD").expect("collector CMD"))
    } else {
        strings(&svc["command"])
    };
    assert_eq!(cmd.first().map(String::as_str), Some("serve"), "{cmd:?}");
    let i = cmd
        .iter()
        .position(|a| a == "--config")
        .unwrap_or_else(|| panic!("{cmd:?}: no --config"));
    cmd[i + 1].clone()
}

/// A collector's config, loaded from the host file its container reads.
pub fn collector_config(c: &Value, name: &str) -> (PathBuf, Config) {
    let svc = service(c, name);
    let path = bind_at(&svc, name, &config_path_in_container(&svc));
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (path, cfg)
}

pub fn listen_port(cfg: &Config) -> u16 {
    let (host, port) = host_port(&cfg.server.listen);
    assert_eq!(host, "0.0.0.0", "a container listens on all interfaces");
    port
}

#[test]
fn collectors_load_and_share_one_consumer_group_on_the_compose_broker() {
    let c = compose();
    let names = collectors(&c);
    let listeners = kafka_listeners(&c);
    let (kafka_host, kafka_port) = listeners.get("PLAINTEXT").expect("PLAINTEXT listener");
    let (created, partitions) = created_topics(&c);
    let am = service(&c, "alertmanager");
    let am_ports = container_ports(&am);
    let mut groups = BTreeSet::new();
    let mut volumes = BTreeSet::new();
    let mut normalized = Vec::new();
    for name in &names {
        let svc = service(&c, name);
        let (path, cfg) = collector_config(&c, name);
        let what = format!("{name} ({})", rel(&path));

        // Kafka: the compose broker, the topics kafka-init creates.
        assert_eq!(cfg.kafka.len(), 1, "{what}: one [[kafka]] source");
        let k = &cfg.kafka[0];
        for b in k.brokers.split(',') {
            let (h, p) = host_port(b);
            assert!(
                services(&c).contains_key(&h),
                "{what}: broker {h} is not a service"
            );
            assert_eq!((&h, p), (kafka_host, *kafka_port), "{what}: broker");
        }
        groups.insert(k.group_id.clone());
        let formats: BTreeMap<&str, &str> = k
            .topics
            .iter()
            .map(|t| (t.format.as_str(), t.topic.as_str()))
            .collect();
        assert!(
            formats.contains_key("nginx"),
            "{what}: no gateway-line topic"
        );
        assert!(formats.contains_key("otlp-proto"), "{what}: no span topic");
        for t in &k.topics {
            assert!(
                created.contains(&t.topic),
                "{what}: topic {} is not created by kafka-init ({created:?})",
                t.topic
            );
        }
        assert!(
            partitions as usize >= names.len(),
            "{partitions} partitions for {} collectors: one would idle",
            names.len()
        );
        // With several collectors, a trace's records must all come through
        // Kafka: OTLP straight to one collector would split traces.
        assert!(
            cfg.otlp.http_listen.is_empty() && cfg.otlp.grpc_listen.is_empty(),
            "{what}: OTLP listeners on a collector of a group"
        );

        // Alertmanager: the compose service, on its port.
        assert!(!cfg.alerts.alertmanager_urls.is_empty(), "{what}");
        for u in &cfg.alerts.alertmanager_urls {
            let (h, p) = host_port(u);
            assert_eq!(h, "alertmanager", "{what}: {u}");
            assert!(am_ports.contains(&p), "{what}: {u} vs {am_ports:?}");
        }

        // The API: published, probed, linked on the port it listens on.
        let port = listen_port(&cfg);
        // Published: the API and the PostgreSQL wire protocol (its
        // [sql.postgres] listen port), each on the host's loopback only.
        let pubs = published(&svc);
        let (pg_host, pg_port) = host_port(&cfg.sql.postgres.listen);
        assert_eq!(
            pg_host, "0.0.0.0",
            "{name}: [sql.postgres] on all interfaces"
        );
        let mut containers: Vec<u16> = pubs.iter().map(|p| p.2).collect();
        containers.sort();
        let mut want = vec![port, pg_port];
        want.sort();
        assert_eq!(
            containers, want,
            "{name}: {pubs:?} publishes the API and PostgreSQL"
        );
        for (ip, _, c) in &pubs {
            assert_eq!(
                ip, "127.0.0.1",
                "{name}: {c}: no auth, so the host's loopback only"
            );
        }
        let (_, host_port_n, _) = pubs
            .iter()
            .find(|p| p.2 == port)
            .expect("the API is published");
        let probe = strings(&svc["healthcheck"]["test"]).join(" ");
        assert!(
            probe.contains(&format!("http://127.0.0.1:{port}/readyz")),
            "{name}: healthcheck {probe:?}"
        );
        assert_eq!(
            cfg.alerts.external_url,
            format!("http://localhost:{host_port_n}"),
            "{what}: links must open this collector's UI"
        );

        // Its own store volume.
        let vol = mounts(&svc)
            .into_iter()
            .find_map(|m| match m {
                Mount::Volume { name, target } if Path::new(&target) == cfg.store.data_dir => {
                    Some(name)
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                panic!(
                    "{what}: data_dir {} is not a volume",
                    cfg.store.data_dir.display()
                )
            });
        assert!(volumes.insert(vol.clone()), "{name} shares volume {vol}");

        let mut n = cfg.clone();
        n.alerts.external_url = String::new();
        normalized.push((name.clone(), n));
    }
    assert_eq!(groups.len(), 1, "one consumer group: {groups:?}");
    for w in normalized.windows(2) {
        assert_eq!(
            w[0].1, w[1].1,
            "{} and {} differ beyond alerts.external_url",
            w[0].0, w[1].0
        );
    }
}
