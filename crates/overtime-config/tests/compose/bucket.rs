//! The collectors' Parquet bucket: every collector writes to one
//! `[store] url` on the compose file's S3-compatible service, with that
//! service's credentials, after the init job has made the bucket.

use super::collectors::{collector_config, collectors};
use super::yaml::{compose, container_ports, host_port, service, services, strings};
use serde_norway::Value;
use std::collections::BTreeSet;

/// `s3://bucket/prefix` → (bucket, prefix).
fn bucket_of(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("s3://")
        .unwrap_or_else(|| panic!("[store] url {url:?}: an s3:// url"));
    let (b, p) = rest.split_once('/').unwrap_or((rest, ""));
    (b.to_string(), p.to_string())
}

fn env<'a>(svc: &'a Value, key: &str, what: &str) -> &'a str {
    svc["environment"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no environment {key}"))
}

#[test]
fn every_collector_flushes_to_one_bucket_that_the_init_job_makes_on_the_compose_s3_service() {
    let c = compose();
    let mut urls = BTreeSet::new();
    for name in collectors(&c) {
        let svc = service(&c, &name);
        let (_, cfg) = collector_config(&c, &name);
        let url = cfg.store.url.clone().unwrap_or_else(|| {
            panic!("{name}: no [store] url: its Parquet would stay on its volume")
        });
        assert!(
            cfg.store.collector_id.is_none(),
            "{name}: a fixed collector_id would be shared by the identical configs"
        );
        let (bucket, prefix) = bucket_of(&url);
        assert!(!prefix.is_empty(), "{name}: {url}: a prefix in the bucket");

        // The endpoint is a compose service listening on that port.
        let endpoint = env(&svc, "AWS_ENDPOINT_URL", &name);
        let (host, port) = host_port(endpoint);
        assert!(
            services(&c).contains_key(&host),
            "{name}: endpoint {endpoint}: {host} is not a service"
        );
        let s3 = service(&c, &host);
        assert!(
            container_ports(&s3).contains(&port)
                || strings(&s3["command"])
                    .iter()
                    .any(|a| a.ends_with(&format!(":{port}"))),
            "{name}: {endpoint}: {host} does not serve port {port}"
        );
        assert_eq!(
            env(&svc, "AWS_ALLOW_HTTP", &name),
            "true",
            "{name}: plain HTTP endpoint"
        );
        // Its credentials are the service's own.
        assert_eq!(
            env(&svc, "AWS_ACCESS_KEY_ID", &name),
            env(&s3, "MINIO_ROOT_USER", &host),
            "{name}: access key"
        );
        assert_eq!(
            env(&svc, "AWS_SECRET_ACCESS_KEY", &name),
            env(&s3, "MINIO_ROOT_PASSWORD", &host),
            "{name}: secret"
        );

        // It starts after a job that makes the bucket on that service.
        let inits: Vec<String> = svc["depends_on"]
            .as_mapping()
            .expect("depends_on as a mapping")
            .iter()
            .filter(|(_, v)| v["condition"].as_str() == Some("service_completed_successfully"))
            .filter_map(|(k, _)| k.as_str().map(String::from))
            .collect();
        let makes_bucket = inits.iter().any(|init| {
            let script = strings(&service(&c, init)["command"]).join("\n");
            script.contains(&format!("http://{host}:{port}"))
                && script.contains(&format!("mb --ignore-existing local/{bucket}"))
        });
        assert!(
            makes_bucket,
            "{name}: none of {inits:?} makes bucket {bucket} on {host}:{port}"
        );
        urls.insert(url);
    }
    assert_eq!(
        urls.len(),
        1,
        "one bucket prefix for every collector: {urls:?}"
    );
}
