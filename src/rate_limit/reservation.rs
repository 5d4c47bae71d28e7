//! [`Reservation`]: a cost admitted at an estimate and settled at the real figure once the work
//! is done ([`RateLimit::reserve`]).

use super::balance::Balance;
use super::handle::RateLimit;
use super::options::CheckOptions;
use crate::error::{Error, Result};
use crate::rate::{Adjustment, Decision, UnixNanos};
use std::time::Duration;
use tokio::time::Instant;

/// How long a reservation may be settled unless [`CheckOptions::settle_within`] says
/// otherwise: ten minutes, longer than any LLM call or download it is meant for.
pub const DEFAULT_SETTLE_WITHIN: Duration = Duration::from_secs(600);

impl RateLimit {
    /// Admits work for `key` at an `estimate` of its cost, to be settled at the real cost once
    /// it is known ([`Reservation::settle`]): a check of `estimate`, admitted (and taken) or
    /// denied like [`check_n`](Self::check_n), that remembers what it took and when.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{Limiter, Quota};
    /// let limiter = Limiter::connect("memory://reserve-doc").await?;
    /// let tokens = limiter.rate_limit("tokens", Quota::per_day(10_000)).await?;
    /// let call = tokens.reserve("tenant-a", 4_000).await?; // max_tokens of the request
    /// assert!(call.allowed());
    /// // ... the LLM answers, having used 1,200 tokens:
    /// let b = call.settle(1_200).await?;
    /// assert_eq!(b.remaining, 8_800); // the 2,800 not used came back
    /// # Ok(()) }
    /// ```
    ///
    /// An estimate of 0 takes nothing and is admitted iff a check of 1 would be (the key is
    /// not spent or in debt): "admit now, charge the cost afterwards".
    ///
    /// Errors as [`check_n`](Self::check_n).
    pub async fn reserve(&self, key: &str, estimate: u64) -> Result<Reservation> {
        self.reserve_with(key, CheckOptions::new().cost(estimate))
            .await
    }

    /// [`reserve`](Self::reserve) as `options` say: the estimate is their cost; their class,
    /// flow and budget as for [`check_with`](Self::check_with); their
    /// [`settle_within`](CheckOptions::settle_within) the reservation's time limit.
    ///
    /// Errors as [`check_with`](Self::check_with), and `InvalidArgument` for a time limit of 0.
    pub async fn reserve_with(&self, key: &str, options: CheckOptions) -> Result<Reservation> {
        let opening = self.open_reservation(&options)?;
        let decision = self.check_with(key, options.clone().reserving()).await?;
        Ok(opening.decided(self, key, options.cost_of(), decision))
    }

    /// The start of a reservation as `options` say, to be taken by a check of their cost right
    /// after (by this handle or a [`StoreDownGuard`](crate::StoreDownGuard)).
    pub(crate) fn open_reservation(&self, options: &CheckOptions) -> Result<Opening> {
        let within = options.settle_within_of().unwrap_or(DEFAULT_SETTLE_WITHIN);
        if within.is_zero() {
            return Err(Error::invalid(
                "a reservation's time limit (settle_within) must be longer than 0",
            ));
        }
        Ok(Opening {
            // Taken no earlier than this: a window's refund is given back only if this is in
            // the window now counting, so an instant too early can only give back less.
            taken_at: self.inner().now_ns(),
            settle_by: Instant::now().checked_add(within),
        })
    }
}

/// A reservation opened before the check that takes its estimate: when it was taken at the
/// earliest, and when its time limit ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening {
    taken_at: UnixNanos,
    settle_by: Option<Instant>,
}

impl Opening {
    /// The reservation of `estimate` on `key` of `limit`, as the check's `decision` made it.
    pub(crate) fn decided(
        self,
        limit: &RateLimit,
        key: &str,
        estimate: u64,
        decision: Decision,
    ) -> Reservation {
        Reservation {
            limit: limit.clone(),
            key: key.to_string(),
            estimate,
            decision,
            taken_at: self.taken_at,
            settle_by: self.settle_by,
            open: decision.allowed,
        }
    }
}

/// Work admitted at an estimate of its cost ([`RateLimit::reserve`]), to be settled at the
/// real cost with [`settle`](Self::settle) once it is known.
///
/// A reservation holds nothing in the store: its estimate was taken when it was admitted.
/// Settling gives back what the work did not use, or charges what it used beyond (into debt if
/// need be). Dropping it unsettled, or letting its time limit pass, settles it at its estimate:
/// the estimate stays taken, as [`keep`](Self::keep) says explicitly.
#[derive(Debug)]
#[must_use = "a reservation keeps its whole estimate taken until it is settled"]
pub struct Reservation {
    limit: RateLimit,
    key: String,
    estimate: u64,
    decision: Decision,
    taken_at: UnixNanos,
    /// `None`: a time limit too far to represent (none).
    settle_by: Option<Instant>,
    /// Admitted and not settled yet.
    open: bool,
}

impl Reservation {
    /// Whether the work was admitted (and the estimate taken).
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// The decision of the check of the estimate: `remaining`, `retry_after` and the rest.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The estimate taken.
    pub fn estimate(&self) -> u64 {
        self.estimate
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How long is left to settle it (zero once its time limit has passed).
    pub fn time_left(&self) -> Duration {
        self.settle_by.map_or(Duration::MAX, |at| {
            at.saturating_duration_since(Instant::now())
        })
    }

    /// Settles the work at its real cost `actual`: a smaller cost gives the difference back
    /// (never more than the estimate, never past a full key; GCRA gives back only what of it
    /// still holds the key, as what has passed came back by itself with time; a window gives
    /// back only while the window that took it still counts), a larger one charges the rest whatever the key
    /// holds, into debt if need be ([`RateLimit::charge`]). `actual == estimate` takes no store
    /// request; otherwise one write, shared with the key's concurrent checks.
    ///
    /// Errors: `InvalidArgument` when the reservation was denied (nothing was taken: charge the
    /// work with [`RateLimit::charge`] if it ran anyway), when its time limit has passed (it
    /// was settled at its estimate then; charge any extra with `charge`), or when the extra
    /// above the estimate exceeds [`MAX_CHARGE`](crate::MAX_CHARGE); otherwise as `charge`.
    pub async fn settle(mut self, actual: u64) -> Result<Balance> {
        self.close()?;
        let rl = &self.limit;
        if actual >= self.estimate {
            let extra = actual - self.estimate;
            return rl.adjust(&self.key, extra, Adjustment::Charge(extra)).await;
        }
        let amount = self.estimate - actual;
        // The check left the key full again `reset_after` after it was decided, which was
        // after `taken_at`: its units held the key until then at the earliest.
        let reset = u64::try_from(self.decision.reset_after.as_nanos()).unwrap_or(u64::MAX);
        let back = Adjustment::Refund {
            amount,
            taken_at: self.taken_at,
            held_until: self.taken_at.saturating_add(reset),
            seen: self.decision.slots,
        };
        rl.adjust(&self.key, amount, back).await
    }

    /// Settles it at its estimate: nothing is given back or charged, and no request is made.
    pub fn keep(mut self) {
        self.open = false;
    }

    /// Marks it settled, or says why it cannot be.
    fn close(&mut self) -> Result<()> {
        if !self.decision.allowed {
            return Err(Error::invalid(format!(
                "the reservation of {} on {:?} was denied, so nothing was taken and there is nothing to settle; charge the cost if the work ran anyway",
                self.estimate, self.key
            )));
        }
        self.open = false;
        if self.time_left().is_zero() {
            return Err(Error::invalid(format!(
                "the reservation of {} on {:?} passed its time limit and was settled at its estimate; charge any cost above it",
                self.estimate, self.key
            )));
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.open {
            tracing::debug!(
                limit = self.limit.name(),
                key = self.key.as_str(),
                estimate = self.estimate,
                "a reservation was dropped unsettled: its estimate stays taken"
            );
        }
    }
}
