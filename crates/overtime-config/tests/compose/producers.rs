//! The producers: Vector (gateway lines) and the OpenTelemetry Collector
//! (spans) write the collectors' topics on the compose broker, keyed by
//! trace id with the same partitioner, from where the simulator writes.

use super::collectors::{collector_config, collectors};
use super::yaml::{
    Mount, bind_at, compose, container_ports, host_port, kafka_listeners, mounts, read_path,
    service, strings, yaml,
};
use serde_norway::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn producers_key_the_collectors_topics_by_trace_id_alike() {
    let c = compose();
    let (_, cfg) = collector_config(&c, &collectors(&c)[0]);
    let topic = |format: &str| -> String {
        cfg.kafka[0]
            .topics
            .iter()
            .find(|t| t.format.as_str() == format)
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
    let vcfg: toml::Value = toml::from_str(&read_path(&bind_at(&vector, "vector", vpath)))
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
        &read_path(&bind_at(
            &otel,
            "otelcol",
            "/etc/otelcol-contrib/config.yaml",
        )),
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
