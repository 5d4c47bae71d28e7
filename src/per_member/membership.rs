//! One Limiter's part in a per-member semaphore (made by `open.rs`, held by its `Semaphore`
//! handles and, weakly, by the Limiter): while it lives, the Limiter counts as a member.

use tokio_util::sync::CancellationToken;

/// One Limiter's membership of a per-member semaphore, shared by its handles: its task (the
/// announcement, and the capacity while this Limiter controls) stops, withdrawing the
/// announcement, when the last handle goes.
#[derive(Debug)]
pub(crate) struct Membership {
    pub(crate) stop: CancellationToken,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
