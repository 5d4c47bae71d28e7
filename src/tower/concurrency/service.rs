//! The limited service.

use super::admit::Policy;
use super::classify::{Classify, DefaultClassifier};
use super::error::LimitError;
use super::flows::{DefaultFlow, FlowFn};
use super::future::ResponseFuture;
use crate::tower::inner::{inner_accessors, take_ready};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A service whose requests each hold permits of a cluster-wide semaphore while they run; made
/// by [`ClusterConcurrencyLimitLayer`](super::ClusterConcurrencyLimitLayer).
///
/// `poll_ready` is the inner service's; the permit is taken in the [`ResponseFuture`], before
/// the inner service is called (see the [module docs](crate::tower)).
pub struct ClusterConcurrencyLimit<S, C = DefaultClassifier, F = DefaultFlow> {
    inner: S,
    policy: Arc<Policy>,
    classify: C,
    flows: Arc<F>,
}

impl<S: Clone, C: Clone, F> Clone for ClusterConcurrencyLimit<S, C, F> {
    fn clone(&self) -> Self {
        ClusterConcurrencyLimit {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            classify: self.classify.clone(),
            flows: self.flows.clone(),
        }
    }
}

impl<S: std::fmt::Debug, C: std::fmt::Debug, F> std::fmt::Debug
    for ClusterConcurrencyLimit<S, C, F>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConcurrencyLimit")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .field("classify", &self.classify)
            .finish_non_exhaustive()
    }
}

impl<S, C, F> ClusterConcurrencyLimit<S, C, F> {
    pub(crate) fn new(inner: S, policy: Arc<Policy>, classify: C, flows: Arc<F>) -> Self {
        ClusterConcurrencyLimit {
            inner,
            policy,
            classify,
            flows,
        }
    }

    inner_accessors!();
}

impl<S, C, F, Req> Service<Req> for ClusterConcurrencyLimit<S, C, F>
where
    S: Service<Req> + Clone,
    C: Classify<S::Response, S::Error> + Clone,
    F: FlowFn<Req>,
{
    type Response = S::Response;
    type Error = LimitError<S::Error>;
    type Future = ResponseFuture<S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(LimitError::Service)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // Called once the permit is granted.
        let ready = take_ready(&mut self.inner);
        let tag = self.flows.tag(&req);
        ResponseFuture::new(self.policy.clone(), ready, req, self.classify.clone(), tag)
    }
}
