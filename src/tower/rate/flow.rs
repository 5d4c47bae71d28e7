//! Which flow (tenant) a request is checked as: the [`RateFlowFn`] of
//! [`ClusterRateLimitLayer::flows`](super::ClusterRateLimitLayer::flows).

use super::class::IntoClass;

/// Names each request's flow (tenant, user, client) on a rate limit whose quota shares each
/// key among its flows ([`Quota::fair_flows`](crate::Quota::fair_flows)): a request must
/// leave the other flows of its key their due. Closures `Fn(&Request) -> impl IntoClass`
/// (a name, or an `Option` of one: the same forms as a class) are `RateFlowFn`s; the default,
/// [`NoRateFlow`], names none (every request is of the one anonymous flow). On a quota without
/// fair flows the flow is ignored.
///
/// A flow name that is empty, longer than [`MAX_FLOW_LEN`](crate::rate::MAX_FLOW_LEN) bytes
/// or holds a control character refuses that request as a bad request without a check: 400
/// with `field: "flow"`, or
/// [`RateLimitError::InvalidRequest`](super::RateLimitError::InvalidRequest) with
/// `field: "flow"`.
///
/// ```
/// // Each request's flow is its tenant header, if any.
/// let flows = |req: &http::Request<String>| {
///     req.headers().get("x-tenant").and_then(|v| v.to_str().ok()).map(str::to_string)
/// };
/// # let _ = flows;
/// ```
pub trait RateFlowFn<Req> {
    /// The flow of `req`; `None` checks it in the anonymous flow.
    fn flow(&self, req: &Req) -> Option<String>;
}

impl<F, Req, O> RateFlowFn<Req> for F
where
    F: Fn(&Req) -> O,
    O: IntoClass,
{
    fn flow(&self, req: &Req) -> Option<String> {
        self(req).into_class()
    }
}

/// The default [`RateFlowFn`]: requests name no flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoRateFlow;

impl<Req> RateFlowFn<Req> for NoRateFlow {
    fn flow(&self, _: &Req) -> Option<String> {
        None
    }
}
