//! The controller's step: the next capacity from the current one and the cluster's merged
//! window of outcomes. Pure: no store, no clock; the same inputs give the same step.
//!
//! Two algorithms, as Netflix's concurrency-limits names them:
//! - **AIMD**: a window with drops, or with a median latency over `latency_tolerance` × the
//!   learnt baseline (or over `latency_limit` when set), multiplies the capacity by `backoff`;
//!   a window that used at least half the capacity adds `increase`.
//! - **Gradient**: the ratio of a baseline latency to the window's latency sets the capacity.
//!   With `gradient = tolerance × baseline / latency` (at least 0.5): a queue (gradient < 1)
//!   makes it `capacity × gradient`, at once; drops make it at most 0.9 × the permits used at
//!   the window's peak, and at least one permit less; a latency within half the tolerance
//!   (`(1 + tolerance) / 2 × baseline`), no drops and the pool in use grow it by
//!   `smoothing × √capacity` (at least one permit); in between it holds. No growth term is
//!   added to a decrease, so a decrease always lands below the current capacity.
//!
//! Both hold when the window has no samples, and do not grow a capacity the traffic does not
//! use (fewer than half the permits held at the window's peak): a pool nobody fills says
//! nothing about the dependency. Every step is clamped to `[min, max]` and to at most
//! `max_step` of the capacity (at least 1).
//!
//! The **baseline** (the dependency's unloaded latency; the gradient's reference and AIMD's
//! default latency limit) is protected from self-poisoning: it falls a quarter of the way
//! towards any lower latency seen, and rises only from windows where this pool cannot be the cause of queueing
//! (at most half of it used, or it is at its minimum); latencies are judged on at least
//! [`MIN_SAMPLES_TO_TEACH`] successes (windows with fewer are summed with the next ones at the
//! same capacity, holding meanwhile).
//!
//! A **first baseline** is never learnt from a full pool: its latency may be mostly queue (a
//! first capacity guessed too high under overload). It is judged on **throughput**, over as
//! many windows as a slow dependency needs: the pool is halved while the successes per window
//! hold at the larger pools' mean (calls/s unchanged while the pool shrinks: the pool was only
//! queue; at least 85% holds, under 65% fell, in between is measured twice as long and split
//! at 75%). A smaller pool is judged only once the larger one's excess has drained (its
//! peak in flight within the pool, or the excess over the throughput in windows, by Little's
//! law) and on at least [`MIN_SAMPLES_TO_JUDGE`] successes, however many windows that takes.
//! When the throughput falls, the pool now limits it and nothing queues: the controller waits
//! until the calls queued by the larger pools have left (their latency in windows, again by
//! Little's law: the pool over the throughput), learns the median latency there (or the lowest
//! median measured during the calibration, if lower) and goes back to the smallest pool that
//! kept the throughput. Once, at the start: a controller that takes over starts from its
//! predecessor's baseline. Sustained overload therefore never teaches it that a slow
//! dependency is normal; a dependency that really became slower is learnt as soon as the pool
//! stops saturating it. Nothing pins the pool down to measure it.
//!
//! This file holds the step, AIMD, the gradient and the baseline's learning; the settings are
//! in `settings.rs`, the first calibration in `calibration.rs`, and what both this file and
//! the calibration use (`Bounds`, `Step`, `clamp`) in `bounds.rs`.

mod bounds;
mod calibration;
mod settings;

pub use bounds::{Bounds, Step, MIN_SAMPLES_TO_TEACH};
pub use calibration::MIN_SAMPLES_TO_JUDGE;
#[allow(deprecated)]
pub use settings::Algorithm;
pub use settings::{Aimd, CapacityAlgorithm, Gradient};

use super::window::WindowSummary;
use bounds::{clamp, ms};
use calibration::{calibrate, Calibration, Learning};
use std::time::Duration;

/// What the controller remembers between windows (the baseline, and a first calibration in
/// progress).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Memory {
    /// The latency the dependency has when nothing queues, as learnt so far.
    pub baseline: Option<Duration>,
    /// While a first baseline is learnt with the pool full: what the shrinking pools did.
    calibrating: Option<Box<Calibration>>,
    /// Windows at the current capacity with too few successes to judge yet.
    pending: Option<Box<Pending>>,
}

impl Memory {
    /// A memory that starts from `baseline` (a previous controller's), if any.
    pub fn with_baseline(baseline: Option<Duration>) -> Self {
        Memory {
            baseline,
            calibrating: None,
            pending: None,
        }
    }

    /// The part a first calibration reads and writes.
    fn learning(&mut self) -> Learning<'_> {
        Learning {
            baseline: &mut self.baseline,
            calibrating: &mut self.calibrating,
        }
    }
}

/// How fast the baseline follows a higher latency in a window that may teach it.
const BASELINE_RISE: f64 = 0.2;
/// How far the baseline falls towards a lower latency: a quarter of the way, so lucky windows
/// do not set it (medians of windows scatter below the true one as often as above, and a
/// baseline that only follows the low ones ends below the truth).
const BASELINE_FALL: f64 = 0.25;
/// The gradient grows only while the latency is within this share of the tolerance above
/// the baseline (the rest holds: growing on would overshoot before the latency shows it).
const GROW_SHARE: f64 = 0.5;
/// Latency up to this × the baseline is no queue at all: the gradient grows by √c a window.
const FAST_GROWTH_BELOW: f64 = 1.1;

/// The next capacity after `window`, from `current`.
pub fn step(
    algorithm: &CapacityAlgorithm,
    bounds: &Bounds,
    memory: &mut Memory,
    current: u32,
    window: &WindowSummary,
) -> Step {
    let current_in_bounds = current.clamp(bounds.min.max(1), bounds.max.max(bounds.min.max(1)));
    if window.samples() == 0 {
        return clamp(
            bounds,
            current,
            current_in_bounds as f64,
            "no outcomes reported: hold".into(),
        );
    }
    let used_half = window.peak_in_flight.saturating_mul(2) >= u64::from(current);
    match algorithm {
        CapacityAlgorithm::Aimd(a) => aimd(a, bounds, memory, current, window, used_half),
        CapacityAlgorithm::Gradient(g) => gradient(g, bounds, memory, current, window, used_half),
    }
}

/// Windows at one capacity summed until they hold [`MIN_SAMPLES_TO_TEACH`] successes: a slow
/// dependency's window may hold too few for its median to mean anything.
#[derive(Debug, Clone, PartialEq)]
struct Pending {
    capacity: u32,
    sum: WindowSummary,
    windows: u32,
}

/// Adds `w` to the windows summed at `current` (a different capacity starts a new sum); the
/// sum once it has enough successes to be judged, and how many windows it spans.
fn judged(memory: &mut Memory, current: u32, w: &WindowSummary) -> Option<(WindowSummary, u32)> {
    let pending = match &mut memory.pending {
        Some(p) if p.capacity == current => p,
        slot => slot.insert(Box::new(Pending {
            capacity: current,
            sum: WindowSummary::default(),
            windows: 0,
        })),
    };
    let peak = pending.sum.peak_in_flight.max(w.peak_in_flight);
    pending.sum.merge(w);
    pending.sum.peak_in_flight = peak;
    pending.windows += 1;
    if pending.sum.ok < MIN_SAMPLES_TO_TEACH {
        return None;
    }
    memory.pending.take().map(|p| (p.sum, p.windows))
}

/// "`n` successes: too few …, hold".
fn too_few(bounds: &Bounds, current: u32, memory: &Memory) -> Step {
    let (ok, windows) = memory
        .pending
        .as_ref()
        .map_or((0, 0), |p| (p.sum.ok, p.windows));
    let reason = format!(
        "{ok} successes in {windows} window(s): too few to judge the latency from ({MIN_SAMPLES_TO_TEACH} needed), hold"
    );
    clamp(bounds, current, f64::from(current), reason)
}

/// Moves the baseline with a judged latency (see the module's doc); the baseline to use.
fn learn(memory: &mut Memory, latency: Duration, may_rise: bool) -> Duration {
    let baseline = match memory.baseline {
        None => latency,
        Some(b) if latency < b => b - (b - latency).mul_f64(BASELINE_FALL),
        Some(b) if may_rise => b.mul_f64(1.0 - BASELINE_RISE) + latency.mul_f64(BASELINE_RISE),
        Some(b) => b,
    };
    memory.baseline = Some(baseline);
    baseline
}

fn aimd(
    a: &Aimd,
    bounds: &Bounds,
    memory: &mut Memory,
    current: u32,
    w: &WindowSummary,
    used_half: bool,
) -> Step {
    let c = f64::from(current);
    let learns = a.latency_limit.is_none() && a.latency_tolerance.is_some();
    if learns {
        if let Some(s) = calibrate(bounds, &mut memory.learning(), current, w, used_half, 0.5) {
            return s;
        }
    }
    // A decrease is at least one permit: 9 × 0.9 rounded towards 9 would never go below 9.
    let backed_off = (c * a.backoff).min(c - 1.0);
    if w.drop_ratio() > a.drop_threshold {
        memory.pending = None;
        let reason = format!(
            "{:.1}% of {} calls dropped: × {}",
            w.drop_ratio() * 100.0,
            w.samples(),
            a.backoff
        );
        return clamp(bounds, current, backed_off, reason);
    }
    // The latency limit: the one set, else the learnt baseline × tolerance (learnt as the
    // gradient's: a first one by calibration, never from a full pool), judged on windows summed
    // until they hold enough successes.
    if a.latency_limit.is_some() || learns {
        let Some((sum, _)) = judged(memory, current, w) else {
            return too_few(bounds, current, memory);
        };
        let may_rise = !used_half || current <= bounds.min.max(1);
        let limit = match (
            a.latency_limit,
            a.latency_tolerance,
            sum.latency_quantile(0.5),
        ) {
            (Some(limit), _, Some(p50)) => Some((p50, limit, format!("the limit {}", ms(limit)))),
            (None, Some(t), Some(p50)) => {
                let b = learn(memory, p50, may_rise);
                Some((p50, b.mul_f64(t), format!("{t} × the baseline {}", ms(b))))
            }
            _ => None,
        };
        if let Some((p50, _, over)) = limit.filter(|(p50, limit, _)| p50 > limit) {
            let reason = format!("median latency {} over {over}: × {}", ms(p50), a.backoff);
            return clamp(bounds, current, backed_off, reason);
        }
    }
    if !used_half {
        return clamp(
            bounds,
            current,
            c,
            format!("at most {} of {current} used: hold", w.peak_in_flight),
        );
    }
    let reason = format!(
        "no drops, {} of {current} used: + {}",
        w.peak_in_flight, a.increase
    );
    clamp(bounds, current, c + f64::from(a.increase), reason)
}

fn gradient(
    g: &Gradient,
    bounds: &Bounds,
    memory: &mut Memory,
    current: u32,
    w: &WindowSummary,
    used_half: bool,
) -> Step {
    let c = f64::from(current);
    let Some(now) = w.latency_quantile(g.quantile) else {
        // Only drops: the dependency refuses everything.
        memory.pending = None;
        let reason = format!("{} calls, all dropped: × 0.5", w.dropped);
        return clamp(bounds, current, (c * 0.5).min(c - 1.0), reason);
    };
    if let Some(s) = calibrate(
        bounds,
        &mut memory.learning(),
        current,
        w,
        used_half,
        g.quantile,
    ) {
        return s;
    }
    if w.dropped > 0 {
        return gradient_on_drops(g, bounds, memory, current, w, now);
    }
    // The baseline: falls part of the way to a lower latency; rises only where this pool cannot be
    // queueing; and only from windows (summed if need be) with enough successes for their
    // median to mean something.
    let Some((sum, windows)) = judged(memory, current, w) else {
        return too_few(bounds, current, memory);
    };
    let latency = sum.latency_quantile(g.quantile).unwrap_or(now);
    let may_rise = !used_half || current <= bounds.min.max(1);
    let judged = Judged {
        baseline: learn(memory, latency, may_rise),
        latency,
        windows,
    };
    gradient_judged(g, bounds, current, w, used_half, &judged)
}

/// `tolerance × baseline / latency`, within `[0.5, 1]`.
fn ratio(g: &Gradient, baseline: Duration, latency: Duration) -> f64 {
    (g.tolerance * baseline.as_secs_f64() / latency.as_secs_f64().max(1e-9)).clamp(0.5, 1.0)
}

/// Drops: down at once, at least one permit and by at least 10%, whatever the latency (no
/// growth term: it would undo the decrease).
fn gradient_on_drops(
    g: &Gradient,
    bounds: &Bounds,
    memory: &mut Memory,
    current: u32,
    w: &WindowSummary,
    now: Duration,
) -> Step {
    memory.pending = None;
    // From the permits actually held when the dependency refused (a pool it refuses calls
    // from is rarely full: refused calls come back at once).
    let gradient = memory.baseline.map_or(0.9, |b| ratio(g, b, now).min(0.9));
    let c = f64::from(current);
    let used = c.min(w.peak_in_flight as f64);
    let reason = format!(
        "{} dropped, latency {}{}, at most {} of {current} used: × {gradient:.2}",
        w.dropped,
        ms(now),
        memory
            .baseline
            .map_or(String::new(), |b| format!(" against baseline {}", ms(b))),
        w.peak_in_flight,
    );
    clamp(bounds, current, (used * gradient).min(c - 1.0), reason)
}

/// A latency judged on enough successes, against the baseline it taught.
struct Judged {
    latency: Duration,
    baseline: Duration,
    /// Windows summed to judge it.
    windows: u32,
}

/// No drops, a judged latency: a queue shrinks the pool at once; a pool in use with no queue
/// grows; anything else holds.
fn gradient_judged(
    g: &Gradient,
    bounds: &Bounds,
    current: u32,
    w: &WindowSummary,
    used_half: bool,
    j: &Judged,
) -> Step {
    let c = f64::from(current);
    let gradient = ratio(g, j.baseline, j.latency);
    let seen = format!(
        "latency {}{} against baseline {} (tolerance {})",
        ms(j.latency),
        if j.windows > 1 {
            format!(" over {} windows", j.windows)
        } else {
            String::new()
        },
        ms(j.baseline),
        g.tolerance,
    );
    if gradient < 1.0 {
        // A queue: the decrease applies fully, with no growth term.
        let reason = format!("{seen}: × {gradient:.2}");
        return clamp(bounds, current, c * gradient, reason);
    }
    if !used_half {
        let reason = format!(
            "{seen}, at most {} of {current} used: hold",
            w.peak_in_flight
        );
        return clamp(bounds, current, c, reason);
    }
    // Within the tolerance but past most of it: a small queue, as much as is wanted; growing
    // on would overshoot before the latency shows it (a window late).
    let grow_below = j.baseline.mul_f64(1.0 + (g.tolerance - 1.0) * GROW_SHARE);
    if j.latency > grow_below {
        let reason = format!(
            "{seen}: over {} (most of the tolerance), hold",
            ms(grow_below)
        );
        return clamp(bounds, current, c, reason);
    }
    // No queueing and the pool in use: at least one permit more per window, so a small pool
    // grows too (√c × smoothing alone is under one permit below 25); √c while calls are as
    // fast as the baseline (nothing queues anywhere yet: a pool started far too low catches
    // up in a few windows, not dozens).
    let fast = j.latency <= j.baseline.mul_f64(FAST_GROWTH_BELOW);
    let grow = if fast {
        c.sqrt().max(1.0)
    } else {
        (c.sqrt() * g.smoothing).max(1.0)
    };
    clamp(
        bounds,
        current,
        c + grow,
        format!("{seen}: + {grow:.1} (√{current} × {})", g.smoothing),
    )
}

#[cfg(test)]
mod tests;
