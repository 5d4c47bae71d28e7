//! When the store cannot be asked: one vocabulary for the permit and rate layers.
//!
//! * `breaker.rs`: the circuit breaker in front of a store (the tower layers and the guard
//!   share it): a store that errs or stops answering is left alone for a while, so a down store
//!   costs no latency per request; a busy store is not a down store.
//! * `policy.rs`: [`StoreDownPolicy`], the answer chosen for that time (fail open, fail
//!   closed, or an in-process share of the limit).
//! * `guard.rs`: [`StoreDownGuard`], rate checks through the store while it answers and the
//!   policy's answer while it does not, each answer saying where it came from
//!   ([`DecisionSource`]); `guard_wait.rs` its waits (a rate limit's one wait over guarded
//!   checks); `local.rs` holds the in-process shares.
//!
//! Used by the tower layers (`crate::tower`) and the sidecar's HTTP and RLS answers.

pub(crate) mod breaker;
pub(crate) mod guard;
mod guard_wait;
mod local;
pub(crate) mod policy;

pub use breaker::BreakerStats;
pub use guard::{
    ClusterBreaker, DecisionSource, GuardedDecision, StoreDownGuard, DEFAULT_GUARD_RETRY_INTERVAL,
};
pub use policy::StoreDownPolicy;
