//! What every handle of one Limiter shares (its `Semaphore`s and `Permit`s hold it too): the
//! backend, the background releaser, the owner label, the runtime, and the one "closed" flag.

use crate::admission::Admission;
use crate::backend::Backend;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::rate::UnixNanos;
use crate::rate_limit::combine::Sender as WriteSender;
use crate::rate_limit::rates::Rates;
use crate::release::Releaser;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct LimiterInner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) releaser: Releaser,
    /// How many acquire requests may be at the store at once, and refusals past that.
    pub(crate) admission: Arc<Admission>,
    pub(crate) owner: String,
    /// This Limiter's id on announcement boards (`announce.rs`): unique per Limiter.
    pub(crate) id: String,
    /// The runtime the Limiter was made on: background work is spawned there, so calls made
    /// from outside a Tokio context cannot panic on a missing runtime.
    pub(crate) runtime: tokio::runtime::Handle,
    /// The rate limits' internals (known limits and key states, combined writes, joint
    /// calls, counts), owned by `rate_limit/`.
    pub(crate) rates: Rates,
    /// The clock rate limits read.
    pub(crate) clock: Clock,
    /// Bound on each store request; a rate-limit decision takes at most twice this.
    pub(crate) request_timeout: Duration,
    /// Whether hot keys are served from leases (`rate_limit/lease_book.rs`); off from the
    /// start of `close` (`rate_limit/lease_close.rs`).
    leases: AtomicBool,
    /// Whether hot keys are decided locally, reported every ~100 ms (the approximate mode,
    /// `rate_limit/approx_book.rs`); off from the start of `close`.
    approximate: AtomicBool,
    /// Adaptive semaphores open in this Limiter, by name (`adaptive/open.rs`).
    pub(crate) adaptive: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Weak<crate::adaptive::adaptivity::Adaptivity>>,
    >,
    /// Per-member semaphores open in this Limiter, by name (`per_member/open.rs`).
    pub(crate) per_member: std::sync::Mutex<
        std::collections::HashMap<
            String,
            std::sync::Weak<crate::per_member::membership::Membership>,
        >,
    >,
    closed: AtomicBool,
}

/// "Closed" has one owner, the Limiter: calls after [`Limiter::close`] are refused here, and a
/// call the close cut short reports `Closed` whatever its backend said (a backend only stops:
/// see `backend/stop.rs`).
impl LimiterInner {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        releaser: Releaser,
        owner: String,
        runtime: tokio::runtime::Handle,
    ) -> LimiterInner {
        LimiterInner {
            backend,
            releaser,
            admission: Arc::default(),
            owner,
            id: uuid::Uuid::new_v4().simple().to_string(),
            runtime,
            rates: Rates::default(),
            clock: Clock::system(),
            request_timeout: crate::timing::DEFAULT_REQUEST_TIMEOUT,
            leases: AtomicBool::new(false),
            approximate: AtomicBool::new(false),
            adaptive: Default::default(),
            per_member: Default::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// What the rate-limit write combiner sends requests with.
    pub(crate) fn write_sender(&self) -> WriteSender {
        WriteSender {
            backend: self.backend.clone(),
            runtime: self.runtime.clone(),
        }
    }

    /// Whether hot keys are served from leases now.
    pub(crate) fn leasing(&self) -> bool {
        self.leases.load(Ordering::Acquire)
    }

    /// Serves hot keys from leases (`on`) or not.
    pub(crate) fn set_leasing(&self, on: bool) {
        self.leases.store(on, Ordering::Release);
    }

    /// Whether hot keys are decided locally now (the approximate mode).
    pub(crate) fn approximating(&self) -> bool {
        self.approximate.load(Ordering::Acquire)
    }

    /// Decides hot keys locally (`on`) or not.
    pub(crate) fn set_approximating(&self, on: bool) {
        self.approximate.store(on, Ordering::Release);
    }

    /// This Limiter as a key's lease holder (`rate/lease.rs` shares a key fairly between
    /// holders): its id, hashed as a flow name.
    pub(crate) fn lease_holder(&self) -> crate::rate::FlowId {
        crate::rate::FlowId::of(&format!("lease:{}", self.id))
            .unwrap_or_else(|_| crate::rate::FlowId::anonymous())
    }

    /// Now on the rate-limit clock, in Unix nanoseconds.
    pub(crate) fn now_ns(&self) -> UnixNanos {
        self.clock.unix_ns()
    }

    /// Marks the Limiter closed; true if it was already.
    pub(crate) fn mark_closed(&self) -> bool {
        self.closed.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// `e`, or `Closed` if the Limiter was closed meanwhile (the close is why the call failed).
    pub(crate) fn closed_or(&self, e: Error) -> Error {
        if self.is_closed() {
            Error::Closed
        } else {
            e
        }
    }

    /// A backend call's result, with its error passed through [`closed_or`](Self::closed_or).
    pub(crate) fn closed_or_result<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| self.closed_or(e))
    }
}

impl Drop for LimiterInner {
    // Nothing can use the session any more: end it so its permits come back now rather than
    // after the TTL. Best effort; never panics.
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            self.backend.shutdown();
        }
    }
}
