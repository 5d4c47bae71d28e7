//! `Permit::shrink_to`: lowering a held weight (acquired at an estimate, shrunk to the real
//! figure once known), the freed weight granted to waiters as a partial release would.

use super::Permit;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

impl Permit {
    /// Lowers the weight held to `permits` (at least 1, at most [`permits()`](Permit::permits)),
    /// keeping the place in the queue and the [fencing token](Permit::fencing_token). The
    /// weight freed goes to the waiters as a partial release would: in FIFO order, a heavy head
    /// of the queue never passed (on a fair semaphore, by the fair rule). One store request on
    /// `memory://`, Redis and ZooKeeper (a conditional write of the entry's data), two on etcd
    /// (a read of the entry and a compare-and-put); `permits` equal to the weight held sends
    /// nothing (see docs/semaphores.md).
    ///
    /// Errors: `InvalidArgument` for 0 or more than the weight held (nothing sent);
    /// `SessionLost` once the permit is [lost](Permit::lost) (nothing changes); `Closed`
    /// after [`Limiter::close`](crate::Limiter::close); a store error when the store did not
    /// answer (the weight may or may not be lowered: `permits()` reports the one confirmed).
    ///
    /// Cancel-safe: the request runs on the Limiter's runtime, so dropping this future does not
    /// cut it; when the store answers, `permits()` reports the weight the store holds, whether
    /// or not anyone still awaits. A repeated or late request never raises the stored weight.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::AcquireOptions;
    /// let limiter = clusterlimit::Limiter::connect("memory://shrink-doc").await?;
    /// let tokens = limiter.semaphore("tokens", 200_000).await?;
    /// let mut permit = tokens.acquire_with(AcquireOptions::new().permits(8_000)).await?;
    /// // ... the call is made; it used 5,000 tokens
    /// permit.shrink_to(5_000).await?;
    /// assert_eq!(permit.permits(), 5_000);
    /// # Ok(()) }
    /// ```
    pub async fn shrink_to(&mut self, permits: u32) -> Result<()> {
        let held = self.permits();
        check_weight(permits, held)?;
        if self.is_lost() {
            return Err(Error::SessionLost);
        }
        if permits == held {
            return Ok(());
        }
        let limiter = self.guard.limiter.clone();
        limiter.check_open()?;
        let (backend, weight) = (limiter.backend.clone(), self.permits.clone());
        let (name, id) = (self.guard.name.clone(), self.guard.id.clone());
        // Spawned: a dropped call still records what the store answered.
        let request = limiter.runtime.spawn(async move {
            let stored = backend.shrink_entry(&name, &id, permits).await?;
            weight.fetch_min(stored, Ordering::AcqRel);
            Ok(stored)
        });
        let result = match request.await {
            Ok(r) => r,
            // The runtime shut down: the Limiter is going away.
            Err(_) => Err(Error::Closed),
        };
        if matches!(result, Err(Error::SessionLost)) {
            self.lost.fire(); // the entry is gone: the store may give its weight to others
        }
        limiter.closed_or_result(result).map(|_| ())
    }
}

/// `InvalidArgument` unless `1 ≤ permits ≤ held`.
fn check_weight(permits: u32, held: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid(
            "permits must be at least 1 to shrink a permit (release it to free all of it)",
        ));
    }
    if permits > held {
        return Err(Error::invalid(format!(
            "permits {permits} is more than the {held} held: a permit can only be shrunk"
        )));
    }
    Ok(())
}
