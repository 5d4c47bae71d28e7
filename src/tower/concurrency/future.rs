//! The response future: first the permit, then the inner call, holding the permit until the
//! inner future completes or this future is dropped.

use super::admit::{Admission, Policy};
use super::classify::{Classify, DefaultClassifier};
use super::error::LimitError;
use crate::error::Error;
use crate::fair::FairTag;
use crate::permit::Permit;
use crate::tower::admitting::Admitting;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;
use tower_service::Service;

pin_project_lite::pin_project! {
    /// Future of [`ClusterConcurrencyLimit`](super::ClusterConcurrencyLimit): waits for the
    /// permit, then calls the inner service and holds the permit until its future completes.
    ///
    /// Cancel-safe: dropping it while it waits removes the queue entry; dropping it while the
    /// inner call runs releases the permit (in the background, reporting no outcome), as does
    /// completing (reporting the classifier's outcome).
    pub struct ResponseFuture<S, Req, C = DefaultClassifier>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req>,
        classify: C,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, Req>
    where
        S: Service<Req>,
    {
        Admitting { admitting: Admitting<S, Req, Admission> },
        Running {
            #[pin]
            call: S::Future,
            permit: Option<Permit>,
            started: Instant,
        },
        Done,
    }
}

impl<S: Service<Req>, Req, C> ResponseFuture<S, Req, C> {
    pub(crate) fn new(
        policy: Arc<Policy>,
        inner: S,
        req: Req,
        classify: C,
        tag: Option<FairTag>,
    ) -> Self {
        ResponseFuture {
            state: State::Admitting {
                admitting: Admitting::new(async move { policy.admit(tag).await }, inner, req),
            },
            classify,
        }
    }
}

impl<S: Service<Req>, Req, C> std::fmt::Debug for ResponseFuture<S, Req, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match self.state {
            State::Admitting { .. } => "admitting",
            State::Running { .. } => "running",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &stage)
            .finish()
    }
}

impl<S, Req, C> Future for ResponseFuture<S, Req, C>
where
    S: Service<Req>,
    C: Classify<S::Response, S::Error>,
{
    type Output = Result<S::Response, LimitError<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting { admitting } => {
                    let (permit, mut inner, req) = match ready!(admitting.poll(cx)) {
                        (Ok(permit), Some((inner, req))) => (permit, inner, req),
                        (Err(rejected), _) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(rejected.widen()));
                        }
                        // Not reachable: this stage is left as soon as it is decided.
                        (Ok(_), None) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(polled_after_completion()));
                        }
                    };
                    let call = inner.call(req);
                    let started = Instant::now();
                    this.state.set(State::Running {
                        call,
                        permit,
                        started,
                    });
                }
                StateProj::Running {
                    call,
                    permit,
                    started,
                } => {
                    let output = ready!(call.poll(cx));
                    if let Some(p) = permit.as_mut() {
                        p.set_outcome(this.classify.classify(&output, started.elapsed()));
                    }
                    // Released now (in the background), not whenever this future is dropped.
                    drop(permit.take());
                    this.state.set(State::Done);
                    return Poll::Ready(output.map_err(LimitError::Service));
                }
                StateProj::Done => return Poll::Ready(Err(polled_after_completion())),
            }
        }
    }
}

fn polled_after_completion<E>() -> LimitError<E> {
    LimitError::Limiter(Error::invalid("ResponseFuture polled after it completed"))
}
