//! What a call's spans say, gathered over every span of the call: the
//! model server's phases, DNS and connect times, and the timeouts that
//! fired.

use super::Call;
use crate::assemble::Trace;
use crate::tree::TraceTree;
use overtime_model::{LlmPhases, SpanRecord, SpanStatus};
use overtime_parse::llm_reason::parse_llm_reason;

/// DNS and connect time of one span (fields first, else its events), ms.
pub(super) fn span_dns_connect(s: &SpanRecord) -> (Option<f64>, Option<f64>) {
    // A connection phase written as a span of its own (`dns.lookup`,
    // `tcp.connect`) is that phase, all of it.
    if crate::shape::is_phase(s) {
        let d = Some(s.duration_ms());
        return if s.name.to_ascii_lowercase().starts_with("dns") {
            (d, None)
        } else {
            (None, d)
        };
    }
    let mut dns = s.dns_ms;
    let mut connect = s.connect_ms;
    let mut last_phase_end = s.start_us;
    let mut evs: Vec<_> = s.events.iter().collect();
    evs.sort_by_key(|e| e.time_us);
    for e in evs {
        let name = e.name.to_ascii_lowercase();
        let slot = if name == "dns" || name.starts_with("dns.") || name.contains("dns_") {
            &mut dns
        } else if name == "connect" || name.starts_with("connect") || name.contains("tls") {
            &mut connect
        } else {
            continue;
        };
        let d = e
            .duration_ms
            .unwrap_or(((e.time_us - last_phase_end) as f64 / 1000.0).max(0.0));
        last_phase_end = e.time_us.max(last_phase_end);
        if slot.is_none() {
            *slot = Some(d);
        } else if e.duration_ms.is_some() && s.dns_ms.is_none() && s.connect_ms.is_none() {
            *slot = Some(slot.unwrap_or(0.0) + d);
        }
    }
    (dns, connect)
}

/// Adds `b` to `a` when `b` is known.
pub(super) fn add(a: &mut Option<f64>, b: Option<f64>) {
    if let Some(b) = b {
        *a = Some(a.unwrap_or(0.0) + b);
    }
}

/// Adds the phases of `p` into `into`.
pub(super) fn merge_phases(into: &mut LlmPhases, p: &LlmPhases) {
    add(&mut into.queue_ms, p.queue_ms);
    add(&mut into.prefill_ms, p.prefill_ms);
    add(&mut into.decode_ms, p.decode_ms);
    add(&mut into.io_ms, p.io_ms);
    for (n, v) in &p.other {
        match into.other.iter_mut().find(|(k, _)| k == n) {
            Some((_, x)) => *x += v,
            None => into.other.push((n.clone(), *v)),
        }
    }
    into.malformed |= p.malformed;
}

/// A span's own phases: parsed already, else its raw `X-LLM-Reason`.
pub(crate) fn span_phases(s: &SpanRecord) -> LlmPhases {
    if !s.phases.is_empty() {
        return s.phases.clone();
    }
    s.llm_reason
        .as_deref()
        .map(parse_llm_reason)
        .unwrap_or_default()
}

/// Phase spans (a model server may emit `queue`/`prefill`/`decode` spans).
pub(super) fn phase_of_name(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase();
    let n = n.rsplit(['.', ' ', '/']).next().unwrap_or(&n).to_string();
    match n.as_str() {
        "queue" | "queue_wait" | "queueing" | "prefill_waiting" => Some("queue"),
        "prefill" | "kv_cache_build" | "prefill_forward" => Some("prefill"),
        "decode" | "decode_loop" => Some("decode"),
        _ => None,
    }
}

/// Every node of the subtree under `node`, itself first, breadth-first.
pub(super) fn descendants(tree: &TraceTree, node: usize) -> Vec<usize> {
    let mut out = vec![node];
    let mut i = 0;
    while i < out.len() {
        out.extend(tree.nodes[out[i]].children.iter().copied());
        i += 1;
    }
    out
}

/// The phases one attempt's reply reported, and where they were read: the
/// first span under it (itself first) that carries some.
pub(super) fn attempt_phases(
    trace: &Trace,
    tree: &TraceTree,
    node: usize,
) -> Option<(LlmPhases, String)> {
    descendants(tree, node)
        .into_iter()
        .filter_map(|d| tree.nodes[d].span)
        .map(|i| &trace.spans[i])
        .map(|s| (span_phases(s), s))
        .find(|(p, _)| !p.is_empty())
        .map(|(p, s)| (p, phase_source(s).to_string()))
}

fn has_key(s: &SpanRecord, prefix: &str) -> bool {
    s.attributes.iter().any(|(k, _)| k.starts_with(prefix))
}

/// Where a span's phases come from, as the evidence names it.
pub(crate) fn phase_source(s: &SpanRecord) -> &'static str {
    let scope = s.scope_name.as_deref().unwrap_or("").to_ascii_lowercase();
    if s.llm_reason.is_some() {
        "X-LLM-Reason header"
    } else if has_key(s, "gen_ai.latency.") {
        if scope.contains("sglang") {
            "SGLang span"
        } else if scope.contains("vllm") || s.name == "llm_request" {
            "vLLM span"
        } else {
            "model server span (gen_ai.latency.*)"
        }
    } else if has_key(s, "http.response.header.x-queue-time")
        || has_key(s, "http.response.header.x-inference-time")
        // The headers fill the phase columns and are not kept; only TGI's
        // `x-inference-time` times prefill and decode together.
        || s.phases.other.iter().any(|(n, _)| n == "inference")
    {
        "TGI headers"
    } else if has_key(s, "http.response.header.openai-processing-ms") {
        "openai-processing-ms header"
    } else {
        "model server"
    }
}

/// A prompt token's share of the time of a generated one, for splitting a
/// time that holds both prefill and decode when nothing better says: a GPU
/// reads a prompt at about ten thousand tokens a second but generates one
/// token of a sequence per step, some 25 ms (a 7-8B model on one A100-class
/// GPU; larger models scale both alike).
const PROMPT_TOKEN_COST: f64 = 0.004;

/// A server that reports prefill and decode only together (TGI's
/// `x-inference-time`) has them split where the call's first token came,
/// when the client saw it (before it queue and prefill, after it decode);
/// else by the call's token counts, prefill ≈ inference × P·c / (P·c + G),
/// c = [`PROMPT_TOKEN_COST`], which the evidence marks as estimated (and
/// which the model's own costs, learned from its calls, replace when they
/// can: [`crate::costs`]). With
/// neither they stay one time ([`largest_llm_phase`] names the queue
/// only when it outweighs them; else `llm_slow`).
///
/// [`largest_llm_phase`]: crate::rules::shared::largest_llm_phase
pub(super) fn split_inference(c: &mut Call) {
    if c.phases.prefill_ms.is_some() || c.phases.decode_ms.is_some() {
        return;
    }
    let Some(inference) = c
        .phases
        .other
        .iter()
        .find(|(n, _)| n == "inference")
        .map(|(_, v)| *v)
    else {
        return;
    };
    let (prefill, how) = match (c.ttft_ms, c.input_tokens, c.output_tokens) {
        (Some(ttft), _, _) => (
            (ttft - c.phases.queue_ms.unwrap_or(0.0)).clamp(0.0, inference),
            format!(
                "inference split at the first token ({})",
                crate::fmt::dur(ttft)
            ),
        ),
        (None, Some(input), Some(output)) => {
            c.unsplit = Some([inference, input.max(0) as f64, output.max(0) as f64]);
            let prompt = input.max(0) as f64 * PROMPT_TOKEN_COST;
            let generated = output.max(1) as f64;
            (
                inference * prompt / (prompt + generated),
                format!(
                    "prefill and decode estimated from inference by tokens ({input} in, {output} out)"
                ),
            )
        }
        _ => return,
    };
    let p = &mut c.phases;
    p.prefill_ms = Some(prefill);
    p.decode_ms = Some(inference - prefill);
    p.other.retain(|(n, _)| n != "inference");
    let source = c
        .phase_source
        .take()
        .unwrap_or_else(|| "model server".into());
    c.phase_source = Some(format!("{source}, {how}"));
}

/// Gathers what the spans under operation node `n` say into `c`: phases
/// (the model server's header, else phase spans), DNS and connect, model,
/// tokens, time to first token, GPU load, and a timeout configured on a
/// span inside it.
pub(super) fn gather(trace: &Trace, tree: &TraceTree, n: usize, c: &mut Call) {
    let spans = &trace.spans;
    let mut phases = LlmPhases::default();
    let mut dns = None;
    let mut connect = None;
    let mut phase_spans = LlmPhases::default();
    let mut nested_timeout: Option<f64> = None;
    for d in descendants(tree, n) {
        let Some(di) = tree.nodes[d].span else {
            continue;
        };
        let ds = &spans[di];
        if phases.is_empty() {
            phases = span_phases(ds);
            if !phases.is_empty() && c.phase_source.is_none() {
                c.phase_source = Some(phase_source(ds).to_string());
            }
        }
        let (a, b) = span_dns_connect(ds);
        add(&mut dns, a);
        add(&mut connect, b);
        if d != n {
            if let Some(t) = ds.timeout_ms {
                nested_timeout = Some(nested_timeout.map_or(t, |x: f64| x.min(t)));
            }
            if let Some(p) = phase_of_name(&ds.name) {
                let ms = Some(ds.duration_ms());
                match p {
                    "queue" => add(&mut phase_spans.queue_ms, ms),
                    "prefill" => add(&mut phase_spans.prefill_ms, ms),
                    _ => add(&mut phase_spans.decode_ms, ms),
                }
            }
        }
        c.model = c.model.clone().or(ds.model.clone());
        c.input_tokens = c.input_tokens.or(ds.input_tokens);
        c.output_tokens = c.output_tokens.or(ds.output_tokens);
        c.max_tokens = c.max_tokens.or(ds.max_tokens);
        c.ttft_ms = c.ttft_ms.or(ds.ttft_ms);
        c.gpu_load = c.gpu_load.or(ds.gpu_load);
        if c.response_id.is_none() {
            c.response_id = ds
                .attributes
                .iter()
                .find(|(k, v)| k == "gen_ai.response.id" && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_string());
        }
    }
    if phases.is_empty() && !phase_spans.is_empty() {
        phases = phase_spans;
        c.phase_source = Some("the model server's phase spans".into());
    } else if phases.queue_ms.is_none() && phase_spans.queue_ms.is_some() {
        // Attributes that say nothing of the queue (SGLang's gen_ai
        // latency counts the wait in its prefill) are completed by the
        // server's own stage spans, whose timings win where they name a
        // phase: their prefill is the forward pass, without the wait.
        phases.queue_ms = phase_spans.queue_ms;
        phases.prefill_ms = phase_spans.prefill_ms.or(phases.prefill_ms);
        phases.decode_ms = phase_spans.decode_ms.or(phases.decode_ms);
        let source = c.phase_source.take().unwrap_or_default();
        c.phase_source = Some(format!("{source} and its stage spans"));
    }
    merge_phases(&mut c.phases, &phases);
    add(&mut c.dns_ms, dns);
    add(&mut c.dns_connect_ms, dns);
    add(&mut c.dns_connect_ms, connect);
    if c.timeout_ms.is_none() {
        c.timeout_ms = nested_timeout;
    }
}

/// Instrumentation records no configured timeouts, only the errors they
/// raise: a call (one of its operation spans, or one of its attempts) that
/// ended in a timeout error had a timeout, and it fired at about that
/// span's duration. A configured timeout (`timeout_ms`) is kept as it is.
pub(super) fn observe_timeout(trace: &Trace, tree: &TraceTree, nodes: &[usize], c: &mut Call) {
    let mut fired: Vec<(f64, Option<String>)> = Vec::new();
    for &n in nodes {
        let Some(s) = tree.nodes[n].span.map(|i| &trace.spans[i]) else {
            continue;
        };
        if s.status == SpanStatus::Timeout {
            fired.push((s.duration_ms(), s.error_type.clone()));
        } else if c.error_type.is_none() && s.status == SpanStatus::Error {
            c.error_type = s.error_type.clone();
        }
    }
    if fired.is_empty() {
        return;
    }
    c.timed_out = true;
    c.error_type = fired
        .iter()
        .find_map(|(_, e)| e.clone())
        .or(c.error_type.take());
    if c.timeout_ms.is_none() {
        // The shortest: an attempt's timeout, not the whole retry loop's.
        c.timeout_ms = fired.iter().map(|(d, _)| *d).reduce(f64::min);
        c.timeout_observed = true;
    }
}
