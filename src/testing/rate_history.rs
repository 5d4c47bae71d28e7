//! Checks of a rate limit's history as callers saw it: every check's start and end on the
//! wall clock and the cost it was admitted with. A decision was made somewhere between its
//! start and end, so an event whose whole [start, end] lies inside an interval was decided in
//! it: counting only those can never blame the limiter for the callers' latency (a sound
//! check), and with millisecond latencies it is a sharp one.

use super::max_tree::MaxTree;
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

/// What [`worst_excess`] finds with [`gcra_bound`], in O(n log n): for histories of hundreds
/// of thousands of events (a hot key at thousands a second for a minute). An event that ends
/// before it starts (a clock stepped back) is taken as ending at its start.
pub fn gcra_excess(events: &[Admitted], quota: &Quota) -> Excess {
    let t = quota.emission_interval_ns().max(1) as f64;
    let mut by_start: Vec<Admitted> = events
        .iter()
        .map(|e| Admitted {
            end: e.end.max(e.start),
            ..*e
        })
        .collect();
    by_start.sort_by_key(|e| e.start);
    let mut ends: Vec<u64> = by_start.iter().map(|e| e.end).collect();
    ends.sort_unstable();
    ends.dedup();
    // Times from the first start, in emission intervals.
    let origin = by_start.first().map_or(0, |e| e.start);
    let at = |ns: u64| (ns - origin) as f64 / t;
    // Slot i: the cost admitted by the events seen so far (those starting at or after the
    // current start) that end by ends[i], less ends[i] in intervals; -inf until an event
    // ending there is seen. Over the bound from start s to ends[i]: slot i + at(s) - burst.
    let mut slots = MaxTree::new(ends.len());
    let mut sums = CostSums::new(ends.len());
    let mut worst = Excess {
        over: f64::MIN,
        from: 0,
        to: 0,
        admitted: 0,
    };
    for e in by_start.iter().rev() {
        let i = ends.partition_point(|&x| x < e.end);
        slots.add(i + 1, ends.len(), e.cost as f64);
        sums.add(i, e.cost);
        slots.set(i, sums.up_to(i) as f64 - at(e.end));
        let (best, j) = slots.max();
        let over = best + at(e.start) - quota.burst as f64;
        if over > worst.over {
            worst = Excess {
                over,
                from: e.start,
                to: ends[j],
                admitted: sums.up_to(j),
            };
        }
    }
    worst
}

/// Costs by slot, with sums of every slot up to one (a Fenwick tree).
struct CostSums(Vec<u64>);

impl CostSums {
    fn new(len: usize) -> CostSums {
        CostSums(vec![0; len + 1])
    }

    fn add(&mut self, slot: usize, cost: u64) {
        let mut i = slot + 1;
        while i < self.0.len() {
            self.0[i] += cost;
            i += i & i.wrapping_neg();
        }
    }

    /// The costs of slots 0..=slot.
    fn up_to(&self, slot: usize) -> u64 {
        let mut i = slot + 1;
        let mut sum = 0;
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

/// Panics unless no interval of `events` admitted more than GCRA allows (plus `slack`, for
/// tests with an injected clock skew); returns the worst excess found (≤ 0 when exact).
pub fn assert_gcra_exact(events: &[Admitted], quota: &Quota, slack: f64) -> Excess {
    assert_eq!(quota.algorithm, Algorithm::Gcra, "a GCRA quota");
    let mut worst = gcra_excess(events, quota);
    worst.over -= slack;
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

    /// The fast walk finds what the plain one finds, on random histories: overlapping calls,
    /// equal starts and ends, costs above 1.
    #[test]
    fn gcra_excess_is_worst_excess_with_the_gcra_bound() {
        let mut rng = fastrand::Rng::with_seed(43);
        for round in 0..300 {
            let q = Quota::per_second(rng.u64(1..2_000)).burst(rng.u64(1..50));
            let events: Vec<Admitted> = (0..rng.usize(1..120))
                .map(|_| {
                    let start = rng.u64(0..200) * 1_000_000;
                    Admitted {
                        start,
                        end: start + rng.u64(0..5) * 1_000_000,
                        cost: rng.u64(1..4),
                    }
                })
                .collect();
            let plain = worst_excess(&events, |l| gcra_bound(&q, l));
            let fast = gcra_excess(&events, &q);
            assert!(
                (plain.over - fast.over).abs() < 1e-6,
                "round {round}: {plain:?} vs {fast:?} ({q}): {events:?}"
            );
            // The interval it names admits what it says, that far over.
            let inside: u64 = events
                .iter()
                .filter(|e| e.start >= fast.from && e.end <= fast.to)
                .map(|e| e.cost)
                .sum();
            assert_eq!(inside, fast.admitted, "round {round}");
            let over = inside as f64 - gcra_bound(&q, fast.to - fast.from);
            assert!((over - fast.over).abs() < 1e-6, "round {round}: {fast:?}");
        }
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
