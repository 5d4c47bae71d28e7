//! Whether the store answered lately (shared by the tower layers and [`crate::StoreDownGuard`]). After a failure, only one request per interval asks the
//! store again; the others get the store-down fallback at once instead of each waiting for a
//! store that is not there.

use crate::backend::lock;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct StoreHealth {
    interval: Duration,
    /// `None` while the store answers; else when the next request may try it again.
    next_try: Mutex<Option<Instant>>,
}

impl StoreHealth {
    pub(crate) fn new(interval: Duration) -> Self {
        StoreHealth {
            interval,
            next_try: Mutex::new(None),
        }
    }

    /// Whether this request may ask the store: always while it answers; while it is down, the
    /// first request after each interval (which pushes the next try one interval on).
    pub(crate) fn may_try(&self) -> bool {
        let mut next = lock(&self.next_try);
        match *next {
            None => true,
            Some(at) => {
                let now = Instant::now();
                if now < at {
                    return false;
                }
                *next = Some(now + self.interval);
                true
            }
        }
    }

    /// Whether a failure was seen and no success since.
    pub(crate) fn is_down(&self) -> bool {
        lock(&self.next_try).is_some()
    }

    /// The store answered (for the semaphore or rate limit `name`, named in the log).
    pub(crate) fn up(&self, name: &str) {
        if lock(&self.next_try).take().is_some() {
            tracing::info!(name, "store answers again; requests ask it again");
        }
    }

    /// The store failed or did not answer in time.
    pub(crate) fn down(&self, name: &str, cause: &crate::Error) {
        let was_up = lock(&self.next_try)
            .replace(Instant::now() + self.interval)
            .is_none();
        if was_up {
            tracing::warn!(
                name, error = %cause, retry_every = ?self.interval,
                "store unavailable; requests get the store-error fallback until it answers"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_try_per_interval_while_down() {
        let h = StoreHealth::new(Duration::from_secs(1));
        assert!(h.may_try() && h.may_try(), "up: every request tries");
        h.down("s", &crate::Error::Timeout);
        assert!(!h.may_try(), "down: no try before the interval");
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(h.may_try(), "the first request after the interval tries");
        assert!(!h.may_try(), "and only that one");
        h.up("s");
        assert!(h.may_try() && h.may_try(), "up again: every request tries");
    }
}
