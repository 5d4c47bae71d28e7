//! Checks of a rate limit's history as callers saw it: every check's start and end on the
//! wall clock and the cost it was admitted with. A decision was made somewhere between its
//! start and end, so an event whose whole [start, end] lies inside an interval was decided in
//! it: counting only those can never blame the limiter for the callers' latency (a sound
//! check), and with millisecond latencies it is a sharp one.

use crate::rate::{Algorithm, Quota};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// One admitted check, as its caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Unix ns when the call started.
    pub start: u64,
    /// Unix ns when it returned.
    pub end: u64,
    /// The cost admitted.
    pub cost: u64,
}

/// Unix ns now (for [`Admitted`] times).
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What [`worst_excess`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Excess {
    /// The most admitted cost above the bound in any interval (≤ 0: never over).
    pub over: f64,
    /// That interval, Unix ns.
    pub from: u64,
    /// End of that interval.
    pub to: u64,
    /// Admitted cost in it.
    pub admitted: u64,
}

/// The largest excess of admitted cost over `bound(interval length in ns)` across every
/// interval [an event's start, another's end], counting events wholly inside it.
/// O(n²) in the number of events: meant for a few tens of thousands.
pub fn worst_excess(events: &[Admitted], bound: impl Fn(u64) -> f64) -> Excess {
    let mut by_start = events.to_vec();
    by_start.sort_by_key(|e| e.start);
    let mut worst = Excess {
        over: f64::MIN,
        from: 0,
        to: 0,
        admitted: 0,
    };
    // Walk starts from the latest back, keeping the events that start at or after it, by end.
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    for e in by_start.iter().rev() {
        *ends.entry(e.end).or_default() += e.cost;
        let mut admitted = 0;
        for (&end, &cost) in &ends {
            admitted += cost;
            let over = admitted as f64 - bound(end.saturating_sub(e.start));
            if over > worst.over {
                worst = Excess {
                    over,
                    from: e.start,
                    to: end,
                    admitted,
                };
            }
        }
    }
    worst
}

/// The bound a quota promises for an interval of `len_ns` (before clock skew): GCRA
/// `burst + len / T`; windows are checked per aligned window by [`window_excess`] instead.
pub fn gcra_bound(quota: &Quota, len_ns: u64) -> f64 {
    quota.burst as f64 + len_ns as f64 / quota.emission_interval_ns() as f64
}

/// Panics unless no interval of `events` admitted more than GCRA allows (plus `slack`, for
/// tests with an injected clock skew); returns the worst excess found (≤ 0 when exact).
pub fn assert_gcra_exact(events: &[Admitted], quota: &Quota, slack: f64) -> Excess {
    assert_eq!(quota.algorithm, Algorithm::Gcra, "a GCRA quota");
    let worst = worst_excess(events, |len| gcra_bound(quota, len) + slack);
    assert!(
        worst.over <= 0.0,
        "over-admission: {} admitted in {:.3} ms, above {quota} allows (+{slack}): {worst:?}",
        worst.admitted,
        (worst.to - worst.from) as f64 / 1e6
    );
    worst
}

/// The most admitted cost found in one aligned window (events wholly inside it), and that
/// window's index: for a window quota it must not exceed `limit`.
pub fn window_excess(events: &[Admitted], quota: &Quota) -> (u64, u64) {
    let period = u64::try_from(quota.period.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
    for e in events {
        let w = e.start / period;
        if e.end / period == w {
            *per_window.entry(w).or_default() += e.cost;
        }
    }
    per_window
        .into_iter()
        .map(|(w, n)| (n, w))
        .max()
        .unwrap_or((0, 0))
}

/// Total admitted cost.
pub fn total(events: &[Admitted]) -> u64 {
    events.iter().map(|e| e.cost).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Admitted {
        Admitted {
            start: ms * 1_000_000,
            end: ms * 1_000_000 + 1,
            cost: 1,
        }
    }

    #[test]
    fn finds_a_burst_above_the_bound() {
        let q = Quota::per_second(10).burst(2);
        // 2 at once, then one every 100 ms: exact.
        let exact: Vec<_> = [0, 0, 100, 200, 300].into_iter().map(at).collect();
        assert!(worst_excess(&exact, |l| gcra_bound(&q, l)).over <= 0.0);
        // 3 at once: one too many.
        let over: Vec<_> = [0, 0, 0, 100].into_iter().map(at).collect();
        let w = worst_excess(&over, |l| gcra_bound(&q, l));
        assert!(w.over > 0.5, "{w:?}");
    }

    #[test]
    fn events_straddling_a_window_are_not_blamed_on_it() {
        let q = Quota::new(2, Duration::from_secs(1)).algorithm(Algorithm::FixedWindow);
        let mut events: Vec<_> = [10, 20, 1010, 1020].into_iter().map(at).collect();
        assert_eq!(window_excess(&events, &q).0, 2);
        events.push(Admitted {
            start: 990_000_000,
            end: 1_005_000_000,
            cost: 1,
        });
        assert_eq!(window_excess(&events, &q).0, 2);
        events.push(at(30));
        assert_eq!(window_excess(&events, &q), (3, 0));
    }
}
