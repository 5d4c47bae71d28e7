//! [`Balance`]: a key as a charge, refund or settlement leaves it, with its debt.

use super::cell::Answer;
use serde::Serialize;
use std::time::Duration;

/// A rate-limit key after a charge, a refund or a settlement
/// ([`RateLimit::charge`](crate::RateLimit::charge),
/// [`Reservation::settle`](crate::Reservation::settle)), or as it stands
/// ([`RateLimit::balance`](crate::RateLimit::balance)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use clusterlimit::{Limiter, Quota};
/// let limiter = Limiter::connect("memory://balance-doc").await?;
/// let tokens = limiter.rate_limit("tokens", Quota::per_day(1000)).await?;
/// let b = tokens.charge("tenant-a", 1300).await?; // the work cost more than the key had
/// assert_eq!((b.remaining, b.debt), (0, 300));
/// assert!(b.retry_after.is_some()); // checks are denied until the debt is paid off
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Balance {
    /// The most a key can take at once: GCRA's `burst`, a window's `limit`.
    pub limit: u64,
    /// How much a check could take right now.
    pub remaining: u64,
    /// What the key owes beyond empty (0: none): charges it could not cover, paid off by time
    /// before any check is admitted again (GCRA: one unit per emission interval; windows: the
    /// limit per window, carried from window to window).
    pub debt: u64,
    /// `None` when a check of 1 would be admitted now; else how long until it would be.
    pub retry_after: Option<Duration>,
    /// How long until the key is back to full (nothing owed, nothing consumed).
    pub reset_after: Duration,
}

impl Balance {
    pub(crate) fn of(answer: Answer) -> Balance {
        let d = answer.decision;
        Balance {
            limit: d.limit,
            remaining: d.remaining,
            debt: answer.debt,
            retry_after: d.retry_after,
            reset_after: d.reset_after,
        }
    }
}
