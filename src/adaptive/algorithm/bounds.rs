//! What the two algorithms and the first calibration share: the [`Bounds`] of a step, the
//! [`Step`] itself, [`clamp`] (every step ends in it), the successes a latency is judged on,
//! and how a latency is written in a reason. A leaf: `algorithm.rs` and `calibration.rs` both
//! import it, neither the other way round.

use std::time::Duration;

/// Limits on the capacity the controller may choose.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Bounds {
    /// Never below this (≥ 1).
    pub min: u32,
    /// Never above this.
    pub max: u32,
    /// A window changes the capacity by at most this share of it (at least 1 permit).
    pub max_step: f64,
}

impl Bounds {
    /// Bounds from `min` to `max`, a window moving the capacity by at most `max_step` of it.
    pub fn new(min: u32, max: u32, max_step: f64) -> Self {
        Bounds { min, max, max_step }
    }
}

/// One step's result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Step {
    /// The capacity to store (may equal the current one).
    pub capacity: u32,
    /// Why, in words (shown in status and logs).
    pub reason: String,
}

/// Successes a latency is judged on: a window with fewer is summed with the next ones at the
/// same capacity (holding meanwhile) until they reach this; only then may its median move the
/// baseline or the capacity. Drops act at once.
pub const MIN_SAMPLES_TO_TEACH: u64 = 10;

/// A latency as reasons show it: `12.5 ms`.
pub(super) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// `wanted`, limited to one step from `current` and to the bounds.
pub(super) fn clamp(bounds: &Bounds, current: u32, wanted: f64, reason: String) -> Step {
    let min = bounds.min.max(1);
    let max = bounds.max.max(min);
    let step = (f64::from(current) * bounds.max_step.max(0.0)).max(1.0);
    let c = f64::from(current);
    let limited = wanted.clamp(c - step, c + step);
    // Round towards the current capacity: a step is never larger than asked.
    let rounded = if limited < c {
        limited.ceil()
    } else {
        limited.floor()
    };
    let capacity = (rounded.clamp(f64::from(min), f64::from(max))) as u32;
    Step { capacity, reason }
}
