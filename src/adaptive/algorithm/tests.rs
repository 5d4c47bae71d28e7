//! Unit tests of the controller's step (src/adaptive/algorithm.rs).

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

/// With a baseline learnt (AIMD learns one first, as the gradient does: see
/// `aimd_learns_a_baseline_first_and_backs_off_on_latency`).
#[test]
fn aimd_backs_off_on_drops_and_grows_when_used() {
    let a = CapacityAlgorithm::Aimd(Aimd::default());
    let ms10 = Duration::from_millis(10);
    let mut m = Memory::with_baseline(Some(ms10));
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
    let a = CapacityAlgorithm::Aimd(Aimd::default());
    let mut m = Memory::with_baseline(Some(Duration::from_millis(5)));
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

/// AIMD's default: a first baseline learnt by calibration (a full pool halves while its
/// throughput holds), then a median over 1.5 × the baseline backs off like drops do;
/// `latency_limit` overrides it; `latency_tolerance: None` is drops only, as before.
#[test]
fn aimd_learns_a_baseline_first_and_backs_off_on_latency() {
    let a = CapacityAlgorithm::Aimd(Aimd::default());
    let mut m = Memory::default();
    let ms10 = Duration::from_millis(10);
    let s = step(&a, &BOUNDS, &mut m, 100, &window(100, 0, ms10 * 4, 100));
    assert_eq!(s.capacity, 50, "{s:?}");
    assert!(s.reason.contains("learning the unloaded latency"), "{s:?}");
    assert_eq!(m.baseline, None);
    // Half the pool, as many calls: still only queue.
    let s = step(&a, &BOUNDS, &mut m, 50, &window(100, 0, ms10 * 2, 50));
    assert_eq!(s.capacity, 25, "{s:?}");
    // A quarter: the throughput falls; its latency, once the queue left, is the baseline.
    let mut c = 25;
    for _ in 0..10 {
        c = step(&a, &BOUNDS, &mut m, c, &window(50, 0, ms10, 25)).capacity;
        if m.baseline.is_some() {
            break;
        }
    }
    let learnt = m.baseline.map_or(0, |b| b.as_micros());
    assert!((8_750..=11_250).contains(&learnt), "{learnt} µs");
    assert_eq!(
        c, 37,
        "back towards 50, the smallest pool that kept the throughput"
    );
    // Over 1.5 × the baseline: × 0.9; under: + 1.
    let s = step(&a, &BOUNDS, &mut m, 50, &window(100, 0, ms10 * 2, 50));
    assert_eq!(s.capacity, 45, "{s:?}");
    assert!(s.reason.contains("over 1.5 × the baseline"), "{s:?}");
    assert_eq!(
        step(&a, &BOUNDS, &mut m, 50, &window(100, 0, ms10, 50)).capacity,
        51
    );
    // An explicit limit wins over the learnt one.
    let limited = CapacityAlgorithm::Aimd(Aimd {
        latency_limit: Some(ms10 * 3),
        ..Aimd::default()
    });
    let mut fresh = Memory::default();
    let s = step(
        &limited,
        &BOUNDS,
        &mut fresh,
        50,
        &window(100, 0, ms10 * 2, 50),
    );
    assert_eq!((s.capacity, fresh.baseline), (51, None), "{s:?}");
    let s = step(
        &limited,
        &BOUNDS,
        &mut fresh,
        50,
        &window(100, 0, ms10 * 4, 50),
    );
    assert_eq!(s.capacity, 45, "{s:?}");
    assert!(s.reason.contains("over the limit"), "{s:?}");
    // Drops only: no calibration, latency says nothing.
    let drops_only = CapacityAlgorithm::Aimd(Aimd {
        latency_tolerance: None,
        ..Aimd::default()
    });
    let mut fresh = Memory::default();
    let s = step(
        &drops_only,
        &BOUNDS,
        &mut fresh,
        100,
        &window(100, 0, ms10 * 9, 100),
    );
    assert_eq!((s.capacity, fresh.baseline), (101, None), "{s:?}");
}

/// With drops the gradient's target is below the capacity whatever its size: no √c term
/// is added to a decrease (0.9 × 30 + √30 was 32.5, above 30).
#[test]
fn gradient_decreases_under_drops_at_any_size() {
    let g = CapacityAlgorithm::Gradient(Gradient::default());
    let base = Duration::from_millis(10);
    for c in [3u32, 5, 9, 10, 30, 100, 500] {
        let mut m = Memory::with_baseline(Some(base));
        let s = step(&g, &BOUNDS, &mut m, c, &window(100, 5, base, u64::from(c)));
        assert!(s.capacity < c, "{c}: {s:?}");
        assert!(s.reason.contains("dropped"), "{s:?}");
        // A queue with no drops: also strictly down (no growth term).
        let s = step(
            &g,
            &BOUNDS,
            &mut m,
            c,
            &window(100, 0, base * 3, u64::from(c)),
        );
        assert!(s.capacity < c || c <= BOUNDS.min, "{c}: {s:?}");
    }
}

#[test]
fn gradient_follows_queueing_latency_down_and_up() {
    let g = CapacityAlgorithm::Gradient(Gradient::default());
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
    // Back at the baseline and saturated: grows by √c (nothing queues), not more.
    let s = step(&g, &BOUNDS, &mut m, 60, &window(100, 0, base, 60));
    assert!(s.capacity > 60 && s.capacity <= 68, "{s:?}");
    // Within the tolerance but not at the baseline: grows smoothly (√c × 0.2).
    let s = step(
        &g,
        &BOUNDS,
        &mut m,
        60,
        &window(100, 0, base.mul_f64(1.2), 60),
    );
    assert!(s.capacity > 60 && s.capacity <= 62, "{s:?}");
}

#[test]
fn a_slower_dependency_is_learnt_once_the_pool_stops_saturating_it() {
    let g = CapacityAlgorithm::Gradient(Gradient::default());
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

/// A small pool at its baseline latency and in use grows by √c a window (at least a permit:
/// a pool started far too low catches up in a few windows), and stops growing once latency
/// shows a queue.
#[test]
fn a_small_pool_grows_until_latency_rises() {
    let g = CapacityAlgorithm::Gradient(Gradient::default());
    let mut m = Memory::with_baseline(Some(Duration::from_millis(40)));
    let base = Duration::from_millis(40);
    let mut c = 4;
    for _ in 0..4 {
        c = step(&g, &BOUNDS, &mut m, c, &window(50, 0, base, u64::from(c))).capacity;
    }
    assert_eq!(c, 13, "√c a window from 4: 6, 8, 11, 13 (rounded)");
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
    let g = CapacityAlgorithm::Gradient(Gradient::default());
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

/// One lucky window does not set the baseline: few successes teach nothing (until summed
/// with the next windows), and a lower median moves it part of the way (a quarter).
#[test]
fn the_baseline_ignores_small_windows_and_falls_halfway() {
    let g = CapacityAlgorithm::Gradient(Gradient::default());
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
        CapacityAlgorithm::Aimd(Aimd::default()),
        CapacityAlgorithm::Gradient(Gradient::default()),
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
