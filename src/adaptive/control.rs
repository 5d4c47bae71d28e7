//! The window task of one adaptive semaphore in one Limiter: at each window's end it announces
//! this Limiter's summary on the semaphore's board, and if this Limiter holds the controller
//! permit, it merges every Limiter's summary of that window, takes one algorithm step and stores
//! the new capacity with its reason.
//!
//! **One controller at a time:** it is whoever holds the one permit of the semaphore
//! `<name>.controller` (every Limiter with the adaptive semaphore open waits in its queue). When
//! the controller dies, its permit comes back within the session TTL and the next in line takes
//! over; the stored capacity stays as it was meanwhile. A controller that may have lost its
//! permit (`lost()`) stops writing at once.
//!
//! **Windows are aligned on the wall clock** (window `k` covers `[k·w, (k+1)·w)` of Unix time),
//! so Limiters on different hosts sum the same spans without talking to each other; a summary
//! announced later than the controller's read (a clock off by more than the grace) misses that
//! window's step.

use super::algorithm::{step, Memory};
use super::config::Adaptive;
use super::names::board_of;
use super::reporter::Reporter;
use super::window::WindowSummary;
use crate::error::Error;
use crate::limiter_inner::LimiterInner;
use crate::permit::Permit;
use crate::semaphore::Semaphore;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// What one Limiter announces each window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The window summed (Unix ms / window ms).
    pub window: u64,
    /// The window's length, in ms.
    pub window_ms: u64,
    /// This Limiter's outcomes in it.
    pub summary: WindowSummary,
    /// The controller's latest step (only the controller's report has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// One step of the controller: what it saw, what it chose, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Decision {
    /// The window the step was taken on (Unix ms / window ms).
    pub window: u64,
    /// When it was taken (Unix ms).
    pub at_unix_ms: u64,
    /// The capacity before.
    pub from: u32,
    /// The capacity after (equal to `from` when it held).
    pub to: u32,
    /// Why, in words.
    pub reason: String,
    /// Successes reported in the window, by every Limiter.
    pub ok: u64,
    /// Drops reported in the window.
    pub dropped: u64,
    /// The median latency of the successes, in microseconds.
    pub p50_us: Option<u64>,
    /// The most permits held at once (summed over Limiters: an upper bound).
    pub peak_in_flight: u64,
    /// The gradient's baseline (the dependency's unloaded latency as learnt), in microseconds.
    pub baseline_us: Option<u64>,
    /// How many Limiters reported the window.
    pub reporters: usize,
    /// The owner label of the controlling Limiter.
    pub controller: String,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What the task shares with the handles: the controller permit while this Limiter holds it.
#[derive(Debug, Default)]
struct Election {
    permit: Mutex<Option<Permit>>,
}

impl Election {
    fn holds(&self) -> bool {
        self.permit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|p| !p.is_lost())
    }

    fn set(&self, permit: Option<Permit>) {
        *self.permit.lock().unwrap_or_else(PoisonError::into_inner) = permit;
    }
}

/// Waits in the controller semaphore's queue, holds its permit while it lasts, and waits again
/// when it is lost; leaves (releasing it) when `stop` fires.
async fn campaign(
    controller: Semaphore,
    election: Arc<Election>,
    stop: CancellationToken,
    retry: Duration,
) {
    loop {
        let acquired = tokio::select! {
            _ = stop.cancelled() => break,
            r = controller.acquire() => r,
        };
        match acquired {
            Ok(permit) => {
                tracing::info!(semaphore = %controller.name(), "this Limiter now controls the adaptive capacity");
                let lost = permit.lost_signal();
                election.set(Some(permit));
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = lost.lost() => {
                        election.set(None);
                        if controller.limiter().is_closed() {
                            break; // closing ended the session: no loss to report
                        }
                        tracing::warn!(semaphore = %controller.name(), "controller permit lost; waiting to control again");
                    }
                }
            }
            Err(Error::Closed) => break,
            Err(e) => {
                tracing::debug!(semaphore = %controller.name(), error = %e, "waiting for the controller permit failed; retrying");
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        }
    }
    election.set(None);
}

/// The window task of adaptive semaphore `name` in the Limiter `limiter`; ends when `stop`
/// fires or the Limiter closes.
pub(crate) async fn run(
    limiter: Arc<LimiterInner>,
    name: String,
    config: Adaptive,
    reporter: Arc<Reporter>,
    controller: Semaphore,
    stop: CancellationToken,
) {
    let election = Arc::new(Election::default());
    let window_ms = u64::try_from(config.window.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    limiter.runtime.spawn(campaign(
        controller,
        election.clone(),
        stop.clone(),
        config.window,
    ));
    let board = board_of(&name);
    // The controller reads the board this long after a window ends: time for every Limiter's
    // announcement to land.
    let grace = (config.window / 5).min(Duration::from_millis(250));
    let mut memory = Memory::default();
    let mut newest_seen: Option<Decision> = None;
    let mut controlling = false;
    let mut my_decision: Option<Decision> = None;
    loop {
        let now = unix_ms();
        let window = now / window_ms;
        let until_end = Duration::from_millis((window + 1) * window_ms - now);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(until_end) => {}
        }
        if limiter.is_closed() {
            break;
        }
        let report = Report {
            window,
            window_ms,
            summary: reporter.take(),
            decision: my_decision.clone(),
        };
        announce(&limiter, &board, &report).await;
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(grace) => {}
        }
        let reports = match limiter.backend.announcements(&board).await {
            Ok(values) => values
                .into_iter()
                .filter_map(|(_, v)| serde_json::from_slice::<Report>(&v).ok())
                .collect::<Vec<_>>(),
            Err(e) => {
                tracing::debug!(semaphore = %name, error = %e, "reading the adaptive board failed; skipping this window");
                continue;
            }
        };
        for d in reports.iter().filter_map(|r| r.decision.as_ref()) {
            if newest_seen.as_ref().is_none_or(|n| d.window > n.window) {
                newest_seen = Some(d.clone());
            }
        }
        if !election.holds() {
            controlling = false;
            my_decision = None;
            continue;
        }
        if !controlling {
            // Take over where the last controller left: its baseline, not a fresh one that
            // the current (possibly overloaded) latency would poison.
            memory = Memory::with_baseline(
                newest_seen
                    .as_ref()
                    .and_then(|d| d.baseline_us)
                    .map(Duration::from_micros),
            );
            controlling = true;
        }
        let mut merged = WindowSummary::default();
        let mut reporters = 0;
        for r in reports
            .iter()
            .filter(|r| r.window == window && r.window_ms == window_ms)
        {
            merged.merge(&r.summary);
            reporters += 1;
        }
        let current = match limiter.backend.ensure_semaphore(&name, None).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(semaphore = %name, error = %e, "reading the capacity failed; skipping this window");
                continue;
            }
        };
        let next = step(
            &config.algorithm,
            &config.bounds,
            &mut memory,
            current,
            &merged,
        );
        if next.capacity != current {
            // A controller that may have lost its permit must not write: another may be in
            // control already.
            if !election.holds() {
                continue;
            }
            if let Err(e) = limiter.backend.set_capacity(&name, next.capacity).await {
                tracing::warn!(semaphore = %name, error = %e, "storing the adaptive capacity failed; trying again next window");
                continue;
            }
            tracing::info!(semaphore = %name, from = current, to = next.capacity, reason = %next.reason, "adaptive capacity changed");
        } else {
            tracing::debug!(semaphore = %name, capacity = current, reason = %next.reason, "adaptive capacity held");
        }
        let decision = Decision {
            window,
            at_unix_ms: unix_ms(),
            from: current,
            to: next.capacity,
            reason: next.reason,
            ok: merged.ok,
            dropped: merged.dropped,
            p50_us: merged.latency_quantile(0.5).map(micros),
            peak_in_flight: merged.peak_in_flight,
            baseline_us: memory.baseline.map(micros),
            reporters,
            controller: limiter.owner.clone(),
        };
        // Shown at once (status reads the board), not only with the next window's summary.
        let shown = Report {
            decision: Some(decision.clone()),
            ..report
        };
        announce(&limiter, &board, &shown).await;
        newest_seen = Some(decision.clone());
        my_decision = Some(decision);
    }
    election.set(None);
    if !limiter.is_closed() {
        let _ = limiter.backend.withdraw(&board, &limiter.id).await;
    }
}

async fn announce(limiter: &LimiterInner, board: &str, report: &Report) {
    let value = match serde_json::to_vec(report) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(board, error = %e, "encoding an adaptive report failed");
            return;
        }
    };
    if let Err(e) = limiter.backend.announce(board, &limiter.id, &value).await {
        tracing::debug!(board, error = %e, "announcing the window's outcomes failed");
    }
}
