//! The pipeline's own health: rejected records by reason, backpressure,
//! Kafka lag and the bearer token; an idle collector's data-time clock.

use super::exposition::{parse_exposition, promtool_check, sum_by, value};
use super::harness::{call, feed, fixture, state};
use axum::http::StatusCode;
use overtime_model::{RecordSink, SinkError, Table};
use overtime_parse::nginx::{GatewayParser, LogFormat};
use overtime_server::pipeline::{self, SourceSink};

#[tokio::test]
async fn rejections_backpressure_lag_and_the_token() {
    let dir = tempfile::tempdir().unwrap();
    // A small budget so that the store pushes back.
    let s = state(dir.path(), Some("s3cret"), 1024 * 1024);
    // A bad nginx line becomes a rejected row, counted by reason.
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    p.push_bytes(b"this is not an nginx line\n", 1);
    let (_, rejected) = p.finish();
    assert_eq!(rejected.num_rows(), 1);
    let file = SourceSink {
        state: s.clone(),
        source: "file",
    };
    file.write(Table::Rejected, rejected, None).unwrap();
    s.metrics
        .register_rejections("otlp_grpc", || [("bad_proto".to_string(), 2u64)].into());
    s.metrics
        .register_kafka_lag(|| [("spans/3".to_string(), 17u64)].into());
    // Fill the memtable until the store answers Full.
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    p.push_bytes(
        &std::fs::read(fixture("a_prefill").join("access.log")).unwrap(),
        1,
    );
    let (g, _) = p.finish();
    let kafka = SourceSink {
        state: s.clone(),
        source: "kafka",
    };
    let mut full = 0;
    for _ in 0..200 {
        match kafka.write(Table::GatewayRequests, g.clone(), None) {
            Err(SinkError::Full { .. }) => {
                full += 1;
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(()) => {}
        }
    }
    assert_eq!(full, 1, "the store pushed back");

    assert_eq!(call(&s, "/metrics", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&s, "/api/slo", None).await.0, StatusCode::UNAUTHORIZED);
    let (st, _, text) = call(&s, "/metrics", Some("s3cret")).await;
    assert_eq!(st, StatusCode::OK);
    let fams = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let reasons = sum_by(&fams, "overtime_records_rejected_total", "reason");
    assert_eq!(reasons.values().sum::<f64>(), 3.0, "{reasons:?}");
    assert_eq!(
        value(
            &fams,
            "overtime_records_rejected_total",
            &[("source", "otlp_grpc"), ("reason", "bad_proto")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&fams, "overtime_backpressure_total", &[("source", "kafka")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &fams,
            "overtime_kafka_lag",
            &[("topic", "spans"), ("partition", "3")]
        ),
        Some(17.0)
    );
    assert_eq!(
        value(&fams, "overtime_memtable_budget_bytes", &[]),
        Some(1024.0 * 1024.0)
    );
    promtool_check(&text);
}

#[tokio::test]
async fn an_idle_collector_moves_on_in_data_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 256 * 1024 * 1024);
    feed(&s, "a_prefill");
    let five = |text: &str| {
        let fams = parse_exposition(text).unwrap();
        (
            value(&fams, "overtime_error_ratio", &[("window", "5m")]),
            value(&fams, "overtime_error_ratio", &[("window", "3d")]),
        )
    };
    let now = pipeline::now_us();
    // Not idle long enough: replayed data keeps its own time.
    s.metrics.advance_if_idle(now, 60_000_000);
    let (_, _, text) = call(&s, "/metrics", None).await;
    assert!(
        matches!(five(&text), (Some(_), Some(_))),
        "{:?}",
        five(&text)
    );
    // 10 min without a completed request: the 5 min window is empty, the
    // 3 d one still holds the incident.
    s.metrics.advance_if_idle(now + 600_000_000, 60_000_000);
    let (_, _, text) = call(&s, "/metrics", None).await;
    assert!(
        matches!(five(&text), (None, Some(r)) if r > 0.08),
        "{:?}",
        five(&text)
    );
}

#[tokio::test]
async fn a_batch_the_live_diagnosis_cannot_decode_is_counted_not_dropped_unseen() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 64 * 1024 * 1024);
    let (_, _, before) = call(&s, "/metrics", None).await;
    let before = parse_exposition(&before).unwrap();
    assert_eq!(
        value(
            &before,
            "overtime_live_decode_failures_total",
            &[("table", "spans")]
        ),
        Some(0.0),
        "the family is there from the start, at zero"
    );
    // A gateway batch shown to the live diagnosis as spans: it cannot be
    // read as spans.
    let mut p = GatewayParser::new(LogFormat::builtin("overtime").unwrap(), "edge", 0);
    p.push_bytes(
        &std::fs::read(fixture("a_prefill").join("access.log")).unwrap(),
        1,
    );
    let (g, _) = p.finish();
    pipeline::DiagnosingSink::observe(&s, Table::Spans, &g, pipeline::now_us());
    let (_, _, after) = call(&s, "/metrics", None).await;
    let after = parse_exposition(&after).unwrap();
    assert_eq!(
        value(
            &after,
            "overtime_live_decode_failures_total",
            &[("table", "spans")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &after,
            "overtime_live_decode_failures_total",
            &[("table", "gateway_requests")]
        ),
        Some(0.0)
    );
}

/// Scraped model-server samples reach the fast early warning
/// (`overtime_early_signal_items_total{signal="queue_depth"|"kv_cache_use"}`)
/// while their time agrees with the requests' data time; a sample stamped
/// by the wall clock while hours-old logs are replayed is left out, so it
/// cannot push the SLO clock past the requests still coming.
#[tokio::test]
async fn scraped_model_server_load_feeds_the_early_warning_on_data_time_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 64 * 1024 * 1024);
    feed(&s, "a_prefill");
    let (_, _, before) = call(&s, "/api/slo", None).await;
    let wm_before = serde_json::from_str::<serde_json::Value>(&before).unwrap()["watermark_us"]
        .as_i64()
        .expect("the SLOs' data time after the fixture");
    let sample = |name: &str, value: f64, time_us: i64| overtime_model::MetricSample {
        name: name.into(),
        labels: vec![("model_name".into(), "deepseek-v4-pro".into())],
        value,
        time_us,
    };
    let now = pipeline::now_us();
    let mut cols = overtime_model::MetricColumns::new();
    for (i, q) in [2.0, 5.0, 9.0].into_iter().enumerate() {
        cols.append(
            "vllm",
            &sample(
                "vllm:num_requests_waiting",
                q,
                wm_before + i as i64 * 15_000_000,
            ),
        );
    }
    for k in [0.5, 0.9] {
        cols.append(
            "vllm",
            &sample("vllm:kv_cache_usage_perc", k, wm_before + 30_000_000),
        );
    }
    // Stamped now, while the fixture's requests are weeks old.
    for q in [40.0, 41.0] {
        cols.append("vllm", &sample("vllm:num_requests_waiting", q, now));
    }
    SourceSink {
        state: s.clone(),
        source: "model_server",
    }
    .write(Table::ModelServerMetrics, cols.finish(), None)
    .unwrap();
    let (code, _, text) = call(&s, "/metrics", None).await;
    assert_eq!(code, StatusCode::OK);
    let fams = parse_exposition(&text).unwrap();
    let items = |signal: &str| {
        value(
            &fams,
            "overtime_early_signal_items_total",
            &[("signal", signal)],
        )
    };
    assert_eq!(
        items("queue_depth"),
        Some(3.0),
        "the three samples on data time"
    );
    assert_eq!(items("kv_cache_use"), Some(2.0));
    let (_, _, after) = call(&s, "/api/slo", None).await;
    let wm_after = serde_json::from_str::<serde_json::Value>(&after).unwrap()["watermark_us"]
        .as_i64()
        .unwrap();
    assert!(
        wm_after < now - 3_600_000_000,
        "the wall-clock samples left the SLO clock on data time ({wm_after} vs now {now})"
    );
}
