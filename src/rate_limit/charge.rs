//! Charges and refunds after the fact on a [`RateLimit`]: [`charge`](RateLimit::charge),
//! [`refund`](RateLimit::refund), and [`balance`](RateLimit::balance) to look at a key's debt.
//! What they mean is `rate::adjust`; they travel in the key's batch like checks.

use super::balance::Balance;
use super::batch;
use super::handle::{validate_key, RateLimit};
use crate::error::{Error, Result};
use crate::rate::{Adjustment, UnixNanos, MAX_RATE};

/// The most one charge, refund or settlement may move a key by: a billion units (a GCRA
/// debt of that many intervals lasts longer than anyone waits for).
pub const MAX_CHARGE: u64 = MAX_RATE;

impl RateLimit {
    /// Charges `cost` to `key` after the fact, whatever the key holds: for work whose cost is
    /// known only once it is done (tokens an LLM produced, bytes sent). Past what the key has
    /// left, the key goes into **debt**: checks are denied, with a `retry_after` that counts
    /// the debt, until time has paid it off (GCRA: the key's arrival time moves by the whole
    /// cost; windows: the count passes the limit and what is over is carried into the next
    /// window, and on). A charge starts no ban and counts toward no flow's share.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Limiter, Quota};
    /// let limiter = Limiter::connect("memory://charge-doc").await?;
    /// let tokens = limiter.rate_limit("tokens", Quota::per_day(10_000)).await?;
    /// assert!(tokens.check("tenant-a").await?.allowed); // admitted; its cost is unknown yet
    /// let b = tokens.charge("tenant-a", 12_000).await?; // it used 12,000 tokens
    /// assert_eq!(b.debt, 2_001);
    /// assert!(!tokens.check("tenant-a").await?.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// One store write, shared with the key's concurrent checks; a charge of 0 writes nothing.
    /// It is applied even if the returned future is dropped once polled. A GCRA debt that
    /// would last past the year 2554 (a billion units on a quota of 100 per hour) is kept as
    /// lasting until then: `debt` then says less than was charged, and the key is denied all
    /// the same.
    ///
    /// Errors: `InvalidArgument` for a bad key or a cost above [`MAX_CHARGE`]; `NotFound` if
    /// the limit was deleted; `Store` if the store fails (the charge may or may not have
    /// applied when the store did not answer in time).
    pub async fn charge(&self, key: &str, cost: u64) -> Result<Balance> {
        self.adjust(key, cost, Adjustment::Charge(cost)).await
    }

    /// Gives `amount` back to `key`: the reverse of a charge or of an admitted check, for work
    /// that cost less than it took (or never ran). Never past a full key; GCRA gives back
    /// exactly what a charge of that much less would have left, a window gives back only
    /// from the window now counting (what an earlier window took is gone with it: use
    /// [`Reservation::settle`](crate::Reservation::settle), which knows when it was taken).
    ///
    /// Other Limiters see what comes back at their next write of the key, or within a second
    /// of checks (as a [`reset`](Self::reset)): until then one may still deny from the debt it
    /// saw last.
    ///
    /// Errors as [`charge`](Self::charge).
    pub async fn refund(&self, key: &str, amount: u64) -> Result<Balance> {
        let taken_at = self.inner().now_ns();
        let back = Adjustment::Refund {
            amount,
            taken_at,
            held_until: UnixNanos::MAX,
            seen: Default::default(),
        };
        self.adjust(key, amount, back).await
    }

    /// `key` as it stands: what a check could take, and what it owes. A peek: it writes
    /// nothing (it reads the key when this Limiter has not seen it within a second).
    pub async fn balance(&self, key: &str) -> Result<Balance> {
        self.adjust(key, 0, Adjustment::Charge(0)).await
    }

    /// `adjustment` (of `amount` units) applied to `key` in its next batch.
    pub(crate) async fn adjust(
        &self,
        key: &str,
        amount: u64,
        adjustment: Adjustment,
    ) -> Result<Balance> {
        validate_key(key)?;
        if amount > MAX_CHARGE {
            return Err(Error::invalid(format!(
                "a charge or refund may move a key by at most {MAX_CHARGE}, got {amount}"
            )));
        }
        self.inner().check_open()?;
        let answer = batch::adjust_key(self.inner(), self.shared(), key, adjustment).await?;
        Ok(Balance::of(answer))
    }
}
