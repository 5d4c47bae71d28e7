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

use super::window::WindowSummary;
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

/// AIMD's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Aimd {
    /// Multiplier on an overloaded window (0 < backoff < 1; default 0.9).
    pub backoff: f64,
    /// Permits added by a window that used the capacity (default 1).
    pub increase: u32,
    /// Share of drops above which a window is overloaded (default 0.01).
    pub drop_threshold: f64,
    /// A median latency above this multiple of the learnt baseline (the dependency's unloaded
    /// latency, learnt as the gradient's is) also makes a window overloaded (default 1.5;
    /// `None`: drops only, no baseline learnt). Ignored when `latency_limit` is set.
    pub latency_tolerance: Option<f64>,
    /// A median latency above this makes a window overloaded, instead of the learnt baseline ×
    /// `latency_tolerance` (default `None`: the learnt one).
    pub latency_limit: Option<Duration>,
}

impl Bounds {
    /// Bounds from `min` to `max`, a window moving the capacity by at most `max_step` of it.
    pub fn new(min: u32, max: u32, max_step: f64) -> Self {
        Bounds { min, max, max_step }
    }
}

// Setters, so that settings can be built outside the crate although the struct may grow:
// `Aimd::default().backoff(0.95)`.
impl Aimd {
    /// Sets [`backoff`](Self::backoff).
    pub fn backoff(mut self, backoff: f64) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets [`increase`](Self::increase).
    pub fn increase(mut self, increase: u32) -> Self {
        self.increase = increase;
        self
    }

    /// Sets [`drop_threshold`](Self::drop_threshold).
    pub fn drop_threshold(mut self, drop_threshold: f64) -> Self {
        self.drop_threshold = drop_threshold;
        self
    }

    /// Sets [`latency_tolerance`](Self::latency_tolerance).
    pub fn latency_tolerance(mut self, latency_tolerance: Option<f64>) -> Self {
        self.latency_tolerance = latency_tolerance;
        self
    }

    /// Sets [`latency_limit`](Self::latency_limit).
    pub fn latency_limit(mut self, latency_limit: Option<Duration>) -> Self {
        self.latency_limit = latency_limit;
        self
    }
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd {
            backoff: 0.9,
            increase: 1,
            drop_threshold: 0.01,
            latency_tolerance: Some(1.5),
            latency_limit: None,
        }
    }
}

/// The gradient's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Gradient {
    /// Latency up to `tolerance × baseline` counts as unloaded (default 1.5).
    pub tolerance: f64,
    /// Share of `√capacity` added per window while nothing queues (decreases apply fully;
    /// default 0.2).
    pub smoothing: f64,
    /// Which latency quantile is compared (default 0.5, the median).
    pub quantile: f64,
}

// Setters, as for `Aimd`: `Gradient::default().tolerance(2.0)`.
impl Gradient {
    /// Sets [`tolerance`](Self::tolerance).
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Sets [`smoothing`](Self::smoothing).
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// Sets [`quantile`](Self::quantile).
    pub fn quantile(mut self, quantile: f64) -> Self {
        self.quantile = quantile;
        self
    }
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
#[non_exhaustive]
pub enum CapacityAlgorithm {
    /// Additive increase, multiplicative decrease on drops and on latency over the baseline.
    Aimd(Aimd),
    /// Latency gradient against a protected baseline.
    Gradient(Gradient),
}

/// Old name of [`CapacityAlgorithm`]; using it warns (`clusterlimit::Algorithm` is the rate
/// limits' algorithm, another type).
///
/// ```compile_fail
/// #![deny(deprecated)]
/// let _ = clusterlimit::adaptive::Algorithm::Aimd(Default::default());
/// ```
#[deprecated(since = "0.1.0", note = "renamed to `CapacityAlgorithm`")]
pub type Algorithm = CapacityAlgorithm;

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
/// Successes a latency is judged on: a window with fewer is summed with the next ones at the
/// same capacity (holding meanwhile) until they reach this; only then may its median move the
/// baseline or the capacity. Drops act at once.
pub const MIN_SAMPLES_TO_TEACH: u64 = 10;
/// Successes a first calibration sums (over as many windows as it takes) before it compares a
/// pool's throughput with the larger pool's.
pub const MIN_SAMPLES_TO_JUDGE: u64 = 30;

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

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
        if let Some(s) = calibrate(bounds, memory, current, w, used_half, 0.5) {
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
    if let Some(s) = calibrate(bounds, memory, current, w, used_half, g.quantile) {
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

// The first calibration (see the module's doc): with no baseline yet and the pool full, the
// pool is halved while its throughput holds, and the baseline is learnt where it falls.

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
struct Calibration {
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
fn calibrate(
    bounds: &Bounds,
    memory: &mut Memory,
    current: u32,
    w: &WindowSummary,
    used_half: bool,
    quantile: f64,
) -> Option<Step> {
    let min = bounds.min.max(1);
    if memory.baseline.is_some() {
        memory.calibrating = None;
        return None;
    }
    let cal = match &mut memory.calibrating {
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
fn finishing(bounds: &Bounds, memory: &mut Memory, current: u32, quantile: f64) -> Step {
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
fn judge_pool(bounds: &Bounds, memory: &mut Memory, current: u32, quantile: f64) -> Step {
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
fn finish(bounds: &Bounds, memory: &mut Memory, current: u32, latency: Duration) -> Step {
    let cal = memory.calibrating.take();
    let kept = cal.as_ref().and_then(|cal| cal.kept);
    let baseline = cal
        .and_then(|cal| cal.lowest)
        .map_or(latency, |l| l.min(latency));
    memory.baseline = Some(baseline);
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
mod tests;
