//! The controller's step: the next capacity from the current one and the cluster's merged
//! window of outcomes. Pure: no store, no clock; the same inputs give the same step.
//!
//! Two algorithms, as Netflix's concurrency-limits names them:
//! - **AIMD**: a window with drops (or, if set, a latency over the limit) multiplies the
//!   capacity by `backoff`; a window that used at least half the capacity adds `increase`.
//! - **Gradient**: the ratio of a baseline latency to the window's latency sets the capacity
//!   (`capacity × min(1, tolerance × baseline / latency) + √capacity`, the square root being
//!   room for a small queue): as the dependency queues, latency rises and the capacity falls
//!   in proportion; decreases apply at once, increases are smoothed (at least one permit a
//!   window while nothing queues).
//!
//! Both hold when the window has no samples, and do not grow a capacity the traffic does not
//! use (fewer than half the permits held at the window's peak): a pool nobody fills says
//! nothing about the dependency. Every step is clamped to `[min, max]` and to at most
//! `max_step` of the capacity (at least 1).
//!
//! The gradient's **baseline** is protected from self-poisoning: it falls halfway towards any
//! lower latency seen, and rises only from windows where this pool cannot be the cause of
//! queueing (at most half of it used, or it is at its minimum); a window with fewer than
//! [`MIN_SAMPLES_TO_TEACH`] successes teaches it nothing. A first baseline is never learnt from
//! a full pool: its latency may be mostly queue (a first capacity guessed too high under
//! overload), so the pool shrinks by a quarter every other window (one to drain) until calls
//! stop getting faster, and the baseline is the latency there. Once, at the start: a controller that takes over starts
//! from its predecessor's baseline. Sustained overload therefore never teaches it
//! that a slow dependency is normal; a dependency that really became slower is learnt as soon
//! as the pool stops saturating it. Nothing pins the pool down to measure it.

use super::window::WindowSummary;
use std::time::Duration;

/// Limits on the capacity the controller may choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Never below this (≥ 1).
    pub min: u32,
    /// Never above this.
    pub max: u32,
    /// A window changes the capacity by at most this share of it (at least 1 permit).
    pub max_step: f64,
}

/// AIMD's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aimd {
    /// Multiplier on an overloaded window (0 < backoff < 1; default 0.9).
    pub backoff: f64,
    /// Permits added by a window that used the capacity (default 1).
    pub increase: u32,
    /// Share of drops above which a window is overloaded (default 0.01).
    pub drop_threshold: f64,
    /// A median latency above this also makes a window overloaded (`None`: drops only).
    pub latency_limit: Option<Duration>,
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd {
            backoff: 0.9,
            increase: 1,
            drop_threshold: 0.01,
            latency_limit: None,
        }
    }
}

/// The gradient's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gradient {
    /// Latency up to `tolerance × baseline` counts as unloaded (default 1.5).
    pub tolerance: f64,
    /// Share of an increase applied per window (decreases apply fully; default 0.2).
    pub smoothing: f64,
    /// Which latency quantile is compared (default 0.5, the median).
    pub quantile: f64,
}

impl Default for Gradient {
    fn default() -> Self {
        Gradient {
            tolerance: 1.5,
            smoothing: 0.2,
            quantile: 0.5,
        }
    }
}

/// Which algorithm, with its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Algorithm {
    /// Additive increase, multiplicative decrease on drops.
    Aimd(Aimd),
    /// Latency gradient against a protected baseline.
    Gradient(Gradient),
}

/// What the controller remembers between windows (the gradient's baseline).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Memory {
    /// The latency the dependency has when nothing queues, as learnt so far.
    pub baseline: Option<Duration>,
    /// While there is no baseline yet and the pool is full: the last shrink, to tell whether
    /// a smaller pool still makes calls faster.
    calibrating: Option<Calibration>,
}

/// One shrink of a first calibration: the capacity and median latency before it, and whether
/// a window has passed since (the queue of the larger pool drains first).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Calibration {
    before: u32,
    was: Duration,
    drained: bool,
}

impl Memory {
    /// A memory that starts from `baseline` (a previous controller's), if any.
    pub fn with_baseline(baseline: Option<Duration>) -> Self {
        Memory {
            baseline,
            calibrating: None,
        }
    }
}

/// One step's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The capacity to store (may equal the current one).
    pub capacity: u32,
    /// Why, in words (shown in status and logs).
    pub reason: String,
}

/// How fast the baseline follows a higher latency in a window that may teach it.
const BASELINE_RISE: f64 = 0.2;
/// How far the baseline falls towards a lower latency: halfway, so one lucky window does not
/// set it (medians of windows scatter below the true one as often as above).
const BASELINE_FALL: f64 = 0.5;
/// While learning a first baseline with the pool full: the share of the pool kept per window.
const CALIBRATION_SHRINK: f64 = 0.75;
/// Successes a window needs before its median may move the baseline.
pub const MIN_SAMPLES_TO_TEACH: u64 = 10;

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The next capacity after `window`, from `current`.
pub fn step(
    algorithm: &Algorithm,
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
        Algorithm::Aimd(a) => aimd(a, bounds, current, window, used_half),
        Algorithm::Gradient(g) => gradient(g, bounds, memory, current, window, used_half),
    }
}

fn aimd(a: &Aimd, bounds: &Bounds, current: u32, w: &WindowSummary, used_half: bool) -> Step {
    let slow = match (a.latency_limit, w.latency_quantile(0.5)) {
        (Some(limit), Some(p50)) if p50 > limit => Some((p50, limit)),
        _ => None,
    };
    let c = f64::from(current);
    // A decrease is at least one permit: 9 × 0.9 rounded towards 9 would never go below 9.
    let backed_off = (c * a.backoff).min(c - 1.0);
    if w.drop_ratio() > a.drop_threshold {
        let reason = format!(
            "{:.1}% of {} calls dropped: × {}",
            w.drop_ratio() * 100.0,
            w.samples(),
            a.backoff
        );
        return clamp(bounds, current, backed_off, reason);
    }
    if let Some((p50, limit)) = slow {
        let reason = format!(
            "median latency {} over the limit {}: × {}",
            ms(p50),
            ms(limit),
            a.backoff
        );
        return clamp(bounds, current, backed_off, reason);
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
    let Some(latency) = w.latency_quantile(g.quantile) else {
        // Only drops: the dependency refuses everything.
        let reason = format!("{} calls, all dropped: × 0.5", w.dropped);
        return clamp(bounds, current, (c * 0.5).min(c - 1.0), reason);
    };
    // The baseline: falls halfway to a lower latency; rises only where this pool cannot be
    // queueing; and only from windows with enough successes for their median to mean something.
    let enough = w.ok >= MIN_SAMPLES_TO_TEACH;
    let may_rise = !used_half || current <= bounds.min.max(1);
    if memory.baseline.is_none() && enough && !may_rise {
        // No baseline yet and the pool is full: its latency may be mostly queue (a first
        // capacity guessed too high under overload), and learning it would make that queue
        // the norm. Shrink until calls stop getting faster, then learn.
        match memory.calibrating {
            // One window for the larger pool's queue to drain before judging the smaller one.
            Some(cal) if !cal.drained => {
                memory.calibrating = Some(Calibration {
                    drained: true,
                    ..cal
                });
                let reason = format!(
                    "learning the unloaded latency: a window for the pool of {current} to drain, hold"
                );
                return clamp(bounds, current, c, reason);
            }
            // Calls did not get faster with a smaller pool (or it cannot shrink): no queue.
            Some(cal)
                if current >= cal.before
                    || latency.as_secs_f64() >= cal.was.as_secs_f64() * 0.9 =>
            {
                memory.baseline = Some(latency.min(cal.was));
                memory.calibrating = None;
            }
            _ => {
                memory.calibrating = Some(Calibration {
                    before: current,
                    was: latency,
                    drained: false,
                });
                let reason = format!(
                    "learning the unloaded latency: {} with the pool full at {current}; × {CALIBRATION_SHRINK} until calls stop getting faster",
                    ms(latency)
                );
                let shrunk = (c * CALIBRATION_SHRINK).min(c - 1.0);
                return clamp(bounds, current, shrunk, reason);
            }
        }
    }
    let baseline = match memory.baseline {
        None if enough => latency,
        None => {
            let reason = format!(
                "{} successes: too few to learn the baseline latency from, hold",
                w.ok
            );
            return clamp(bounds, current, c, reason);
        }
        Some(b) if !enough => b,
        Some(b) if latency < b => b - (b - latency).mul_f64(BASELINE_FALL),
        Some(b) if may_rise => b.mul_f64(1.0 - BASELINE_RISE) + latency.mul_f64(BASELINE_RISE),
        Some(b) => b,
    };
    memory.baseline = Some(baseline);
    let ratio = g.tolerance * baseline.as_secs_f64() / latency.as_secs_f64().max(1e-9);
    let mut gradient = ratio.clamp(0.5, 1.0);
    let dropped = w.dropped > 0;
    if dropped {
        gradient = gradient.min(0.9);
    }
    if gradient >= 1.0 && !used_half {
        let reason = format!(
            "latency {} (baseline {}), at most {} of {current} used: hold",
            ms(latency),
            ms(baseline),
            w.peak_in_flight
        );
        return clamp(bounds, current, c, reason);
    }
    let target = c * gradient + c.sqrt();
    let next = if target < c {
        target
    } else if gradient >= 1.0 {
        // No queueing and the pool in use: at least one permit more per window, so a small
        // pool grows too (√c × smoothing alone is under one permit below 25).
        c + ((target - c) * g.smoothing).max(1.0)
    } else {
        c + (target - c) * g.smoothing
    };
    let reason = format!(
        "latency {} against baseline {} (tolerance {}){}: × {:.2} + √{current}",
        ms(latency),
        ms(baseline),
        g.tolerance,
        if dropped {
            format!(", {} dropped", w.dropped)
        } else {
            String::new()
        },
        gradient
    );
    clamp(bounds, current, next, reason)
}

/// `wanted`, limited to one step from `current` and to the bounds.
fn clamp(bounds: &Bounds, current: u32, wanted: f64, reason: String) -> Step {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adaptive::window::Outcome;

    const BOUNDS: Bounds = Bounds {
        min: 2,
        max: 1000,
        max_step: 0.5,
    };

    fn window(ok: u64, dropped: u64, latency: Duration, peak: u64) -> WindowSummary {
        let mut w = WindowSummary::default();
        for _ in 0..ok {
            w.record(Outcome::Success(latency));
        }
        for _ in 0..dropped {
            w.record(Outcome::Dropped);
        }
        w.in_flight(peak);
        w
    }

    #[test]
    fn aimd_backs_off_on_drops_and_grows_when_used() {
        let a = Algorithm::Aimd(Aimd::default());
        let mut m = Memory::default();
        let ms10 = Duration::from_millis(10);
        let s = step(&a, &BOUNDS, &mut m, 100, &window(90, 10, ms10, 100));
        assert_eq!(s.capacity, 90);
        assert!(s.reason.contains("dropped"), "{}", s.reason);
        assert_eq!(
            step(&a, &BOUNDS, &mut m, 100, &window(100, 0, ms10, 80)).capacity,
            101
        );
        // Not used: hold.
        assert_eq!(
            step(&a, &BOUNDS, &mut m, 100, &window(100, 0, ms10, 20)).capacity,
            100
        );
        // No samples: hold.
        assert_eq!(
            step(&a, &BOUNDS, &mut m, 100, &WindowSummary::default()).capacity,
            100
        );
    }

    /// Drops bring a small pool down to its minimum: each backoff is at least one permit.
    #[test]
    fn aimd_backs_off_below_ten() {
        let a = Algorithm::Aimd(Aimd::default());
        let mut m = Memory::default();
        let mut c = 12;
        for _ in 0..20 {
            c = step(
                &a,
                &BOUNDS,
                &mut m,
                c,
                &window(10, 10, Duration::from_millis(5), 12),
            )
            .capacity;
        }
        assert_eq!(c, BOUNDS.min);
    }

    #[test]
    fn gradient_follows_queueing_latency_down_and_up() {
        let g = Algorithm::Gradient(Gradient::default());
        let mut m = Memory::default();
        let base = Duration::from_millis(10);
        // Learn the baseline from a lightly used window.
        let s = step(&g, &BOUNDS, &mut m, 100, &window(100, 0, base, 30));
        assert_eq!(s.capacity, 100);
        // The histogram's bucket: within 12.5% of 10 ms.
        let learnt = m.baseline.map_or(0, |b| b.as_micros());
        assert!((8_750..=11_250).contains(&learnt), "{learnt} µs");
        // Queueing: the median latency four times the baseline: the capacity falls at once.
        let s = step(&g, &BOUNDS, &mut m, 100, &window(100, 0, base * 4, 100));
        assert!(s.capacity < 70, "{s:?}");
        // The baseline did not learn from the saturated window.
        let learnt = m.baseline;
        let _ = step(&g, &BOUNDS, &mut m, 60, &window(100, 0, base * 4, 60));
        assert_eq!(m.baseline, learnt);
        // Back at the baseline and saturated: grows, smoothly.
        let s = step(&g, &BOUNDS, &mut m, 60, &window(100, 0, base, 60));
        assert!(s.capacity > 60 && s.capacity <= 62, "{s:?}");
    }

    #[test]
    fn a_slower_dependency_is_learnt_once_the_pool_stops_saturating_it() {
        let g = Algorithm::Gradient(Gradient::default());
        let mut m = Memory::with_baseline(Some(Duration::from_millis(10)));
        // At its minimum the pool cannot be the cause: the baseline rises towards 40 ms.
        for _ in 0..30 {
            let _ = step(
                &g,
                &BOUNDS,
                &mut m,
                2,
                &window(50, 0, Duration::from_millis(40), 2),
            );
        }
        assert!(
            m.baseline.unwrap_or_default() > Duration::from_millis(30),
            "{m:?}"
        );
    }

    /// A small pool at its baseline latency and in use grows by a permit a window (√8 × 0.2
    /// alone would round to nothing), and stops growing once latency shows a queue.
    #[test]
    fn a_small_pool_grows_until_latency_rises() {
        let g = Algorithm::Gradient(Gradient::default());
        let mut m = Memory::with_baseline(Some(Duration::from_millis(40)));
        let base = Duration::from_millis(40);
        let mut c = 4;
        for _ in 0..4 {
            c = step(&g, &BOUNDS, &mut m, c, &window(50, 0, base, u64::from(c))).capacity;
        }
        assert_eq!(c, 8, "one permit a window from 4");
        let s = step(
            &g,
            &BOUNDS,
            &mut m,
            c,
            &window(50, 0, base * 3, u64::from(c)),
        );
        assert!(s.capacity < c, "{s:?}");
    }

    /// A first capacity 4× too high under overload: the queue's latency is not learnt as the
    /// norm; the pool shrinks until latency stops falling with it, then grows from there.
    #[test]
    fn a_first_baseline_is_not_learnt_from_a_queue() {
        let g = Algorithm::Gradient(Gradient::default());
        let mut m = Memory::default();
        // A dependency of 8 workers, 40 ms per call: latency = 40 ms × max(1, c / 8).
        let latency = |c: u32| Duration::from_millis(40).mul_f64((f64::from(c) / 8.0).max(1.0));
        let mut c = 32;
        let mut seen = Vec::new();
        for _ in 0..30 {
            c = step(
                &g,
                &BOUNDS,
                &mut m,
                c,
                &window(50, 0, latency(c), u64::from(c)),
            )
            .capacity;
            seen.push(c);
        }
        let base = m.baseline.unwrap_or_default().as_secs_f64();
        assert!(
            (0.035..=0.046).contains(&base),
            "baseline {base} s, steps {seen:?}"
        );
        assert!((8..=16).contains(&c), "settles near the workers: {seen:?}");
    }

    /// One lucky window does not set the baseline: few successes teach nothing, and a lower
    /// median moves it halfway.
    #[test]
    fn the_baseline_ignores_small_windows_and_falls_halfway() {
        let g = Algorithm::Gradient(Gradient::default());
        let mut m = Memory::default();
        let s = step(
            &g,
            &BOUNDS,
            &mut m,
            10,
            &window(1, 0, Duration::from_millis(30), 1),
        );
        assert_eq!((s.capacity, m.baseline), (10, None), "{s:?}");
        assert!(s.reason.contains("too few"), "{s:?}");
        let _ = step(
            &g,
            &BOUNDS,
            &mut m,
            10,
            &window(20, 0, Duration::from_millis(40), 2),
        );
        let learnt = m.baseline.unwrap_or_default().as_secs_f64();
        let _ = step(
            &g,
            &BOUNDS,
            &mut m,
            10,
            &window(3, 0, Duration::from_millis(5), 2),
        );
        assert_eq!(
            m.baseline.unwrap_or_default().as_secs_f64(),
            learnt,
            "3 successes"
        );
        let _ = step(
            &g,
            &BOUNDS,
            &mut m,
            10,
            &window(20, 0, Duration::from_millis(20), 2),
        );
        let fell = m.baseline.unwrap_or_default().as_secs_f64();
        assert!(fell < learnt && fell > learnt * 0.6, "{learnt} → {fell}");
    }

    #[test]
    fn every_step_stays_in_bounds_and_within_one_step() {
        let algorithms = [
            Algorithm::Aimd(Aimd::default()),
            Algorithm::Gradient(Gradient::default()),
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for a in &algorithms {
            let mut m = Memory::default();
            let mut current = 50u32;
            for _ in 0..5_000 {
                let bounds = Bounds {
                    min: 1 + (next() % 5) as u32,
                    max: 20 + (next() % 500) as u32,
                    max_step: [0.0, 0.1, 0.5, 1.0][(next() % 4) as usize],
                };
                let w = window(
                    next() % 50,
                    next() % 3,
                    Duration::from_micros(1 + next() % 1_000_000),
                    next() % 600,
                );
                let s = step(a, &bounds, &mut m, current, &w);
                assert!(
                    s.capacity >= bounds.min && s.capacity <= bounds.max,
                    "{s:?} {bounds:?}"
                );
                let allowed = (f64::from(current) * bounds.max_step).max(1.0).ceil() as u32;
                let in_bounds_current = current.clamp(bounds.min, bounds.max);
                let moved = s.capacity.abs_diff(current);
                assert!(
                    moved <= allowed
                        || s.capacity == in_bounds_current
                        || s.capacity == bounds.min
                        || s.capacity == bounds.max,
                    "moved {moved} > {allowed}: {s:?} from {current}"
                );
                current = s.capacity;
            }
        }
    }
}
