//! Incident pages through Alertmanager as one of overtime's alert
//! channels ([`overtime_notify::IncidentChannel`]): a page fires the
//! one-shot `Overtime504Incident` alert, a resolution resolves it, a hand
//! over stops re-sending it, a rename carries its labels to the new id.
//! Updates and tickets are not for this channel (Alertmanager keeps one
//! alert per label set, and the page's labels do not change as the
//! incident grows).
//!
//! The sender it pages through is shared with the SLO alerts, so stopping
//! the channel leaves the sender to its owner.

use crate::alert::Alert;
use crate::sender::AlertSender;
use chrono::Utc;
use overtime_notify::{
    Accepted, ChannelError, ChannelMetrics, IncidentChannel, Notice as IncidentNotice, Stopping,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// The incident pages of an [`AlertSender`].
pub struct PageChannel {
    sender: Arc<AlertSender>,
    external_url: String,
    /// The labels of each page still firing, by incident id: what its
    /// resolution is sent with.
    labels: Mutex<HashMap<String, BTreeMap<String, String>>>,
}

impl PageChannel {
    /// Pages through `sender`, linking reports under `external_url`.
    pub fn new(sender: Arc<AlertSender>, external_url: &str) -> PageChannel {
        PageChannel {
            sender,
            external_url: external_url.to_string(),
            labels: Mutex::new(HashMap::new()),
        }
    }

    fn labels(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, String>>> {
        self.labels.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl IncidentChannel for PageChannel {
    fn name(&self) -> &str {
        "alertmanager"
    }

    fn notify(&self, notice: &IncidentNotice) -> Result<Accepted, ChannelError> {
        match notice {
            IncidentNotice::Page(i) => {
                let page = Alert::incident(
                    &i.kind,
                    &i.component,
                    &i.fingerprint,
                    &i.headline,
                    &i.id,
                    &self.external_url,
                );
                self.labels().insert(i.id.clone(), page.labels.clone());
                self.sender.fire_once(page, Utc::now());
            }
            IncidentNotice::Resolve(i) => match self.labels().remove(&i.id) {
                Some(l) => self.sender.resolve_once(&l, Utc::now()),
                None => return Ok(Accepted::Ignored),
            },
            IncidentNotice::HandOver(i) => match self.labels().remove(&i.id) {
                Some(l) => self.sender.hand_over_once(&l),
                None => return Ok(Accepted::Ignored),
            },
            IncidentNotice::Rename { from, to } => {
                // The page already sent stands for the renamed incident
                // (same labels); resolving it goes by its new id.
                let mut labels = self.labels();
                match labels.remove(from) {
                    Some(l) => labels.insert(to.clone(), l),
                    None => return Ok(Accepted::Ignored),
                };
            }
            IncidentNotice::Update(_) | IncidentNotice::Ticket(_) => return Ok(Accepted::Ignored),
        }
        Ok(Accepted::Done)
    }

    fn metrics(&self) -> ChannelMetrics {
        ChannelMetrics::Own(Box::new(self.sender.collector()))
    }

    fn shutdown(self: Box<Self>) -> Stopping {
        Box::pin(async {})
    }
}
