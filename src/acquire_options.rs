//! How one acquire asks: weight, deadline, owner label, wait or not, and on a fair semaphore its
//! flow, class and weight.

use crate::fair::FairTag;
use std::time::Duration;

/// How to acquire: weight, deadline, owner label, wait or not. Used by [`Semaphore::acquire_with`](crate::Semaphore::acquire_with).
///
/// ```
/// use clusterlimit::AcquireOptions;
/// use std::time::Duration;
/// let opts = AcquireOptions::new().permits(2).timeout(Duration::from_secs(5)).owner("job-42");
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct AcquireOptions {
    pub(crate) permits: u32,
    pub(crate) timeout: Option<Duration>,
    pub(crate) owner: Option<String>,
    pub(crate) wait: bool,
    pub(crate) silent_store_is_error: bool,
    pub(crate) fair: Option<FairTag>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            permits: 1,
            timeout: None,
            owner: None,
            wait: true,
            silent_store_is_error: false,
            fair: None,
        }
    }
}

impl AcquireOptions {
    /// One permit, waiting as long as needed, with the Limiter's owner label.
    pub fn new() -> Self {
        Self::default()
    }
    /// Weight to acquire (granted atomically).
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }
    /// Give up with `Error::Timeout` after this long (the whole call, store requests included).
    /// The call returns within the timeout + 40 ms even when the store hangs; the queue entry is
    /// removed before it returns when the store confirms that in time (one more request, a few
    /// milliseconds), else in the background.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Owner label for this permit instead of the Limiter's.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
    /// Do not wait: `Error::NoPermits` unless granted at once.
    pub fn no_wait(mut self) -> Self {
        self.wait = false;
        self
    }
    /// When the timeout passes before the store answered the enqueue at all, fail with
    /// `Error::Store` ("the store did not answer within …") instead of `Error::Timeout`, for
    /// callers that treat a full semaphore and a silent store differently (the sidecar answers
    /// 429 and 503, `clusterlimit run` exits 75 and 69). Same bound, same cleanup.
    pub fn silent_store_is_error(mut self) -> Self {
        self.silent_store_is_error = true;
        self
    }
    /// On a fair semaphore ([`Limiter::fair_semaphore`](crate::Limiter::fair_semaphore)): the
    /// flow (tenant, user, job family) this request belongs to. Flows share the capacity by
    /// weight and one flow's waiters never hold up another's for more than one grant; a
    /// request without a flow is in the flow `"default"`. `InvalidArgument` on a plain
    /// semaphore. See [`crate::fair`].
    pub fn flow(mut self, flow: impl Into<String>) -> Self {
        let tag = self.fair.take().unwrap_or_default();
        self.fair = Some(FairTag {
            flow: flow.into(),
            ..tag
        });
        self
    }
    /// On a fair semaphore: the class (priority level) by name, one of the semaphore's
    /// classes; without one, the first class.
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.fair = Some(self.fair.take().unwrap_or_default().class(class));
        self
    }
    /// On a fair semaphore: the weight of this request's flow (default 1), the share it gets
    /// beside other flows of its class while all wait. A flow's weight is that of its newest
    /// request.
    pub fn weight(mut self, weight: u32) -> Self {
        self.fair = Some(self.fair.take().unwrap_or_default().weight(weight));
        self
    }
}
