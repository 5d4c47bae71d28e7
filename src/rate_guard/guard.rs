//! [`StoreDownGuard`]: checks through the store while it answers; the policy's answer at once
//! while it is known down.

use super::local::{fits, LocalLimits};
use super::StoreDownPolicy;
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::rate::Decision;
use crate::rate_limit::{validate_key, Check, RateLimit};
use crate::store_health::{BreakerStats, Failure, StoreHealth};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Default [`StoreDownGuard::retry_interval`]: while the store is down, one request per 250 ms
/// asks it again, so exact answers resume within a quarter second of the store's recovery.
pub const DEFAULT_GUARD_RETRY_INTERVAL: Duration = Duration::from_millis(250);

/// Where a [`Guarded`] decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The store decided: exact, cluster-wide.
    Store,
    /// The store was down and [`StoreDownPolicy::FailOpen`] admitted the request uncounted.
    FailOpen,
    /// The store was down and [`StoreDownPolicy::FailClosed`] denied the request.
    FailClosed,
    /// The store was down and [`StoreDownPolicy::Local`] decided in this process alone.
    Local,
}

/// A decision and who made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Guarded {
    /// The answer to give the caller.
    pub decision: Decision,
    /// Whether the store made it, or which fallback.
    pub source: Source,
}

/// Checks rate limits through the store while it answers, and applies a [`StoreDownPolicy`]
/// while it does not.
///
/// A check that gets no answer within [`store_timeout`](Self::store_timeout) gets the policy's
/// answer, alone. Behind it is a circuit breaker: a store error or a lost session opens it at
/// once, slow answers only once they persist ([`SLOW_TO_OPEN`](crate::SLOW_TO_OPEN) of them and
/// no success for [`SLOW_OPEN_AFTER`](crate::SLOW_OPEN_AFTER)), so a busy store is not taken for
/// a down one. While it is open, one request per [`retry_interval`](Self::retry_interval) asks
/// the store and every other one gets the policy's answer at once, without waiting on timeouts;
/// [`breaker`](Self::breaker) tells its state and transitions.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use clusterlimit::{Limiter, Quota, Source, StoreDownGuard, StoreDownPolicy};
/// use std::time::Duration;
/// let limiter = Limiter::connect("memory://guard-doc").await?;
/// let api = limiter.rate_limit("api", Quota::per_second(100)).await?;
/// let guard = StoreDownGuard::new(StoreDownPolicy::Local { replicas: 3 })
///     .store_timeout(Duration::from_millis(200));
/// let g = guard.check_n(&api, "user-42", 1).await?;
/// assert!(g.decision.allowed);
/// assert_eq!(g.source, Source::Store);
/// # Ok(()) }
/// ```
///
/// Cheap to clone; clones share the breaker, so make one per store and policy and clone it
/// (the builder methods start a fresh breaker: call them before cloning). Errors that are not
/// the store's (`InvalidArgument`, `NotFound`, `Closed`) are returned, never hidden by the
/// policy. Cancel-safe as [`RateLimit::check_n`] is.
#[derive(Debug, Clone)]
pub struct StoreDownGuard {
    policy: StoreDownPolicy,
    retry_interval: Duration,
    store_timeout: Option<Duration>,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    health: StoreHealth,
    local: LocalLimits,
}

impl StoreDownGuard {
    /// A guard applying `policy`, asking a down store again every [`DEFAULT_GUARD_RETRY_INTERVAL`],
    /// and waiting for the store as long as the Limiter's own timeouts allow.
    pub fn new(policy: StoreDownPolicy) -> StoreDownGuard {
        StoreDownGuard::build(policy, DEFAULT_GUARD_RETRY_INTERVAL, None)
    }

    fn build(
        policy: StoreDownPolicy,
        retry_interval: Duration,
        store_timeout: Option<Duration>,
    ) -> StoreDownGuard {
        let replicas = match policy {
            StoreDownPolicy::Local { replicas } => replicas,
            _ => 1,
        };
        StoreDownGuard {
            policy,
            retry_interval,
            store_timeout,
            shared: Arc::new(Shared {
                health: StoreHealth::new(retry_interval),
                local: LocalLimits::new(replicas),
            }),
        }
    }

    /// While the store is down, one request per `interval` asks it again (at least 1 ms).
    pub fn retry_interval(self, interval: Duration) -> StoreDownGuard {
        let interval = interval.max(Duration::from_millis(1));
        StoreDownGuard::build(self.policy, interval, self.store_timeout)
    }

    /// A store check that takes longer than `timeout` counts as the store being down (its
    /// request may still have consumed).
    pub fn store_timeout(self, timeout: Duration) -> StoreDownGuard {
        StoreDownGuard::build(self.policy, self.retry_interval, Some(timeout))
    }

    /// The policy applied while the store is down.
    pub fn policy(&self) -> StoreDownPolicy {
        self.policy
    }

    /// Whether the store is known to be down right now (the breaker is open: a check failed,
    /// and none has succeeded since).
    pub fn store_down(&self) -> bool {
        self.shared.health.is_down()
    }

    /// The breaker's state and how often it opened and closed (shared by clones).
    pub fn breaker(&self) -> BreakerStats {
        self.shared.health.stats()
    }

    /// [`RateLimit::check_n`] through the store, or the policy's answer if the store is down.
    pub async fn check_n(&self, limit: &RateLimit, key: &str, cost: u64) -> Result<Guarded> {
        self.check_n_by(limit, key, cost, self.store_timeout).await
    }

    /// [`check_n`](Self::check_n) for a caller that owes its own answer within `budget` (an
    /// RPC's deadline, an HTTP request's timeout): the store gets the shorter of `budget` and
    /// the [`store_timeout`](Self::store_timeout), and past it this check gets the policy's
    /// answer (a slow answer: it opens the breaker only if such answers persist).
    pub async fn check_n_within(
        &self,
        limit: &RateLimit,
        key: &str,
        cost: u64,
        budget: Duration,
    ) -> Result<Guarded> {
        let bound = self.store_timeout.map_or(budget, |t| t.min(budget));
        self.check_n_by(limit, key, cost, Some(bound)).await
    }

    async fn check_n_by(
        &self,
        limit: &RateLimit,
        key: &str,
        cost: u64,
        bound: Option<Duration>,
    ) -> Result<Guarded> {
        // Bad input is an error whether or not the store answers.
        validate_key(key)?;
        let max = limit.quota().max_cost();
        if cost > max {
            return Err(Error::invalid(format!(
                "cost {cost} is above what rate limit {:?} can ever admit at once ({max})",
                limit.name()
            )));
        }
        let health = &self.shared.health;
        if health.may_try() {
            // The deadline goes into the check, so coalescing and pacing keep to it.
            let deadline = bound.and_then(|t| Instant::now().checked_add(t));
            match limit.check_by(key, cost, deadline).await {
                Ok(decision) => {
                    health.up(limit.name());
                    return Ok(Guarded {
                        decision,
                        source: Source::Store,
                    });
                }
                Err(e) => match failure(&e) {
                    Some(kind) => health.failed(limit.name(), &cause(e, bound), kind),
                    None => return Err(e),
                },
            }
        }
        let mut answers = self.fallback(&[(limit, key, cost)]).await?;
        answers
            .pop()
            .ok_or_else(|| Error::invalid("no check given"))
    }

    /// [`Limiter::check_all`] (all or nothing) through the store, or the policy's answer for
    /// every check if the store is down (`Local`: all or nothing among the local shares).
    pub async fn check_all(&self, limiter: &Limiter, checks: &[Check<'_>]) -> Result<Vec<Guarded>> {
        self.check_all_by(limiter, checks, self.store_timeout).await
    }

    /// [`check_all`](Self::check_all) within `budget`, as [`check_n_within`](Self::check_n_within).
    pub async fn check_all_within(
        &self,
        limiter: &Limiter,
        checks: &[Check<'_>],
        budget: Duration,
    ) -> Result<Vec<Guarded>> {
        let bound = self.store_timeout.map_or(budget, |t| t.min(budget));
        self.check_all_by(limiter, checks, Some(bound)).await
    }

    async fn check_all_by(
        &self,
        limiter: &Limiter,
        checks: &[Check<'_>],
        bound: Option<Duration>,
    ) -> Result<Vec<Guarded>> {
        let Some(first) = checks.first() else {
            return Err(Error::invalid("check_all needs at least one check"));
        };
        let name = first.parts().0.name().to_string();
        let health = &self.shared.health;
        if health.may_try() {
            let call = limiter.check_all(checks);
            let answered = match bound {
                None => call.await,
                Some(t) => tokio::time::timeout(t, call)
                    .await
                    .unwrap_or(Err(Error::Timeout)),
            };
            match answered {
                Ok(decisions) => {
                    health.up(&name);
                    return Ok(decisions
                        .into_iter()
                        .map(|decision| Guarded {
                            decision,
                            source: Source::Store,
                        })
                        .collect());
                }
                Err(e) => match failure(&e) {
                    Some(kind) => health.failed(&name, &cause(e, bound), kind),
                    None => return Err(e),
                },
            }
        }
        let mut parts = Vec::with_capacity(checks.len());
        for c in checks {
            let (limit, key, cost) = c.parts();
            validate_key(key)?;
            let max = limit.quota().max_cost();
            if cost > max {
                return Err(Error::invalid(format!(
                    "cost {cost} is above what rate limit {:?} can ever admit at once ({max})",
                    limit.name()
                )));
            }
            parts.push((limit, key, cost));
        }
        self.fallback(&parts).await
    }

    /// The policy's answers for checks the store could not decide.
    async fn fallback(&self, checks: &[(&RateLimit, &str, u64)]) -> Result<Vec<Guarded>> {
        let fixed = |allowed: bool| {
            checks
                .iter()
                .map(|(limit, _, _)| {
                    let max = limit.quota().max_cost();
                    let decision = if allowed {
                        Decision {
                            allowed: true,
                            limit: max,
                            remaining: max,
                            retry_after: None,
                            reset_after: Duration::ZERO,
                        }
                    } else {
                        Decision {
                            allowed: false,
                            limit: max,
                            remaining: 0,
                            retry_after: Some(self.retry_interval),
                            reset_after: self.retry_interval,
                        }
                    };
                    let source = if allowed {
                        Source::FailOpen
                    } else {
                        Source::FailClosed
                    };
                    Guarded { decision, source }
                })
                .collect::<Vec<_>>()
        };
        match self.policy {
            StoreDownPolicy::FailOpen => Ok(fixed(true)),
            StoreDownPolicy::FailClosed => Ok(fixed(false)),
            StoreDownPolicy::Local { .. } => self.local(checks).await,
        }
    }

    /// `Local`: the same checks, all or nothing, on this process's shares.
    async fn local(&self, checks: &[(&RateLimit, &str, u64)]) -> Result<Vec<Guarded>> {
        let local = &self.shared.local;
        let mut twins = Vec::with_capacity(checks.len());
        for (limit, _, _) in checks {
            twins.push(local.twin(limit).await?);
        }
        let too_big = checks
            .iter()
            .zip(&twins)
            .any(|((_, _, cost), twin)| !fits(&twin.quota(), *cost));
        let decisions = if too_big {
            // A share smaller than the cost can never admit it: deny, as the store would if
            // the others had taken the rest.
            twins
                .iter()
                .map(|twin| Decision {
                    allowed: false,
                    limit: twin.quota().max_cost(),
                    remaining: 0,
                    retry_after: Some(self.retry_interval),
                    reset_after: self.retry_interval,
                })
                .collect()
        } else if let [(_, key, cost)] = checks {
            vec![twins[0].check_n(key, *cost).await?]
        } else {
            let local_checks: Vec<Check<'_>> = checks
                .iter()
                .zip(&twins)
                .map(|((_, key, cost), twin)| Check::new(twin, *key, *cost))
                .collect();
            local.limiter().await?.check_all(&local_checks).await?
        };
        Ok(decisions
            .into_iter()
            .map(|decision| Guarded {
                decision,
                source: Source::Local,
            })
            .collect())
    }
}

/// What the log says of a failed check (a bare `Timeout` says too little).
fn cause(e: Error, bound: Option<Duration>) -> Error {
    match (e, bound) {
        (Error::Timeout, Some(t)) => Error::store(format!(
            "no answer within the store timeout ({} ms)",
            t.as_millis()
        )),
        (e, _) => e,
    }
}

/// What kind of store failure an error is (`None`: not the store's, e.g. a caller's mistake).
fn failure(e: &Error) -> Option<Failure> {
    match e {
        Error::Store(_) | Error::SessionLost => Some(Failure::Error),
        Error::Timeout => Some(Failure::Slow),
        _ => None,
    }
}
