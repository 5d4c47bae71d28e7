//! A command's `--timeout` as one deadline over all its steps: connecting, opening the
//! semaphore or rate limit, and waiting. A step the store does not answer by then ends the
//! command at the deadline with exit 69 (the store is the trouble, not contention).

use crate::common::{exit, Failure};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// The end of `--timeout` (none: no end).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    at: Option<Instant>,
    given: Option<Duration>,
}

impl Deadline {
    /// Starts now; a timeout too long to represent is no timeout.
    pub fn after(timeout: Option<Duration>) -> Self {
        Deadline {
            at: timeout.and_then(|t| Instant::now().checked_add(t)),
            given: timeout,
        }
    }

    /// What is left of it (zero once past); `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Runs `step`, or fails when the deadline passes first: "the store did not answer within
    /// --timeout 3s while `doing`".
    pub async fn bound<T>(
        &self,
        doing: &str,
        step: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let (Some(at), Some(given)) = (self.at, self.given) else {
            return step.await;
        };
        tokio::time::timeout_at(at, step).await.unwrap_or_else(|_| {
            Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "the store did not answer within --timeout {} while {doing}",
                    crate::common::format_duration(given)
                ),
            ))
        })
    }
}

/// Ends the store session of a one-shot command. After a failure of the store itself
/// (`store_failed`) nothing is awaited: a silent store would hold the exit for a whole request
/// timeout, and the session's TTL frees whatever it held. Otherwise the close (which frees the
/// session at once) gets one request timeout.
pub async fn close(limiter: &clusterlimit::Limiter, store_failed: bool, request_timeout: Duration) {
    if store_failed {
        return;
    }
    match tokio::time::timeout(request_timeout, limiter.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "closing the store session; its TTL frees it"),
        Err(_) => tracing::warn!("closing the store session timed out; its TTL frees it"),
    }
}
