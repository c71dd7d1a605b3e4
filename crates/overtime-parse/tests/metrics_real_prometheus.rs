//! Model-server metrics as real Prometheus tools write them: an OpenMetrics
//! file with the series vLLM exposes (names and types as vLLM's
//! `vllm/v1/metrics/loggers.py` declares them) is turned into a TSDB by
//! `promtool tsdb create-blocks-from openmetrics`; `promtool tsdb dump`
//! and a real `prometheus` serving that TSDB (its HTTP API's
//! `query_range`) then write it back the two ways users export metrics.
//! Each must read back as the samples written.
//!
//! Needs `promtool` and `prometheus` (Debian `prometheus`; scripts/test
//! installs them): missing, the test fails saying so.

use overtime_model::MetricSample;
use overtime_parse::metrics::read_metrics;
use overtime_test_support::monitoring::Daemon;
use overtime_test_support::net::get;
use overtime_test_support::program::find_program;
use std::collections::BTreeMap;
use std::process::Command;

/// 10:00 UTC on the test's day, s.
const T0: i64 = 1_796_637_600;
const STEPS: i64 = 20;

/// queue depth, KV-cache use and the queue-time histogram's sum and count
/// every 15 s.
fn openmetrics() -> String {
    let mut s = String::new();
    s += "# TYPE vllm:num_requests_waiting gauge\n";
    for i in 0..STEPS {
        s += &format!(
            "vllm:num_requests_waiting{{model_name=\"qwen2.5-7b\"}} {} {}\n",
            i % 7,
            T0 + 15 * i
        );
    }
    s += "# TYPE vllm:kv_cache_usage_perc gauge\n";
    for i in 0..STEPS {
        s += &format!(
            "vllm:kv_cache_usage_perc{{model_name=\"qwen2.5-7b\"}} {} {}\n",
            0.05 * i as f64,
            T0 + 15 * i
        );
    }
    s += "# TYPE vllm:request_queue_time_seconds histogram\n";
    for i in 0..STEPS {
        let t = T0 + 15 * i;
        for (le, c) in [("1.0", i), ("+Inf", 2 * i)] {
            s += &format!(
                "vllm:request_queue_time_seconds_bucket{{model_name=\"qwen2.5-7b\",le=\"{le}\"}} {c} {t}\n"
            );
        }
        s += &format!(
            "vllm:request_queue_time_seconds_sum{{model_name=\"qwen2.5-7b\"}} {} {t}\n",
            1.5 * i as f64
        );
        s += &format!(
            "vllm:request_queue_time_seconds_count{{model_name=\"qwen2.5-7b\"}} {} {t}\n",
            2 * i
        );
    }
    s + "# EOF\n"
}

type Series = BTreeMap<(String, i64), f64>;

/// (name, time s) → value, for the series the diagnosis uses.
fn series(samples: &[MetricSample]) -> Series {
    samples
        .iter()
        .filter(|s| !s.name.ends_with("_bucket"))
        .map(|s| ((s.name.clone(), s.time_us / 1_000_000), s.value))
        .collect()
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new(find_program(&["promtool"], "prometheus"))
        .args(args)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn metrics_exported_by_promtool_and_the_prometheus_api_read_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("vllm.om.txt");
    std::fs::write(&om, openmetrics()).unwrap();
    let tsdb = dir.path().join("tsdb");
    let (om_s, tsdb_s) = (om.display().to_string(), tsdb.display().to_string());

    // The file itself, read as OpenMetrics (timestamps in seconds).
    let direct = read_metrics(&openmetrics());
    assert!(direct.rejected.is_empty(), "{:?}", direct.rejected);
    let written = series(&direct.samples);
    assert_eq!(written.len(), 4 * STEPS as usize, "{written:?}");
    assert_eq!(
        written[&("vllm:request_queue_time_seconds_sum".into(), T0 + 15 * 3)],
        4.5
    );

    // promtool's dump of the blocks it made from that file.
    promtool(&["tsdb", "create-blocks-from", "openmetrics", &om_s, &tsdb_s]);
    // (promtool 2.42's dump opens the WAL, which blocks made offline lack)
    std::fs::create_dir_all(tsdb.join("wal")).unwrap();
    let dump = promtool(&["tsdb", "dump", &tsdb_s]);
    let read = read_metrics(&dump);
    assert!(read.rejected.is_empty(), "{:?}", read.rejected);
    assert_eq!(series(&read.samples), written);
    let q = read
        .samples
        .iter()
        .find(|s| s.name == "vllm:num_requests_waiting")
        .unwrap();
    assert_eq!(q.label("model_name"), Some("qwen2.5-7b"));

    // A real Prometheus serving those blocks: query_range at the samples' step.
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(&cfg, "global:\n  scrape_interval: 1h\n").unwrap();
    let prom = Daemon::start(
        find_program(&["prometheus"], "prometheus"),
        |port| {
            vec![
                format!("--config.file={}", cfg.display()),
                format!("--storage.tsdb.path={tsdb_s}"),
                "--storage.tsdb.retention.time=100y".into(),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ]
        },
        dir.path().join("prometheus.log"),
    );
    let mut from_api = Series::new();
    for name in [
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:request_queue_time_seconds_sum",
        "vllm:request_queue_time_seconds_count",
    ] {
        let path = format!(
            "/api/v1/query_range?query={}&start={T0}&end={}&step=15s",
            name.replace(':', "%3A"),
            T0 + 15 * (STEPS - 1)
        );
        let (status, body) = get(prom.port(), &path).expect("prometheus answers");
        assert_eq!(status, 200, "{body}");
        let read = read_metrics(&body);
        assert!(read.rejected.is_empty(), "{:?}", read.rejected);
        from_api.extend(series(&read.samples));
    }
    assert_eq!(from_api, written, "prometheus log: {}", prom.log_text());
}

#[test]
fn concatenated_scrapes_without_times_are_refused_with_a_reason_and_the_rest_kept() {
    let scrape = |t: Option<i64>, v: u32| {
        let ts = t.map(|t| format!(" {t}")).unwrap_or_default();
        format!(
            "# HELP vllm:num_requests_waiting Number of requests waiting.\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{model_name=\"m\"}} {v}{ts}\n"
        )
    };
    let text = [
        scrape(Some(1_000), 1),
        scrape(Some(16_000), 2),
        scrape(None, 3),
        "vllm:num_requests_waiting{model_name=\"m\" 4 31000\n".into(),
        scrape(Some(46_000), 5),
    ]
    .concat();
    let read = read_metrics(&text);
    let got: Vec<(i64, f64)> = read.samples.iter().map(|s| (s.time_us, s.value)).collect();
    assert_eq!(
        got,
        vec![(1_000_000, 1.0), (16_000_000, 2.0), (46_000_000, 5.0)]
    );
    assert_eq!(read.rejected.len(), 2, "{:?}", read.rejected);
    assert!(read.rejected[0].reason.contains("without a timestamp"));
    assert_eq!(read.rejected[1].line, 10);
}
