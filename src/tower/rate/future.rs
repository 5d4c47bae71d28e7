//! The response future: the check first, then the inner call, then the decision's fields on
//! the response.

use super::admit::{Admission, Fields, Plan, Policy};
use super::error::RateLimitInfo;
use super::respond::Respond;
use futures::future::BoxFuture;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tower_service::Service;

pin_project_lite::pin_project! {
    /// Future of [`ClusterRateLimit`](super::ClusterRateLimit): checks the request, then calls
    /// the inner service if it was admitted.
    ///
    /// Cancel-safe as [`RateLimit::check_n`](crate::RateLimit::check_n): dropping it while a
    /// check is in flight never disturbs other requests (that check may or may not have
    /// consumed); dropping it while it waits between checks (wait mode) consumes nothing.
    /// Dropping it never panics and leaves nothing behind.
    pub struct RateLimitFuture<S, Req, M>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req>,
        mode: PhantomData<fn() -> M>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, Req>
    where
        S: Service<Req>,
    {
        Admitting {
            admission: BoxFuture<'static, Admission>,
            // Both `Some` until the admission is decided.
            inner: Option<S>,
            req: Option<Req>,
        },
        Running {
            #[pin]
            call: S::Future,
            info: Option<RateLimitInfo>,
            fields: Fields,
        },
        Done,
    }
}

impl<S: Service<Req>, Req, M> RateLimitFuture<S, Req, M> {
    pub(crate) fn new(policy: Arc<Policy>, plan: Plan, inner: S, req: Req) -> Self {
        RateLimitFuture {
            state: State::Admitting {
                admission: Box::pin(async move { policy.admit(plan).await }),
                inner: Some(inner),
                req: Some(req),
            },
            mode: PhantomData,
        }
    }
}

impl<S: Service<Req>, Req, M> std::fmt::Debug for RateLimitFuture<S, Req, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Admitting { .. } => "admitting",
            State::Running { .. } => "running",
            State::Done => "done",
        };
        f.debug_struct("RateLimitFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, Req, M> Future for RateLimitFuture<S, Req, M>
where
    S: Service<Req>,
    M: Respond<S::Response, S::Error>,
{
    type Output = Result<S::Response, M::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting {
                    admission,
                    inner,
                    req,
                } => {
                    let admitted = ready!(admission.as_mut().poll(cx));
                    let (info, fields, mut inner, req) = match (admitted, inner.take(), req.take())
                    {
                        (Admission::Pass(info, fields), Some(inner), Some(req)) => {
                            (info, fields, inner, req)
                        }
                        (Admission::Reject(rejection, fields), _, _) => {
                            this.state.set(State::Done);
                            return Poll::Ready(M::rejected(rejection, fields));
                        }
                        // Not reachable: both are taken only here, right before leaving this state.
                        (Admission::Pass(..), _, _) => {
                            this.state.set(State::Done);
                            return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                        }
                    };
                    let call = inner.call(req);
                    this.state.set(State::Running { call, info, fields });
                }
                StateProj::Running { call, info, fields } => {
                    let output = ready!(call.poll(cx));
                    let (info, fields) = (info.take(), std::mem::take(fields));
                    this.state.set(State::Done);
                    return Poll::Ready(match output {
                        Ok(res) => Ok(M::admitted(res, info, fields)),
                        Err(e) => Err(M::service_error(e)),
                    });
                }
                StateProj::Done => {
                    return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()))
                }
            }
        }
    }
}

fn polled_after_completion() -> super::RateLimitError<std::convert::Infallible> {
    super::RateLimitError::Limiter(crate::Error::invalid(
        "RateLimitFuture polled after it completed",
    ))
}
