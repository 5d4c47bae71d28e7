//! What a request costs: 1 by default, or a closure over the request.

/// Finds the cost of a request of type `Req`. Implemented for every `Fn(&Req) -> u64` and for
/// [`OnePerRequest`].
pub trait CostFn<Req> {
    /// The cost of `req`. 0 makes the request free: it passes without a check (and needs no
    /// key).
    fn cost(&self, req: &Req) -> u64;
}

impl<F, Req> CostFn<Req> for F
where
    F: Fn(&Req) -> u64,
{
    fn cost(&self, req: &Req) -> u64 {
        self(req)
    }
}

/// Every request costs 1 (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct OnePerRequest;

impl<Req> CostFn<Req> for OnePerRequest {
    fn cost(&self, _: &Req) -> u64 {
        1
    }
}
