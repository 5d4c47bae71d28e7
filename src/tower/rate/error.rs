//! What a rate-limited request ended with: [`RateLimitInfo`] (the decision, carried by every
//! checked response) and [`RateLimitError`] (why a request was not run).

use crate::error::Error;
use crate::rate::Decision;
use crate::store_down::DecisionSource;
use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

/// The decision a request got, and who made it. HTTP responses of a
/// [`ClusterRateLimitLayer`](super::ClusterRateLimitLayer) carry it in their extensions
/// (admitted or rejected; not a request that was never checked: cost 0, or
/// [`OnMissingKey::Admit`](super::OnMissingKey::Admit)). With layers stacked, the outermost
/// layer's (each layer adds its own IETF `RateLimit` entry, though).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitInfo {
    /// Name of the rate limit.
    pub limit: String,
    /// The decision.
    pub decision: Decision,
    /// Whether the store decided, or a store-down fallback.
    pub source: DecisionSource,
}

/// Why a request through [`ClusterRateLimit`](super::ClusterRateLimit) failed, for services
/// that are not HTTP (made with [`reject_as_error`](super::ClusterRateLimitLayer::reject_as_error);
/// HTTP services get these as responses instead: 429, 503, 400, 500).
///
/// Every variant but [`Service`](Self::Service) means the request was **not run** (and, for a
/// denial, nothing was consumed).
///
/// ```
/// use clusterlimit::tower::RateLimitError;
/// fn status_of(e: &RateLimitError<std::io::Error>) -> u16 {
///     match e {
///         RateLimitError::RateLimited { .. } => 429, // e.retry_after() says when
///         RateLimitError::MissingKey { .. } | RateLimitError::InvalidRequest { .. } => 400,
///         _ => 500,
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RateLimitError<E> {
    /// Denied: the key has spent its quota ([`DecisionSource::Store`] or [`DecisionSource::Local`]), or the
    /// store is down and the policy is fail-closed ([`DecisionSource::FailClosed`]). In wait mode: no
    /// admission came before the deadline.
    RateLimited {
        /// Name of the rate limit.
        limit: String,
        /// The (last) denial: `retry_after` says when to try again.
        decision: Decision,
        /// Who decided.
        source: DecisionSource,
    },
    /// The request has no key and [`OnMissingKey::Reject`](super::OnMissingKey::Reject) is set.
    MissingKey {
        /// Name of the rate limit.
        limit: String,
        /// Why there is no key (from the key function).
        reason: String,
    },
    /// The request's key, cost, class or flow cannot be checked: a key of 0 or more than
    /// [`MAX_KEY_LEN`](crate::RateLimit::MAX_KEY_LEN) bytes (`field` is `"key"`), a cost above what
    /// the quota ever admits at once (`"cost"`), or a class the quota does not declare or
    /// whose reserve leaves no room for the cost (`"class"`), or a bad flow name (`"flow"`).
    /// An `InvalidArgument` that says which.
    InvalidRequest {
        /// `"key"`, `"cost"`, `"class"` or `"flow"`.
        field: &'static str,
        /// The `InvalidArgument` error.
        source: Error,
    },
    /// The Limiter refused for a reason no fallback covers: closed Limiter (`Closed`), a
    /// rate limit that was deleted (`NotFound`), no Tokio runtime. A setup mistake.
    Limiter(Error),
    /// The inner service failed.
    Service(E),
}

impl<E> RateLimitError<E> {
    /// When to try again, for a [`RateLimited`](Self::RateLimited) denial; `None` otherwise.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RateLimitError::RateLimited { decision, .. } => decision.retry_after,
            _ => None,
        }
    }

    /// Whether the request was not run (every variant but [`Service`](Self::Service)).
    pub fn is_rejected(&self) -> bool {
        !matches!(self, RateLimitError::Service(_))
    }
}

impl RateLimitError<Infallible> {
    /// A rejection, as the error of any inner service.
    pub(crate) fn widen<E>(self) -> RateLimitError<E> {
        match self {
            RateLimitError::RateLimited {
                limit,
                decision,
                source,
            } => RateLimitError::RateLimited {
                limit,
                decision,
                source,
            },
            RateLimitError::MissingKey { limit, reason } => {
                RateLimitError::MissingKey { limit, reason }
            }
            RateLimitError::InvalidRequest { field, source } => {
                RateLimitError::InvalidRequest { field, source }
            }
            RateLimitError::Limiter(e) => RateLimitError::Limiter(e),
            RateLimitError::Service(never) => match never {},
        }
    }
}

impl<E: fmt::Display> fmt::Display for RateLimitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimitError::RateLimited {
                limit,
                source: DecisionSource::FailClosed,
                ..
            } => write!(
                f,
                "rate limit {limit:?}: the store is unavailable and the policy is fail-closed"
            ),
            RateLimitError::RateLimited {
                limit, decision, ..
            } => {
                let secs = crate::rate::headers::retry_after_secs(decision).unwrap_or(1);
                write!(f, "rate limit {limit:?} exceeded; retry in {secs} s")
            }
            RateLimitError::MissingKey { limit, reason } => {
                write!(f, "rate limit {limit:?} needs a key: {reason}")
            }
            RateLimitError::InvalidRequest { field, source } => {
                write!(f, "bad rate-limit {field}: {source}")
            }
            RateLimitError::Limiter(e) => write!(f, "cannot rate-limit the request: {e}"),
            RateLimitError::Service(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RateLimitError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RateLimitError::RateLimited { .. } | RateLimitError::MissingKey { .. } => None,
            RateLimitError::InvalidRequest { source, .. } => Some(source),
            RateLimitError::Limiter(e) => Some(e),
            RateLimitError::Service(e) => Some(e),
        }
    }
}
