//! A backend's "stopped" state: set once by `close`/`shutdown`, never cleared.
//!
//! Whether a *call* reports [`Error::Closed`] is decided by the Limiter, the one owner of
//! "closed" (it refuses calls after `close()` and reports any call cut short by the close as
//! `Closed`). A backend only needs to know that it was stopped: its background tasks end (they
//! watch the token), it starts no new session, and its retry loops give up.

use crate::error::{Error, Result};
use tokio_util::sync::CancellationToken;

/// Cancelled when the backend is closed or shut down.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop(CancellationToken);

impl Stop {
    /// Stops the backend: idempotent, never blocks.
    pub(crate) fn stop(&self) {
        self.0.cancel();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.0.is_cancelled()
    }

    /// `Err(Closed)` once stopped: for work that must not start after the close (a new session,
    /// another retry).
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_stopped() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// A token cancelled with this one (or on its own): for one background task.
    pub(crate) fn child_token(&self) -> CancellationToken {
        self.0.child_token()
    }
}
