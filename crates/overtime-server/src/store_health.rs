//! Says on stderr when the store stops taking data (a full disk, an I/O
//! error) and when it takes data again, without repeating itself: the
//! first failure, a reminder every minute while it lasts, the recovery.
//! `/readyz` answers 503 with the same reason meanwhile (see `api`).

use overtime_store::Store;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a lasting failure is logged again.
const REMIND: Duration = Duration::from_secs(60);

/// Since when the store has been failing, and when that was last logged.
static STATE: Mutex<Option<(Instant, Instant)>> = Mutex::new(None);

/// Logs a change of the store's health; call it periodically.
pub(crate) fn log_changes(store: &Store) {
    let failing = store.failing();
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match (failing, *st) {
        (Some(why), None) => {
            tracing::warn!(
                "overtime: the store in {} cannot take data: {why}; sources are pushed back (OTLP 503, file tails and Kafka wait) until it can",
                store.data_dir().display()
            );
            *st = Some((Instant::now(), Instant::now()));
        }
        (Some(why), Some((since, logged))) if logged.elapsed() >= REMIND => {
            tracing::warn!(
                "overtime: the store still cannot take data ({} s): {why}",
                since.elapsed().as_secs()
            );
            *st = Some((since, Instant::now()));
        }
        (None, Some((since, _))) => {
            tracing::info!(
                "overtime: the store takes data again (it could not for {} s)",
                since.elapsed().as_secs()
            );
            *st = None;
        }
        _ => {}
    }
}
