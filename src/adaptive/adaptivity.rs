//! One Limiter's part in an adaptive semaphore (made by `open.rs`, held by its `Semaphore`
//! handles and, weakly, by the Limiter): counts grants into the window in progress.

use super::reporter::{Held, Reporter};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One Limiter's part in an adaptive semaphore, shared by its handles: the window in progress,
/// and the window task, which stops when the last handle goes.
#[derive(Debug)]
pub(crate) struct Adaptivity {
    pub(crate) reporter: Arc<Reporter>,
    pub(crate) stop: CancellationToken,
}

impl Adaptivity {
    /// Counts a grant of `permits` in flight until the returned share goes.
    pub(crate) fn granted(&self, permits: u32) -> Held {
        self.reporter.granted(permits)
    }
}

impl Drop for Adaptivity {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
