//! The circuit breaker in front of a store (shared by the tower layers and
//! [`crate::StoreDownGuard`]): whether requests ask the store, or get the store-down fallback
//! at once instead of each waiting for a store that is not there.
//!
//! A busy store is not a down store. Two kinds of failure are told apart:
//!
//! * **An error** (the store or the connection said it cannot: refused, unavailable, a lost
//!   session): the breaker opens at once.
//! * **A slow answer** (a caller's own deadline passed first): that caller gets the fallback,
//!   but the breaker opens only once slow answers persist — at least [`SLOW_TO_OPEN`] of them
//!   and no success for [`SLOW_OPEN_AFTER`]. One slow call (a first connection, an fsync
//!   stall, a burst of callers with short deadlines) never blanks everyone's answers.
//!
//! While open, one request per interval asks the store (the probe); its success closes the
//! breaker. Every transition is logged and counted ([`BreakerStats`]).

use crate::backend::lock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Slow answers (no success between them) needed before the breaker opens on slowness alone.
pub const SLOW_TO_OPEN: u32 = 3;
/// How long slow answers must go on, with no success, before the breaker opens on them: longer
/// than a busy store's stalls (an fsync, a compaction, a burst), shorter than an etcd or
/// ZooKeeper leader election (about a second with their default timings).
pub const SLOW_OPEN_AFTER: Duration = Duration::from_millis(500);

/// What went wrong with one store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The store or the connection answered with an error.
    Error,
    /// No answer before the caller's deadline.
    Slow,
}

/// A breaker's state and how often it changed, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BreakerStats {
    /// Open now: requests get the store-down fallback, one probe per interval asks the store.
    pub open: bool,
    /// Times it opened.
    pub opened: u64,
    /// Times it closed again (a probe, or any request, got an answer).
    pub closed: u64,
    /// Slow answers seen (each got the fallback, whether or not the breaker opened).
    pub slow: u64,
}

#[derive(Debug)]
pub(crate) struct StoreHealth {
    /// The cluster it stands for, named in its logs (`None`: a store of one cluster).
    cluster: Option<String>,
    interval: Duration,
    state: Mutex<State>,
    opened: AtomicU64,
    closed: AtomicU64,
    slow: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Requests ask the store; `slow` answers in a row so far, the first at `since`.
    Closed { slow: u32, since: Option<Instant> },
    /// Requests get the fallback; the next probe may go at `next_try`.
    Open { next_try: Instant },
}

impl StoreHealth {
    pub(crate) fn new(interval: Duration) -> Self {
        Self::for_cluster(interval, None)
    }

    /// The breaker of one cluster of a sharded store (`cluster`: how logs name it).
    pub(crate) fn for_cluster(interval: Duration, cluster: Option<String>) -> Self {
        StoreHealth {
            cluster,
            interval,
            state: Mutex::new(State::Closed {
                slow: 0,
                since: None,
            }),
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            slow: AtomicU64::new(0),
        }
    }

    /// Whether this request may ask the store: always while closed; while open, the first
    /// request after each interval (which pushes the next try one interval on).
    pub(crate) fn may_try(&self) -> bool {
        let mut state = lock(&self.state);
        match *state {
            State::Closed { .. } => true,
            State::Open { next_try } => {
                let now = Instant::now();
                if now < next_try {
                    return false;
                }
                *state = State::Open {
                    next_try: now + self.interval,
                };
                true
            }
        }
    }

    /// Whether the breaker is open: the store failed and has not answered since.
    pub(crate) fn is_down(&self) -> bool {
        matches!(*lock(&self.state), State::Open { .. })
    }

    /// The store answered (for the semaphore or rate limit `name`, named in the log).
    pub(crate) fn up(&self, name: &str) {
        let was = std::mem::replace(
            &mut *lock(&self.state),
            State::Closed {
                slow: 0,
                since: None,
            },
        );
        if matches!(was, State::Open { .. }) {
            self.closed.fetch_add(1, Relaxed);
            tracing::info!(
                name,
                cluster = self.cluster(),
                "store answers again; circuit breaker closed, requests ask it again"
            );
        }
    }

    /// The store failed (`Failure::Error`) or did not answer in time (`Failure::Slow`).
    pub(crate) fn failed(&self, name: &str, cause: &crate::error::Error, kind: Failure) {
        if kind == Failure::Slow {
            self.slow.fetch_add(1, Relaxed);
        }
        let now = Instant::now();
        let mut state = lock(&self.state);
        let open = match (*state, kind) {
            (State::Open { .. }, _) => {
                // A probe failed: stay open, and the next probe comes an interval after this
                // answer (not after the probe began: a probe that waited a whole store timeout
                // longer than the interval would otherwise be followed by another at once).
                *state = State::Open {
                    next_try: now + self.interval,
                };
                return;
            }
            (State::Closed { .. }, Failure::Error) => true,
            (State::Closed { slow, since }, Failure::Slow) => {
                let slow = slow.saturating_add(1);
                let since = since.unwrap_or(now);
                let open = slow >= SLOW_TO_OPEN && now.duration_since(since) >= SLOW_OPEN_AFTER;
                if !open {
                    *state = State::Closed {
                        slow,
                        since: Some(since),
                    };
                }
                open
            }
        };
        if open {
            *state = State::Open {
                next_try: now + self.interval,
            };
            drop(state);
            self.opened.fetch_add(1, Relaxed);
            let why = match kind {
                Failure::Error => "the store failed",
                Failure::Slow => "the store has not answered in time for a while",
            };
            tracing::warn!(
                name, cluster = self.cluster(), error = %cause, retry_every_ms = self.interval.as_millis() as u64,
                "{why}; circuit breaker open: requests get the store-down fallback until a probe succeeds"
            );
        }
    }

    /// The cluster it stands for (`None`: a store of one cluster).
    pub(crate) fn cluster_name(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    fn cluster(&self) -> &str {
        self.cluster.as_deref().unwrap_or("the store")
    }

    pub(crate) fn stats(&self) -> BreakerStats {
        BreakerStats {
            open: self.is_down(),
            opened: self.opened.load(Relaxed),
            closed: self.closed.load(Relaxed),
            slow: self.slow.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_error_opens_at_once_then_one_try_per_interval() {
        let h = StoreHealth::new(Duration::from_secs(1));
        assert!(h.may_try() && h.may_try(), "closed: every request tries");
        h.failed("s", &crate::Error::store("refused"), Failure::Error);
        assert!(h.is_down());
        assert!(!h.may_try(), "open: no try before the interval");
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(h.may_try(), "the first request after the interval tries");
        assert!(!h.may_try(), "and only that one");
        h.up("s");
        assert!(
            h.may_try() && h.may_try(),
            "closed again: every request tries"
        );
        let s = h.stats();
        assert_eq!((s.open, s.opened, s.closed), (false, 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_answers_open_only_when_they_persist_without_a_success() {
        let h = StoreHealth::new(Duration::from_millis(200));
        // A burst of slow answers at one instant (many callers with short deadlines, one
        // stall): never opens.
        for _ in 0..100 {
            h.failed("s", &crate::Error::Timeout, Failure::Slow);
        }
        assert!(!h.is_down(), "a burst of slow answers is a busy store");
        // A success in between starts the count again.
        tokio::time::advance(SLOW_OPEN_AFTER).await;
        h.up("s");
        h.failed("s", &crate::Error::Timeout, Failure::Slow);
        assert!(!h.is_down());
        // Slow for SLOW_OPEN_AFTER with no success: open.
        tokio::time::advance(SLOW_OPEN_AFTER / 2).await;
        h.failed("s", &crate::Error::Timeout, Failure::Slow);
        assert!(!h.is_down(), "two slow answers over half the time");
        tokio::time::advance(SLOW_OPEN_AFTER / 2).await;
        h.failed("s", &crate::Error::Timeout, Failure::Slow);
        assert!(
            h.is_down(),
            "slow for {SLOW_OPEN_AFTER:?} without a success"
        );
        assert_eq!(h.stats().slow, 103);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_keeps_it_open() {
        let h = StoreHealth::new(Duration::from_millis(100));
        h.failed("s", &crate::Error::store("x"), Failure::Error);
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(h.may_try());
        // The probe waited longer than the interval before it failed.
        tokio::time::advance(Duration::from_millis(300)).await;
        h.failed("s", &crate::Error::Timeout, Failure::Slow);
        assert!(h.is_down());
        assert!(
            !h.may_try(),
            "the next probe waits an interval from the failure"
        );
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(!h.may_try());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(h.may_try());
        assert_eq!(h.stats().opened, 1, "still the same opening");
    }
}
