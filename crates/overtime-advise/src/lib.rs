//! # overtime-advise
//!
//! From the last outage to the next one avoided. Over the same traces the
//! diagnosis reads (gateway logs joined with spans), this crate says which
//! timeouts to set and what a proposed set of timeouts would have done:
//!
//! - [`advise`]: per LLM model × input-token bucket, per tool and memory
//!   store, per gateway layer: the latency of the calls that finished, the
//!   survival of all of them with calls cut by a timeout *censored*
//!   (Kaplan–Meier, and a censored log-normal tail), the timeout in force
//!   (configured, observed firing, or inferred from the 504s), and a
//!   recommended timeout covering a target share; a latency law fitted
//!   per model ([`LatencyModel`]) with its per-request timeout rule; and
//!   the alignment rule checked top-down ([`Alignment`]).
//! - [`whatif`]: every trace replayed under a [`Proposal`]:
//!   which 504s would finish, fail fast, fall back, and which successes
//!   would now fail; calls that were cut draw their latency from the
//!   fitted laws with a seeded generator, and the report says how many
//!   outcomes depend on those draws.
//!
//! Pure: no I/O, no network, no async.
//!
//! The inputs are read by [`dataset`] into a [`Dataset`]; [`render`] writes
//! the results as text or Markdown; [`synth`] and [`stats`] make the
//! synthetic datasets of known laws the proofs and examples run on.

#![warn(missing_docs)]

mod advice;
mod align;
mod attempts;
mod context;
mod extract;
mod fired;
mod latency_model;
mod lognormal;
mod model_fit;
mod optim;
mod proposal;
pub mod render;
mod replay;
mod retry;
pub mod stats;
pub mod synth;
mod whatif;

pub use advice::{GroupAdvice, InForce, Method, ModelAdvice, Quantiles, Source};
pub use align::{AlignStep, Alignment};
pub use extract::{Attempt, CallFacts, Class, Dataset, End, LayerFacts, TraceFacts, dataset};
pub use fired::fired_cluster;
pub use latency_model::{Form, LatencyModel};
pub use lognormal::{LogNormal, TailFit};
pub use proposal::{Proposal, Timeout};
pub use replay::Fate;
pub use retry::{Backoff, RetryRule, openai_backoff_ms};
pub use whatif::{Counts, Latency, TraceChange, Transition, WhatIf, WhatIfOptions, whatif};

use serde::{Deserialize, Serialize};

/// What went wrong reading the inputs or a proposal.
#[derive(Debug, thiserror::Error)]
pub enum AdviseError {
    /// The stored tables could not be read as gateway records or spans.
    #[error(transparent)]
    Model(#[from] overtime_model::ModelError),
    /// A `--set` proposal is malformed or names a model, tool, service or
    /// gateway layer the data does not have.
    #[error("proposal: {0}")]
    Proposal(String),
}

/// The advice's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdviseOptions {
    /// The share of calls a recommended timeout must cover (0.99).
    pub target: f64,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions { target: 0.99 }
    }
}

/// The whole advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// The share of calls the recommended timeouts cover (the option,
    /// clamped to 0.5–0.9999).
    pub target: f64,
    /// Requests (traces) the advice was computed over.
    pub traces: usize,
    /// First and last request start (RFC 3339).
    pub window: Option<(String, String)>,
    /// Per model × input-token bucket.
    pub llm: Vec<GroupAdvice>,
    /// Each model's latency law and per-request timeout rule.
    pub models: Vec<ModelAdvice>,
    /// Per tool and memory store.
    pub tools: Vec<GroupAdvice>,
    /// Per gateway layer.
    pub gateways: Vec<GroupAdvice>,
    /// The alignment rule, per service.
    pub alignment: Vec<Alignment>,
}

/// The advice over a [`Dataset`].
///
/// ```
/// use overtime_advise::{advise, synth, AdviseOptions};
/// // 3 000 calls following seed 000's three input classes, 30 s timeout.
/// let ds = synth::seed_classes(3_000, synth::Cut::At(30_000.0), 7);
/// let a = advise(&ds, &AdviseOptions::default());
/// let long = a.llm.iter().find(|g| g.bucket.as_deref() == Some(">500")).unwrap();
/// assert!(long.timed_out > 0, "the 30 s timeout cut long calls");
/// assert!(long.recommended_ms.unwrap() > 30_000.0);
/// ```
pub fn advise(ds: &Dataset, opts: &AdviseOptions) -> Advice {
    let target = opts.target.clamp(0.5, 0.9999);
    let models = advice::fit_models(ds);
    let (llm, tools, model_advice) = advice::call_groups(ds, &models, target);
    let mut gateways = advice::gateway_groups(ds, target);
    let alignment = align::align(ds, &llm, &tools, target);
    // A gateway's timeout is not a latency to cover but a layer of the
    // chain: what the alignment rule asks of it.
    for g in &mut gateways {
        let layer = format!("gateway {}", g.name);
        g.recommended_ms = alignment
            .iter()
            .flat_map(|a| a.steps.iter())
            .filter(|s| s.layer == layer)
            .filter_map(|s| s.recommended_ms)
            .reduce(f64::max);
        g.method = g.recommended_ms.map(|_| advice::Method::Alignment);
        g.change = advice::change_word(g.recommended_ms, g.timeout.as_ref());
    }
    let window = match (ds.traces.first(), ds.traces.last()) {
        (Some(a), Some(b)) => Some((
            overtime_diagnose::verdict::rfc3339(a.start_us),
            overtime_diagnose::verdict::rfc3339(b.start_us),
        )),
        _ => None,
    };
    Advice {
        target,
        traces: ds.traces.len(),
        window,
        llm,
        models: model_advice,
        tools,
        gateways,
        alignment,
    }
}

/// Checks that `p` names only models, tools, services and gateway layers
/// the data has: a typo would otherwise change nothing, silently.
pub fn check_proposal(p: &Proposal, ds: &Dataset) -> Result<(), AdviseError> {
    use std::collections::BTreeSet;
    let mut models = BTreeSet::new();
    let mut comps = BTreeSet::new();
    let mut services = BTreeSet::new();
    for t in &ds.traces {
        for c in &t.calls {
            if c.class == extract::Class::Llm {
                models.insert(c.component.as_str());
            } else {
                comps.insert(c.component.as_str());
            }
        }
        if let Some(s) = &t.service {
            services.insert(s.as_str());
        }
    }
    let layers: Vec<&str> = ds.layers.iter().map(|l| l.name.as_str()).collect();
    let (models, comps, services): (Vec<&str>, Vec<&str>, Vec<&str>) = (
        models.into_iter().collect(),
        comps.into_iter().collect(),
        services.into_iter().collect(),
    );
    let bad = p.unknown_names(&models, &comps, &services, &layers);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(AdviseError::Proposal(format!(
            "{}. Name one of them, or `*` for all of them.",
            bad.join("; ")
        )))
    }
}
