//! [`StoreDownGuard`]: what a rate limit answers while its store cannot be asked (fail open,
//! fail closed, or an in-process share of the limit), behind a circuit breaker so a down store
//! costs no latency per request. Used by the sidecar's RLS answers and the tower layer.

mod guard;
mod local;
mod policy;

pub use guard::{Guarded, Source, StoreDownGuard, DEFAULT_GUARD_RETRY_INTERVAL};
pub use policy::StoreDownPolicy;
