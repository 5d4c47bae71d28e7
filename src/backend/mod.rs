//! The store interface. [`Limiter`](crate::limiter::Limiter) talks to stores only through [`Backend`].
//!
//! A backend stores, per semaphore, a capacity (with the `floor` of [`crate::queue`]) and a
//! queue of entries, each with a weight, an owner label and a store-assigned token that orders
//! the queue and serves as the fencing token. Whether an entry holds permits is decided by
//! [`crate::queue`] alone, so all backends mean the same thing. Entries belong to a session
//! (etcd lease, ZooKeeper session, memory session) and vanish with it, as do announcements
//! (one small value per Limiter and board, see [`Backend::announce`]).
//!
//! The generic layer validates input, applies timeouts, removes the entry of a cancelled or
//! failed acquire and releases dropped permits in the background; a backend only has to store.

use crate::error::Result;
use crate::lost::LostSignal;
use crate::stats::RequestStats;
use crate::status::Status;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod capacity;
mod config_setters;
mod due_queue;
pub mod etcd;
mod expiry;
pub(crate) mod fair_checks;
mod fair_record;
pub(crate) mod key_hash;
pub mod memory;
pub(crate) mod outage;
mod rate_forward;
mod rate_store;
pub(crate) mod reach;
pub mod redis;
mod request;
pub(crate) mod retry;
mod session_slot;
pub mod sharded;
mod start_once;
mod stop;
mod sweeper;
pub mod zookeeper;

pub(crate) mod waiters;
/// The trait macro `Backend` is written with, for backends outside the crate.
pub use async_trait::async_trait;
pub use rate_store::{Current, KeyOutcome, KeyWrite, RateStore, Versioned, WriteOutcome};
pub use request::{Enqueued, EntryRequest};
pub(crate) use session_slot::{SessionSlot, StoreSession};
pub(crate) use stop::Stop;
pub use waiters::{outcome, QueueView, WaitOutcome, Waiters};

/// Old name of [`WaitOutcome`]; using it warns (`clusterlimit::adaptive::Outcome` is what became
/// of the work done under a permit, another type).
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _ = clusterlimit::backend::Outcome::Granted;
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `WaitOutcome`")]
pub type Outcome = WaitOutcome;

/// Locks ignoring poison: backend state is updated in single steps that a panic cannot leave
/// half-done, and a poisoned lock must never turn into a panic of ours.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the default announcement methods of [`Backend`] answer.
fn no_boards(board: &str) -> crate::error::Error {
    crate::error::Error::invalid(format!(
        "this store keeps no announcements (board {board:?})"
    ))
}

/// Where a backend hands an entry of its own live session that no request of the Limiter owns
/// any more (a write the store applied late, after its request had finished), as (semaphore,
/// request id, the session's loss signal). The Limiter removes it like a dropped permit: see
/// `release.rs`.
pub type OrphanSink = std::sync::Arc<dyn Fn(&str, &str, LostSignal) + Send + Sync>;

/// A store that keeps semaphores. Implemented by `memory://`, `etcd://` and `zk://`.
///
/// Every method must be bounded in time (a hung store yields an error, never a hang), except
/// [`wait_outcome`](Backend::wait_outcome), which waits as long as the session lives.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// Creates the semaphore with `capacity` if absent, or opens it. Returns the stored capacity.
    /// `Some(c)` that differs from the stored one → `CapacityMismatch`; `None` and absent →
    /// `NotFound`.
    async fn ensure_semaphore(&self, name: &str, capacity: Option<u32>) -> Result<u32>;

    /// Whether this store keeps fair semaphores (see [`crate::fair`]): when false (the
    /// default), the Limiter refuses flows, classes and weights before sending anything, and
    /// [`ensure_fair_semaphore`](Backend::ensure_fair_semaphore) refuses.
    fn keeps_fair_semaphores(&self) -> bool {
        false
    }

    /// Creates the fair semaphore with `capacity` and `classes` if absent, or opens it, and
    /// returns the stored capacity: as [`ensure_semaphore`](Backend::ensure_semaphore), and also
    /// `InvalidArgument` when the name is a plain semaphore, or the stored classes differ from
    /// `classes` (given: it names both tables). Entries of a fair semaphore hold when the store
    /// has **marked** them granted; the store marks, in one atomic step with each change of the
    /// queue or the capacity, the entries [`crate::fair::next_grants_named`] returns, and
    /// reports the marks through [`QueueView::marked`]. The default refuses.
    async fn ensure_fair_semaphore(
        &self,
        name: &str,
        _capacity: Option<u32>,
        _classes: Option<&crate::fair::Classes>,
    ) -> Result<u32> {
        Err(crate::error::Error::invalid(format!(
            "this store keeps no fair semaphores yet (semaphore {name:?}); memory://, etcd, ZooKeeper and Redis do"
        )))
    }

    /// Appends an entry to the queue in one store request when possible and tells whether it
    /// already holds. A weight above the current capacity → `InvalidArgument` (entry removed).
    /// Idempotent for the same `req.id`.
    async fn enqueue(&self, req: &EntryRequest) -> Result<Enqueued>;

    /// Waits until the fate of the enqueued entry is decided and returns it (see [`WaitOutcome`];
    /// [`Waiters`] does the deciding from any [`QueueView`]). `Err` only when the backend can no
    /// longer tell (its session or watch ended). The caller maps the outcome to the acquire's
    /// result and also stops waiting when `enq.lost` fires, so a backend need not watch it.
    /// Cancel-safe: dropping the future leaves the entry queued (the caller removes it).
    async fn wait_outcome(&self, req: &EntryRequest, enq: &Enqueued) -> Result<WaitOutcome>;

    /// Removes an entry (release or cancel). Removing an absent entry succeeds.
    async fn remove(&self, name: &str, id: &str) -> Result<()>;

    /// Lowers the weight of entry `id` of semaphore `name` (a holder) to `permits` when it is
    /// above that, in one atomic step with whatever the freed weight grants (the queue rule
    /// decides, as after a removal; the entry keeps its token), and tells only the waiters it
    /// decides. Returns the weight stored afterwards: `min(permits, stored)`, so a repeated or
    /// late request never raises it. An absent entry → `SessionLost` (it went with its
    /// session). The default refuses with `InvalidArgument` (a store that cannot lower a
    /// held weight).
    async fn shrink_entry(&self, name: &str, _id: &str, _permits: u32) -> Result<u32> {
        Err(crate::error::Error::invalid(format!(
            "this store cannot lower a held permit's weight (semaphore {name:?}); release it and acquire the lower weight instead"
        )))
    }

    /// Reads the semaphore's state.
    async fn status(&self, name: &str) -> Result<Status>;

    /// Changes the capacity for every client; shrinking keeps current holders.
    async fn set_capacity(&self, name: &str, capacity: u32) -> Result<()>;

    /// Names of all semaphores, sorted.
    async fn list(&self) -> Result<Vec<String>>;

    /// Requests sent so far.
    fn stats(&self) -> RequestStats;

    /// The session TTL: how long after the last keepalive the store may end a session (for
    /// `memory://`, whose sessions never expire, the TTL it was configured with).
    fn session_ttl(&self) -> Duration;

    /// The loss signal of the current session, or `None` if there is no live one.
    async fn session_signal(&self) -> Option<LostSignal>;

    /// Ends the session `session` belongs to (the signal of a session or of one of its entries,
    /// see [`LostSignal::same_session`]) if it is still the current one; otherwise does nothing.
    /// Ending means: its entries, waits and permits are lost at once (`lost()` fires, waits fail
    /// with `SessionLost`), it is no longer kept alive, and the store is asked to end it now
    /// (etcd: the lease is revoked; ZooKeeper: the session is closed). If that request fails,
    /// the store still ends it within one TTL, since nothing keeps it alive. Later calls start a
    /// new session. Bounded in time; never fails.
    ///
    /// Used when an entry's removal cannot be confirmed for long (see `release.rs`): ending its
    /// session is the one way left to free the entry for certain.
    async fn end_session(&self, session: &LostSignal);

    /// Puts `value` on `board` under `id`, replacing the value there, bound to the current
    /// session (started if there is none, as [`enqueue`](Backend::enqueue) does): the store
    /// drops it when the session ends (close, expiry, loss). A later session does not carry it
    /// over. `board` is validated like a semaphore name, `id` is the Limiter's (hex), `value`
    /// at most [`MAX_ANNOUNCEMENT_BYTES`](crate::validate::MAX_ANNOUNCEMENT_BYTES).
    ///
    /// The default refuses with `InvalidArgument` (a backend that keeps no announcements).
    async fn announce(&self, board: &str, _id: &str, _value: &[u8]) -> Result<()> {
        Err(no_boards(board))
    }

    /// Every value on `board` now as `(id, value)`, sorted by id; an unknown board is empty.
    async fn announcements(&self, board: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Err(no_boards(board))
    }

    /// Removes the value of `id` from `board`; an absent one counts as removed.
    async fn withdraw(&self, board: &str, _id: &str) -> Result<()> {
        Err(no_boards(board))
    }

    /// The store's servers as it reports them now (see [`Limiter::store_members`](crate::limiter::Limiter::store_members));
    /// empty by default: a backend that cannot tell says nothing.
    async fn members(&self) -> Result<Vec<crate::members::StoreMember>> {
        Ok(Vec::new())
    }

    /// Called once by the Limiter with the place to hand orphaned entries to. A backend whose
    /// store can apply a write after the request that sent it has finished (etcd: a request
    /// buffered in a hung member) keeps it and reports every such entry it sees; the default
    /// ignores it.
    fn set_orphan_sink(&self, _sink: OrphanSink) {}

    /// The backend's rate-limit storage, if it keeps rate limits (the default: it does not,
    /// and rate-limit calls fail with `InvalidArgument` saying so).
    fn rate_store(&self) -> Option<&dyn RateStore> {
        None
    }

    /// Ends the session: every entry of it is removed at once, waits fail, permits are lost.
    /// From then on the backend is stopped: it starts no new session, its retries and
    /// background tasks end, and calls still in flight may fail with any error (the Limiter,
    /// the one owner of "closed", reports them as `Closed`; it calls nothing else afterwards
    /// but `remove`, which must then succeed at once).
    async fn close(&self) -> Result<()>;

    /// Best-effort, non-blocking version of [`close`](Backend::close) for `Drop`: must not panic
    /// and must work without a runtime (it may do nothing but stop background tasks then).
    fn shutdown(&self);
}
