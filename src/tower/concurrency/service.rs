//! The limited service.

use super::admit::Policy;
use super::classify::{Classify, DefaultClassifier};
use super::error::LimitError;
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
#[derive(Debug, Clone)]
pub struct ClusterConcurrencyLimit<S, C = DefaultClassifier> {
    inner: S,
    policy: Arc<Policy>,
    classify: C,
}

impl<S, C> ClusterConcurrencyLimit<S, C> {
    pub(crate) fn new(inner: S, policy: Arc<Policy>, classify: C) -> Self {
        ClusterConcurrencyLimit {
            inner,
            policy,
            classify,
        }
    }

    inner_accessors!();
}

impl<S, C, Req> Service<Req> for ClusterConcurrencyLimit<S, C>
where
    S: Service<Req> + Clone,
    C: Classify<S::Response, S::Error> + Clone,
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
        ResponseFuture::new(self.policy.clone(), ready, req, self.classify.clone())
    }
}
