//! The first stage of both limiting middlewares' response futures (`concurrency`, `rate`):
//! the admission decided off the request path, with the inner service and the request kept
//! until it is.

use futures::future::BoxFuture;
use std::future::Future;
use std::task::{ready, Context, Poll};

/// An admission in flight, and what the call needs once it is decided.
pub(crate) struct Admitting<S, Req, A> {
    admission: BoxFuture<'static, A>,
    /// `Some` until the admission is decided.
    call: Option<(S, Req)>,
}

impl<S, Req, A> Admitting<S, Req, A> {
    pub(crate) fn new(
        admission: impl Future<Output = A> + Send + 'static,
        inner: S,
        req: Req,
    ) -> Self {
        Admitting {
            admission: Box::pin(admission),
            call: Some((inner, req)),
        }
    }

    /// The admission once decided, with the service and the request (`None` only if polled
    /// again after that: the response future has left this stage by then).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(A, Option<(S, Req)>)> {
        let admitted = ready!(self.admission.as_mut().poll(cx));
        Poll::Ready((admitted, self.call.take()))
    }
}
