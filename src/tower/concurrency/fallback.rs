//! [`Fallback`]: what the concurrency layer does with a request that got no permit in time.

use crate::store_down::policy::StoreDownPolicy;

/// What to do with a request that got no permit by its deadline ([`on_timeout`]); also
/// accepted by [`on_store_error`], whose vocabulary is the rate layers' [`StoreDownPolicy`]
/// (`Reject` is [`StoreDownPolicy::FailClosed`]).
///
/// [`on_timeout`]: super::ClusterConcurrencyLimitLayerBuilder::on_timeout
/// [`on_store_error`]: super::ClusterConcurrencyLimitLayerBuilder::on_store_error
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fallback {
    /// Do not run the request: answer [`LimitError::Timeout`](super::LimitError::Timeout) or
    /// [`LimitError::StoreUnavailable`](super::LimitError::StoreUnavailable). Keeps the cap.
    #[default]
    Reject,
    /// Run the request without a permit: availability before the cap. Logged at `debug` per
    /// request, and at `warn` when the store goes down.
    FailOpen,
}

impl From<Fallback> for StoreDownPolicy {
    fn from(f: Fallback) -> StoreDownPolicy {
        match f {
            Fallback::Reject => StoreDownPolicy::FailClosed,
            Fallback::FailOpen => StoreDownPolicy::FailOpen,
        }
    }
}
