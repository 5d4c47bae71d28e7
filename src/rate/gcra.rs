//! GCRA exactly as redis-cell's `CL.THROTTLE` computes it, on absolute Unix nanoseconds.
//!
//! The state is one theoretical arrival time `tat`. With the emission interval `T` (the quota's
//! `period / limit`, rounded up) and the delay variation tolerance `τ = T × burst` (redis-cell:
//! `T × (max_burst + 1)`), a check of `cost` at `now` computes
//! `new_tat = max(tat, now) + T × cost` and is admitted iff `new_tat − τ ≤ now`.
//! All arithmetic is in `u128` and saturating: no input overflows or panics.

use super::decide::{Status, Take};
use super::{Quota, UnixNanos};

/// A quota's GCRA constants, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gcra {
    /// Emission interval `T` (≥ 1).
    t: u128,
    /// Delay variation tolerance `τ = T × burst`.
    tau: u128,
}

impl Gcra {
    pub(super) fn new(quota: &Quota) -> Gcra {
        // max(1): an invalid quota must not divide by zero below.
        let t = quota.emission_interval_ns().max(1);
        Gcra {
            t,
            tau: t.saturating_mul(u128::from(quota.burst)),
        }
    }

    /// The key as it stands at `now` (`tat` `None`: absent, i.e. full).
    pub(super) fn status(&self, tat: Option<UnixNanos>, now: UnixNanos) -> Status {
        let now = u128::from(now);
        let tat = tat.map_or(now, u128::from);
        let reset = tat.saturating_sub(now);
        Status {
            // redis-cell: (τ − ttl) / T, truncated, 0 once the tolerance is used up.
            remaining: u64::try_from(self.tau.saturating_sub(reset) / self.t).unwrap_or(u64::MAX),
            reset_ns: reset,
            worthless_at: tat,
        }
    }

    /// A check of `cost` at `now`: the new `tat` if admitted, else how long until it would be.
    pub(super) fn take(
        &self,
        tat: Option<UnixNanos>,
        cost: u64,
        now: UnixNanos,
    ) -> Take<UnixNanos> {
        let now = u128::from(now);
        let tat = tat.map_or(now, u128::from).max(now);
        let new_tat = tat.saturating_add(self.t.saturating_mul(u128::from(cost)));
        let allow_at = new_tat.saturating_sub(self.tau);
        if allow_at > now {
            return Err(allow_at - now);
        }
        // A tat past u64::MAX (the year 2554) cannot be stored: deny rather than store less.
        UnixNanos::try_from(new_tat).map_err(|_| u128::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// One check on `tat`, as decide sees it: admitted → status of the new tat, denied →
    /// status of the old one.
    fn check(g: &Gcra, tat: &mut Option<u64>, cost: u64, now: u64) -> (bool, u64, u128, u128) {
        match g.take(*tat, cost, now) {
            Ok(new) => {
                *tat = Some(new);
                let s = g.status(*tat, now);
                (true, s.remaining, s.reset_ns, 0)
            }
            Err(retry) => {
                let s = g.status(*tat, now);
                (false, s.remaining, s.reset_ns, retry)
            }
        }
    }

    /// redis-cell's own test (`it_rate_limits`): max_burst 4 (burst 5), 1 per second.
    #[test]
    fn redis_cell_reference_sequence() {
        let g = Gcra::new(&Quota::per_second(1).burst(5));
        let start = 1_700_000_000 * S;
        let mut tat = None;
        let s = u128::from(S);
        let ms = u128::from(MS);
        // (offset, cost, allowed, remaining, reset_after, retry_after (0: none))
        let cases: [(u64, u64, bool, u64, u128, u128); 14] = [
            (0, 1, true, 4, s, 0),
            (0, 1, true, 3, 2 * s, 0),
            (0, 1, true, 2, 3 * s, 0),
            (0, 1, true, 1, 4 * s, 0),
            (0, 1, true, 0, 5 * s, 0),
            (0, 1, false, 0, 5 * s, s),
            (3000 * MS, 1, true, 2, 3000 * ms, 0),
            (3100 * MS, 1, true, 1, 3900 * ms, 0),
            (4000 * MS, 1, true, 1, 4000 * ms, 0),
            (8000 * MS, 1, true, 4, 1000 * ms, 0),
            (9500 * MS, 1, true, 4, 1000 * ms, 0),
            (9500 * MS, 2, true, 2, 3 * s, 0),
            (9500 * MS, 5, false, 2, 3 * s, 3 * s),
            (9500 * MS, 3, false, 2, 3 * s, s),
        ];
        for (i, (at, cost, allowed, remaining, reset, retry)) in cases.into_iter().enumerate() {
            let got = check(&g, &mut tat, cost, start + at);
            assert_eq!(got, (allowed, remaining, reset, retry), "case {i}");
        }
    }

    /// The README's `CL.THROTTLE user123 15 30 60 1` → `0 16 15 -1 2`.
    #[test]
    fn redis_cell_readme_example() {
        let g = Gcra::new(&Quota::new(30, Duration::from_secs(60)).burst(16));
        let mut tat = None;
        assert_eq!(
            check(&g, &mut tat, 1, 5 * S),
            (true, 15, 2 * u128::from(S), 0)
        );
    }

    #[test]
    fn a_full_burst_then_one_per_interval() {
        // 10 per second, burst 3: T = 100 ms, τ = 300 ms.
        let g = Gcra::new(&Quota::per_second(10).burst(3));
        let mut tat = None;
        assert!(check(&g, &mut tat, 3, 0).0);
        let (ok, rem, reset, retry) = check(&g, &mut tat, 1, 0);
        assert_eq!(
            (ok, rem, reset, retry),
            (false, 0, 300 * u128::from(MS), 100 * u128::from(MS))
        );
        assert!(!check(&g, &mut tat, 1, 100 * MS - 1).0);
        assert!(check(&g, &mut tat, 1, 100 * MS).0);
        // An empty key, long idle: full again.
        assert_eq!(g.status(tat, 10 * S).remaining, 3);
        assert_eq!(g.status(tat, 10 * S).reset_ns, 0);
    }

    #[test]
    fn rounding_up_the_interval_never_admits_more() {
        // 3 per second: T = 333_333_334 ns, so 3 checks need 1_000_000_002 ns, not 1 s.
        let g = Gcra::new(&Quota::per_second(3).burst(1));
        let mut tat = None;
        for k in 0..3u64 {
            assert!(check(&g, &mut tat, 1, k * 333_333_334).0, "{k}");
        }
        assert!(!check(&g, &mut tat, 1, 3 * 333_333_334 - 1).0);
    }

    #[test]
    fn huge_times_and_costs_neither_overflow_nor_panic() {
        let g = Gcra::new(&Quota::per_second(1).burst(5));
        // Near u64::MAX a new tat no longer fits: denied, never stored truncated.
        assert_eq!(g.take(None, 5, u64::MAX - 1), Err(u128::MAX));
        assert_eq!(g.take(Some(u64::MAX), 1, u64::MAX), Err(u128::MAX));
        assert_eq!(g.take(Some(u64::MAX), 5, 0), Err(u128::from(u64::MAX)));
        assert!(g.take(None, 1, u64::MAX - S).is_ok());
        let _ = g.take(Some(u64::MAX), u64::MAX, 0);
        let s = g.status(Some(u64::MAX), 0);
        assert_eq!((s.remaining, s.reset_ns), (0, u128::from(u64::MAX)));
        // An invalid quota (never given by the caller) still computes something.
        let bad = Gcra::new(&Quota::new(0, Duration::MAX).burst(u64::MAX));
        let _ = bad.take(Some(7), u64::MAX, u64::MAX);
        let _ = bad.status(Some(7), u64::MAX);
    }
}
