//! What a finished request tells an adaptive semaphore: the [`Outcome`] its permit reports.

use crate::adaptive::Outcome;
use std::time::Duration;

/// Turns a request's result and latency (from the inner call's start to its completion) into
/// the [`Outcome`] its permit reports to an [adaptive semaphore](crate::Limiter::adaptive_semaphore).
/// Other semaphores ignore outcomes, so the classifier only matters with an adaptive one.
///
/// Closures `Fn(&Result<Response, Error>, Duration) -> Outcome` are classifiers: for HTTP,
/// count a 503 or 429 from the dependency as a drop:
///
/// ```
/// use clusterlimit::adaptive::Outcome;
/// use std::time::Duration;
/// let classify = |r: &Result<http::Response<String>, std::io::Error>, latency: Duration| match r {
///     Ok(res) if res.status() == 503 || res.status() == 429 => Outcome::Dropped,
///     Ok(res) if res.status().is_client_error() => Outcome::Ignore, // says nothing of load
///     Ok(_) => Outcome::Success(latency),
///     Err(_) => Outcome::Dropped,
/// };
/// # let _ = classify;
/// ```
pub trait Classify<Response, Error> {
    /// The outcome of one request.
    fn classify(&self, result: &Result<Response, Error>, latency: Duration) -> Outcome;
}

/// The default classifier: a response is a success with its latency, an error a drop (as
/// tower-acc and Netflix's concurrency-limits count them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultClassifier;

impl<Response, Error> Classify<Response, Error> for DefaultClassifier {
    fn classify(&self, result: &Result<Response, Error>, latency: Duration) -> Outcome {
        match result {
            Ok(_) => Outcome::Success(latency),
            Err(_) => Outcome::Dropped,
        }
    }
}

impl<F, Response, Error> Classify<Response, Error> for F
where
    F: Fn(&Result<Response, Error>, Duration) -> Outcome,
{
    fn classify(&self, result: &Result<Response, Error>, latency: Duration) -> Outcome {
        self(result, latency)
    }
}
