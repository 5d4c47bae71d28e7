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
use super::seat::{campaign, Election};
use super::window::WindowSummary;
use crate::limiter_inner::LimiterInner;
use crate::semaphore::Semaphore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
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

/// The window task of adaptive semaphore `name` in the Limiter `limiter`; ends when `stop`
/// fires or the Limiter closes. Each window: wait for its end, announce this Limiter's
/// summary, give the others a grace to announce theirs, read the board, and, while this
/// Limiter controls, take one step.
pub(crate) async fn run(
    limiter: Arc<LimiterInner>,
    name: String,
    config: Adaptive,
    reporter: Arc<Reporter>,
    controller: Semaphore,
    stop: CancellationToken,
) {
    let election = Arc::new(Election::default());
    limiter.runtime.spawn(campaign(
        controller,
        election.clone(),
        stop.clone(),
        config.window,
        "adaptive",
    ));
    let mut task = Task::new(limiter, name, config, reporter, election);
    loop {
        let Some(window) = task.until_window_end(&stop).await else {
            break;
        };
        let report = task.report(window);
        announce(&task.limiter, &task.board, &report).await;
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(task.grace) => {}
        }
        let Some(reports) = task.read_board().await else {
            continue;
        };
        task.note_decisions(&reports);
        if !task.take_control() {
            continue;
        }
        if let Some(decision) = task.step(window, &reports).await {
            // Shown at once (status reads the board), not only with the next window's summary.
            let shown = Report {
                decision: Some(decision.clone()),
                ..report
            };
            announce(&task.limiter, &task.board, &shown).await;
            task.newest_seen = Some(decision.clone());
            task.my_decision = Some(decision);
        }
    }
    task.election.set(None);
    if !task.limiter.is_closed() {
        let _ = task
            .limiter
            .backend
            .withdraw(&task.board, &task.limiter.id)
            .await;
    }
}

/// The window task's state from one window to the next.
struct Task {
    limiter: Arc<LimiterInner>,
    name: String,
    config: Adaptive,
    reporter: Arc<Reporter>,
    election: Arc<Election>,
    board: String,
    window_ms: u64,
    /// The controller reads the board this long after a window ends: time for every
    /// Limiter's announcement to land.
    grace: Duration,
    /// The algorithm's memory while this Limiter controls.
    memory: Memory,
    /// The newest step seen on the board (this Limiter's or another controller's).
    newest_seen: Option<Decision>,
    controlling: bool,
    /// This Limiter's latest step, announced with its next summary.
    my_decision: Option<Decision>,
}

impl Task {
    fn new(
        limiter: Arc<LimiterInner>,
        name: String,
        config: Adaptive,
        reporter: Arc<Reporter>,
        election: Arc<Election>,
    ) -> Task {
        let window_ms = u64::try_from(config.window.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let grace = (config.window / 5).min(Duration::from_millis(250));
        Task {
            board: board_of(&name),
            limiter,
            name,
            config,
            reporter,
            election,
            window_ms,
            grace,
            memory: Memory::default(),
            newest_seen: None,
            controlling: false,
            my_decision: None,
        }
    }

    /// Sleeps to the end of the current window and returns it; `None` when `stop` fires or
    /// the Limiter closes.
    async fn until_window_end(&self, stop: &CancellationToken) -> Option<u64> {
        let now = unix_ms();
        let window = now / self.window_ms;
        let until_end = Duration::from_millis((window + 1) * self.window_ms - now);
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(until_end) => {}
        }
        (!self.limiter.is_closed()).then_some(window)
    }

    /// This Limiter's report of `window`: its outcomes, and its latest step.
    fn report(&self, window: u64) -> Report {
        Report {
            window,
            window_ms: self.window_ms,
            summary: self.reporter.take(),
            decision: self.my_decision.clone(),
        }
    }

    /// Every Limiter's report on the board; `None` (this window skipped) if it cannot be read.
    async fn read_board(&self) -> Option<Vec<Report>> {
        match self.limiter.backend.announcements(&self.board).await {
            Ok(values) => Some(
                values
                    .into_iter()
                    .filter_map(|(_, v)| serde_json::from_slice::<Report>(&v).ok())
                    .collect(),
            ),
            Err(e) => {
                tracing::debug!(semaphore = %self.name, error = %e, "reading the adaptive board failed; skipping this window");
                None
            }
        }
    }

    /// Keeps the newest step the reports show.
    fn note_decisions(&mut self, reports: &[Report]) {
        for d in reports.iter().filter_map(|r| r.decision.as_ref()) {
            if self
                .newest_seen
                .as_ref()
                .is_none_or(|n| d.window > n.window)
            {
                self.newest_seen = Some(d.clone());
            }
        }
    }

    /// Whether this Limiter controls now; taking over starts from the last controller's
    /// baseline, not a fresh one that the current (possibly overloaded) latency would poison.
    fn take_control(&mut self) -> bool {
        if !self.election.holds() {
            self.controlling = false;
            self.my_decision = None;
            return false;
        }
        if !self.controlling {
            let baseline = self.newest_seen.as_ref().and_then(|d| d.baseline_us);
            self.memory = Memory::with_baseline(baseline.map(Duration::from_micros));
            self.controlling = true;
        }
        true
    }

    /// One step on `window`'s merged reports: the new capacity stored if it changed. `None`
    /// when the capacity could not be read or stored, or control was lost meanwhile.
    async fn step(&mut self, window: u64, reports: &[Report]) -> Option<Decision> {
        let mut merged = WindowSummary::default();
        let mut reporters = 0;
        for r in reports
            .iter()
            .filter(|r| r.window == window && r.window_ms == self.window_ms)
        {
            merged.merge(&r.summary);
            reporters += 1;
        }
        let backend = &self.limiter.backend;
        let current = match backend.ensure_semaphore(&self.name, None).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(semaphore = %self.name, error = %e, "reading the capacity failed; skipping this window");
                return None;
            }
        };
        let config = &self.config;
        let next = step(
            &config.algorithm,
            &config.bounds,
            &mut self.memory,
            current,
            &merged,
        );
        if next.capacity != current {
            // A controller that may have lost its permit must not write: another may be in
            // control already.
            if !self.election.holds() {
                return None;
            }
            if let Err(e) = backend.set_capacity(&self.name, next.capacity).await {
                tracing::warn!(semaphore = %self.name, error = %e, "storing the adaptive capacity failed; trying again next window");
                return None;
            }
            tracing::info!(semaphore = %self.name, from = current, to = next.capacity, reason = %next.reason, "adaptive capacity changed");
        } else {
            tracing::debug!(semaphore = %self.name, capacity = current, reason = %next.reason, "adaptive capacity held");
        }
        Some(Decision {
            window,
            at_unix_ms: unix_ms(),
            from: current,
            to: next.capacity,
            reason: next.reason,
            ok: merged.ok,
            dropped: merged.dropped,
            p50_us: merged.latency_quantile(0.5).map(micros),
            peak_in_flight: merged.peak_in_flight,
            baseline_us: self.memory.baseline.map(micros),
            reporters,
            controller: self.limiter.owner.clone(),
        })
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
