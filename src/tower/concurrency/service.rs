//! The limited service.

use super::admit::Policy;
use super::classify::{Classify, DefaultClassifier};
use super::error::LimitError;
use super::future::ResponseFuture;
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

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
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
        // The service that was polled ready goes with the request (it is called once the
        // permit is granted); a fresh clone takes its place and is polled for the next one.
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::new(self.policy.clone(), ready, req, self.classify.clone())
    }
}
