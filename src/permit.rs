//! `Permit`: permits held until released, dropped, or lost.

use crate::adaptive::reporter::Held;
use crate::adaptive::window::Outcome;
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::lost::LostSignal;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod shrink;

/// Owns one queue entry: removes it when dropped unless disarmed by an explicit removal.
#[derive(Debug)]
pub(crate) struct EntryGuard {
    limiter: Arc<LimiterInner>,
    name: Arc<str>,
    id: String,
    /// The loss signal of the session the entry was written under, once the store answered
    /// the enqueue: a background removal stops when that session is gone.
    session: Option<LostSignal>,
    armed: bool,
}

impl EntryGuard {
    pub(crate) fn new(limiter: Arc<LimiterInner>, name: Arc<str>, id: String) -> Self {
        EntryGuard {
            limiter,
            name,
            id,
            session: None,
            armed: true,
        }
    }

    /// Records the session the entry was written under (the enqueue's loss signal).
    pub(crate) fn written_under(&mut self, session: LostSignal) {
        self.session = Some(session);
    }

    /// Leaves the entry to the enqueue task, which removes it once its request ends: the
    /// caller left before the store answered (see `Semaphore::enqueue_to_completion`).
    pub(crate) fn hand_to_enqueue(mut self) {
        self.armed = false;
    }

    /// Removes the entry now; on failure hands it to the background releaser and reports.
    /// Cancel-safe in effect: the guard stays armed until the store confirmed the removal, so
    /// if this future is dropped mid-request, `Drop` hands the entry to the releaser.
    pub(crate) async fn remove_now(mut self) -> Result<()> {
        let result = self.limiter.backend.remove(&self.name, &self.id).await;
        if result.is_ok() {
            self.armed = false;
        }
        // Err: still armed, so dropping `self` here queues the background removal.
        result
    }

    /// Removes the entry of a failed acquire and returns the acquire's error.
    ///
    /// The wait for the removal is bounded: at most [`FAILED_ENTRY_REMOVAL_WAIT`], and for a
    /// call with a deadline at most until [`TIMEOUT_OVERRUN`] past it, so that
    /// `acquire_timeout(d)` returns within `d` plus that overrun even when the store hangs. A
    /// removal that takes longer goes on in the background (`Drop` hands it to the releaser,
    /// which retries until it is confirmed or the session ends). On a working store the
    /// removal takes one request of a few milliseconds, so it is almost always done before the
    /// call returns. After `SessionLost` or `Closed` nothing is awaited: the session's entries
    /// go with it.
    pub(crate) async fn fail(mut self, cause: Error, deadline: Option<Instant>) -> Error {
        if matches!(cause, Error::SessionLost | Error::Closed) {
            // Still armed: the releaser sees at once that the session is gone (no request).
            return cause;
        }
        let mut until = Instant::now() + FAILED_ENTRY_REMOVAL_WAIT;
        if let Some(d) = deadline {
            until = until.min(d + TIMEOUT_OVERRUN);
        }
        let backend = self.limiter.backend.clone();
        let (name, id) = (self.name.clone(), self.id.clone());
        // Spawned on the Limiter's runtime, so the timer works whatever executor awaits us.
        let removal = self
            .limiter
            .runtime
            .spawn(async move { tokio::time::timeout_at(until, backend.remove(&name, &id)).await });
        let removed = match removal.await {
            Ok(Ok(Ok(()))) => true,
            Ok(Ok(Err(e))) => {
                tracing::debug!(error = %e, "removing a failed request's entry; retrying in the background");
                false
            }
            _ => {
                tracing::debug!("the store is slow to remove a failed request's entry; removing it in the background");
                false
            }
        };
        self.armed = !removed;
        cause
    }
}

/// How long a failed acquire without a deadline waits for the removal of its entry before
/// returning (then the removal goes on in the background).
pub(crate) const FAILED_ENTRY_REMOVAL_WAIT: Duration = Duration::from_secs(1);

/// How long past its deadline a timed acquire may wait for the removal of its entry: the
/// call's promise is to return within its timeout plus this.
pub(crate) const TIMEOUT_OVERRUN: Duration = Duration::from_millis(40);
// `acquire_timeout(d)` returns within d + 100 ms (docs/design.md, "Timing rules").
const _: () = assert!(TIMEOUT_OVERRUN.as_millis() < 100);
const _: () = assert!(TIMEOUT_OVERRUN.as_millis() < FAILED_ENTRY_REMOVAL_WAIT.as_millis());

impl Drop for EntryGuard {
    fn drop(&mut self) {
        if self.armed {
            self.limiter.releaser.remove_later(
                self.name.clone(),
                std::mem::take(&mut self.id),
                self.session.take(),
            );
        }
    }
}

/// Permits held in one semaphore. Released by [`release`](Permit::release) or, in the
/// background, when dropped; the session TTL frees them if the process dies.
///
/// A permit can be **lost** when its session may have ended (keepalives failed until the TTL
/// could have run out, the lease was revoked, the entry was deleted): from then on the store
/// may give the permits to someone else. Watch [`lost`](Permit::lost) and stop the guarded work
/// when it fires, and pass [`fencing_token`](Permit::fencing_token) to resources that can
/// reject stale holders.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// let limiter = clusterlimit::Limiter::connect("memory://permit-doc").await?;
/// let permit = limiter.semaphore("exports", 1).await?.acquire().await?;
/// let token = permit.fencing_token(); // stamp every write of the guarded work with it
/// # async fn export(_token: u64) {}
/// tokio::select! {
///     _ = export(token) => {}
///     _ = permit.lost() => { /* someone else may hold it now: stop writing */ }
/// }
/// permit.release().await?; // or drop it: released in the background
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a Permit releases it"]
pub struct Permit {
    guard: EntryGuard,
    token: u64,
    /// The weight the store holds, as last confirmed: lowered by [`shrink_to`](Permit::shrink_to)'s
    /// request when the store answers, even if that call was dropped meanwhile.
    permits: Arc<std::sync::atomic::AtomicU32>,
    lost: LostSignal,
    granted_at: std::time::Instant,
    /// An adaptive semaphore's permit: counted in flight, and its outcome reported when it goes.
    held: Option<Held>,
}

impl Permit {
    pub(crate) fn new(
        guard: EntryGuard,
        token: u64,
        permits: u32,
        lost: LostSignal,
        held: Option<Held>,
    ) -> Self {
        Permit {
            guard,
            token,
            permits: Arc::new(std::sync::atomic::AtomicU32::new(permits)),
            lost,
            granted_at: std::time::Instant::now(),
            held,
        }
    }

    /// How long ago the permits were granted: the latency of the work done under them, for
    /// [`Outcome::Success`] when the permit covers one call.
    pub fn held_for(&self) -> Duration {
        self.granted_at.elapsed()
    }

    /// Says what the work under this permit came to, reported when the permit goes (released,
    /// dropped or lost); the last call wins, and a permit nobody says anything of reports
    /// [`Outcome::Ignore`]. Only an adaptive semaphore
    /// ([`Limiter::adaptive_semaphore`](crate::Limiter::adaptive_semaphore)) uses outcomes;
    /// other semaphores ignore them.
    pub fn set_outcome(&mut self, outcome: Outcome) {
        if let Some(h) = &mut self.held {
            h.set(outcome);
        }
    }

    /// [`set_outcome`](Permit::set_outcome), then [`release`](Permit::release).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::adaptive::{Adaptive, Outcome};
    /// let limiter = clusterlimit::Limiter::connect("memory://release-with-doc").await?;
    /// let db = limiter.adaptive_semaphore("db", Adaptive::gradient().max(64)).await?;
    /// let permit = db.acquire().await?;
    /// # async fn query() -> Result<(), ()> { Ok(()) }
    /// let outcome = match query().await {
    ///     Ok(_) => Outcome::Success(permit.held_for()),
    ///     Err(_) => Outcome::Dropped, // the dependency refused or timed out
    /// };
    /// permit.release_with(outcome).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_with(mut self, outcome: Outcome) -> Result<()> {
        self.set_outcome(outcome);
        self.release().await
    }

    /// The loss signal, for the crate's own holders (the adaptive controller).
    pub(crate) fn lost_signal(&self) -> LostSignal {
        self.lost.clone()
    }

    /// Fencing token: strictly increasing across grants of one semaphore (the etcd key's create
    /// revision; the ZooKeeper node's sequence number; a counter on `memory://`). A resource that
    /// remembers the highest token it has seen can refuse a stale holder's late writes. It orders
    /// grants; it does not make N holders mutually exclusive.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Weight held: as acquired, or as lowered by [`shrink_to`](Permit::shrink_to).
    pub fn permits(&self) -> u32 {
        self.permits.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Name of the semaphore.
    pub fn semaphore(&self) -> &str {
        &self.guard.name
    }

    /// Completes when this permit can no longer be trusted. Fires no later than the moment the
    /// store could give the permits to someone else. Cancel-safe; may be awaited many times.
    pub async fn lost(&self) {
        self.lost.lost().await
    }

    /// Whether [`lost`](Permit::lost) has fired.
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// Releases the permits now and reports errors (the background releaser keeps trying if
    /// the store could not be reached). After [`Limiter::close`](crate::Limiter::close) it
    /// succeeds at once: closing released everything. Cancel-safe in effect: if dropped mid-way, the removal
    /// continues in the background.
    pub async fn release(self) -> Result<()> {
        let result = self.guard.remove_now().await;
        tracing::debug!(token = self.token, "released");
        result
    }
}
