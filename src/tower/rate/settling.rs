//! One admitted request's reservation until it is settled: at the cost its response reports,
//! or as [`OnNoResponse`] says when it got none (an error, or dropped: then on drop). A
//! settlement that needs the store runs in a spawned task, so the response never waits on it.

use super::settle::{NoResponse, OnNoResponse};
use crate::rate_limit::Reservation;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::runtime::Handle;

/// How a layer's settlements went ([`ClusterRateLimitLayer::settle_stats`](super::ClusterRateLimitLayer::settle_stats)),
/// counted since the layer was made, over every service it made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleStats {
    /// Reservations settled: at their estimate (no store request) or by a store write that
    /// succeeded.
    pub settled: u64,
    /// Settlements that failed (logged as warnings): the estimate stayed taken.
    pub failed: u64,
}

/// The counts behind [`SettleStats`], shared by a layer's services.
#[derive(Debug, Default)]
pub(crate) struct SettleCounts {
    settled: AtomicU64,
    failed: AtomicU64,
}

impl SettleCounts {
    pub(crate) fn stats(&self) -> SettleStats {
        SettleStats {
            settled: self.settled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// A request's reservation, settled exactly once: by [`answered`](Self::answered),
/// [`failed`](Self::failed), or when dropped (cancelled).
pub(crate) struct Unsettled {
    /// `Some` until settled.
    reservation: Option<Reservation>,
    limit: String,
    on_no_response: OnNoResponse,
    counts: Arc<SettleCounts>,
    /// Where the settlement runs, even when the drop happens off the runtime's threads.
    runtime: Handle,
}

impl Unsettled {
    pub(crate) fn new(
        reservation: Reservation,
        limit: &str,
        on_no_response: OnNoResponse,
        counts: Arc<SettleCounts>,
        runtime: Handle,
    ) -> Self {
        Unsettled {
            reservation: Some(reservation),
            limit: limit.to_string(),
            on_no_response,
            counts,
            runtime,
        }
    }

    /// The inner service answered, reporting `actual` (`None`: it did not say; the estimate
    /// stays taken).
    pub(crate) fn answered(mut self, actual: Option<u64>) {
        if let Some(r) = self.reservation.take() {
            let actual = actual.unwrap_or(r.estimate());
            self.settle(r, actual);
        }
    }

    /// The inner service failed (`None`: with an error the settle function does not show).
    pub(crate) fn failed(mut self, error: Option<&dyn std::any::Any>) {
        if let Some(r) = self.reservation.take() {
            let actual = match error {
                Some(e) => self
                    .on_no_response
                    .actual(NoResponse::Failed(e), r.estimate()),
                None => r.estimate(),
            };
            self.settle(r, actual);
        }
    }

    /// Settles `r` at `actual`: at once if that is its estimate (no store request), else in a
    /// spawned task, so the response goes out without waiting for the store.
    fn settle(&self, r: Reservation, actual: u64) {
        if actual == r.estimate() {
            r.keep();
            self.counts.settled.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (limit, counts) = (self.limit.clone(), self.counts.clone());
        // Runs even if the runtime is shutting down only as far as the runtime lets it: a
        // settlement lost then leaves the estimate taken, the safe side.
        drop(self.runtime.spawn(async move {
            let (key, estimate) = (r.key().to_string(), r.estimate());
            match r.settle(actual).await {
                Ok(_) => counts.settled.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    log_failure(&limit, &key, estimate, actual, &e);
                    counts.failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }));
    }
}

impl Drop for Unsettled {
    /// Dropped unsettled: the response future was dropped before the inner service answered.
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            let actual = self
                .on_no_response
                .actual(NoResponse::Cancelled, r.estimate());
            self.settle(r, actual);
        }
    }
}

/// A warning for the operator: which limit and key, and what the failure leaves behind.
fn log_failure(limit: &str, key: &str, estimate: u64, actual: u64, e: &crate::error::Error) {
    let next = if actual < estimate {
        "the estimate stays taken: the key gets the difference back only as time refills it"
    } else {
        "the cost above the estimate is not charged: the key may admit more than its quota for a while"
    };
    tracing::warn!(
        limit,
        key,
        estimate,
        actual,
        error = %e,
        "settling a request's reservation at its real cost failed; {next}"
    );
}
