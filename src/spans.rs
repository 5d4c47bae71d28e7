//! The library's `tracing` spans, in one place: their names and fields are what an operator
//! reads in a trace (docs/operations.md#tracing). All are at DEBUG level, so a subscriber at
//! the usual INFO (the sidecar's default logs) never creates them: a disabled span is an
//! atomic load, and no field is formatted unless a subscriber records it.

use crate::error::{Error, Result};
use crate::permit::Permit;
use crate::rate::Decision;
use std::future::Future;
use std::time::Instant;
use tracing::field::{display, Empty};
use tracing::{Instrument as _, Span};

/// A rate check (`RateLimit::check*`): the limit, the key, the cost; the decision is filled
/// in by [`decided`].
pub(crate) fn rate_check(name: &str, key: &str, cost: u64) -> Span {
    tracing::debug_span!(
        "rate_limit.check",
        name,
        key,
        cost,
        allowed = Empty,
        remaining = Empty,
        limit = Empty,
        error = Empty,
        "otel.status_code" = Empty,
    )
}

/// Several checks decided together (`Limiter::check_all`, an RLS request of several
/// descriptors): their joint write is made by a task shared with other calls, not a child.
pub(crate) fn check_all(checks: usize) -> Span {
    tracing::debug_span!("rate_limit.check_all", checks)
}

/// A wait for admission (`RateLimit::wait*`): its checks are children.
pub(crate) fn rate_wait(name: &str, key: &str, cost: u64) -> Span {
    tracing::debug_span!("rate_limit.wait", name, key, cost)
}

/// Records a check's outcome on its span, and hands the outcome on.
pub(crate) fn decided(span: &Span, outcome: Result<Decision>) -> Result<Decision> {
    match &outcome {
        Ok(d) => {
            span.record("allowed", d.allowed);
            span.record("remaining", d.remaining);
            span.record("limit", d.limit);
        }
        Err(e) => failed(span, e),
    }
    outcome
}

/// A permit acquire (`Semaphore::acquire*`): the semaphore, the weight asked, whether it
/// waits; the fencing token when granted ([`granted`]). The store request and the queue wait
/// under it are children.
pub(crate) fn acquire(name: &str, permits: u32, wait: bool) -> Span {
    tracing::debug_span!(
        "semaphore.acquire",
        name,
        permits,
        wait,
        token = Empty,
        error = Empty,
        "otel.status_code" = Empty,
    )
}

/// Records an acquire's fencing token, or its error.
pub(crate) fn granted(span: &Span, acquired: &Result<Permit>) {
    match acquired {
        Ok(permit) => {
            span.record("token", permit.fencing_token());
        }
        Err(e) => failed(span, e),
    }
}

/// The wait in a semaphore's queue after an enqueue that was not granted at once.
pub(crate) fn queue_wait() -> Span {
    tracing::debug_span!("semaphore.queue_wait")
}

/// A request to the store (`op`: what it does), opened where it is sent, so that a request
/// sent from a task of its own is still a child of the call that asked for it ([`timed`]).
pub(crate) fn store_request(op: &'static str) -> Span {
    tracing::debug_span!(
        "store.request",
        op,
        latency_us = Empty,
        error = Empty,
        "otel.status_code" = Empty,
    )
}

/// Runs `call` in `span`, recording its latency (microseconds) and its error, if any.
pub(crate) async fn timed<T>(span: Span, call: impl Future<Output = Result<T>>) -> Result<T> {
    if span.is_disabled() {
        return call.await;
    }
    let started = Instant::now();
    let result = call.instrument(span.clone()).await;
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    span.record("latency_us", micros);
    if let Err(e) = &result {
        failed(&span, e);
    }
    result
}

/// A store request `op` around `call`: [`timed`] in a new [`store_request`] span.
pub(crate) async fn store<T>(op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    timed(store_request(op), call).await
}

/// Marks `span` failed, with the error's message.
fn failed(span: &Span, e: &Error) {
    span.record("error", display(e));
    span.record("otel.status_code", "ERROR");
}
