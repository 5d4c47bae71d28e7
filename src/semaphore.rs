//! `Semaphore`: acquire permits from one named semaphore.

pub use crate::acquire_options::AcquireOptions;
use crate::admission::Slot;
use crate::backend::{Enqueued, EntryRequest, WaitOutcome};
use crate::error::{Error, Result};
use crate::limiter_inner::LimiterInner;
use crate::lost::LostSignal;
use crate::permit::{EntryGuard, Permit};
use crate::spans;
use crate::status::Status;
use crate::validate;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

/// A named cluster-wide counting semaphore, opened through [`Limiter::semaphore`](crate::Limiter::semaphore).
///
/// Cheap to clone, `Send + Sync`. Grants are strictly FIFO across the cluster: a request is
/// granted only after every request made before it, and a weighted request is granted whole.
///
/// Cancel-safety of every `acquire*` method: dropping the future (a `select!`, a timeout)
/// removes its queue entry — at once if it can, else in the background, and at the latest when
/// the session ends — so a cancelled wait never holds or blocks permits. A permit granted in the
/// store just as the future is dropped is released the same way.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use std::time::Duration;
/// let limiter = clusterlimit::Limiter::connect("memory://semaphore-doc").await?;
/// let gpus = limiter.semaphore("gpu-jobs", 2).await?;
/// let big = gpus.acquire_many(2).await?;                  // both, atomically
/// assert!(matches!(gpus.try_acquire().await, Err(clusterlimit::Error::NoPermits)));
/// let late = gpus.acquire_timeout(Duration::from_millis(10)).await;
/// assert!(matches!(late, Err(clusterlimit::Error::Timeout))); // and its queue entry is gone
/// big.release().await?;
/// assert_eq!(gpus.status().await?.used, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    limiter: Arc<LimiterInner>,
    name: Arc<str>,
    /// Set for an adaptive semaphore: where its permits report their outcomes.
    adaptive: Option<Arc<crate::adaptive::adaptivity::Adaptivity>>,
    /// Set for a per-member semaphore: this Limiter counts as a member while a handle lives
    /// (held, never read: the last one's drop withdraws the membership).
    #[allow(dead_code)]
    per_member: Option<Arc<crate::per_member::membership::Membership>>,
}

/// The outcome of an acquire, for callers that must tell a full semaphore from a store that
/// does not answer (the tower layer).
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) result: Result<Permit>,
    /// Whether the store answered this acquire's enqueue. A `Timeout` after an answered
    /// enqueue means the semaphore stayed full; without one, that the store did not answer
    /// within the deadline. (The removal after a failure is no such proof: a backend may
    /// confirm the removal of an entry whose create is in doubt without asking the store.)
    // Read by the tower layer only.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) store_answered: bool,
}

impl Semaphore {
    pub(crate) fn new(limiter: Arc<LimiterInner>, name: &str) -> Self {
        Semaphore {
            limiter,
            name: name.into(),
            adaptive: None,
            per_member: None,
        }
    }

    /// A per-member semaphore's handle: this Limiter stays a member while it lives.
    pub(crate) fn per_member(
        limiter: Arc<LimiterInner>,
        name: &str,
        membership: Arc<crate::per_member::membership::Membership>,
    ) -> Self {
        Semaphore {
            per_member: Some(membership),
            ..Semaphore::new(limiter, name)
        }
    }

    /// An adaptive semaphore's handle: its permits report outcomes to `adaptive`.
    pub(crate) fn adaptive(
        limiter: Arc<LimiterInner>,
        name: &str,
        adaptive: Arc<crate::adaptive::adaptivity::Adaptivity>,
    ) -> Self {
        Semaphore {
            adaptive: Some(adaptive),
            ..Semaphore::new(limiter, name)
        }
    }

    /// The Limiter this handle belongs to.
    pub(crate) fn limiter(&self) -> &Arc<LimiterInner> {
        &self.limiter
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for one permit (FIFO). Uncontended on etcd: one store request.
    pub async fn acquire(&self) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new()).await
    }

    /// Waits for `permits` permits, granted all at once. `InvalidArgument` at once if `permits`
    /// is 0 or above the capacity.
    pub async fn acquire_many(&self, permits: u32) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new().permits(permits))
            .await
    }

    /// Like [`acquire`](Self::acquire) but gives up with `Error::Timeout` after `timeout`.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new().timeout(timeout))
            .await
    }

    /// Like [`acquire_many`](Self::acquire_many) with a timeout.
    pub async fn acquire_many_timeout(&self, permits: u32, timeout: Duration) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new().permits(permits).timeout(timeout))
            .await
    }

    /// One permit if it can be granted now, else `Error::NoPermits` (also when others wait
    /// ahead: FIFO). Costs one request when granted, two when not (enqueue, then remove).
    pub async fn try_acquire(&self) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new().no_wait()).await
    }

    /// `permits` permits if they can be granted now, else `Error::NoPermits`.
    pub async fn try_acquire_many(&self, permits: u32) -> Result<Permit> {
        self.acquire_with(AcquireOptions::new().permits(permits).no_wait())
            .await
    }

    /// The general form of every `acquire*` method.
    pub async fn acquire_with(&self, opts: AcquireOptions) -> Result<Permit> {
        let silent_is_error = opts.silent_store_is_error.then_some(opts.timeout).flatten();
        let acquired = self.acquire_with_report(opts).await;
        match (acquired.result, silent_is_error) {
            (Err(Error::Timeout), Some(timeout)) if !acquired.store_answered => Err(Error::store(
                format!("the store did not answer within {timeout:?}"),
            )),
            (result, _) => result,
        }
    }

    /// [`acquire_with`](Self::acquire_with), telling also whether the store answered.
    pub(crate) async fn acquire_with_report(&self, opts: AcquireOptions) -> Acquired {
        // The deadline starts before anything else, so the whole call keeps to it.
        let deadline = opts.timeout.map(|t| tokio::time::Instant::now() + t);
        let span = spans::acquire(&self.name, opts.permits, opts.wait);
        let acquired = match self.request(opts) {
            Ok(req) => {
                let acquiring = self.acquire_reporting(req, deadline);
                acquiring.instrument(span.clone()).await
            }
            // Nothing was sent: a caller's mistake or a closed Limiter, not the store's.
            Err(e) => Acquired {
                result: Err(e),
                store_answered: true,
            },
        };
        spans::granted(&span, &acquired.result);
        acquired
    }

    /// Validates the options into the request sent to the store.
    fn request(&self, opts: AcquireOptions) -> Result<EntryRequest> {
        validate::permits(opts.permits)?;
        let owner = opts.owner.unwrap_or_else(|| self.limiter.owner.clone());
        validate::owner(&owner)?;
        if let Some(tag) = &opts.fair {
            tag.check()?;
            if !self.limiter.backend.keeps_fair_semaphores() {
                return Err(Error::invalid(format!(
                    "flows, classes and weights need a fair semaphore, and this store keeps \
                     none yet (semaphore {:?}); memory://, etcd, ZooKeeper and Redis do",
                    self.name
                )));
            }
        }
        self.limiter.check_open()?;
        Ok(EntryRequest {
            name: self.name.to_string(),
            permits: opts.permits,
            owner,
            id: uuid::Uuid::new_v4().simple().to_string(),
            wait: opts.wait,
            fair: opts.fair,
        })
    }

    /// Enqueues `req` and waits for the grant until `deadline`.
    async fn acquire_reporting(
        &self,
        req: EntryRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Acquired {
        // At most a few requests of this Limiter at the store at once; refused here, before
        // anything is sent, when the deadline would pass first (src/admission.rs).
        let slot = match self.limiter.admission.enter(&self.name, deadline).await {
            Ok(slot) => slot,
            Err(refused) => {
                return Acquired {
                    result: Err(self.limiter.closed_or(Error::Timeout)),
                    // A busy store answers: its callers must not take it for a down one.
                    store_answered: refused.store_answering,
                };
            }
        };
        // Armed before the first request: if this future is dropped while the enqueue is in
        // flight, the entry (which may or may not exist) is still removed, in the background.
        let mut guard = EntryGuard::new(self.limiter.clone(), self.name.clone(), req.id.clone());
        let mut answered = false;
        let mut enqueued = false;
        let backend = &self.limiter.backend;
        let attempt = async {
            let enq = self.enqueue_to_completion(&req, slot).await;
            answered = true;
            let enq = enq?;
            enqueued = true;
            guard.written_under(enq.lost.clone());
            if !enq.granted {
                if !req.wait {
                    return Err(Error::NoPermits);
                }
                // The store's decision, or the session's loss, whichever comes first.
                let waited = backend.wait_outcome(&req, &enq);
                let outcome = tokio::select! {
                    o = waited.instrument(spans::queue_wait()) => o?,
                    _ = enq.lost.lost() => WaitOutcome::Gone,
                };
                outcome.into_result(&req, &enq.lost)?;
            }
            Ok(enq)
        };
        let outcome = match deadline {
            None => attempt.await,
            Some(d) => tokio::time::timeout_at(d, attempt)
                .await
                .unwrap_or(Err(Error::Timeout)),
        };
        match outcome {
            Ok(enq) => {
                tracing::debug!(semaphore = %self.name, token = enq.token, permits = req.permits, "acquired");
                let held = self.adaptive.as_ref().map(|a| a.granted(req.permits));
                Acquired {
                    result: Ok(Permit::new(guard, enq.token, req.permits, enq.lost, held)),
                    store_answered: true,
                }
            }
            // Left before the enqueue answered: the enqueue task removes the entry, one
            // request, so the call returns at its deadline and the store sees one removal.
            Err(e) if !answered => {
                guard.hand_to_enqueue();
                Acquired {
                    result: Err(self.limiter.closed_or(e)),
                    store_answered: false,
                }
            }
            // On every other failure the entry is removed before returning (within the
            // deadline's bound; else in the background), so a caller that got Timeout or
            // NoPermits blocks nobody.
            Err(e) => Acquired {
                result: Err(self.limiter.closed_or(guard.fail(e, deadline).await)),
                store_answered: enqueued,
            },
        }
    }

    /// Sends the enqueue in a task of its own, holding `slot` (this acquire's place at the
    /// store) until the task ends. If the caller is gone before the store answered (timed out,
    /// dropped), the task stops retrying and removes the entry, which may or may not exist:
    /// one request while it still holds the slot, else the releaser's. An attempt the store
    /// applies after its removal (a request buffered by a hung member, or one whose
    /// client-side attempt timed out) is found by the backend as an entry of the live session
    /// that no request owns, and removed the same way.
    async fn enqueue_to_completion(&self, req: &EntryRequest, slot: Slot) -> Result<Enqueued> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let limiter = self.limiter.clone();
        let name = self.name.clone();
        let req = req.clone();
        // Opened here, so that the request sent from the task is a child of this acquire.
        let span = spans::store_request("enqueue");
        self.limiter.runtime.spawn(async move {
            let _slot = slot;
            let mut tx = tx;
            let started = tokio::time::Instant::now();
            // Once the caller is gone, retrying the enqueue only writes an entry nobody wants
            // (and may write it again after its removal): stop.
            let result = tokio::select! {
                r = spans::timed(span, limiter.backend.enqueue(&req)) => Some(r),
                _ = tx.closed() => None,
            };
            if let Some(Ok(_)) = &result {
                limiter.admission.answered(started.elapsed());
            }
            let unanswered = match result {
                Some(r) => tx.send(r).err(),
                None => Some(Err(Error::Timeout)),
            };
            if let Some(unanswered) = unanswered {
                let session = unanswered.ok().map(|enq| enq.lost);
                if session.as_ref().is_some_and(LostSignal::is_lost) {
                    return; // gone with its session
                }
                let removal = limiter.backend.remove(&name, &req.id);
                let removed = tokio::time::timeout(limiter.request_timeout, removal).await;
                if !matches!(removed, Ok(Ok(()))) {
                    limiter.releaser.remove_later(name, req.id, session);
                }
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(Error::store("enqueue task ended without an answer")))
    }

    /// Reads capacity, usage, holders and waiters from the store. Cancel-safe.
    pub async fn status(&self) -> Result<Status> {
        self.limiter.check_open()?;
        let status = self.limiter.backend.status(&self.name).await;
        self.limiter.closed_or_result(status)
    }

    /// Changes the capacity for every client at once. Shrinking never revokes current holders;
    /// new grants wait until usage fits. Cancel-safe (the change is atomic: made or not).
    pub async fn set_capacity(&self, capacity: u32) -> Result<()> {
        validate::capacity(capacity)?;
        self.limiter.check_open()?;
        let set = self
            .limiter
            .backend
            .set_capacity(&self.name, capacity)
            .await;
        self.limiter.closed_or_result(set)
    }
}
