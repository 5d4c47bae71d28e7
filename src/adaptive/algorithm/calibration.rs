//! The first calibration (see `algorithm.rs`'s module doc): with no baseline yet and the pool
//! full, the pool is halved while its throughput holds, and the baseline is learnt where it
//! falls. Its own file because it is a procedure of its own, over many windows, with its own
//! state ([`Calibration`]); the steps it returns are clamped as every step is (`bounds.rs`).

use super::bounds::{clamp, ms, Bounds, Step, MIN_SAMPLES_TO_TEACH};
use crate::adaptive::window::WindowSummary;
use std::time::Duration;

/// Successes a first calibration sums (over as many windows as it takes) before it compares a
/// pool's throughput with the larger pool's.
pub const MIN_SAMPLES_TO_JUDGE: u64 = 30;

/// While learning a first baseline with the pool full: the share of the pool kept per shrink.
const CALIBRATION_SHRINK: f64 = 0.5;
/// The throughput of a halved pool clearly "fell" under this share of the larger pools' mean
/// successes per window, and clearly "held" at or above [`THROUGHPUT_HELD`]; in between the
/// pool is measured twice as long and judged at the middle. [`MIN_SAMPLES_TO_JUDGE`]
/// successes of a dependency whose service times scatter (a coefficient of variation of 0.5)
/// count within about ±10% (one standard deviation): a false "fell" would learn a queue's
/// latency, a false "held" halves once more.
const THROUGHPUT_FELL: f64 = 0.65;
/// See [`THROUGHPUT_FELL`].
const THROUGHPUT_HELD: f64 = 0.85;
/// How each step of the calibration starts its reason.
const LEARNING: &str = "learning the unloaded latency";

/// What one pool of a first calibration did: its size, successes per window, median latency.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measure {
    pool: u32,
    per_window: f64,
    latency: Duration,
}

/// A first calibration in progress (see the module's doc).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Calibration {
    /// The pool measured now (the capacity when the last decision was taken).
    pool: u32,
    /// Windows seen since the capacity became `pool`.
    since: u32,
    /// Until this many windows have passed, a window whose peak in flight exceeds the pool is
    /// still draining the larger pool (Little's law: the excess over the throughput).
    drained_after: u32,
    /// Windows after which the calls queued by the larger pool have left, so a median is this
    /// pool's (Little's law: the larger pool over the throughput is its latency in windows).
    settled_after: u32,
    /// The drained windows at `pool`, summed, and how many they are.
    sum: WindowSummary,
    windows: u32,
    /// The windows in `sum` that came after `settled_after`, summed.
    settled: WindowSummary,
    /// The smallest pool so far whose throughput held.
    kept: Option<Measure>,
    /// The successes per window of every pool whose throughput held, summed, and how many:
    /// their mean is the throughput a smaller pool is compared with.
    kept_per_window: f64,
    kept_count: u32,
    /// The lowest median measured.
    lowest: Option<Duration>,
    /// The throughput fell at `pool` (or it cannot shrink): measuring its latency to finish.
    finishing: bool,
}

impl Calibration {
    fn new(pool: u32) -> Calibration {
        Calibration {
            pool,
            since: 0,
            drained_after: 0,
            settled_after: 0,
            sum: WindowSummary::default(),
            windows: 0,
            settled: WindowSummary::default(),
            kept: None,
            kept_per_window: 0.0,
            kept_count: 0,
            lowest: None,
            finishing: false,
        }
    }

    /// Starts measuring `pool`, drained `drained_after` and settled `settled_after` windows
    /// after the change.
    fn measure(&mut self, pool: u32, drained_after: u32, settled_after: u32) {
        self.pool = pool;
        self.since = 0;
        self.drained_after = drained_after;
        self.settled_after = settled_after;
        self.restart();
    }

    /// Forgets the windows summed so far at this pool.
    fn restart(&mut self) {
        self.sum = WindowSummary::default();
        self.windows = 0;
        self.settled = WindowSummary::default();
    }

    /// The settled windows' latency, once they hold enough successes to teach it.
    fn settled_latency(&self, quantile: f64) -> Option<Duration> {
        self.settled
            .latency_quantile(quantile)
            .filter(|_| self.settled.ok >= MIN_SAMPLES_TO_TEACH)
    }
}

/// What a first calibration reads and writes of the controller's memory: the baseline it
/// learns, and its own progress between windows.
pub(super) struct Learning<'a> {
    pub(super) baseline: &'a mut Option<Duration>,
    pub(super) calibrating: &'a mut Option<Box<Calibration>>,
}

/// "`LEARNING`: `why`, hold".
fn hold(bounds: &Bounds, current: u32, why: String) -> Step {
    clamp(
        bounds,
        current,
        f64::from(current),
        format!("{LEARNING}: {why}, hold"),
    )
}

/// While no baseline has been learnt and the pool is full: one window of the first
/// calibration, `Some` step while it lasts (and the one that ends it); `None` when there is
/// nothing to calibrate (a baseline, a pool not full, or at its minimum).
pub(super) fn calibrate(
    bounds: &Bounds,
    memory: &mut Learning<'_>,
    current: u32,
    w: &WindowSummary,
    used_half: bool,
    quantile: f64,
) -> Option<Step> {
    let min = bounds.min.max(1);
    if memory.baseline.is_some() {
        *memory.calibrating = None;
        return None;
    }
    let cal = match &mut *memory.calibrating {
        Some(cal) => cal,
        None if used_half && current > min && w.ok > 0 => memory
            .calibrating
            .insert(Box::new(Calibration::new(current))),
        None => return None,
    };
    if cal.pool != current {
        // Moved by someone else (or a write failed): measure this pool, after a drain.
        cal.measure(current, 2, 2);
    }
    cal.since += 1;
    let drained = cal.since > cal.drained_after || w.peak_in_flight <= u64::from(current);
    if !drained {
        let why = format!(
            "{} in flight draining to the pool of {current}",
            w.peak_in_flight
        );
        return Some(hold(bounds, current, why));
    }
    if !used_half && !cal.finishing {
        // The traffic no longer fills the pool: it queues nothing; its latency is unloaded.
        cal.finishing = true;
        cal.restart();
    }
    if cal.since > cal.settled_after {
        cal.settled.merge(w);
    }
    if cal.finishing {
        return Some(finishing(bounds, memory, current, quantile));
    }
    if current <= min {
        // Cannot shrink further: the floor's latency, once settled, is the baseline.
        cal.finishing = true;
        cal.restart();
        let why = format!("at the minimum {current}; measuring its latency");
        return Some(hold(bounds, current, why));
    }
    cal.sum.merge(w);
    cal.windows += 1;
    Some(judge_pool(bounds, memory, current, quantile))
}

/// The pool's latency is measured to finish: the baseline once it has settled and taught
/// enough, else hold.
fn finishing(bounds: &Bounds, memory: &mut Learning<'_>, current: u32, quantile: f64) -> Step {
    let Some(cal) = memory.calibrating.as_deref() else {
        return hold(bounds, current, "no calibration under way".into());
    };
    if let Some(latency) = cal.settled_latency(quantile) {
        return finish(bounds, memory, current, latency);
    }
    let why = if cal.since <= cal.settled_after {
        format!(
            "waiting {} window(s) for the calls queued by a larger pool to leave",
            cal.settled_after + 1 - cal.since
        )
    } else {
        format!(
            "{} successes at a pool of {current} so far, too few to learn from ({MIN_SAMPLES_TO_TEACH} needed)",
            cal.settled.ok
        )
    };
    hold(bounds, current, why)
}

/// The full pool, drained, judged on its throughput against the larger pools': held (shrink
/// again), fell (learn its latency), or not clear yet (measure longer).
fn judge_pool(bounds: &Bounds, memory: &mut Learning<'_>, current: u32, quantile: f64) -> Step {
    let Some(cal) = memory.calibrating.as_deref_mut() else {
        return hold(bounds, current, "no calibration under way".into());
    };
    let (Some(latency), true) = (
        cal.sum.latency_quantile(quantile),
        cal.sum.ok >= MIN_SAMPLES_TO_JUDGE,
    ) else {
        let why = format!(
            "{} successes at a pool of {current} so far, too few to judge its throughput ({MIN_SAMPLES_TO_JUDGE} needed)",
            cal.sum.ok
        );
        return hold(bounds, current, why);
    };
    let now = Measure {
        pool: current,
        per_window: cal.sum.ok as f64 / f64::from(cal.windows.max(1)),
        latency,
    };
    cal.lowest = Some(cal.lowest.map_or(latency, |l| l.min(latency)));
    let reference = cal.kept_per_window / f64::from(cal.kept_count.max(1));
    let share = now.per_window / reference.max(1e-9);
    let fell = cal.kept_count > 0
        && match share {
            s if s < THROUGHPUT_FELL => true,
            s if s >= THROUGHPUT_HELD => false,
            // Neither clearly: measure longer (twice the successes), then split the difference.
            _ if cal.sum.ok < 2 * MIN_SAMPLES_TO_JUDGE => {
                let why = format!(
                    "{:.1} successes a window at {current}, {:.0}% of the larger pools' {reference:.1}: measuring longer",
                    now.per_window,
                    share * 100.0
                );
                return hold(bounds, current, why);
            }
            s => s < (THROUGHPUT_FELL + THROUGHPUT_HELD) / 2.0,
        };
    if !fell {
        return shrink(bounds, cal, current, now);
    }
    // The throughput fell: the pool limits it now and nothing queues; its latency, once
    // settled, is the baseline.
    if let Some(latency) = cal.settled_latency(quantile) {
        return finish(bounds, memory, current, latency);
    }
    cal.finishing = true;
    let why = format!(
        "{:.1} successes a window at {current}, under the larger pools' {reference:.1}: the pool limits the throughput now; measuring its latency",
        now.per_window,
    );
    hold(bounds, current, why)
}

/// The throughput held at `now`: keep it as the smallest pool so far, and halve the pool.
fn shrink(bounds: &Bounds, cal: &mut Calibration, current: u32, now: Measure) -> Step {
    let c = f64::from(current);
    let first = cal.kept.is_none();
    cal.kept = Some(now);
    cal.kept_per_window += now.per_window;
    cal.kept_count += 1;
    let next = clamp(bounds, current, c * CALIBRATION_SHRINK, String::new()).capacity;
    let excess = f64::from(current.saturating_sub(next));
    let per_window = now.per_window.max(1.0);
    // Little's law: the excess leaves at the throughput; the larger pool's calls, queued behind
    // each other, take the pool over the throughput (windows) to leave.
    let drained_after = 1 + (excess / per_window).floor().min(50.0) as u32;
    let settled_after = 1 + (c / per_window).ceil().min(50.0) as u32;
    cal.measure(next, drained_after, settled_after);
    let reason = format!(
        "{LEARNING}: {:.1} successes a window with the pool full at {current} (median {}){}; × {CALIBRATION_SHRINK} while the throughput holds",
        now.per_window,
        ms(now.latency),
        if first { "" } else { ", as many as the larger pool's: only queue" },
    );
    Step {
        capacity: next,
        reason,
    }
}

/// Ends a first calibration at `current`, whose settled median is `latency`: the baseline is
/// that (or the lowest median measured, if lower); back to the smallest pool that kept the
/// throughput.
fn finish(bounds: &Bounds, memory: &mut Learning<'_>, current: u32, latency: Duration) -> Step {
    let cal = memory.calibrating.take();
    let kept = cal.as_ref().and_then(|cal| cal.kept);
    let baseline = cal
        .and_then(|cal| cal.lowest)
        .map_or(latency, |l| l.min(latency));
    *memory.baseline = Some(baseline);
    let back = kept.map_or(current, |k| k.pool.max(current));
    let reason = format!(
        "learnt the unloaded latency {} at a pool of {current}{}: back to {back}",
        ms(baseline),
        kept.map_or(String::new(), |k| format!(
            " ({:.1} successes a window at {}, the smallest pool that kept them)",
            k.per_window, k.pool
        )),
    );
    clamp(bounds, current, f64::from(back), reason)
}
