//! The guarded wait: [`StoreDownGuard::wait_until`] and [`StoreDownGuard::wait_with`], the one
//! wait of a rate limit (`rate_limit/wait.rs`) over the guard's checks, so a wait is answered
//! by the store-down policy too.

use super::guard::{GuardedDecision, StoreDownGuard};
use crate::error::{Error, Result};
use crate::rate_limit::handle::RateLimit;
use crate::rate_limit::options::CheckOptions;
use crate::rate_limit::wait::{self, Waited};
use std::future::Future;
use tokio::time::Instant;

impl StoreDownGuard {
    /// [`RateLimit::wait_until`] through the guard: checks until admitted, sleeping each
    /// denial's `retry_after`, while the next check still falls before `deadline` (`None`:
    /// none). Each check gets what is left of the wait, but at least 100 ms (a deadline of now
    /// is one check, not a store-down answer), and at most the store timeout. A store-down
    /// answer ends the wait at once: fail open admits, fail closed is
    /// [`Waited::Denied`] (waiting does not bring the store back); a local share's denial is
    /// waited on like the store's.
    ///
    /// Errors: `InvalidArgument` for a bad key or a cost of 0 or above the quota.
    /// Cancel-safe: dropping it between checks consumes nothing.
    pub async fn wait_until(
        &self,
        limit: &RateLimit,
        key: &str,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<Waited<GuardedDecision>> {
        self.wait_until_or(limit, key, cost, deadline, std::future::pending())
            .await
    }

    /// [`wait_until`](Self::wait_until), ended by `stop` ([`Waited::Stopped`]) if it
    /// finishes while the wait sleeps between checks: for a server that must answer its
    /// callers at shutdown without cutting off a check whose write may already count.
    pub async fn wait_until_or(
        &self,
        limit: &RateLimit,
        key: &str,
        cost: u64,
        deadline: Option<Instant>,
        stop: impl Future<Output = ()>,
    ) -> Result<Waited<GuardedDecision>> {
        let options = CheckOptions::new().cost(cost);
        self.wait_by(limit, key, options, deadline, stop).await
    }

    /// [`RateLimit::wait_with`] through the guard: [`wait_until`](Self::wait_until) as
    /// `options` say, their budget ([`CheckOptions::within`]) the wait's (none: as long as it
    /// takes). Each check is [`check_with`](Self::check_with) with the options whole (their
    /// cost, their priority class, whatever else they carry), given what is left of the wait
    /// but at least 100 ms, and at most the store timeout. While the store is down the
    /// policy answers as the class: fail open admits it, a local share keeps its share of the
    /// class's reserve (and its denials are waited on).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> clusterlimit::Result<()> {
    /// use clusterlimit::{CheckOptions, Limiter, Quota, StoreDownGuard, StoreDownPolicy, Waited};
    /// use std::time::Duration;
    /// let limiter = Limiter::connect("memory://guard-wait-with-doc").await?;
    /// let jobs = limiter.rate_limit("jobs", Quota::per_minute(10).reserve("batch", 9)).await?;
    /// let guard = StoreDownGuard::new(StoreDownPolicy::FailOpen);
    /// let batch = CheckOptions::new().class("batch").within(Duration::from_millis(50));
    /// assert!(matches!(guard.wait_with(&jobs, "host-a", batch.clone()).await?, Waited::Admitted(_)));
    /// // Batch may take 1 of 10; the next is 6 s away: denied at once, nothing consumed.
    /// assert!(matches!(guard.wait_with(&jobs, "host-a", batch).await?, Waited::Denied(_)));
    /// # Ok(()) }
    /// ```
    ///
    /// Errors as [`wait_until`](Self::wait_until), and `InvalidArgument` for a class the
    /// quota does not declare or a cost above what the class can ever take.
    pub async fn wait_with(
        &self,
        limit: &RateLimit,
        key: &str,
        options: CheckOptions,
    ) -> Result<Waited<GuardedDecision>> {
        self.wait_with_or(limit, key, options, std::future::pending())
            .await
    }

    /// [`wait_with`](Self::wait_with), ended by `stop` ([`Waited::Stopped`]) if it finishes
    /// while the wait sleeps between checks, as [`wait_until_or`](Self::wait_until_or).
    pub async fn wait_with_or(
        &self,
        limit: &RateLimit,
        key: &str,
        options: CheckOptions,
        stop: impl Future<Output = ()>,
    ) -> Result<Waited<GuardedDecision>> {
        // A budget too long to represent is no deadline.
        let deadline = options
            .budget_of()
            .and_then(|b| Instant::now().checked_add(b));
        self.wait_by(limit, key, options, deadline, stop).await
    }

    /// The one guarded wait: `options`' checks until admitted or `deadline`, each check
    /// given what is left of the wait (at least [`wait::CHECK_GRACE`], the store timeout at
    /// most).
    async fn wait_by(
        &self,
        limit: &RateLimit,
        key: &str,
        options: CheckOptions,
        deadline: Option<Instant>,
        stop: impl Future<Output = ()>,
    ) -> Result<Waited<GuardedDecision>> {
        if options.cost_of() == 0 {
            return Err(Error::invalid(
                "a wait needs a cost of at least 1 (cost 0 is a peek: use check_n)",
            ));
        }
        let options = &options;
        wait::until(deadline, stop, |deadline| async move {
            match deadline {
                // `until` gives each check at least CHECK_GRACE past its start.
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    self.check_with(limit, key, options.clone().within(left))
                        .await
                }
                None => self.check_with(limit, key, options.clone()).await,
            }
        })
        .await
    }
}
