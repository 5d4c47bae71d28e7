//! The response future: the check first, then the inner call, then the decision's fields on
//! the response.

use super::admit::{Admission, Fields, Plan, Policy};
use super::error::RateLimitInfo;
use super::options::OnLimit;
use super::respond::Respond;
use super::settle::{NoSettle, SettleFn};
use super::settling::Unsettled;
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
    /// With [`settle`](super::ClusterRateLimitLayer::settle), an admitted request's reservation
    /// is settled when the inner service answers (from the response, or as
    /// [`OnNoResponse`](super::OnNoResponse) says for an error), or when this future is dropped
    /// before it answered (as `OnNoResponse` says for a cancelled request); a settlement that
    /// needs the store runs in a spawned task, never delaying the response.
    ///
    /// In wait mode it does not hold the inner service's readiness while it waits: the clone
    /// that was polled ready is dropped at once (giving back, say, a concurrency-limit slot
    /// or a buffer's place), and a fresh clone is polled ready once the request is admitted.
    pub struct RateLimitFuture<S, Req, M, X = NoSettle>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req>,
        settle: Arc<X>,
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
            // All `Some` until the clone is ready.
            inner: Option<S>,
            req: Option<Req>,
            admitted: Option<Admitted>,
        },
        Running {
            #[pin]
            call: S::Future,
            // `Some` until the call ends; its reservation is settled when dropped with it.
            admitted: Option<Admitted>,
        },
        Done,
    }
}

/// What an admitted request carries to its response: the decision, the fields to add, and its
/// reservation if it is to be settled.
struct Admitted {
    info: Option<RateLimitInfo>,
    fields: Fields,
    unsettled: Option<Box<Unsettled>>,
}

impl<S: Service<Req> + Clone, Req, M, X> RateLimitFuture<S, Req, M, X> {
    /// `ready` is the inner service as polled ready for this request; `settle` reads its cost
    /// off the response.
    pub(crate) fn new(policy: Arc<Policy>, plan: Plan, ready: S, req: Req, settle: Arc<X>) -> Self {
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
            settle,
            mode: PhantomData,
        }
    }
}

impl<S: Service<Req>, Req, M, X> std::fmt::Debug for RateLimitFuture<S, Req, M, X> {
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

impl<S, Req, M, X> Future for RateLimitFuture<S, Req, M, X>
where
    S: Service<Req>,
    M: Respond<S::Response, S::Error>,
    X: SettleFn<S::Response, S::Error>,
{
    type Output = Result<S::Response, M::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let settle: &X = this.settle;
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting { admitting, unready } => {
                    let (admitted, mut inner, req) = match ready!(admitting.poll(cx)) {
                        (Admission::Pass(info, fields, unsettled), Some((inner, req))) => {
                            let admitted = Admitted {
                                info,
                                fields,
                                unsettled,
                            };
                            (Some(admitted), inner, req)
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
                        let (inner, req) = (Some(inner), Some(req));
                        this.state.set(State::Readying {
                            inner,
                            req,
                            admitted,
                        });
                        continue;
                    }
                    let call = inner.call(req);
                    this.state.set(State::Running { call, admitted });
                }
                StateProj::Readying {
                    inner,
                    req,
                    admitted,
                } => {
                    let Some(service) = inner.as_mut() else {
                        // Not reachable: taken only below, right before leaving this state.
                        this.state.set(State::Done);
                        return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                    };
                    if let Err(e) = ready!(service.poll_ready(cx)) {
                        let admitted = admitted.take();
                        this.state.set(State::Done);
                        return Poll::Ready(finish::<_, _, M, _>(Err(e), admitted, settle));
                    }
                    let (Some(mut service), Some(req)) = (inner.take(), req.take()) else {
                        this.state.set(State::Done);
                        return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()));
                    };
                    let admitted = admitted.take();
                    let call = service.call(req);
                    this.state.set(State::Running { call, admitted });
                }
                StateProj::Running { call, admitted } => {
                    let output = ready!(call.poll(cx));
                    let admitted = admitted.take();
                    this.state.set(State::Done);
                    return Poll::Ready(finish::<_, _, M, _>(output, admitted, settle));
                }
                StateProj::Done => {
                    return Poll::Ready(M::rejected(polled_after_completion(), Vec::new()))
                }
            }
        }
    }
}

/// The answer to an admitted request whose inner service ended with `output`, its reservation
/// settled first (a store write only spawned: the answer does not wait for it).
fn finish<Res, E, M, X>(
    output: Result<Res, E>,
    admitted: Option<Admitted>,
    settle: &X,
) -> Result<Res, M::Error>
where
    M: Respond<Res, E>,
    X: SettleFn<Res, E>,
{
    let Some(Admitted {
        info,
        fields,
        unsettled,
    }) = admitted
    else {
        // Not reachable: taken only when the call ends.
        return M::rejected(polled_after_completion(), Vec::new());
    };
    match (unsettled, &output) {
        (Some(u), Ok(res)) => u.answered(settle.actual(res)),
        (Some(u), Err(e)) => u.failed(settle.error(e)),
        (None, _) => {}
    }
    match output {
        Ok(res) => Ok(M::admitted(res, info, fields)),
        Err(e) => Err(M::service_error(e)),
    }
}

fn polled_after_completion() -> super::error::RateLimitError<std::convert::Infallible> {
    super::error::RateLimitError::Limiter(crate::error::Error::invalid(
        "RateLimitFuture polled after it completed",
    ))
}
