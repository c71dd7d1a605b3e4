//! The alignment rule with the recommended values: at every layer,
//! sum of downstream timeouts < service budget < gateway timeout, and each
//! outer gateway above the one inside it — whatever today's values are.

use overtime_advise::synth::{self, Cut};
use overtime_advise::{
    AdviseOptions, Alignment, Attempt, CallFacts, Class, Dataset, End, LayerFacts, advise,
};
use overtime_diagnose::LayerTimeout;
use overtime_model::Stage;

/// Seed 000's LLM calls (30 s timeout), each followed by a tool call of
/// 0.4–2 s (10 s timeout), behind the gateway layers `edge` then
/// `ingress` with the read timeouts given, under a service budget.
fn chain(budget_ms: Option<f64>, edge_ms: Option<f64>, ingress_ms: Option<f64>) -> Dataset {
    let mut ds = synth::seed_classes(400, Cut::At(30_000.0), 11);
    for (i, t) in ds.traces.iter_mut().enumerate() {
        let llm_end = t.calls[0].end_ms();
        let tool_ms = 400.0 + (i * 37 % 1_600) as f64;
        t.calls.push(CallFacts {
            class: Class::Tool,
            component: "search_api".into(),
            stage: Stage::Tool,
            tokens_in: None,
            gpu_load: None,
            in_flight: 0.0,
            attempts: vec![Attempt {
                start_ms: llm_end,
                ms: tool_ms,
                end: End::Finished,
                known_ms: None,
                answered: true,
            }],
            timeout_ms: Some(10_000.0),
            timeout_observed: false,
            remaining_budget_ms: None,
            critical: true,
            fallback_ms: None,
            abs_start_us: 0,
            gateway: None,
        });
        t.service_end_ms = Some(llm_end + tool_ms);
        t.elapsed_ms = llm_end + tool_ms;
        t.budget_ms = budget_ms;
        t.layers = vec!["edge".into(), "ingress".into()];
    }
    let layer = |name: &str, ms: Option<f64>| LayerFacts {
        name: name.into(),
        timeout: ms.map(|ms| LayerTimeout {
            ms,
            inferred: false,
            cluster: 0,
            of: 0,
            cut_streams: 0,
        }),
        requests: ds.traces.iter().map(|t| (t.elapsed_ms, t.status)).collect(),
    };
    ds.layers = vec![layer("edge", edge_ms), layer("ingress", ingress_ms)];
    ds
}

/// The recommended values of one service's chain, outermost first:
/// (gateways, budget, downstream sum).
fn recommended(a: &Alignment) -> (Vec<(String, f64)>, f64, f64) {
    let value = |i: usize| {
        a.steps[i]
            .recommended_ms
            .unwrap_or_else(|| panic!("no recommended value for {}: {a:#?}", a.steps[i].layer))
    };
    let n = a.steps.len();
    assert!(n >= 3, "gateways, budget, downstream: {a:#?}");
    let gateways = (0..n - 2)
        .map(|i| {
            assert!(a.steps[i].layer.starts_with("gateway "), "{a:#?}");
            (a.steps[i].layer.clone(), value(i))
        })
        .collect();
    assert!(a.steps[n - 2].layer.ends_with(" budget"), "{a:#?}");
    assert!(a.steps[n - 1].layer.starts_with("downstream"), "{a:#?}");
    (gateways, value(n - 2), value(n - 1))
}

/// Asserts the rule on the recommended values of every service.
fn assert_rule_holds(case: &str, ds: &Dataset) -> Vec<Alignment> {
    let advice = advise(ds, &AdviseOptions::default());
    assert!(!advice.alignment.is_empty(), "{case}: no alignment at all");
    for a in &advice.alignment {
        let (gateways, budget, downstream) = recommended(a);
        assert_eq!(
            gateways.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(),
            ["gateway edge", "gateway ingress"],
            "{case}: every layer, outermost first"
        );
        assert!(
            downstream < budget,
            "{case}: sum of downstream timeouts {downstream} ms must be < the budget {budget} ms: {a:#?}"
        );
        let (inner, inner_ms) = gateways.last().unwrap();
        assert!(
            budget < *inner_ms,
            "{case}: the budget {budget} ms must be < {inner} at {inner_ms} ms: {a:#?}"
        );
        for w in gateways.windows(2) {
            assert!(
                w[0].1 > w[1].1,
                "{case}: {} ({} ms) must outlive {} ({} ms) inside it: {a:#?}",
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            );
        }
    }
    advice.alignment
}

#[test]
fn the_recommended_timeouts_keep_downstream_under_the_budget_under_every_gateway() {
    // Seed 000 as it was: a 30 s budget over 30 s LLM calls, two 60 s
    // gateways (neither above the other).
    assert_rule_holds(
        "seed 000's values",
        &chain(Some(30_000.0), Some(60_000.0), Some(60_000.0)),
    );
    // Generous values today: what already fits is kept, and still nests.
    assert_rule_holds(
        "generous values",
        &chain(Some(100_000.0), Some(300_000.0), Some(120_000.0)),
    );
    // Gateways shorter than the budget, the outer one shorter than the
    // inner one.
    assert_rule_holds(
        "inverted gateways",
        &chain(Some(90_000.0), Some(20_000.0), Some(45_000.0)),
    );
    // No budget, no known read timeout.
    assert_rule_holds("nothing known", &chain(None, None, None));
}

#[test]
fn a_budget_exactly_at_what_the_calls_need_is_raised_since_the_rule_is_strict() {
    let first = assert_rule_holds(
        "seed 000's values",
        &chain(Some(30_000.0), Some(60_000.0), Some(60_000.0)),
    );
    let (_, _, downstream) = recommended(&first[0]);
    // Today's budget equals the recommended sum of downstream timeouts:
    // a call chain using all of its timeouts ends with the budget, so the
    // budget must grow.
    let again = assert_rule_holds(
        "budget = downstream",
        &chain(Some(downstream), Some(600_000.0), Some(300_000.0)),
    );
    let (_, budget, _) = recommended(&again[0]);
    assert!(budget > downstream, "{again:#?}");
}

#[test]
fn an_llm_gateways_retry_loop_is_a_layer_that_must_end_inside_the_budget() {
    // The LLM calls go through LiteLLM, which gave each attempt 1 s and
    // retried twice after 1.1 s of backoff.
    let mut ds = chain(Some(30_000.0), Some(60_000.0), Some(60_000.0));
    for t in &mut ds.traces {
        let c = &mut t.calls[0];
        c.gateway = Some("litellm-proxy".into());
        c.timeout_ms = Some(1_000.0);
        c.timeout_observed = true;
        let start = c.attempts[0].start_ms;
        c.attempts = (0..3)
            .map(|k| Attempt {
                start_ms: start + k as f64 * 2_100.0,
                ms: 1_000.0,
                end: End::TimedOut,
                known_ms: None,
                answered: false,
            })
            .collect();
        t.elapsed_ms = t.elapsed_ms.max(start + 5_200.0);
    }
    let advice = advise(&ds, &AdviseOptions::default());
    let a = &advice.alignment[0];
    let budget = a
        .steps
        .iter()
        .find(|s| s.layer.ends_with(" budget"))
        .and_then(|s| s.recommended_ms)
        .expect("a budget step");
    let step = a
        .steps
        .iter()
        .find(|s| s.layer.starts_with("LLM gateway litellm-proxy"))
        .unwrap_or_else(|| panic!("no LLM gateway step: {a:#?}"));
    // Today's loop as it ran: 3 attempts of 1 s and two pauses of 1.1 s.
    assert_eq!(step.current_ms, Some(5_200.0), "{step:#?}");
    let loop_ms = step.recommended_ms.expect("a recommended loop");
    assert!(
        loop_ms < budget,
        "the loop {loop_ms} ms must end inside the budget {budget} ms: {a:#?}"
    );
    assert!(
        step.why.contains("LiteLLM: `timeout: ") && step.why.contains("`num_retries: "),
        "{}",
        step.why
    );
}
