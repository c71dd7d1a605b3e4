//! Seeds from other projects' test data (`tests/fixtures/peers/`, see its
//! README): Beats' and VRL's nginx lines, Fluent Bit's and
//! opentelemetry-proto's OTLP JSON requests. They join each target's own
//! seeds, so both the bounded runs and the cargo-fuzz corpus start from
//! what other tools were tested with.

const BEATS_INGRESS: &str =
    include_str!("../../../../tests/fixtures/peers/beats/ingress_controller/test.log");
const BEATS_ACCESS: &str = include_str!("../../../../tests/fixtures/peers/beats/access/test.log");
const VRL: &str = include_str!("../../../../tests/fixtures/peers/vrl/parse_nginx_log.json");
const FLUENT_BIT: &str = include_str!("../../../../tests/fixtures/peers/fluent-bit/traces.json");
const FLUENT_BIT_1: &str =
    include_str!("../../../../tests/fixtures/peers/fluent-bit/test_traces_001.in.json");
const FLUENT_BIT_2: &str =
    include_str!("../../../../tests/fixtures/peers/fluent-bit/test_traces_002.in.json");
const OTLP_EXAMPLE: &str =
    include_str!("../../../../tests/fixtures/peers/opentelemetry-proto/trace.json");

/// VRL's input lines of one format.
fn vrl_lines(format: &str) -> Vec<String> {
    let cases: serde_json::Value = serde_json::from_str(VRL).expect("VRL cases are JSON");
    cases
        .as_array()
        .map_or(&[][..], |a| a)
        .iter()
        .filter(|c| c["format"] == format)
        .filter_map(|c| c["line"].as_str().map(str::to_string))
        .collect()
}

/// `sel` then `text`, the input shape of the line targets.
fn with(sel: u8, text: &str) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(text.as_bytes());
    v
}

/// One compact JSON line per OTLP request of the peers.
fn otlp_lines() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(serde_json::Value::Object(cases)) = serde_json::from_str(FLUENT_BIT) {
        out.extend(cases.values().map(|c| c["input"].to_string()));
    }
    for text in [FLUENT_BIT_1, FLUENT_BIT_2, OTLP_EXAMPLE] {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
            out.push(v.to_string());
        }
    }
    out
}

/// The peer seeds of target `name`.
pub fn peer_seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        // `nginx_line`: selector 1 is `combined`.
        "nginx_line" => {
            let mut out = vec![with(1, BEATS_ACCESS)];
            out.extend(vrl_lines("combined").iter().map(|l| with(1, l)));
            out
        }
        // `nginx_lists`: odd selector 1 is ingress-nginx, even is the
        // round trip.
        "nginx_lists" => {
            let mut out = vec![with(1, BEATS_INGRESS)];
            out.extend(BEATS_INGRESS.lines().map(|l| with(1, l)));
            out.extend(vrl_lines("ingress_upstreaminfo").iter().map(|l| with(1, l)));
            out
        }
        "otlp_json" => otlp_lines().into_iter().map(String::into_bytes).collect(),
        _ => Vec::new(),
    }
}
