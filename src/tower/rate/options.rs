//! The layer's choices for a request over the limit ([`OnLimit`]) and for one without a key
//! ([`OnMissingKey`]).

use std::time::Duration;

/// What a request over the limit gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLimit {
    /// Rejected at once (429, or [`RateLimitError::RateLimited`](super::RateLimitError::RateLimited)).
    #[default]
    Reject,
    /// Waits (without holding anything in the store) until the key admits it, up to this
    /// long; rejected as with [`Reject`](Self::Reject) when the next chance falls past the
    /// deadline (nothing consumed then). Shapes bursts instead of refusing them, like nginx's
    /// `limit_req` with `delay`. Zero: the same as `Reject`.
    WaitUpTo(Duration),
}

/// What a request without a key gets (the key function answered `None` or `Err`).
///
/// ```
/// # async fn f(api: clusterlimit::RateLimit) {
/// use clusterlimit::tower::{key, ClusterRateLimitLayer, OnMissingKey};
/// // Clients without an API key share one quota.
/// let layer = ClusterRateLimitLayer::new(api, key::header("x-api-key"))
///     .on_missing_key(OnMissingKey::UseKey("anonymous".into()));
/// # let _ = layer;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Rejected without a check: 400 with `code: "missing_key"`, `field: "key"`, or
    /// [`RateLimitError::MissingKey`](super::RateLimitError::MissingKey). Right when every
    /// legitimate client sends the key (an API key): a client cannot dodge the limit by
    /// leaving it out.
    #[default]
    Reject,
    /// Counted under this one key, shared by every request without one (e.g. `"anonymous"`):
    /// keyless clients get one quota between them.
    UseKey(String),
    /// Run unchecked (internal traffic that carries no key). Such a request is not limited.
    Admit,
}
