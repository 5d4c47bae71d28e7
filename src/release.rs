//! Background removal of queue entries: what `Drop` of a `Permit` or of a cancelled acquire
//! hands over, since `Drop` can neither await nor fail. Retried with backoff; the session
//! (lease) is the backstop if the store stays unreachable.

use crate::backend::Backend;
use crate::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const ATTEMPTS: u32 = 12;
const FIRST_DELAY: Duration = Duration::from_millis(50);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// Sends entries to remove to a background task. Cheap to clone; never blocks or panics.
#[derive(Debug, Clone)]
pub(crate) struct Releaser {
    tx: mpsc::UnboundedSender<(Arc<str>, String)>,
}

impl Releaser {
    /// Starts the background task on the current Tokio runtime.
    pub(crate) fn spawn(backend: Arc<dyn Backend>, handle: &tokio::runtime::Handle) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Arc<str>, String)>();
        handle.spawn(async move {
            while let Some((name, id)) = rx.recv().await {
                tokio::spawn(remove_with_retry(backend.clone(), name, id));
            }
        });
        Releaser { tx }
    }

    /// Queues a removal; if the task is gone (runtime shut down) the lease cleans up.
    pub(crate) fn remove_later(&self, name: Arc<str>, id: String) {
        let _ = self.tx.send((name, id));
    }
}

async fn remove_with_retry(backend: Arc<dyn Backend>, name: Arc<str>, id: String) {
    let mut delay = FIRST_DELAY;
    for attempt in 1..=ATTEMPTS {
        match backend.remove(&name, &id).await {
            Ok(()) => return,
            // The session is gone: the store drops the entry with it.
            Err(Error::SessionLost | Error::Closed) => return,
            Err(e) => {
                tracing::warn!(semaphore = %name, %id, attempt, error = %e, "background release failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_DELAY);
            }
        }
    }
    tracing::error!(semaphore = %name, %id, "giving up background release; the session TTL will free it");
}
