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

/// Least time a check the wait starts gets to answer, past the deadline if need be: a wait
/// that may not wait (deadline now) is one check, and a store that takes a few ms to answer
/// it is busy, not down (a guarded wait would otherwise take the store-down answer, and fail
/// open would admit what nobody counted). A deadline is kept within 100 ms.
pub(crate) const CHECK_GRACE: Duration = Duration::from_millis(100);

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

/// Checks (each `check` gets the deadline, or [`CHECK_GRACE`] from its start if later, to
/// answer by it) until admitted, sleeping each denial's `retry_after` (at least
/// [`MIN_WAIT_STEP`]) while the next check still falls before `deadline` (`None`: no
/// deadline). `stop` is raced against the sleeps only. Bounded by the deadline (or by
/// admission): each round sleeps at least 1 ms.
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
        let answer = check(deadline.map(|d| d.max(Instant::now() + CHECK_GRACE))).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn denial(retry_after: Duration) -> Decision {
        Decision {
            allowed: false,
            limit: 1,
            remaining: 0,
            retry_after: Some(retry_after),
            reset_after: retry_after,
            slots: Default::default(),
        }
    }

    fn admission() -> Decision {
        Decision {
            allowed: true,
            limit: 1,
            remaining: 0,
            retry_after: None,
            reset_after: Duration::from_secs(1),
            slots: Default::default(),
        }
    }

    /// Denied twice, then admitted: the wait sleeps each denial's `retry_after`.
    #[tokio::test(start_paused = true)]
    async fn sleeps_each_retry_after_until_admitted() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let waited = until(None, std::future::pending(), |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(if n < 2 {
                    denial(Duration::from_millis(300))
                } else {
                    admission()
                })
            }
        })
        .await;
        assert!(matches!(waited, Ok(Waited::Admitted(d)) if d.allowed));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(started.elapsed(), Duration::from_millis(600));
    }

    /// A next chance past the deadline ends the wait at once with the denial; a denial of a few
    /// ns still sleeps at least 1 ms.
    #[tokio::test(start_paused = true)]
    async fn a_next_chance_past_the_deadline_is_denied_at_once() {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        let waited = until(Some(deadline), std::future::pending(), |_| async {
            Ok(denial(Duration::from_millis(101)))
        })
        .await;
        assert!(matches!(waited, Ok(Waited::Denied(d)) if !d.allowed));
        assert_eq!(started.elapsed(), Duration::ZERO);

        let calls = AtomicU32::new(0);
        let waited = until(
            Some(Instant::now() + Duration::from_millis(5)),
            std::future::pending(),
            |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Ok(denial(Duration::from_nanos(3))) }
            },
        )
        .await;
        assert!(matches!(waited, Ok(Waited::Denied(_))));
        // 1 ms steps within 5 ms: at most 6 checks, not a spin.
        assert!(calls.load(Ordering::SeqCst) <= 6, "{calls:?}");
    }

    /// A denial meaning never (the stored quota can not admit the cost) ends the wait.
    #[tokio::test(start_paused = true)]
    async fn a_cost_the_quota_never_admits_ends_the_wait() {
        let waited = until(None, std::future::pending(), |_| async {
            Ok(denial(Duration::MAX))
        })
        .await;
        assert!(matches!(waited, Ok(Waited::Never(d)) if d.never_admits()));
    }

    /// `stop` ends a sleeping wait; it is not raced against a check in flight.
    #[tokio::test(start_paused = true)]
    async fn stop_ends_the_wait_between_checks_only() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut tx = Some(tx);
        let calls = AtomicU32::new(0);
        let waited = until(
            None,
            async {
                let _ = rx.await;
            },
            |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                // The stop fires during the first check: the check still completes.
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
                async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(denial(Duration::from_secs(10)))
                }
            },
        )
        .await;
        assert!(matches!(waited, Ok(Waited::Stopped)), "{waited:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// An error of a check is the wait's error.
    #[tokio::test(start_paused = true)]
    async fn a_check_error_ends_the_wait() {
        let waited: Result<Waited> = until(None, std::future::pending(), |_| async {
            Err(crate::Error::Timeout)
        })
        .await;
        assert!(matches!(waited, Err(crate::Error::Timeout)));
    }
}
