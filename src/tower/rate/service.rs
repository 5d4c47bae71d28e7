//! The rate-limited service.

use super::admit::Policy;
use super::class::{ClassFn, NoClass};
use super::cost::CostFn;
use super::flow::{NoRateFlow, RateFlowFn};
use super::future::RateLimitFuture;
use super::key::KeyFn;
use super::respond::Respond;
use super::settle::{NoSettle, SettleFn};
use super::settling::SettleStats;
use crate::tower::inner::{inner_accessors, take_ready};
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A service whose requests are each checked against a cluster-wide rate limit before they
/// run; made by [`ClusterRateLimitLayer`](super::ClusterRateLimitLayer).
///
/// `poll_ready` is the inner service's: nothing is checked or consumed for a service that is
/// polled ready but never called. The key and cost are read in `call`; the check runs in the
/// [`RateLimitFuture`], and the inner service (a clone, as tower's deferring middleware
/// requires) is called only once the request is admitted.
///
/// In wait mode ([`OnLimit::WaitUpTo`](super::OnLimit::WaitUpTo)) the request does not keep
/// the inner service's readiness while it waits (which would hold, say, a `ConcurrencyLimit`
/// slot or a `Buffer` place inside for up to the whole wait): the clone polled ready is
/// dropped in `call`, and a fresh clone is polled ready once the request is admitted (its
/// cost is then spent even if that readiness takes a while or fails). In reject mode the
/// clone polled ready is kept through the one check (at most the store timeout).
pub struct ClusterRateLimit<S, K, C, M, L = NoClass, F = NoRateFlow, X = NoSettle> {
    inner: S,
    policy: Arc<Policy>,
    key: Arc<K>,
    cost: Arc<C>,
    classes: Arc<L>,
    flows: Arc<F>,
    settle: Arc<X>,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, K, C, M, L, F, X> Clone for ClusterRateLimit<S, K, C, M, L, F, X> {
    fn clone(&self) -> Self {
        ClusterRateLimit {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            key: self.key.clone(),
            cost: self.cost.clone(),
            classes: self.classes.clone(),
            flows: self.flows.clone(),
            settle: self.settle.clone(),
            mode: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, K, C, M, L, F, X> std::fmt::Debug
    for ClusterRateLimit<S, K, C, M, L, F, X>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRateLimit")
            .field("inner", &self.inner)
            .field("limit", &self.policy.limit.name())
            .finish_non_exhaustive()
    }
}

/// What the layer gives each service it makes, besides the inner one.
pub(crate) struct Parts<K, C, L, F, X> {
    pub(crate) key: Arc<K>,
    pub(crate) cost: Arc<C>,
    pub(crate) classes: Arc<L>,
    pub(crate) flows: Arc<F>,
    pub(crate) settle: Arc<X>,
}

impl<S, K, C, M, L, F, X> ClusterRateLimit<S, K, C, M, L, F, X> {
    pub(crate) fn new(inner: S, policy: Arc<Policy>, parts: Parts<K, C, L, F, X>) -> Self {
        ClusterRateLimit {
            inner,
            policy,
            key: parts.key,
            cost: parts.cost,
            classes: parts.classes,
            flows: parts.flows,
            settle: parts.settle,
            mode: PhantomData,
        }
    }

    /// How the settlements of the layer that made this service went (see
    /// [`ClusterRateLimitLayer::settle_stats`](super::ClusterRateLimitLayer::settle_stats)).
    pub fn settle_stats(&self) -> SettleStats {
        self.policy.settle_counts.stats()
    }

    inner_accessors!();
}

impl<S, Req, K, C, M, L, F, X> Service<Req> for ClusterRateLimit<S, K, C, M, L, F, X>
where
    S: Service<Req> + Clone,
    K: KeyFn<Req>,
    C: CostFn<Req>,
    L: ClassFn<Req>,
    F: RateFlowFn<Req>,
    M: Respond<S::Response, S::Error>,
    X: SettleFn<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = RateLimitFuture<S, Req, M, X>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::service_error)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let cost = self.cost.cost(&req);
        let asker = (self.classes.class(&req), self.flows.flow(&req));
        let plan = self.policy.plan(self.key.key(&req), cost, asker);
        // Called once admitted.
        let ready = take_ready(&mut self.inner);
        let settle = self.settle.clone();
        RateLimitFuture::new(self.policy.clone(), plan, ready, req, settle)
    }
}
