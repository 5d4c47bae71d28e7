//! The rate-limited service.

use super::admit::Policy;
use super::class::{ClassFn, NoClass};
use super::cost::CostFn;
use super::flow::{NoRateFlow, RateFlowFn};
use super::future::RateLimitFuture;
use super::key::KeyFn;
use super::respond::Respond;
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
pub struct ClusterRateLimit<S, K, C, M, L = NoClass, F = NoRateFlow> {
    inner: S,
    policy: Arc<Policy>,
    key: Arc<K>,
    cost: Arc<C>,
    classes: Arc<L>,
    flows: Arc<F>,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, K, C, M, L, F> Clone for ClusterRateLimit<S, K, C, M, L, F> {
    fn clone(&self) -> Self {
        ClusterRateLimit {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            key: self.key.clone(),
            cost: self.cost.clone(),
            classes: self.classes.clone(),
            flows: self.flows.clone(),
            mode: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, K, C, M, L, F> std::fmt::Debug for ClusterRateLimit<S, K, C, M, L, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRateLimit")
            .field("inner", &self.inner)
            .field("limit", &self.policy.limit.name())
            .finish_non_exhaustive()
    }
}

impl<S, K, C, M, L, F> ClusterRateLimit<S, K, C, M, L, F> {
    pub(crate) fn new(
        inner: S,
        policy: Arc<Policy>,
        key: Arc<K>,
        cost: Arc<C>,
        classes: Arc<L>,
        flows: Arc<F>,
    ) -> Self {
        ClusterRateLimit {
            inner,
            policy,
            key,
            cost,
            classes,
            flows,
            mode: PhantomData,
        }
    }

    inner_accessors!();
}

impl<S, Req, K, C, M, L, F> Service<Req> for ClusterRateLimit<S, K, C, M, L, F>
where
    S: Service<Req> + Clone,
    K: KeyFn<Req>,
    C: CostFn<Req>,
    L: ClassFn<Req>,
    F: RateFlowFn<Req>,
    M: Respond<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = M::Error;
    type Future = RateLimitFuture<S, Req, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(M::service_error)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let cost = self.cost.cost(&req);
        let asker = (self.classes.class(&req), self.flows.flow(&req));
        let plan = self.policy.plan(self.key.key(&req), cost, asker);
        // Called once admitted.
        let ready = take_ready(&mut self.inner);
        RateLimitFuture::new(self.policy.clone(), plan, ready, req)
    }
}
