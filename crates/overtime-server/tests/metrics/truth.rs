//! Each incident's metrics against its truth.json: requests by outcome,
//! root causes by kind, gateway statuses, LLM and stage calls, pipeline
//! counters, SLO gauges, incidents opened and `/api/slo`; incident C's
//! judge, TTFT, fallback and tool counters.

use super::exposition::{histogram_count, parse_exposition, promtool_check, sum_by, total, value};
use super::harness::{call, feed, fixture, repo, state};
use axum::http::StatusCode;
use overtime_parse::spans::{SpanFormat, parse_span_bytes};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The `overtime_*` names of docs/metrics.md's tables, but for the
/// Delivery section's: those come from `overtime serve`'s alert sender and
/// Jira notifier (checked by the binary's Alertmanager end-to-end test),
/// and the PostgreSQL wire protocol's.
fn documented_names() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let mut delivery = false;
    let mut names = BTreeSet::new();
    for l in doc.lines() {
        if l.starts_with("## ") {
            // Rendered by overtime-jira/alert and overtime-kafka, checked
            // against these sections there.
            // The PostgreSQL front door's are registered by `overtime
            // serve` when it listens (checked by the binary's postgres test),
            // the model-server scrapes' when it scrapes (the binary's
            // model_server_scrape test).
            delivery = l.starts_with("## Delivery")
                || l.starts_with("## Kafka source")
                || l.starts_with("## Model-server scrapes")
                || l.starts_with("## PostgreSQL wire protocol");
        }
        if let Some(rest) = l.strip_prefix("| `overtime_").filter(|_| !delivery) {
            names.insert(format!("overtime_{}", &rest[..rest.find('`').unwrap()]));
        }
    }
    names
}

#[tokio::test]
async fn metrics_of_each_incident_match_its_truth() {
    let names = documented_names();
    assert!(names.len() > 40, "{names:?}");
    for name in ["a_prefill", "b_tool_no_timeout", "c_dns_retry", "healthy"] {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), None, 256 * 1024 * 1024);
        let fed = feed(&s, name);
        let (st, ct, text) = call(&s, "/metrics", None).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
        let fams = parse_exposition(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        promtool_check(&text);
        let exposed: BTreeSet<String> = fams.keys().cloned().collect();
        assert_eq!(
            exposed, names,
            "{name}: /metrics and docs/metrics.md name the same families"
        );

        // Requests by outcome: the fixture's failing traces by outcome, the
        // rest ok; one request per gateway line (one layer, every trace logged).
        let truth = &fed.truth;
        let mut want: BTreeMap<String, f64> = BTreeMap::new();
        for f in truth["failing"].as_object().unwrap().values() {
            *want
                .entry(f["outcome"].as_str().unwrap().to_string())
                .or_default() += 1.0;
        }
        let failing: f64 = want.values().sum();
        assert_eq!(failing, truth["failing_count"].as_f64().unwrap());
        want.insert("ok".into(), fed.gateway_lines as f64 - failing);
        let by_outcome = sum_by(&fams, "overtime_requests_total", "outcome");
        assert_eq!(by_outcome, want, "{name}: requests by outcome");
        let timed_out = total(&fams, "overtime_requests_timed_out_total");
        let want_timed_out = want.get("gateway_timeout").unwrap_or(&0.0)
            + want.get("service_timeout").unwrap_or(&0.0);
        assert_eq!(timed_out, want_timed_out, "{name}");

        // Root causes by kind = truth.json's failing_by_kind.
        let kinds = sum_by(&fams, "overtime_root_causes_total", "kind");
        let want_kinds: BTreeMap<String, f64> = truth["failing_by_kind"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
            .collect();
        assert_eq!(kinds, want_kinds, "{name}: root causes by kind");

        // Early warning: every request but the 4xx is one chain and one
        // answer; the failing ones are failed in both; every timed-out
        // request used all of its gateway timeout or budget.
        let client_errors: f64 = fed
            .gateway_statuses
            .iter()
            .filter(|(s, _)| s.starts_with('4'))
            .map(|(_, n)| *n as f64)
            .sum();
        let chains = sum_by(&fams, "overtime_chains_total", "result");
        let answers = sum_by(&fams, "overtime_answers_total", "result");
        let requests = fed.gateway_lines as f64 - client_errors;
        assert_eq!(chains.values().sum::<f64>(), requests, "{name}: {chains:?}");
        assert_eq!(
            answers.values().sum::<f64>(),
            requests,
            "{name}: {answers:?}"
        );
        assert_eq!(chains["failed"], failing, "{name}: {chains:?}");
        assert_eq!(answers["failed"], failing, "{name}: {answers:?}");
        assert!(
            chains["healthy"] <= answers["success"] + answers["masked"],
            "{name}"
        );
        let near = value(
            &fams,
            "overtime_near_timeout_calls_total",
            &[("stage", "request")],
        );
        assert!(
            near.unwrap() >= want.get("gateway_timeout").copied().unwrap_or(0.0) * 0.5,
            "{name}: {near:?}"
        );
        // The fast signals per key: every request feeds its route's series
        // (and its flow's, `calls …`), every LLM call its model's; a
        // fixture has fewer than 64 of each, so the keys add up to the
        // signal's totals, in families of their own (a sum by signal of
        // the totals counts nothing twice).
        for (signal, pick) in [
            (
                "request_timeout_use",
                (|k: &str| !k.starts_with("calls ")) as fn(&str) -> bool,
            ),
            ("llm_latency", |_| true),
            ("llm_in_flight", |_| true),
        ] {
            let everything = value(
                &fams,
                "overtime_early_signal_items_total",
                &[("signal", signal)],
            )
            .unwrap();
            let keyed: f64 = fams["overtime_early_signal_keyed_items_total"]
                .samples
                .iter()
                .filter(|(_, l, _)| l["signal"] == signal && pick(&l["key"]))
                .map(|s| s.2)
                .sum();
            assert!(everything > 0.0, "{name}: {signal}");
            assert_eq!(keyed, everything, "{name}: {signal} by key");
        }

        // Gateway records by status, as parsed.
        let statuses: BTreeMap<String, u64> =
            sum_by(&fams, "overtime_gateway_responses_total", "status")
                .into_iter()
                .map(|(k, v)| (k, v as u64))
                .collect();
        assert_eq!(statuses, fed.gateway_statuses, "{name}");

        // Every LLM call has a histogram observation; buckets are checked above.
        let llm_calls = total(&fams, "overtime_llm_calls_total");
        let llm_hist = histogram_count(&fams, "overtime_llm_call_duration_seconds");
        assert!(
            llm_calls > 0.0 && llm_calls == llm_hist,
            "{name}: {llm_calls} {llm_hist}"
        );
        let stage = sum_by(&fams, "overtime_stage_calls_total", "stage");
        assert!(
            stage["llm"] + stage.get("judge").unwrap_or(&0.0) == llm_calls,
            "{name}: {stage:?}"
        );

        // Pipeline health.
        assert_eq!(
            value(
                &fams,
                "overtime_records_ingested_total",
                &[("source", "file"), ("table", "gateway_requests")]
            ),
            Some(fed.gateway_lines as f64)
        );
        assert_eq!(
            value(
                &fams,
                "overtime_records_ingested_total",
                &[("source", "otlp_http"), ("table", "spans")]
            ),
            Some(fed.spans as f64)
        );
        assert_eq!(
            value(&fams, "overtime_backpressure_total", &[("source", "file")]),
            Some(0.0)
        );
        assert!(value(&fams, "overtime_memtable_bytes", &[]).unwrap() > 0.0);
        assert!(value(&fams, "overtime_wal_bytes", &[]).unwrap() > 0.0);
        assert_eq!(
            value(&fams, "overtime_memtable_budget_bytes", &[]),
            Some(256.0 * 1024.0 * 1024.0)
        );
        assert_eq!(value(&fams, "overtime_pending_traces", &[]), Some(0.0));
        // SLO gauges over the replayed data time.
        let r = value(&fams, "overtime_timeout_ratio", &[("window", "3d")]).unwrap();
        assert!(
            (r - want_timed_out / fed.gateway_lines as f64).abs() < 1e-9,
            "{name}: {r}"
        );
        assert!(
            value(&fams, "overtime_chain_health", &[]).is_some(),
            "{name}"
        );
        // Incidents opened: one per report (a fingerprint may fail in
        // several runs apart by more than the quiet period), of the kinds
        // truth.json names.
        let (_, _, body) = call(&s, "/api/incidents", None).await;
        let reports: Value = serde_json::from_str(&body).unwrap();
        let opened = sum_by(&fams, "overtime_incidents_opened_total", "kind");
        assert_eq!(
            opened.values().sum::<f64>(),
            reports["incidents"].as_array().unwrap().len() as f64,
            "{name}: {opened:?}"
        );
        let kinds: BTreeSet<&str> = truth["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            opened.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            kinds,
            "{name}"
        );
        // Asked again, nothing new opened.
        let (_, _, again) = call(&s, "/metrics", None).await;
        let again = parse_exposition(&again).unwrap();
        assert_eq!(
            sum_by(&again, "overtime_incidents_opened_total", "kind"),
            opened
        );

        let (st, _, body) = call(&s, "/api/slo", None).await;
        assert_eq!(st, StatusCode::OK);
        let slo: Value = serde_json::from_str(&body).unwrap();
        assert!(
            slo["watermark"].as_str().unwrap().starts_with("2026-11-"),
            "{body}"
        );
        let w3d = slo["windows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["window"] == "3d")
            .unwrap();
        assert_eq!(w3d["requests"].as_f64().unwrap(), fed.gateway_lines as f64);
        assert!(!slo["models"].as_array().unwrap().is_empty());
    }
}

#[tokio::test]
async fn incident_c_judge_ttft_and_fallback_counters() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path(), None, 256 * 1024 * 1024);
    feed(&s, "c_dns_retry");
    let spans = parse_span_bytes(
        SpanFormat::Jsonl,
        &std::fs::read(fixture("c_dns_retry").join("spans.jsonl")).unwrap(),
        "spans.jsonl",
    )
    .spans;
    let judged: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.judge_score.is_some())
        .map(|s| s.trace_id.as_str())
        .collect();
    let ok: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.judge_score.is_some_and(|j| j >= 0.8))
        .map(|s| s.trace_id.as_str())
        .collect();
    let ttft = spans.iter().filter(|s| s.ttft_ms.is_some()).count();
    let (_, _, text) = call(&s, "/metrics", None).await;
    let fams = parse_exposition(&text).unwrap();
    assert_eq!(
        total(&fams, "overtime_judged_requests_total"),
        judged.len() as f64
    );
    assert_eq!(
        total(&fams, "overtime_semantic_success_total"),
        ok.len() as f64
    );
    let ttft_count = histogram_count(&fams, "overtime_ttft_seconds");
    assert_eq!(ttft_count, ttft as f64);
    // 23 callers got the cache fallback (seed incident 004).
    assert_eq!(
        value(&fams, "overtime_fallbacks_total", &[("model", "cache")]),
        Some(23.0)
    );
    assert_eq!(
        value(
            &fams,
            "overtime_fallbacks_accepted_total",
            &[("model", "cache")]
        ),
        Some(0.0)
    );
    // The weather tool's timeouts, by stage and by tool.
    assert!(value(&fams, "overtime_stage_timeouts_total", &[("stage", "tool")]).unwrap() > 0.0);
    assert!(
        value(
            &fams,
            "overtime_tool_calls_total",
            &[("tool", "weather_api"), ("status", "ok")]
        )
        .unwrap()
            > 0.0
    );
}
