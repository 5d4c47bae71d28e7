//! The controller seat of a semaphore whose capacity one Limiter at a time computes (an
//! adaptive one, `control.rs`, or one sized by its members, `per_member/`): the one permit of
//! `<name>.controller`, waited for in its queue by every Limiter that has the semaphore open.

use crate::error::Error;
use crate::permit::Permit;
use crate::semaphore::Semaphore;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the campaign shares with the task that writes the capacity: the controller permit
/// while this Limiter holds it.
#[derive(Debug, Default)]
pub(crate) struct Election {
    permit: Mutex<Option<Permit>>,
}

impl Election {
    /// Whether this Limiter holds the seat now, its permit not (possibly) lost.
    pub(crate) fn holds(&self) -> bool {
        self.permit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|p| !p.is_lost())
    }

    pub(crate) fn set(&self, permit: Option<Permit>) {
        *self.permit.lock().unwrap_or_else(PoisonError::into_inner) = permit;
    }
}

/// Waits in the controller semaphore's queue, holds its permit while it lasts, and waits again
/// when it is lost; leaves (releasing it) when `stop` fires. `what` names the capacity
/// controlled in the log lines ("adaptive", "per-member").
pub(crate) async fn campaign(
    controller: Semaphore,
    election: Arc<Election>,
    stop: CancellationToken,
    retry: Duration,
    what: &'static str,
) {
    loop {
        let acquired = tokio::select! {
            _ = stop.cancelled() => break,
            r = controller.acquire() => r,
        };
        match acquired {
            Ok(permit) => {
                tracing::info!(semaphore = %controller.name(), "this Limiter now controls the {what} capacity");
                let lost = permit.lost_signal();
                election.set(Some(permit));
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = lost.lost() => {
                        election.set(None);
                        if controller.limiter().is_closed() {
                            break; // closing ended the session: no loss to report
                        }
                        tracing::warn!(semaphore = %controller.name(), "controller permit lost; waiting to control again");
                    }
                }
            }
            Err(Error::Closed) => break,
            Err(e) => {
                tracing::debug!(semaphore = %controller.name(), error = %e, "waiting for the controller permit failed; retrying");
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        }
    }
    election.set(None);
}
