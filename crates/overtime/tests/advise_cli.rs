//! `overtime advise` and `overtime whatif` on incident A's fixture (seed
//! 000: 30 s LLM timeouts, a 30 s budget, nginx at 60 s), through the real
//! binary.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(f: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/incidents/a_prefill")
        .join(f)
        .display()
        .to_string()
}

fn overtime(cmd: &str, extra: &[&str]) -> Output {
    let (log, spans) = (fixture("access.log"), fixture("spans.jsonl"));
    let mut args = vec![
        cmd,
        "--nginx-log",
        &log,
        "--log-format",
        "overtime",
        "--spans",
        &spans,
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_overtime"))
        .args(&args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn advise_on_incident_a_censors_the_cut_calls_and_says_which_layer_to_change_first() {
    let a = json(&overtime("advise", &["--json"]));
    let llm = a["llm"].as_array().unwrap();
    assert!(
        llm.iter()
            .any(|g| g["name"] == "deepseek-v4-pro" && g["bucket"] == "200-500"),
        "{llm:?}"
    );
    // Every LLM call ran under the recorded 30 s timeout.
    for g in llm.iter().filter(|g| g["name"] == "deepseek-v4-pro") {
        assert_eq!(g["timeout"]["ms"], 30000.0, "{g}");
        assert_eq!(g["timeout"]["source"], "configured");
    }
    let gw = &a["gateways"][0];
    assert_eq!(gw["timeout"]["source"], "inferred", "{gw}");
    assert_eq!(gw["timeout"]["ms"], 60000.0);
    assert!(
        gw["cut"].as_u64().unwrap() >= 30,
        "the 504s at 60 s are censored: {gw}"
    );
    let model = a["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "deepseek-v4-pro")
        .expect("a fitted law for deepseek-v4-pro");
    assert!(model["r2"].as_f64().unwrap() > 0.3, "{model}");
    assert!(model["rule"].as_str().unwrap().starts_with("timeout = "));
    let al = a["alignment"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["service"] == "agent-service")
        .expect("the rule for agent-service");
    assert_eq!(
        al["holds_now"], false,
        "30 s of LLM timeout is not < a 30 s budget"
    );
    assert!(al["first"].as_str().is_some(), "{al}");
    let text = overtime("advise", &[]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("Alignment, service agent-service"), "{text}");
    let md = String::from_utf8(overtime("advise", &["--markdown"]).stdout).unwrap();
    assert!(md.starts_with("# Timeout advice"), "{md}");
    assert!(md.contains("| model | tokens |"), "{md}");
}

#[test]
fn whatif_on_incident_a_keeps_the_black_hole_and_finds_the_proposal_that_ends_it() {
    // A shorter LLM timeout: the service gives up sooner, but its 503
    // never reached nginx before, so it still does not — 504s stay.
    let w = json(&overtime(
        "whatif",
        &["--set", "llm.deepseek-v4-pro.timeout=20s", "--json"],
    ));
    let traces = w["traces"].as_u64().unwrap();
    assert!(traces >= 300, "{traces}");
    assert_eq!(
        w["today_reproduced"].as_u64().unwrap(),
        traces,
        "today's settings replay to today's outcome for every request"
    );
    assert_eq!(w["before"]["gateway_timeout"], 30.0);
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() >= 30.0,
        "{}",
        w["after"]
    );
    assert_eq!(w["cut_earlier"], 0.0);
    // Let the calls finish (their model server said how long they took),
    // with a budget and a gateway that outlive them: the 504s go.
    let w = json(&overtime(
        "whatif",
        &[
            "--set",
            "llm.deepseek-v4-pro.timeout=130s",
            "--set",
            "service.budget=160s",
            "--set",
            "gateway.access.read_timeout=180s",
            "--json",
        ],
    ));
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() <= 5.0,
        "{}",
        w["after"]
    );
    assert!(
        w["now_finish"].as_f64().unwrap() >= 25.0,
        "{}",
        w["now_finish"]
    );
    let changed = w["changed"].as_array().unwrap();
    assert!(changed.len() >= 25);
    assert!(
        changed.iter().all(
            |c| c["trace_id"].as_str().unwrap().len() == 32 && c["before"] == "gateway_timeout"
        )
    );
}

#[test]
fn whatif_reads_a_proposal_file_and_the_504s_go_as_the_file_says() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proposal.toml");
    // Let the model calls finish, with a budget and a gateway that outlive
    // them — the same change as the --set test above, written as a file.
    std::fs::write(
        &file,
        r#"
[llm."deepseek-v4-pro"]
timeout = "130s"

[service]
budget = "160s"

[gateway.access]
read_timeout = "180s"
"#,
    )
    .unwrap();
    let w = json(&overtime(
        "whatif",
        &["--proposal", file.to_str().unwrap(), "--json"],
    ));
    let mut keys: Vec<&str> = w["proposal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "gateway.access.read_timeout=180s",
            "llm.deepseek-v4-pro.timeout=130s",
            "service.budget=160s"
        ],
        "the report says what the file proposed"
    );
    assert_eq!(w["before"]["gateway_timeout"], 30.0);
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() <= 5.0,
        "the 504s go: {}",
        w["after"]
    );
    assert!(
        w["now_finish"].as_f64().unwrap() >= 25.0,
        "{}",
        w["now_finish"]
    );
    let changed = w["changed"].as_array().unwrap();
    assert!(changed.len() >= 25, "{changed:?}");
    assert!(
        changed
            .iter()
            .all(|c| c["before"] == "gateway_timeout" && c["after"] != "gateway_timeout"),
        "{changed:?}"
    );

    // A file that only shortens the model timeout keeps the black hole:
    // the service's 503 still comes after nginx's 504.
    std::fs::write(&file, "[llm.\"deepseek-v4-pro\"]\ntimeout = \"20s\"\n").unwrap();
    let w = json(&overtime(
        "whatif",
        &["--proposal", file.to_str().unwrap(), "--json"],
    ));
    assert_eq!(w["proposal"][0], "llm.deepseek-v4-pro.timeout=20s");
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() >= 30.0,
        "{}",
        w["after"]
    );

    // --set after --proposal wins for the same key.
    let w = json(&overtime(
        "whatif",
        &[
            "--proposal",
            file.to_str().unwrap(),
            "--set",
            "llm.deepseek-v4-pro.timeout=130s",
            "--set",
            "service.budget=160s",
            "--set",
            "gateway.access.read_timeout=180s",
            "--json",
        ],
    ));
    assert!(
        w["after"]["gateway_timeout"].as_f64().unwrap() <= 5.0,
        "{}",
        w["after"]
    );
}

#[test]
fn a_proposal_naming_what_the_traces_never_saw_is_a_usage_error() {
    for (set, says) in [
        ("llm.deepseek-v3.timeout=45s", "not in the traces"),
        ("llm.deepseek-v4-pro.speed=2", "llm key"),
        ("tool.bi_report_api.timeout=soon", "not a duration"),
    ] {
        let out = overtime("whatif", &["--set", set]);
        assert_eq!(out.status.code(), Some(2), "{set}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{set}: {err}");
    }
    let out = overtime("whatif", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing proposed"));
}
