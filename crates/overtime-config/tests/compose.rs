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

use overtime_config::Config;
use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn yaml(text: &str, what: &str) -> Value {
    let mut v: Value =
        serde_norway::from_str(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"));
    v.apply_merge()
        .unwrap_or_else(|e| panic!("{what}: merge keys: {e}"));
    v
}

fn compose() -> Value {
    yaml(&read("docker-compose.yml"), "docker-compose.yml")
}

fn services(c: &Value) -> BTreeMap<String, Value> {
    c["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect()
}

fn service(c: &Value, name: &str) -> Value {
    services(c)
        .remove(name)
        .unwrap_or_else(|| panic!("no service {name:?} in docker-compose.yml"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => panic!("not a string: {other:?}"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A service's volumes (short syntax): bind mounts (host path resolved
/// against the repository) and named volumes.
#[derive(Debug)]
enum Mount {
    Bind { host: PathBuf, target: String },
    Volume { name: String, target: String },
}

fn mounts(svc: &Value) -> Vec<Mount> {
    strings(&svc["volumes"])
        .iter()
        .map(|m| {
            let parts: Vec<&str> = m.split(':').collect();
            assert!(
                (2..=3).contains(&parts.len()),
                "volume {m:?}: expected SOURCE:TARGET[:MODE]"
            );
            let (src, target) = (parts[0], parts[1].to_string());
            assert!(target.starts_with('/'), "volume {m:?}: relative target");
            if src.starts_with("./") || src.starts_with("../") || src.starts_with('/') {
                Mount::Bind {
                    host: repo().join(src.trim_start_matches("./")),
                    target,
                }
            } else {
                Mount::Volume {
                    name: src.to_string(),
                    target,
                }
            }
        })
        .collect()
}

/// The host file bind-mounted at `target` in `svc`.
fn bind_at(svc: &Value, name: &str, target: &str) -> PathBuf {
    mounts(svc)
        .into_iter()
        .find_map(|m| match m {
            Mount::Bind { host, target: t } if t == target => Some(host),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{name}: nothing bind-mounted at {target}"))
}

/// The host path under which `svc` sees container path `path` (a file
/// inside a bind-mounted directory, or a bind-mounted file).
fn host_path_of(svc: &Value, path: &str) -> Option<PathBuf> {
    mounts(svc).into_iter().find_map(|m| match m {
        Mount::Bind { host, target } => {
            let rest = Path::new(path).strip_prefix(&target).ok()?;
            // `join("")` would add a trailing slash to a mounted file.
            Some(if rest.as_os_str().is_empty() {
                host
            } else {
                host.join(rest)
            })
        }
        Mount::Volume { .. } => None,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo())
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| p.display().to_string())
}

/// `(host_ip, host_port, container_port)` of each published port.
fn published(svc: &Value) -> Vec<(String, u16, u16)> {
    strings(&svc["ports"])
        .iter()
        .map(|p| {
            let parts: Vec<&str> = p.split(':').collect();
            let n = |s: &str| -> u16 { s.parse().unwrap_or_else(|_| panic!("port {p:?}")) };
            match parts.as_slice() {
                [ip, h, c] => (ip.to_string(), n(h), n(c)),
                [h, c] => (String::new(), n(h), n(c)),
                _ => panic!("port {p:?}: expected [IP:]HOST:CONTAINER"),
            }
        })
        .collect()
}

fn container_ports(svc: &Value) -> BTreeSet<u16> {
    published(svc).into_iter().map(|(_, _, c)| c).collect()
}

/// `host:port` → (host, port).
fn host_port(addr: &str) -> (String, u16) {
    let addr = addr
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let addr = addr.split('/').next().unwrap();
    let (h, p) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{addr:?}: no port"));
    (h.to_string(), p.parse().unwrap())
}

/// The Dockerfile's stages: name → its lines (continuations joined).
fn dockerfile_stages() -> Vec<(String, Vec<String>)> {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut cur = String::new();
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            lines.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for l in lines {
        if l.starts_with("FROM ") {
            let name = l
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .find(|w| w[0].eq_ignore_ascii_case("AS"))
                .map(|w| w[1].to_string())
                .unwrap_or_default();
            stages.push((name, vec![l]));
        } else if let Some(s) = stages.last_mut() {
            s.1.push(l);
        }
    }
    stages
}

fn stage(name: &str) -> Vec<String> {
    dockerfile_stages()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no stage {name:?} in Dockerfile"))
        .1
}

/// The exec-form JSON array of an instruction (`CMD ["a", "b"]`).
fn exec_form(line: &str) -> Vec<String> {
    let start = line
        .find('[')
        .unwrap_or_else(|| panic!("{line:?}: not exec form"));
    line[start..]
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

/// The last instruction `kw` of a stage, following `FROM <stage>` chains.
fn instruction(stage_name: &str, kw: &str) -> Option<String> {
    let stages = dockerfile_stages();
    let mut name = stage_name.to_string();
    loop {
        let (_, lines) = stages.iter().find(|(n, _)| *n == name)?;
        if let Some(l) = lines
            .iter()
            .rev()
            .find(|l| l.starts_with(&format!("{kw} ")))
        {
            return Some(l.clone());
        }
        let from = lines[0].split_whitespace().nth(1)?.to_string();
        if !stages.iter().any(|(n, _)| *n == from) {
            return None;
        }
        name = from;
    }
}

/// The collectors: services built from the Dockerfile's collector stage.
fn collectors(c: &Value) -> Vec<String> {
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
fn config_path_in_container(svc: &Value) -> String {
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
fn collector_config(c: &Value, name: &str) -> (PathBuf, Config) {
    let svc = service(c, name);
    let path = bind_at(&svc, name, &config_path_in_container(&svc));
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (path, cfg)
}

fn listen_port(cfg: &Config) -> u16 {
    let (host, port) = host_port(&cfg.server.listen);
    assert_eq!(host, "0.0.0.0", "a container listens on all interfaces");
    port
}

/// Kafka's listener port for the compose network (the `PLAINTEXT`
/// advertised listener) and the host one.
fn kafka_listeners(c: &Value) -> BTreeMap<String, (String, u16)> {
    let env = &service(c, "kafka")["environment"];
    let adv = env["KAFKA_ADVERTISED_LISTENERS"].as_str().unwrap();
    let listeners = env["KAFKA_LISTENERS"].as_str().unwrap();
    adv.split(',')
        .map(|l| {
            let (name, addr) = l.split_once("://").unwrap();
            let (h, p) = host_port(addr);
            assert!(
                listeners.contains(&format!("{name}://:{p}")),
                "advertised {l} is not a listener ({listeners})"
            );
            (name.to_string(), (h, p))
        })
        .collect()
}

/// Topics kafka-init creates and their partition count.
fn created_topics(c: &Value) -> (BTreeSet<String>, u32) {
    let init = service(c, "kafka-init");
    let script = strings(&init["command"]).join("\n");
    let topics_line = script
        .lines()
        .find(|l| l.trim_start().starts_with("for t in"))
        .expect("kafka-init: `for t in <topics>`");
    let topics = topics_line
        .trim()
        .trim_start_matches("for t in")
        .split(';')
        .next()
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    let parts = script
        .split("--partitions")
        .nth(1)
        .expect("kafka-init: --partitions")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (topics, parts)
}

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
        let pubs = published(&svc);
        assert_eq!(pubs.len(), 1, "{name}: {pubs:?}");
        let (ip, host_port_n, container) = &pubs[0];
        assert_eq!(
            *container, port,
            "{name} publishes {container}, listens on {port}"
        );
        assert_eq!(
            ip, "127.0.0.1",
            "{name}: no auth, so the host's loopback only"
        );
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

#[test]
fn prometheus_loads_the_tested_rules_and_scrapes_every_collector() {
    let c = compose();
    let prom = service(&c, "prometheus");
    let cfg_path = bind_at(&prom, "prometheus", "/etc/prometheus/prometheus.yml");
    let cfg = yaml(
        &std::fs::read_to_string(&cfg_path).unwrap(),
        "prometheus.yml",
    );

    // The rules: the file promtool's unit tests load.
    let shipped = repo().join("deploy/prometheus/overtime.rules.yml");
    let tests_dir = repo().join("deploy/prometheus/tests");
    let mut unit_tests = 0;
    for e in std::fs::read_dir(&tests_dir).unwrap() {
        let p = e.unwrap().path();
        let t = yaml(&std::fs::read_to_string(&p).unwrap(), &rel(&p));
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
    let out = std::process::Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(root.path().join("etc/prometheus/prometheus.yml"))
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool: {e} — install Prometheus (apt-get install -y prometheus, as scripts/test does)")
        });
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

#[test]
fn producers_key_the_collectors_topics_by_trace_id_alike() {
    let c = compose();
    let (_, cfg) = collector_config(&c, &collectors(&c)[0]);
    let topic = |format: &str| -> String {
        cfg.kafka[0]
            .topics
            .iter()
            .find(|t| t.format == format)
            .unwrap()
            .topic
            .clone()
    };
    let broker = cfg.kafka[0].brokers.clone();
    let sim = service(&c, "simulator");
    let sim_args = strings(&sim["command"]);
    let flag = |name: &str| -> String {
        sim_args
            .iter()
            .find_map(|a| a.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("simulator: no {name}=… in {sim_args:?}"))
            .to_string()
    };

    // Gateway lines: Vector reads the simulator's nginx log off a shared
    // volume and produces each line, unchanged, keyed by trace id.
    let vector = service(&c, "vector");
    let vargs = strings(&vector["command"]);
    let vpath = &vargs[vargs.iter().position(|a| a == "--config").unwrap() + 1];
    let vcfg: toml::Value =
        toml::from_str(&std::fs::read_to_string(bind_at(&vector, "vector", vpath)).unwrap())
            .expect("vector config is TOML");
    let access_log = flag("--access-log");
    let shared = |svc: &Value| -> BTreeMap<String, String> {
        mounts(svc)
            .into_iter()
            .filter_map(|m| match m {
                Mount::Volume { name, target } => Some((name, target)),
                _ => None,
            })
            .collect()
    };
    let (sv, vv) = (shared(&sim), shared(&vector));
    let log_vol = sv
        .iter()
        .find(|(_, t)| Path::new(&access_log).starts_with(t))
        .map(|(n, _)| n.clone())
        .expect("the simulator's access log is on a volume");
    assert!(
        Path::new(&access_log).starts_with(&vv[&log_vol]) && vv[&log_vol] == sv[&log_vol],
        "vector sees {log_vol} elsewhere"
    );
    let sources = vcfg["sources"].as_table().unwrap();
    let includes: Vec<&str> = sources
        .values()
        .filter(|s| s["type"].as_str() == Some("file"))
        .flat_map(|s| s["include"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        includes,
        vec![access_log.as_str()],
        "vector tails what nginx writes"
    );
    let sink = vcfg["sinks"]
        .as_table()
        .unwrap()
        .values()
        .find(|s| s["type"].as_str() == Some("kafka"))
        .expect("a kafka sink");
    assert_eq!(sink["bootstrap_servers"].as_str(), Some(broker.as_str()));
    assert_eq!(sink["topic"].as_str(), Some(topic("nginx").as_str()));
    assert_eq!(
        sink["encoding"]["codec"].as_str(),
        Some("text"),
        "the raw line"
    );
    let key = sink["key_field"].as_str().expect("key_field");
    let remap = vcfg["transforms"]
        .as_table()
        .unwrap()
        .values()
        .map(|t| t["source"].as_str().unwrap_or_default())
        .collect::<String>();
    assert!(remap.contains(&format!(".{key} = ")), "nothing sets .{key}");
    // librdkafka must hash keys as the OpenTelemetry Collector does
    // (Sarama-compatible FNV-1a), or a trace's lines and spans part ways.
    assert_eq!(
        sink["librdkafka_options"]["partitioner"].as_str(),
        Some("fnv1a_random")
    );

    // Spans: the OpenTelemetry Collector, fed by the simulator.
    let otel = service(&c, "otelcol");
    let ocfg = yaml(
        &std::fs::read_to_string(bind_at(
            &otel,
            "otelcol",
            "/etc/otelcol-contrib/config.yaml",
        ))
        .unwrap(),
        "otelcol.yaml",
    );
    let kx = &ocfg["exporters"]["kafka"];
    assert_eq!(strings(&kx["brokers"]).join(","), broker);
    assert_eq!(
        kx["traces"]["topic"].as_str(),
        Some(topic("otlp-proto").as_str())
    );
    assert_eq!(kx["traces"]["encoding"].as_str(), Some("otlp_proto"));
    assert_eq!(kx["partition_traces_by_id"].as_bool(), Some(true));
    assert!(
        kx["record_partitioner"].is_null(),
        "the default partitioner (Sarama FNV-1a) is what Vector matches"
    );
    let pipeline = &ocfg["service"]["pipelines"]["traces"];
    assert!(strings(&pipeline["exporters"]).contains(&"kafka".to_string()));
    let (h, p) = host_port(&flag("--otlp-endpoint"));
    assert_eq!(
        h, "otelcol",
        "the simulator's spans go to the compose otelcol"
    );
    let (_, rp) = host_port(
        ocfg["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(p, rp, "simulator exports to {p}, otelcol listens on {rp}");
    assert!(container_ports(&otel).contains(&rp));

    // Kafka's host listener is the one published.
    let host = &kafka_listeners(&c)["HOST"];
    assert_eq!(host.0, "localhost");
    assert!(container_ports(&service(&c, "kafka")).contains(&host.1));
}

#[test]
fn the_image_config_matches_the_dockerfile() {
    let stages = dockerfile_stages();
    assert_eq!(
        stages.last().map(|s| s.0.as_str()),
        Some("collector"),
        "the default target is the collector"
    );
    let coll = stage("collector");
    let copy = coll
        .iter()
        .find(|l| l.starts_with("COPY ") && l.ends_with("/etc/overtime/overtime.toml"))
        .expect("COPY <config> /etc/overtime/overtime.toml");
    let src = copy.split_whitespace().nth(1).unwrap();
    let cfg = Config::load(&repo().join(src)).unwrap();
    let cmd = exec_form(&instruction("collector", "CMD").unwrap());
    assert_eq!(cmd, ["serve", "--config", "/etc/overtime/overtime.toml"]);
    assert_eq!(
        exec_form(&instruction("collector", "ENTRYPOINT").unwrap()),
        ["overtime"]
    );
    let expose: BTreeSet<u16> = instruction("collector", "EXPOSE")
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|p| p.parse().unwrap())
        .collect();
    let port = listen_port(&cfg);
    let mut listens = BTreeSet::from([port]);
    for l in [&cfg.otlp.http_listen, &cfg.otlp.grpc_listen] {
        listens.insert(host_port(l).1);
    }
    assert_eq!(expose, listens, "EXPOSE vs the image config's listeners");
    let hc = instruction("collector", "HEALTHCHECK").unwrap();
    assert!(
        hc.contains(&format!("http://127.0.0.1:{port}/healthz")),
        "{hc}"
    );
    let vol = instruction("collector", "VOLUME").unwrap();
    assert!(
        vol.contains(&format!("\"{}\"", cfg.store.data_dir.display())),
        "{vol} vs data_dir {}",
        cfg.store.data_dir.display()
    );
    let user = instruction("collector", "USER").expect("USER");
    assert!(!user.ends_with(" root") && !user.ends_with(" 0"), "{user}");
    // The build context keeps what the build needs.
    let ignore = read(".dockerignore");
    for needed in ["crates", "Cargo.toml", "Cargo.lock", "deploy", src] {
        assert!(
            !ignore.lines().any(|l| {
                let l = l.trim().trim_end_matches('/');
                !l.starts_with('#') && !l.is_empty() && needed.starts_with(l)
            }),
            ".dockerignore drops {needed}"
        );
    }
}
