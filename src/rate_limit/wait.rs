//! The one wait of a rate limit: check, and after a denial sleep its `retry_after`, until
//! admitted or the next chance lies past the deadline. [`RateLimit::wait_until`] and
//! [`StoreDownGuard::wait_until`](crate::StoreDownGuard::wait_until) are this loop over a
//! plain or a guarded check; the tower layer's wait mode, `clusterlimit rate wait` and the
//! sidecar's `/wait` route use those.

use crate::error::Result;
use crate::rate::Decision;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Shortest pause between the checks of a wait (a denial's `retry_after` can be a few ns).
const MIN_WAIT_STEP: Duration = Duration::from_millis(1);

/// How a wait ended. Nothing was consumed unless it is `Admitted` (a denial of a quota with a
/// ban starts the ban, as any denial does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waited<D = Decision> {
    /// Admitted: the answer that consumed the cost.
    Admitted(D),
    /// Not admitted by the deadline: the last denial, whose next chance lies past it. Also a
    /// final answer that waiting cannot change: a store-down fallback's (the store does not
    /// come back by waiting), or a denial that names no time to retry.
    Denied(D),
    /// The quota now stored can never admit the cost at once (another client lowered it after
    /// the cost was checked): the denial that says so ([`Decision::never_admits`]).
    Never(D),
    /// The `stop` future given to the wait ended it between two checks (never during one, so
    /// a stopped wait consumed nothing).
    Stopped,
}

impl<D> Waited<D> {
    /// The answer that ended the wait (`None` when stopped).
    pub fn into_answer(self) -> Option<D> {
        match self {
            Waited::Admitted(d) | Waited::Denied(d) | Waited::Never(d) => Some(d),
            Waited::Stopped => None,
        }
    }
}

/// One answer of a check a wait repeats: a [`Decision`], or a guarded one.
pub(crate) trait WaitAnswer {
    /// The decision in the answer.
    fn decision(&self) -> &Decision;
    /// Whether waiting cannot change it (a store-down fallback's answer).
    fn is_final(&self) -> bool {
        false
    }
}

impl WaitAnswer for Decision {
    fn decision(&self) -> &Decision {
        self
    }
}

/// Checks (each `check` gets the deadline, to answer by it) until admitted, sleeping each
/// denial's `retry_after` (at least [`MIN_WAIT_STEP`]) while the next check still falls
/// before `deadline` (`None`: no deadline). `stop` is raced against the sleeps only.
/// Bounded by the deadline (or by admission): each round sleeps at least 1 ms.
pub(crate) async fn until<A, C, F>(
    deadline: Option<Instant>,
    stop: impl Future<Output = ()>,
    mut check: C,
) -> Result<Waited<A>>
where
    A: WaitAnswer,
    C: FnMut(Option<Instant>) -> F,
    F: Future<Output = Result<A>>,
{
    let mut stop = std::pin::pin!(stop);
    loop {
        let answer = check(deadline).await?;
        let d = answer.decision();
        if d.allowed {
            return Ok(Waited::Admitted(answer));
        }
        if d.never_admits() {
            return Ok(Waited::Never(answer));
        }
        let Some(retry_after) = d.retry_after.filter(|_| !answer.is_final()) else {
            return Ok(Waited::Denied(answer));
        };
        let Some(wake) = Instant::now().checked_add(retry_after.max(MIN_WAIT_STEP)) else {
            return Ok(Waited::Denied(answer));
        };
        if deadline.is_some_and(|dl| wake > dl) {
            return Ok(Waited::Denied(answer));
        }
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = &mut stop => return Ok(Waited::Stopped),
        }
    }
}
