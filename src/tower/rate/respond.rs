//! How a service answers a rejection: an HTTP response ([`HttpResponses`], the default) or an
//! error ([`AsErrors`], for services that are not HTTP). A type parameter of the layer and the
//! service, so each kind of service gets the right answer without runtime checks.

use super::admit::Fields;
use super::error::{RateLimitError, RateLimitInfo};
use super::http_answer;
use std::convert::Infallible;

mod sealed {
    pub trait Sealed {}
}

/// How rejections and admissions are answered for a service with responses `Res` and errors
/// `E`. Sealed: [`HttpResponses`] and [`AsErrors`] are the two ways.
pub trait Respond<Res, E>: sealed::Sealed {
    /// The limited service's error type.
    type Error;
    /// The answer to a request that was not run.
    #[doc(hidden)]
    fn rejected(rejection: RateLimitError<Infallible>, fields: Fields) -> Result<Res, Self::Error>;
    /// The inner service's response to an admitted request, with the decision added.
    #[doc(hidden)]
    fn admitted(res: Res, info: Option<RateLimitInfo>, fields: Fields) -> Res;
    /// The inner service's error.
    #[doc(hidden)]
    fn service_error(e: E) -> Self::Error;
}

/// For `http::Request` → `http::Response<B>` services (axum routes, hyper services), the
/// default: every rejection is a response (429 `Too Many Requests`, 503 when the store is down
/// and the policy fail-closed, 400 for a missing or bad key, 500 for a setup mistake) with a
/// `application/problem+json` body, `Retry-After` and the RateLimit fields; admitted
/// responses get the RateLimit fields too. The service's error type stays the inner one
/// (`Infallible` for axum). The body type needs `From<String>` (axum's `Body`, `String`,
/// `http_body_util::Full<Bytes>` do). To shape the rejections yourself, use
/// [`AsErrors`] and map the [`RateLimitError`] (axum: in a `HandleErrorLayer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpResponses;

/// For any other service: a rejection is the error [`RateLimitError`] (tower's way, like its
/// own `Overloaded` or `Elapsed`); the response is the inner one, unchanged. Chosen with
/// [`reject_as_error`](super::ClusterRateLimitLayer::reject_as_error).
#[derive(Debug, Clone, Copy, Default)]
pub struct AsErrors;

impl sealed::Sealed for HttpResponses {}
impl sealed::Sealed for AsErrors {}

impl<B: From<String>, E> Respond<http::Response<B>, E> for HttpResponses {
    type Error = E;

    fn rejected(
        rejection: RateLimitError<Infallible>,
        fields: Fields,
    ) -> Result<http::Response<B>, E> {
        Ok(http_answer::rejection(rejection, &fields))
    }

    fn admitted(
        mut res: http::Response<B>,
        info: Option<RateLimitInfo>,
        fields: Fields,
    ) -> http::Response<B> {
        http_answer::add_fields(res.headers_mut(), &fields);
        if let Some(info) = info {
            res.extensions_mut().insert(info);
        }
        res
    }

    fn service_error(e: E) -> E {
        e
    }
}

impl<Res, E> Respond<Res, E> for AsErrors {
    type Error = RateLimitError<E>;

    fn rejected(rejection: RateLimitError<Infallible>, _: Fields) -> Result<Res, Self::Error> {
        Err(rejection.widen())
    }

    fn admitted(res: Res, _: Option<RateLimitInfo>, _: Fields) -> Res {
        res
    }

    fn service_error(e: E) -> RateLimitError<E> {
        RateLimitError::Service(e)
    }
}
