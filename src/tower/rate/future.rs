//! The response future: the check first, then the inner call, then the decision's fields on
//! the response.

use super::admit::{Admission, Fields, Plan, Policy};
use super::error::RateLimitInfo;
use super::options::OnLimit;
use super::respond::Respond;
use crate::tower::admitting::Admitting;
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
    ///
    /// In wait mode it does not hold the inner service's readiness while it waits: the clone
    /// that was polled ready is dropped at once (giving back, say, a concurrency-limit slot
    /// or a buffer's place), and a fresh clone is polled ready once the request is admitted.
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
            admitting: Admitting<S, Req, Admission>,
            // The service is a fresh clone (wait mode): poll it ready once admitted.
            unready: bool,
        },
        // Admitted; waiting for the fresh clone to be ready.
        Readying {
            // Both `Some` until the clone is ready.
            inner: Option<S>,
            req: Option<Req>,
            info: Option<RateLimitInfo>,
            fields: Fields,
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

impl<S: Service<Req> + Clone, Req, M> RateLimitFuture<S, Req, M> {
    /// `ready` is the inner service as polled ready for this request.
    pub(crate) fn new(policy: Arc<Policy>, plan: Plan, ready: S, req: Req) -> Self {
        // A wait may last seconds: give the readiness back meanwhile (see the type's docs).
        let waits = matches!(plan, Plan::Check(..))
            && matches!(policy.on_limit, OnLimit::WaitUpTo(up_to) if !up_to.is_zero());
        let inner = if waits {
            let fresh = ready.clone();
            drop(ready);
            fresh
        } else {
            ready
        };
        RateLimitFuture {
            state: State::Admitting {
                admitting: Admitting::new(async move { policy.admit(plan).await }, inner, req),
                unready: waits,
            },
            mode: PhantomData,
        }
    }
}

impl<S: Service<Req>, Req, M> std::fmt::Debug for RateLimitFuture<S, Req, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match self.state {
            State::Admitting { .. } => "admitting",
            State::Readying { .. } => "readying",
            State::Running { .. } => "running",
            State::Done => "done",
        };
        f.debug_struct("RateLimitFuture")
            .field("state", &stage)
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
                StateProj::Admitting { admitting, unready } => {
                    let (info, fields, mut inner, req) = match ready!(admitting.poll(cx)) {
                        (Admission::Pass(info, fields), Some((inner, req))) => {
                            (info, fields, inner, req)
                        }
                        (Admission::Reject(rejection, fields), _) => {
                            this.state.set(State::Done);
                            return Poll::Ready(M::rejected(rejection, fields));
                        }
                        // Not reachable: this stage is left as soon as it is decided.
                        (Admission::Pass(..), None) => {
                            this.state.set(State::Done);
                            return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                        }
                    };
                    if *unready {
                        this.state.set(State::Readying {
                            inner: Some(inner),
                            req: Some(req),
                            info,
                            fields,
                        });
                        continue;
                    }
                    let call = inner.call(req);
                    this.state.set(State::Running { call, info, fields });
                }
                StateProj::Readying {
                    inner,
                    req,
                    info,
                    fields,
                } => {
                    let Some(service) = inner.as_mut() else {
                        // Not reachable: taken only below, right before leaving this state.
                        this.state.set(State::Done);
                        return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                    };
                    if let Err(e) = ready!(service.poll_ready(cx)) {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(M::service_error(e)));
                    }
                    let (Some(mut service), Some(req)) = (inner.take(), req.take()) else {
                        this.state.set(State::Done);
                        return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                    };
                    let (info, fields) = (info.take(), std::mem::take(fields));
                    let call = service.call(req);
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

fn polled_after_completion() -> super::error::RateLimitError<std::convert::Infallible> {
    super::error::RateLimitError::Limiter(crate::error::Error::invalid(
        "RateLimitFuture polled after it completed",
    ))
}
