//! What the Kafka fault tests share besides the broker itself
//! (`overtime_test_support::tansu`): a producer context that collects
//! delivery reports.

use rdkafka::ClientContext;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Delivery reports of a producer; the opaque is the record's index.
#[derive(Default)]
pub struct Deliveries {
    pub ok: AtomicU64,
    pub failed: Mutex<Vec<String>>,
}

/// A producer context filling [`Deliveries`].
pub struct Ctx(pub Arc<Deliveries>);
impl ClientContext for Ctx {}
impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, r: &DeliveryResult<'_>, i: Box<u64>) {
        match r {
            Ok(_) => {
                self.0.ok.fetch_add(1, Relaxed);
            }
            Err((e, _)) => self
                .0
                .failed
                .lock()
                .unwrap()
                .push(format!("record {i}: {e}")),
        }
    }
}
