//! The model phases' source on the trace page, in a real headless
//! Chromium against a real `overtime serve`: five calls to a vLLM-served
//! model finish with vLLM's `llm_request` span (its `gen_ai.latency.*`
//! attributes), three are cut by the gateway with none (vLLM writes no
//! span for an aborted request). A finished call's page names "vLLM span";
//! a cut call's names the five finished calls its phases were inferred
//! from and their mean split, and its bar shows the inferred phases
//! hatched. Screenshots go to `$CARGO_TARGET_DIR/ui-artifacts/`.

use super::page::{Server, artifacts};
use overtime_test_support::chromium::Browser;
use serde_json::json;

const MODEL: &str = "qwen2.5-7b";

/// Eight requests a minute apart (2026-11-27T05:00Z on): the first five
/// answered in 1.3 s with vLLM's span (0.9 s queue, 0.1 s prefill, 0.18 s
/// decode), the last three cut at 3 s by the gateway with no server span.
fn vllm_calls() -> (String, String) {
    let t0: i64 = 1_795_755_600_000;
    let (mut spans, mut log) = (String::new(), String::new());
    for i in 0..8i64 {
        let done = i < 5;
        let start = t0 + i * 60_000;
        let trace = format!("{:032x}", 0x7a5e_0000 + i);
        let (root, chat, server) = (
            format!("{:016x}", 0x100 + i),
            format!("{:016x}", 0x200 + i),
            format!("{:016x}", 0x300 + i),
        );
        let end = if done { 1_250 } else { 3_500 };
        spans += &json!({"trace_id": trace, "span_id": root, "service": "agent-api",
            "name": "POST /api/agent/execute", "stage": "service", "start_time": start,
            "duration_ms": end, "status": if done { "ok" } else { "error" }, "request_id": trace})
        .to_string();
        spans.push('\n');
        spans += &json!({"trace_id": trace, "span_id": chat, "parent_span_id": root,
            "service": "agent-api", "name": format!("chat {MODEL}"), "stage": "llm", "model": MODEL,
            "start_time": start + 5, "duration_ms": end - 10, "status": if done { "ok" } else { "error" },
            "input_tokens": 900})
        .to_string();
        spans.push('\n');
        if done {
            spans += &json!({"trace_id": trace, "span_id": server, "parent_span_id": chat,
                "service": "vllm", "name": "llm_request", "start_time": start + 10, "duration_ms": 1_200,
                "status": "ok", "attributes": {
                    "gen_ai.request.model": MODEL,
                    "gen_ai.latency.time_in_queue": 0.9,
                    "gen_ai.latency.time_in_model_prefill": 0.1,
                    "gen_ai.latency.time_in_model_decode": 0.18,
                    "gen_ai.latency.e2e": 1.2}})
            .to_string();
            spans.push('\n');
        }
        let at = chrono::DateTime::from_timestamp_millis(start + end)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (status, rt) = if done { (200, "1.300") } else { (504, "3.000") };
        log += &format!(
            "10.0.0.1 [{at}] \"POST /api/agent/execute HTTP/1.1\" {status} 167 rt={rt} uct=\"0.001\" \
             uht=\"-\" urt=\"{rt}\" us=\"{status}\" ua=\"10.0.0.5:8000\" rid={trace} \
             tp=\"00-{trace}-{root}-01\" mw=\"-\" llm=\"-\" llmd=\"-\"\n"
        );
    }
    (spans, log)
}

#[test]
fn the_trace_page_names_each_calls_phase_source_and_an_inferred_phases_neighbours() {
    let server = Server::start("", None, |dir| {
        let (spans, log) = vllm_calls();
        let (sp, lp) = (dir.join("spans.jsonl"), dir.join("access.log"));
        std::fs::write(&sp, spans).unwrap();
        std::fs::write(&lp, log).unwrap();
        format!(
            "[[file]]\npath = {:?}\nkind = \"nginx\"\nformat = \"overtime\"\nlayer = \"access\"\n\n\
             [[file]]\npath = {:?}\nkind = \"jsonl\"\n",
            lp.display().to_string(),
            sp.display().to_string()
        )
    });
    server.wait_for_verdicts(3);
    let cut = format!("{:032x}", 0x7a5e_0000 + 5);
    let finished = format!("{:032x}", 0x7a5e_0000);
    // The API says it structurally: the cut call's phases were inferred
    // from the five finished calls.
    let (_, v) = server.api(&format!("/api/traces/{cut}")).unwrap();
    assert_eq!(v["root_cause"]["kind"], "llm_queueing", "{v:#}");
    let cp = v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|s| s.get("llm_phases"))
        .unwrap_or_else(|| panic!("no llm_phases in {v:#}"))
        .clone();
    assert_eq!(cp["inferred"]["calls"], 5, "{cp}");
    assert_eq!(cp["inferred"]["metered"], 0, "{cp}");
    assert!(
        (cp["inferred"]["queue_ms"].as_f64().unwrap() - 900.0).abs() < 1.0,
        "{cp}"
    );

    let out = artifacts();
    let mut b = Browser::launch();
    b.goto(&server.url(&format!("/#/trace/{cut}")));
    b.wait_for(
        "document.querySelector('#llm-phases li')",
        "the model phases",
    );
    let text = b.eval("document.querySelector('#llm-phases').innerText");
    let text = text.as_str().unwrap();
    assert!(
        text.contains(&format!("inferred from 5 finished calls of {MODEL}")),
        "{text}"
    );
    assert!(
        text.contains(
            "5 finished calls within ±5 min: on average queue 900 ms, prefill 100 ms, decode 180 ms"
        ),
        "{text}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#waterfall .ph.inferred').length > 0"),
        true,
        "the cut call's bar shows its inferred phases, hatched"
    );
    b.screenshot(&out.join("phases-inferred.png"), false);
    b.goto(&server.url(&format!("/#/trace/{finished}")));
    b.wait_for(
        &format!("document.querySelector('#waterfall[data-trace=\"{finished}\"]') && document.querySelector('#llm-phases li')"),
        "the finished call's page",
    );
    let text = b.eval("document.querySelector('#llm-phases').innerText");
    let text = text.as_str().unwrap();
    assert!(text.contains("vLLM span"), "{text}");
    assert!(!text.contains("inferred"), "{text}");
    b.screenshot(&out.join("phases-vllm-span.png"), false);
}
