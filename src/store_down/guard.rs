//! [`StoreDownGuard`]: checks through the store while it answers; the policy's answer at once
//! while it is known down.

use super::local::{fits, LocalLimits};
use super::policy::StoreDownPolicy;
use crate::backend::{lock, RateStore};
use crate::error::{Error, Result};
use crate::limiter::Limiter;
use crate::rate::reserves::ClassName;
use crate::rate::{Decision, FlowId};
use crate::rate_limit::check_all::{self, KeyCheck};
use crate::rate_limit::handle::{validate_key, RateLimit};
use crate::rate_limit::options::CheckOptions;
use crate::rate_limit::wait::WaitAnswer;
use crate::store_down::breaker::{BreakerStats, Failure, StoreHealth};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Default [`StoreDownGuard::retry_interval`]: while the store is down, one request per 250 ms
/// asks it again, so exact answers resume within a quarter second of the store's recovery.
pub const DEFAULT_GUARD_RETRY_INTERVAL: Duration = Duration::from_millis(250);

/// Where a [`GuardedDecision`] decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecisionSource {
    /// The store decided: exact, cluster-wide.
    Store,
    /// The store was down and [`StoreDownPolicy::FailOpen`] admitted the request uncounted.
    FailOpen,
    /// The store was down and [`StoreDownPolicy::FailClosed`] denied the request.
    FailClosed,
    /// The store was down and [`StoreDownPolicy::Local`] decided in this process alone.
    Local,
}

impl WaitAnswer for GuardedDecision {
    fn decision(&self) -> &Decision {
        &self.decision
    }

    fn is_final(&self) -> bool {
        matches!(
            self.source,
            DecisionSource::FailOpen | DecisionSource::FailClosed
        )
    }
}

/// A decision and who made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardedDecision {
    /// The answer to give the caller.
    pub decision: Decision,
    /// Whether the store made it, or which fallback.
    pub source: DecisionSource,
    /// How long the store took to answer (for a latency metric), when it made the decision.
    pub store_latency: Option<Duration>,
}

/// Checks rate limits through the store while it answers, and applies a [`StoreDownPolicy`]
/// while it does not.
///
/// A check that gets no answer within [`store_timeout`](Self::store_timeout) gets the policy's
/// answer, alone. Behind it is a circuit breaker: a store error or a lost session opens it at
/// once, slow answers only once they persist ([`SLOW_TO_OPEN`](crate::ClusterBreaker::SLOW_TO_OPEN) of them and
/// no success for [`SLOW_OPEN_AFTER`](crate::ClusterBreaker::SLOW_OPEN_AFTER)), so a busy store is not taken for
/// a down one. While it is open, one request per [`retry_interval`](Self::retry_interval) asks
/// the store and every other one gets the policy's answer at once, without waiting on timeouts;
/// [`breaker`](Self::breaker) tells its state and transitions.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> clusterlimit::Result<()> {
/// use clusterlimit::{Limiter, Quota, DecisionSource, StoreDownGuard, StoreDownPolicy};
/// use std::time::Duration;
/// let limiter = Limiter::connect("memory://guard-doc").await?;
/// let api = limiter.rate_limit("api", Quota::per_second(100)).await?;
/// let guard = StoreDownGuard::new(StoreDownPolicy::Local { replicas: 3 })
///     .store_timeout(Duration::from_millis(200));
/// let g = guard.check_n(&api, "user-42", 1).await?;
/// assert!(g.decision.allowed);
/// assert_eq!(g.source, DecisionSource::Store);
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
    /// One breaker per cluster of the store, by the cluster's place (a store of one cluster
    /// has one): a sharded store's down cluster fails over its own keys alone.
    breakers: Mutex<Vec<Arc<StoreHealth>>>,
    local: LocalLimits,
}

/// The breaker of one cluster of the store behind a [`StoreDownGuard`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterBreaker {
    /// The cluster's place in a sharded store's URL (0: the first, or the only cluster).
    pub position: usize,
    /// How messages name it (`cluster 2 of 3 (etcd://…)`); `None` for a store of one
    /// cluster.
    pub cluster: Option<String>,
    /// Its state and transitions.
    pub stats: BreakerStats,
}

impl StoreDownGuard {
    /// A guard applying `policy`, asking a down store again every
    /// [`DEFAULT_RETRY_INTERVAL`](Self::DEFAULT_RETRY_INTERVAL),
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
                breakers: Mutex::new(Vec::new()),
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

    /// Whether the store, or any cluster of a sharded store, is known to be down right now
    /// (its breaker is open: a check failed, and none has succeeded since).
    pub fn store_down(&self) -> bool {
        lock(&self.shared.breakers).iter().any(|b| b.is_down())
    }

    /// Whether the cluster at `position` (0: the first, which also keeps every quota) is
    /// known to be down right now.
    pub fn cluster_down(&self, position: usize) -> bool {
        lock(&self.shared.breakers)
            .get(position)
            .is_some_and(|b| b.is_down())
    }

    /// The breakers' state and transitions summed over the clusters (shared by clones):
    /// open if any cluster's is. See [`breakers`](Self::breakers) for each cluster's.
    pub fn breaker(&self) -> BreakerStats {
        self.breakers()
            .iter()
            .fold(BreakerStats::default(), |sum, b| BreakerStats {
                open: sum.open || b.stats.open,
                opened: sum.opened + b.stats.opened,
                closed: sum.closed + b.stats.closed,
                slow: sum.slow + b.stats.slow,
            })
    }

    /// Each cluster's breaker, in the clusters' order, for the clusters checked so far.
    pub fn breakers(&self) -> Vec<ClusterBreaker> {
        lock(&self.shared.breakers)
            .iter()
            .enumerate()
            .map(|(position, b)| ClusterBreaker {
                position,
                cluster: b.cluster_name().map(str::to_string),
                stats: b.stats(),
            })
            .collect()
    }

    /// The breaker of the cluster at `position`, made on first use (named by `store`).
    fn health(&self, store: Option<&dyn RateStore>, position: usize) -> Arc<StoreHealth> {
        let mut breakers = lock(&self.shared.breakers);
        while breakers.len() <= position {
            let name = store.and_then(|s| s.part_name(breakers.len()));
            breakers.push(Arc::new(StoreHealth::for_cluster(
                self.retry_interval,
                name,
            )));
        }
        breakers[position].clone()
    }

    /// The breaker of the cluster that keeps `key` of `limit`.
    fn health_of(&self, limit: &RateLimit, key: &str) -> Arc<StoreHealth> {
        let store = limit.inner().backend.rate_store();
        let position = store.map_or(0, |s| s.part_of(limit.name(), key));
        self.health(store, position)
    }

    /// [`RateLimit::check_n`] through the store, or the policy's answer if the store is down.
    pub async fn check_n(
        &self,
        limit: &RateLimit,
        key: &str,
        cost: u64,
    ) -> Result<GuardedDecision> {
        let options = CheckOptions::new().cost(cost);
        self.check_by(limit, key, &options, self.store_timeout)
            .await
    }

    /// [`RateLimit::check_with`] through the store, or the policy's answer if the store is
    /// down: the options' cost and class, and their budget as
    /// [`check_n_within`](Self::check_n_within)'s. A class is the quota's: `Local` shares
    /// keep each class's share of its reserve, fail open admits a class with its reserve as
    /// `remaining` held back. The options reach the store's check whole.
    pub async fn check_with(
        &self,
        limit: &RateLimit,
        key: &str,
        options: CheckOptions,
    ) -> Result<GuardedDecision> {
        let bound = match (options.budget_of(), self.store_timeout) {
            (Some(b), Some(t)) => Some(b.min(t)),
            (b, t) => b.or(t),
        };
        self.check_by(limit, key, &options, bound).await
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
    ) -> Result<GuardedDecision> {
        let bound = self.store_timeout.map_or(budget, |t| t.min(budget));
        let options = CheckOptions::new().cost(cost);
        self.check_by(limit, key, &options, Some(bound)).await
    }

    /// One check as `options` say, the store given `bound` (`None`: the Limiter's own
    /// timeouts), else the policy's answer.
    async fn check_by(
        &self,
        limit: &RateLimit,
        key: &str,
        options: &CheckOptions,
        bound: Option<Duration>,
    ) -> Result<GuardedDecision> {
        // Bad input is an error whether or not the store answers.
        validate_key(key)?;
        let (cost, class) = (options.cost_of(), options.class_of());
        limit.quota().check_class(limit.name(), class, cost)?;
        if let Some(c) = class {
            ClassName::new(c).map_err(Error::invalid)?;
        }
        check_flow(options.flow_of())?;
        let health = self.health_of(limit, key);
        if health.may_try() {
            // The deadline goes into the check, so coalescing and pacing keep to it.
            let started = Instant::now();
            let asked = match bound {
                Some(b) => options.clone().within(b),
                None => options.clone(),
            };
            match limit.check_with(key, asked).await {
                Ok(decision) => {
                    health.up(limit.name());
                    return Ok(GuardedDecision {
                        decision,
                        source: DecisionSource::Store,
                        store_latency: Some(started.elapsed()),
                    });
                }
                Err(e) => match failure(&e) {
                    Some(kind) => health.failed(limit.name(), &cause(e, bound), kind),
                    None => return Err(e),
                },
            }
        }
        let mut answers = self.fallback(&[(limit, key, options.clone())]).await?;
        answers
            .pop()
            .ok_or_else(|| Error::invalid("no check given"))
    }

    /// [`Limiter::check_all`] (all or nothing) through the store, or the policy's answer for
    /// every check if the store is down (`Local`: all or nothing among the local shares). One
    /// check is [`check_n`](Self::check_n)'s, so a caller with one or many need not choose.
    pub async fn check_all(
        &self,
        limiter: &Limiter,
        checks: &[KeyCheck<'_>],
    ) -> Result<Vec<GuardedDecision>> {
        self.check_all_by(limiter, checks, self.store_timeout).await
    }

    /// [`check_all`](Self::check_all) within `budget`, as [`check_n_within`](Self::check_n_within).
    pub async fn check_all_within(
        &self,
        limiter: &Limiter,
        checks: &[KeyCheck<'_>],
        budget: Duration,
    ) -> Result<Vec<GuardedDecision>> {
        let bound = self.store_timeout.map_or(budget, |t| t.min(budget));
        self.check_all_by(limiter, checks, Some(bound)).await
    }

    async fn check_all_by(
        &self,
        limiter: &Limiter,
        checks: &[KeyCheck<'_>],
        bound: Option<Duration>,
    ) -> Result<Vec<GuardedDecision>> {
        let Some(first) = checks.first() else {
            return Err(Error::invalid("check_all needs at least one check"));
        };
        if let [only] = checks {
            // One check: `check_n`'s path, with the deadline inside the check so that
            // coalescing and pacing keep to it (as `Limiter::check_all` chooses).
            check_all::validate(&limiter.inner, checks)?;
            let (limit, key, _) = only.parts();
            return Ok(vec![
                self.check_by(limit, key, &options_of(only), bound).await?,
            ]);
        }
        let name = first.parts().0.name().to_string();
        let health = self.joint_health(limiter, checks);
        if health.as_ref().is_none_or(|h| h.may_try()) {
            let started = Instant::now();
            let call = limiter.check_all(checks);
            let answered = match bound {
                None => call.await,
                Some(t) => tokio::time::timeout(t, call)
                    .await
                    .unwrap_or(Err(Error::Timeout)),
            };
            match answered {
                Ok(decisions) => {
                    if let Some(h) = &health {
                        h.up(&name);
                    }
                    return Ok(decisions
                        .into_iter()
                        .map(|decision| GuardedDecision {
                            decision,
                            source: DecisionSource::Store,
                            store_latency: Some(started.elapsed()),
                        })
                        .collect());
                }
                Err(e) => match (failure(&e), &health) {
                    (Some(kind), Some(h)) => h.failed(&name, &cause(e, bound), kind),
                    _ => return Err(e),
                },
            }
        }
        let mut parts = Vec::with_capacity(checks.len());
        for c in checks {
            let (limit, key, cost) = c.parts();
            validate_key(key)?;
            limit
                .quota()
                .check_class(limit.name(), c.class_of(), cost)?;
            check_flow(c.flow_of())?;
            parts.push((limit, key, options_of(c)));
        }
        self.fallback(&parts).await
    }

    /// The breaker of the one cluster that keeps every key of `checks`; `None` when they are
    /// on different clusters (the store refuses that `check_all`, and the error is returned).
    fn joint_health(&self, limiter: &Limiter, checks: &[KeyCheck<'_>]) -> Option<Arc<StoreHealth>> {
        let store = limiter.inner.backend.rate_store();
        let mut positions = checks.iter().map(|c| {
            let (limit, key, _) = c.parts();
            store.map_or(0, |s| s.part_of(limit.name(), key))
        });
        let first = positions.next().unwrap_or(0);
        positions
            .all(|p| p == first)
            .then(|| self.health(store, first))
    }

    /// The policy's answers for checks (limit, key, options) the store could not decide.
    async fn fallback(&self, checks: &[GuardCheck<'_>]) -> Result<Vec<GuardedDecision>> {
        let fixed = |allowed: bool| {
            checks
                .iter()
                .map(|(limit, _, options)| {
                    let quota = limit.quota();
                    let max = quota.max_cost();
                    let decision = if allowed {
                        Decision {
                            allowed: true,
                            limit: max,
                            remaining: max
                                .saturating_sub(quota.reserves.reserve_of(options.class_of())),
                            retry_after: None,
                            reset_after: Duration::ZERO,
                            slots: Default::default(),
                        }
                    } else {
                        Decision {
                            allowed: false,
                            limit: max,
                            remaining: 0,
                            retry_after: Some(self.retry_interval),
                            reset_after: self.retry_interval,
                            slots: Default::default(),
                        }
                    };
                    let source = if allowed {
                        DecisionSource::FailOpen
                    } else {
                        DecisionSource::FailClosed
                    };
                    GuardedDecision {
                        decision,
                        source,
                        store_latency: None,
                    }
                })
                .collect::<Vec<_>>()
        };
        match self.policy {
            StoreDownPolicy::FailOpen => Ok(fixed(true)),
            StoreDownPolicy::FailClosed => Ok(fixed(false)),
            StoreDownPolicy::Local { .. } => self.local(checks).await,
        }
    }

    /// `Local`: the same checks, all or nothing, on this process's shares (each class keeping
    /// its share of its reserve).
    async fn local(&self, checks: &[GuardCheck<'_>]) -> Result<Vec<GuardedDecision>> {
        let local = &self.shared.local;
        let mut twins = Vec::with_capacity(checks.len());
        for (limit, _, _) in checks {
            twins.push(local.twin(limit).await?);
        }
        let too_big = checks
            .iter()
            .zip(&twins)
            .any(|((_, _, o), twin)| !fits(&twin.quota(), o.cost_of(), o.class_of()));
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
                    slots: Default::default(),
                })
                .collect()
        } else if let [(_, key, options)] = checks {
            // The caller's budget was the store's: this process's share answers at once.
            let unbounded = options.clone().within(Duration::MAX);
            vec![twins[0].check_with(key, unbounded).await?]
        } else {
            let local_checks: Vec<KeyCheck<'_>> = checks
                .iter()
                .zip(&twins)
                .map(|((_, key, options), twin)| {
                    let check = KeyCheck::new(twin, *key, options.cost_of());
                    let check = match options.class_of() {
                        Some(c) => check.class(c),
                        None => check,
                    };
                    match options.flow_of() {
                        Some(f) => check.flow(f),
                        None => check,
                    }
                })
                .collect();
            local.limiter().await?.check_all(&local_checks).await?
        };
        Ok(decisions
            .into_iter()
            .map(|decision| GuardedDecision {
                decision,
                source: DecisionSource::Local,
                store_latency: None,
            })
            .collect())
    }
}

/// One check as the policy answers it: limit, key, and how it asks.
type GuardCheck<'a> = (&'a RateLimit, &'a str, CheckOptions);

/// The options of one check of a `check_all`: its cost, class and flow.
fn options_of(check: &KeyCheck<'_>) -> CheckOptions {
    let options = CheckOptions::new().cost(check.parts().2);
    let options = match check.class_of() {
        Some(c) => options.class(c),
        None => options,
    };
    match check.flow_of() {
        Some(f) => options.flow(f),
        None => options,
    }
}

/// A flow name is bad input whether or not the store answers (`InvalidArgument`).
fn check_flow(flow: Option<&str>) -> Result<()> {
    match flow.map(FlowId::of) {
        Some(Err(why)) => Err(Error::invalid(why)),
        _ => Ok(()),
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
