//! Admission of one request: take the permit, or decide what a missing permit means.

use super::error::LimitError;
use super::fallback::Fallback;
use crate::error::Error;
use crate::fair::FairTag;
use crate::permit::{Permit, TIMEOUT_OVERRUN};
use crate::semaphore::{AcquireOptions, Acquired, Semaphore};
use crate::store_down::breaker::{Failure, StoreHealth};
use crate::store_down::policy::StoreDownPolicy;
use std::convert::Infallible;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long past its own deadline an acquire may take to come back before the request gets
/// an answer anyway. The acquire itself returns within [`TIMEOUT_OVERRUN`] of its deadline
/// (the removal of its queue entry goes on in the background if the store is slow), so only a
/// starved runtime runs into this; the request then counts as timed out, and the store's
/// health is left as it was (nothing was learned about it).
pub(crate) const ANSWER_GRACE: Duration = Duration::from_millis(90);
const _: () = assert!(TIMEOUT_OVERRUN.as_millis() < ANSWER_GRACE.as_millis());

/// Everything a layer decided, shared by the services it made.
#[derive(Debug)]
pub(crate) struct Policy {
    pub(crate) semaphore: Semaphore,
    pub(crate) permits: u32,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) on_timeout: Fallback,
    pub(crate) on_store_error: StoreDownPolicy,
    pub(crate) retry_after: Duration,
    pub(crate) health: StoreHealth,
}

/// The outcome for one request: run it holding a permit (`Some`) or without one (fail-open,
/// `None`), or reject it.
pub(crate) type Admission = Result<Option<Permit>, LimitError<Infallible>>;

impl Policy {
    /// Takes the permit for one request, in the flow, class and weight of `tag` if it has one
    /// (a fair semaphore's).
    ///
    /// The acquire runs in a task of its own, so a request never waits past the acquire's
    /// deadline plus [`ANSWER_GRACE`], while the task finishes by itself (a permit granted
    /// late is released). A timeout counts as a full semaphore when the store answered the
    /// acquire's enqueue, and as a store that does not answer otherwise (so an acquire timeout
    /// shorter than one store round trip reads as a store that is down). Dropping this future before the deadline stops the wait, which removes the
    /// queue entry.
    pub(crate) async fn admit(&self, tag: Option<FairTag>) -> Admission {
        if !self.health.may_try() {
            // Not asked, so nothing learned: the health stays as it is.
            return self.store_fallback(Error::store(
                "the store failed on an earlier request and is not asked again yet",
            ));
        }
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt,
            Err(_) => {
                return Err(LimitError::Limiter(Error::invalid(
                    "clusterlimit needs a Tokio runtime",
                )))
            }
        };
        let mut opts = AcquireOptions::new().permits(self.permits);
        if let Some(tag) = tag {
            opts = opts.flow(tag.flow).weight(tag.weight);
            if let Some(class) = tag.class {
                opts = opts.class(class);
            }
        }
        if let Some(t) = self.acquire_timeout {
            opts = opts.timeout(t);
        }
        let deadline = self.acquire_timeout.map(|t| Instant::now() + t);
        let sem = self.semaphore.clone();
        let mut task = AbortBefore {
            task: runtime.spawn(async move { sem.acquire_with_report(opts).await }),
            deadline,
        };
        let joined = match deadline {
            None => (&mut task.task).await,
            Some(d) => match tokio::time::timeout_at(d + ANSWER_GRACE, &mut task.task).await {
                Ok(joined) => joined,
                // The acquire keeps to its own deadline, so only a starved runtime gets here.
                Err(_) => return self.timed_out(),
            },
        };
        let acquired = match joined {
            Ok(acquired) => acquired,
            Err(join) => {
                return Err(LimitError::Limiter(Error::store(format!(
                    "the acquire task ended without an answer: {join}"
                ))))
            }
        };
        match acquired.result {
            Ok(permit) => {
                self.health.up(self.semaphore.name());
                Ok(Some(permit))
            }
            Err(Error::Timeout) if acquired.store_answered => {
                // The store answered, so it works: the semaphore stayed full.
                self.health.up(self.semaphore.name());
                self.timed_out()
            }
            Err(Error::Timeout) => self.store_down(
                Error::store("no answer from the store within the acquire timeout"),
                Failure::Slow,
            ),
            Err(e @ (Error::Store(_) | Error::SessionLost)) => self.store_down(e, Failure::Error),
            Err(e) => Err(LimitError::Limiter(e)),
        }
    }

    fn timed_out(&self) -> Admission {
        match self.on_timeout {
            Fallback::FailOpen => {
                tracing::debug!(semaphore = %self.semaphore.name(), "no permit in time; running the request anyway (fail-open)");
                Ok(None)
            }
            Fallback::Reject => Err(LimitError::Timeout {
                semaphore: self.semaphore.name().to_string(),
                waited: self.acquire_timeout.unwrap_or_default(),
                retry_after: self.retry_after,
            }),
        }
    }

    /// The store failed or did not answer for this request.
    fn store_down(&self, cause: Error, kind: Failure) -> Admission {
        self.health.failed(self.semaphore.name(), &cause, kind);
        self.store_fallback(cause)
    }

    fn store_fallback(&self, cause: Error) -> Admission {
        match self.on_store_error {
            StoreDownPolicy::FailOpen => {
                tracing::debug!(semaphore = %self.semaphore.name(), error = %cause, "store unavailable; running the request without a permit (fail-open)");
                Ok(None)
            }
            // Fail closed (`build` refuses a local share for permits).
            _ => Err(LimitError::StoreUnavailable {
                semaphore: self.semaphore.name().to_string(),
                source: cause,
                retry_after: self.retry_after,
            }),
        }
    }
}

/// The acquire task: aborted when dropped before its deadline (the request was cancelled
/// while waiting: aborting drops the wait, which removes its queue entry), left to finish after
/// it (it is then cleaning up by itself, which must not be cut short).
struct AbortBefore {
    task: JoinHandle<Acquired>,
    deadline: Option<Instant>,
}

/// Margin before the deadline within which a dropped request no longer aborts its acquire:
/// the acquire's own timeout may be firing.
const ABORT_MARGIN: Duration = Duration::from_millis(20);

impl Drop for AbortBefore {
    fn drop(&mut self) {
        let waiting = match self.deadline {
            None => true,
            Some(d) => Instant::now() + ABORT_MARGIN < d,
        };
        if waiting {
            self.task.abort();
        }
    }
}
