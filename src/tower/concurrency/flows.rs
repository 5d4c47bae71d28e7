//! Which flow, class and weight a request acquires with on a fair semaphore: the
//! [`FlowFn`] of [`ClusterConcurrencyLimitLayer::flows`](super::ClusterConcurrencyLimitLayer::flows).

use crate::fair::FairTag;

/// Names each request's place on a [fair semaphore](crate::Limiter::fair_semaphore): its flow
/// (tenant, user, job family), its class and its flow's weight, as a [`FairTag`]. Closures
/// `Fn(&Request) -> FairTag` are `FlowFn`s; the default, [`DefaultFlow`], names nothing (on a
/// fair semaphore every request is then in the flow `"default"` of the first class).
///
/// A tag the semaphore refuses (an empty flow name, a class it does not have, a weight of 0)
/// fails that request with [`LimitError::Limiter`](super::LimitError::Limiter), as a
/// setup mistake; on a plain semaphore every tagged request fails so.
///
/// ```
/// use clusterlimit::fair::FairTag;
/// // The tenant from a header; requests of the `/reports` path in the class `batch`.
/// let flows = |req: &http::Request<String>| {
///     let tenant = req.headers().get("x-tenant").and_then(|v| v.to_str().ok());
///     let tag = FairTag::new(tenant.unwrap_or("anonymous"));
///     if req.uri().path().starts_with("/reports") { tag.class("batch") } else { tag }
/// };
/// # let _ = flows;
/// ```
pub trait FlowFn<Req> {
    /// The tag of `req`; `None` acquires without one.
    fn tag(&self, req: &Req) -> Option<FairTag>;
}

impl<F, Req> FlowFn<Req> for F
where
    F: Fn(&Req) -> FairTag,
{
    fn tag(&self, req: &Req) -> Option<FairTag> {
        Some(self(req))
    }
}

/// The default [`FlowFn`]: requests name no flow (a plain semaphore's acquire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultFlow;

impl<Req> FlowFn<Req> for DefaultFlow {
    fn tag(&self, _: &Req) -> Option<FairTag> {
        None
    }
}
