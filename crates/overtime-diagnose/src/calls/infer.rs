//! Phases for the model calls whose server said nothing in their trace:
//! its answer written in a trace of its own ([`crate::answers`]), else the
//! [`PhaseBook`] of the same model's finished calls.

use super::{Call, CallKind};
use crate::assemble::Trace;
use crate::phasebook::{Cut, PhaseBook};
use overtime_model::LlmPhases;

/// The answer a model server wrote in a trace of its own: a span with no
/// parent that says the phases of the request it served and the id it
/// served it under (vLLM's `llm_request` with `gen_ai.request.id`, when
/// the caller's `traceparent` did not reach it). `(id, phases, source,
/// start)`.
pub(crate) fn server_answer(trace: &Trace) -> Option<(&str, LlmPhases, &'static str, i64)> {
    trace.spans.iter().find_map(|s| {
        if s.parent_span_id.is_some() {
            return None;
        }
        let id = s
            .attributes
            .iter()
            .find(|(k, v)| k == "gen_ai.request.id" && !v.trim().is_empty())?;
        let phases = super::span_phases(s);
        (!phases.is_empty()).then(|| {
            (
                id.1.trim(),
                phases,
                super::measure::phase_source(s),
                s.start_us,
            )
        })
    })
}

/// Did the call ask for a stream? A stream event on one of its spans, or
/// an instrumentation's flag (`llm.is_streaming`, `gen_ai.request.stream`,
/// `"stream": true` among OpenInference's invocation parameters).
fn streamed(trace: &Trace, c: &Call) -> bool {
    c.spans.iter().any(|&i| {
        let s = &trace.spans[i];
        s.events
            .iter()
            .any(|e| crate::outcome::is_stream_event(&e.name))
            || s.attributes.iter().any(|(k, v)| {
                (matches!(k.as_str(), "llm.is_streaming" | "gen_ai.request.stream")
                    && v.eq_ignore_ascii_case("true"))
                    || (k == "llm.invocation_parameters"
                        && v.replace(' ', "").contains("\"stream\":true"))
            })
    })
}

/// Splits again, by the model's costs learned from its calls, a call
/// whose server timed prefill and decode together and which the fixed
/// token estimate split ([`crate::costs`]).
fn resplit(c: &mut Call, book: &PhaseBook) {
    let Some([inference, prompt, generated]) = c.unsplit else {
        return;
    };
    let Some((a, b, n)) = book.costs.fit(&c.component) else {
        return;
    };
    let (pc, gc) = (a * prompt, b * generated);
    if pc + gc <= 0.0 {
        return;
    }
    let prefill = inference * pc / (pc + gc);
    c.phases.prefill_ms = Some(prefill);
    c.phases.decode_ms = Some((inference - prefill).max(0.0));
    let source = c
        .phase_source
        .as_deref()
        .and_then(|s| s.split(", prefill and decode estimated").next())
        .unwrap_or("model server")
        .to_string();
    c.phase_source = Some(format!(
        "{source}, prefill and decode split by {}'s costs learned from {n} of its calls ({:.2} ms a prompt token, {:.1} ms a generated token; {prompt} in, {generated} out)",
        c.component, a, b
    ));
}

/// Gives every LLM call with no queue, prefill or decode phase the phases
/// its neighbours in `book` and its own evidence make likely (see
/// [`crate::phasebook`]); a call the book cannot decide stays as it is.
pub(crate) fn infer_phases(trace: &Trace, calls: &mut [Call], book: &PhaseBook) {
    for c in calls.iter_mut() {
        resplit(c, book);
        let p = &c.phases;
        let known = p.queue_ms.is_some() || p.prefill_ms.is_some() || p.decode_ms.is_some();
        if c.kind != CallKind::Span || !c.is_llm() || known {
            continue;
        }
        if let Some((phases, source)) = c.response_id.as_deref().and_then(|id| book.answers.get(id))
        {
            let mut phases = phases;
            phases.other = std::mem::take(&mut c.phases.other);
            c.phases = phases;
            c.phase_source = Some(source);
            continue;
        }
        let Some(start_us) = c.spans.first().map(|&i| trace.spans[i].start_us) else {
            continue;
        };
        let cut = Cut {
            model: &c.component,
            start_us,
            duration_ms: c.raw_attempts_ms().iter().sum(),
            ttft_ms: c.ttft_ms,
            streamed: streamed(trace, c),
        };
        if let Some(inferred) = book.infer(&cut) {
            let mut phases = inferred.phases;
            phases.other = std::mem::take(&mut c.phases.other);
            c.phases = phases;
            c.phase_source = Some(inferred.source);
            c.phase_neighbours = Some(inferred.neighbours);
        }
    }
}

/// An LLM call's phases for its timeline entry: what they are and where
/// they came from; `None` for another call or one whose phases nobody
/// said.
pub(crate) fn call_phases(c: &Call) -> Option<overtime_model::CallPhases> {
    let p = &c.phases;
    if !c.is_llm() || (p.queue_ms.is_none() && p.prefill_ms.is_none() && p.decode_ms.is_none()) {
        return None;
    }
    Some(overtime_model::CallPhases {
        source: c
            .phase_source
            .clone()
            .unwrap_or_else(|| "model server".into()),
        queue_ms: p.queue_ms,
        prefill_ms: p.prefill_ms,
        decode_ms: p.decode_ms,
        inferred: c.phase_neighbours.clone(),
    })
}
