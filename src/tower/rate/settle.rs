//! Costs known only from the response: the [`SettleFn`] of
//! [`ClusterRateLimitLayer::settle`](super::ClusterRateLimitLayer::settle) that reads the real
//! cost off a response, and [`OnNoResponse`], what a request that got none settles at.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// What a settle function may return: the real cost (`u64`), or an `Option` of one (`None`:
/// the response does not say, and the estimate stays taken).
pub trait IntoActual {
    /// The real cost, if the response tells it.
    fn into_actual(self) -> Option<u64>;
}

impl IntoActual for u64 {
    fn into_actual(self) -> Option<u64> {
        Some(self)
    }
}

impl IntoActual for Option<u64> {
    fn into_actual(self) -> Option<u64> {
        self
    }
}

/// Reads the real cost of a request off its response (of type `Res`; the service's errors are
/// `E`). Closures `Fn(&Res) -> u64 | Option<u64>` are `SettleFn`s (for an error type that is
/// `'static`, so [`OnNoResponse::Classify`] can look at it); the default, [`NoSettle`], settles
/// nothing: requests are checked at their cost and that is final.
///
/// The closure sees the response's head (status, headers, extensions), never its body: a
/// usage written in the body is for the inner service to copy into a header or an extension
/// (the layer does not buffer bodies behind your back).
///
/// ```
/// // The tokens an LLM proxy's upstream reports in `x-usage-tokens`; none: keep the estimate.
/// let usage = |res: &http::Response<String>| {
///     res.headers().get("x-usage-tokens")?.to_str().ok()?.parse::<u64>().ok()
/// };
/// # let _ = usage;
/// ```
pub trait SettleFn<Res, E> {
    /// The real cost `res` reports; `None` keeps the estimate.
    fn actual(&self, res: &Res) -> Option<u64>;

    /// The error as [`OnNoResponse::Classify`] sees it (`None`: nothing is settled).
    #[doc(hidden)]
    fn error<'a>(&self, e: &'a E) -> Option<&'a dyn Any>;
}

impl<F, Res, E, O> SettleFn<Res, E> for F
where
    F: Fn(&Res) -> O,
    O: IntoActual,
    E: 'static,
{
    fn actual(&self, res: &Res) -> Option<u64> {
        self(res).into_actual()
    }

    fn error<'a>(&self, e: &'a E) -> Option<&'a dyn Any> {
        Some(e)
    }
}

/// The default [`SettleFn`]: nothing is reserved or settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoSettle;

impl<Res, E> SettleFn<Res, E> for NoSettle {
    fn actual(&self, _: &Res) -> Option<u64> {
        None
    }

    fn error<'a>(&self, _: &'a E) -> Option<&'a dyn Any> {
        None
    }
}

/// Why an admitted request got no response to read its cost from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum NoResponse<'a> {
    /// The inner service failed with this error (of the service's error type: see
    /// [`error`](Self::error)). Also when a service that gave its readiness back while the
    /// request waited (wait mode) failed to become ready again.
    Failed(&'a dyn Any),
    /// The response future was dropped before the inner service answered (the client went
    /// away, a timeout around the layer fired): the inner call was dropped with it.
    Cancelled,
}

impl<'a> NoResponse<'a> {
    /// The inner service's error, if it failed with one of type `E`.
    pub fn error<E: 'static>(&self) -> Option<&'a E> {
        match self {
            NoResponse::Failed(e) => e.downcast_ref(),
            NoResponse::Cancelled => None,
        }
    }
}

/// A classifier of [`OnNoResponse::Classify`]: the real cost of a request that got no response,
/// given why and its estimate.
pub type NoResponseFn = Arc<dyn Fn(NoResponse<'_>, u64) -> u64 + Send + Sync>;

/// What an admitted request that got no response settles at: one whose inner service failed,
/// or whose response future was dropped before the inner service answered
/// ([`ClusterRateLimitLayer::on_no_response`](super::ClusterRateLimitLayer::on_no_response)).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum OnNoResponse {
    /// The estimate stays taken (the default): a failed or abandoned call may still have cost
    /// the upstream its work (an LLM bills a generation cut off midway), and a client that can
    /// make requests fail must not get them free. As a [`Reservation`](crate::Reservation)
    /// dropped unsettled.
    #[default]
    KeepEstimate,
    /// The whole estimate is given back (settled at 0): for failures known to cost nothing.
    RefundAll,
    /// Settled at what the closure says, given why and the estimate (return the estimate to
    /// keep it, 0 to give it all back). Made with [`classify`](Self::classify).
    Classify(NoResponseFn),
}

impl OnNoResponse {
    /// [`Classify`](Self::Classify) by `f(why, estimate)`.
    ///
    /// ```
    /// use clusterlimit::tower::{NoResponse, OnNoResponse};
    /// // Refused at the upstream's door (nothing ran): free; anything else keeps the estimate.
    /// let policy = OnNoResponse::classify(|why, estimate| match why.error::<std::io::Error>() {
    ///     Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => 0,
    ///     _ => estimate,
    /// });
    /// # let _ = policy;
    /// ```
    pub fn classify(f: impl Fn(NoResponse<'_>, u64) -> u64 + Send + Sync + 'static) -> Self {
        OnNoResponse::Classify(Arc::new(f))
    }

    /// The real cost of a request of `estimate` that got no response, `why`.
    pub(crate) fn actual(&self, why: NoResponse<'_>, estimate: u64) -> u64 {
        match self {
            OnNoResponse::KeepEstimate => estimate,
            OnNoResponse::RefundAll => 0,
            OnNoResponse::Classify(f) => f(why, estimate),
        }
    }
}

impl fmt::Debug for OnNoResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnNoResponse::KeepEstimate => f.write_str("KeepEstimate"),
            OnNoResponse::RefundAll => f.write_str("RefundAll"),
            OnNoResponse::Classify(_) => f.write_str("Classify(..)"),
        }
    }
}
