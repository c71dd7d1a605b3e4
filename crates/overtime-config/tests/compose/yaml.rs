//! Reading the repository and docker-compose.yml: paths, YAML, services,
//! their mounts and ports, the Kafka broker's listeners and topics.

use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A file's text, panicking with its path.
pub fn read_path(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// A file of the repository, by its path relative to the root.
pub fn read(rel: &str) -> String {
    read_path(&repo().join(rel))
}

pub fn yaml(text: &str, what: &str) -> Value {
    let mut v: Value =
        serde_norway::from_str(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"));
    v.apply_merge()
        .unwrap_or_else(|e| panic!("{what}: merge keys: {e}"));
    v
}

pub fn compose() -> Value {
    yaml(&read("docker-compose.yml"), "docker-compose.yml")
}

pub fn services(c: &Value) -> BTreeMap<String, Value> {
    c["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect()
}

pub fn service(c: &Value, name: &str) -> Value {
    services(c)
        .remove(name)
        .unwrap_or_else(|| panic!("no service {name:?} in docker-compose.yml"))
}

pub fn strings(v: &Value) -> Vec<String> {
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
pub enum Mount {
    Bind { host: PathBuf, target: String },
    Volume { name: String, target: String },
}

pub fn mounts(svc: &Value) -> Vec<Mount> {
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
pub fn bind_at(svc: &Value, name: &str, target: &str) -> PathBuf {
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
pub fn host_path_of(svc: &Value, path: &str) -> Option<PathBuf> {
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

pub fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

pub fn rel(p: &Path) -> String {
    p.strip_prefix(repo())
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| p.display().to_string())
}

/// `(host_ip, host_port, container_port)` of each published port.
pub fn published(svc: &Value) -> Vec<(String, u16, u16)> {
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

pub fn container_ports(svc: &Value) -> BTreeSet<u16> {
    published(svc).into_iter().map(|(_, _, c)| c).collect()
}

/// `host:port` → (host, port).
pub fn host_port(addr: &str) -> (String, u16) {
    let addr = addr
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let addr = addr.split('/').next().unwrap();
    let (h, p) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{addr:?}: no port"));
    (h.to_string(), p.parse().unwrap())
}

/// Kafka's listener port for the compose network (the `PLAINTEXT`
/// advertised listener) and the host one.
pub fn kafka_listeners(c: &Value) -> BTreeMap<String, (String, u16)> {
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
pub fn created_topics(c: &Value) -> (BTreeSet<String>, u32) {
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
