//! The error of a limited service: a rejection, or the inner service's own error.

use crate::error::Error;
use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

/// Why a request through [`ClusterConcurrencyLimit`](super::ClusterConcurrencyLimit) failed.
///
/// The first three variants mean the request was **not run**; [`Service`](Self::Service) is the
/// inner service's own error. [`retry_after`](Self::retry_after) tells the rejections meant as
/// "try later" apart, for a 503 or a 429:
///
/// ```
/// use clusterlimit::tower::LimitError;
/// use std::time::Duration;
/// fn status_of(e: &LimitError<std::io::Error>) -> (u16, Option<Duration>) {
///     match e {
///         LimitError::Service(_) => (500, None),
///         LimitError::Limiter(_) => (500, None), // a setup mistake: weight above capacity, ...
///         _ => (503, e.retry_after()),           // Timeout, StoreUnavailable
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum LimitError<E> {
    /// No permit came within the acquire timeout and `on_timeout` is
    /// [`Fallback::Reject`](super::Fallback::Reject): the cluster is at its cap.
    Timeout {
        /// Semaphore whose permits were asked for.
        semaphore: String,
        /// How long the request waited.
        waited: Duration,
        /// When to try again (the layer's `retry_after`).
        retry_after: Duration,
    },
    /// The store failed or did not answer and `on_store_error` is
    /// [`Fallback::Reject`](super::Fallback::Reject).
    StoreUnavailable {
        /// Semaphore whose permits were asked for.
        semaphore: String,
        /// The store's error (or why the store was not asked).
        source: Error,
        /// When to try again (the layer's `retry_after`).
        retry_after: Duration,
    },
    /// The Limiter refused the request for a reason no fallback covers: a weight above the
    /// capacity (`InvalidArgument`), a closed Limiter (`Closed`), a semaphore that is gone.
    Limiter(Error),
    /// The inner service failed.
    Service(E),
}

impl<E> LimitError<E> {
    /// When the client should try again, for a rejection meant as "try later"
    /// ([`Timeout`](Self::Timeout), [`StoreUnavailable`](Self::StoreUnavailable)); `None` for
    /// the others.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LimitError::Timeout { retry_after, .. }
            | LimitError::StoreUnavailable { retry_after, .. } => Some(*retry_after),
            LimitError::Limiter(_) | LimitError::Service(_) => None,
        }
    }

    /// Whether the request was not run (every variant but [`Service`](Self::Service)).
    pub fn is_rejected(&self) -> bool {
        !matches!(self, LimitError::Service(_))
    }
}

impl LimitError<Infallible> {
    /// A rejection, as the error of any inner service.
    pub(crate) fn widen<E>(self) -> LimitError<E> {
        match self {
            LimitError::Timeout {
                semaphore,
                waited,
                retry_after,
            } => LimitError::Timeout {
                semaphore,
                waited,
                retry_after,
            },
            LimitError::StoreUnavailable {
                semaphore,
                source,
                retry_after,
            } => LimitError::StoreUnavailable {
                semaphore,
                source,
                retry_after,
            },
            LimitError::Limiter(e) => LimitError::Limiter(e),
            LimitError::Service(never) => match never {},
        }
    }
}

impl<E: fmt::Display> fmt::Display for LimitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitError::Timeout {
                semaphore, waited, ..
            } => write!(
                f,
                "no permit of semaphore {semaphore:?} within {waited:?}: the cluster is at its cap"
            ),
            LimitError::StoreUnavailable {
                semaphore, source, ..
            } => write!(
                f,
                "no permit of semaphore {semaphore:?}: store unavailable: {source}"
            ),
            LimitError::Limiter(e) => write!(f, "cannot limit the request: {e}"),
            LimitError::Service(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LimitError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LimitError::Timeout { .. } => None,
            LimitError::StoreUnavailable { source, .. } => Some(source),
            LimitError::Limiter(e) => Some(e),
            LimitError::Service(e) => Some(e),
        }
    }
}
