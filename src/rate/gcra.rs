//! GCRA exactly as redis-cell's `CL.THROTTLE` computes it, on absolute Unix nanoseconds, and
//! its warm-up.
//!
//! The state is one theoretical arrival time `tat`. With the emission interval `T` (the quota's
//! `period / limit`, rounded up) and the delay variation tolerance `τ = T × burst` (redis-cell:
//! `T × (max_burst + 1)`), a check of `cost` at `now` computes
//! `new_tat = max(tat, now) + T × cost` and is admitted iff `new_tat − τ ≤ now`.
//! All arithmetic is in `u128` and saturating: no input overflows or panics.
//!
//! # Warm-up
//!
//! With a warm-up period `W` and a cold factor `f` the state also keeps the key's coldness
//! `c` (nanoseconds, `0 ..= W`) at the instant `tat`, in the spirit of Guava's
//! `SmoothWarmingUp` (stored permits whose cost is an integral):
//!
//! - Idle time cools: once `now` is past `tat` (the bucket is full) the coldness grows by one
//!   nanosecond per nanosecond, up to `W`. An absent key is fully cold (`c = W`); a plain GCRA
//!   state (`Meter::Gcra`) is warm (`c = 0`) at its `tat`. While the key owes time
//!   (`tat > now`) its coldness stands still.
//! - A unit admitted at coldness `x` costs the interval `T(x) = T × (1 + (f − 1) × x / W)`
//!   (`f × T` fully cold, `T` warm) and warms the key by `D = (f + 1) × T / 2` of coldness.
//!   `n` units at coldness `c` cost the integral over the span of coldness they take away,
//!   `m = min(n × D, c)`: `cost = n × T + (f − 1) × m × (2c − m) / ((f + 1) × W)`, rounded up
//!   (so rounding can only admit less), and leave the coldness `c − m` (rounded up: colder).
//!   Taking the whole span `W` costs `W` of time: a key saturated from cold is warm after `W`.
//! - The new `tat` is `max(tat, now) + cost`. A check is admitted iff
//!   `max(tat, now) + min(cost, τ) − τ ≤ now`: as plain GCRA when `cost ≤ τ`; a check that
//!   costs more than the whole tolerance (a big check on a cold key) is admitted when the key
//!   owes nothing, and its surcharge delays what comes after it, as in Guava. So a check of up
//!   to `burst` is never refused forever, and a denied check's wait is spent owing time, when
//!   the coldness does not move: `retry_after` stays exact.
//!
//! A warm key (`c = 0`) is plain GCRA to the nanosecond; every admission still moves `tat` by
//! at least `T × cost` before the admission test, so the rate never exceeds the plain quota's.

use super::quota::Quota;
use super::state::{Meter, UnixNanos};
use super::take::{Status, Take};

/// A quota's GCRA constants, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gcra {
    /// Emission interval `T` (≥ 1).
    t: u128,
    /// Delay variation tolerance `τ = T × burst`.
    tau: u128,
    /// The most one check may cost (`burst`), for `remaining`.
    burst: u64,
    /// The warm-up, if the quota has one.
    warm: Option<WarmUp>,
}

/// A warm-up's constants.
#[derive(Debug, Clone, Copy)]
struct WarmUp {
    /// The warm-up period `W` in nanoseconds (≥ 1): the coldness of a fully cold key.
    w: u128,
    /// The cold factor `f`.
    f: u128,
}

/// A stored GCRA meter: `tat`, and the coldness at `tat` (`None`: a plain meter).
pub(super) type GcraMeter = (UnixNanos, Option<u64>);

impl Gcra {
    pub(super) fn new(quota: &Quota) -> Gcra {
        // max(1): an invalid quota must not divide by zero below.
        let t = quota.emission_interval_ns().max(1);
        let w = quota.warmup.as_nanos();
        Gcra {
            t,
            tau: t.saturating_mul(u128::from(quota.burst)),
            burst: quota.burst,
            warm: (w > 0).then_some(WarmUp {
                w,
                f: u128::from(quota.cold_factor),
            }),
        }
    }

    /// As a check that must leave `reserve` units sees it: the tolerance less `reserve`
    /// intervals, so a check of `n` passes exactly when one of `n + reserve` would (a quota
    /// with reserves has no warm-up). 0: unchanged.
    pub(super) fn keeping(mut self, reserve: u64) -> Gcra {
        let kept = self.t.saturating_mul(u128::from(reserve));
        self.tau = self.tau.saturating_sub(kept);
        self.burst = self.burst.saturating_sub(reserve);
        self
    }

    /// `max(tat, now)` and the coldness at `now` (`meter` `None`: absent, full and cold).
    fn at(&self, meter: Option<GcraMeter>, now: u128) -> (u128, u128) {
        let w = self.warm.map_or(0, |wu| wu.w);
        match meter {
            None => (now, w),
            Some((tat, cold)) => {
                let tat = u128::from(tat);
                let cold = u128::from(cold.unwrap_or(0)).min(w);
                let idle = now.saturating_sub(tat);
                (tat.max(now), cold.saturating_add(idle).min(w))
            }
        }
    }

    /// What `n` units cost at coldness `c`, and the coldness they leave.
    fn cost(&self, n: u64, c: u128) -> (u128, u128) {
        let plain = self.t.saturating_mul(u128::from(n));
        let Some(WarmUp { w, f }) = self.warm else {
            return (plain, 0);
        };
        // Twice the span of coldness taken, 2m = min(n × (f + 1) × T, 2c), to stay whole.
        let c2 = c.saturating_mul(2);
        let m2 = plain.saturating_mul(f.saturating_add(1)).min(c2);
        // (f − 1) × m × (2c − m) / ((f + 1) × W) = (f − 1) × 2m × (4c − 2m) / (4 × (f + 1) × W).
        let surcharge = f
            .saturating_sub(1)
            .saturating_mul(m2)
            .saturating_mul(c2.saturating_mul(2) - m2)
            .div_ceil(
                f.saturating_add(1)
                    .saturating_mul(w)
                    .saturating_mul(4)
                    .max(1),
            );
        (plain.saturating_add(surcharge), (c2 - m2).div_ceil(2))
    }

    /// The part of `cost` (for `n` units) the admission test counts against the tolerance.
    fn gate(&self, cost: u128, n: u64) -> u128 {
        cost.min(self.tau.max(self.t.saturating_mul(u128::from(n))))
    }

    /// Whether `n` units pass now with the debt `owed` at coldness `c`.
    fn passes(&self, owed: u128, n: u64, c: u128) -> bool {
        let (cost, _) = self.cost(n, c);
        owed.saturating_add(self.gate(cost, n)) <= self.tau
    }

    /// The key as it stands at `now`.
    pub(super) fn status(&self, meter: Option<GcraMeter>, now: UnixNanos) -> Status {
        let now = u128::from(now);
        let (base, c) = self.at(meter, now);
        let reset = base - now;
        let remaining = match self.warm {
            // redis-cell: (τ − ttl) / T, truncated, 0 once the tolerance is used up.
            None => u64::try_from(self.tau.saturating_sub(reset) / self.t).unwrap_or(u64::MAX),
            // The largest cost one check could have now (cost grows with n): binary search.
            Some(_) => {
                let (mut lo, mut hi) = (0u64, self.burst);
                if !self.passes(reset, 0, c) {
                    hi = 0;
                }
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if self.passes(reset, mid, c) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            }
        };
        let worthless_at = match (meter, self.warm) {
            (None, _) => now,
            (Some((tat, _)), None) => u128::from(tat),
            // Fully cold from here: W − c after tat.
            (Some((tat, cold)), Some(wu)) => {
                u128::from(tat).saturating_add(wu.w - u128::from(cold.unwrap_or(0)).min(wu.w))
            }
        };
        Status {
            remaining,
            reset_ns: reset,
            worthless_at,
        }
    }

    /// A check of `cost` at `now`: the new meter if admitted, else how long until it would be.
    pub(super) fn take(&self, meter: Option<GcraMeter>, cost: u64, now: UnixNanos) -> Take<Meter> {
        let now = u128::from(now);
        let (base, c) = self.at(meter, now);
        let (price, cold) = self.cost(cost, c);
        let allow_at = base
            .saturating_add(self.gate(price, cost))
            .saturating_sub(self.tau);
        if allow_at > now {
            return Err(allow_at - now);
        }
        // A tat past u64::MAX (the year 2554) cannot be stored: deny rather than store less.
        let tat = UnixNanos::try_from(base.saturating_add(price)).map_err(|_| u128::MAX)?;
        Ok(self.meter(tat, cold))
    }

    /// A meter charged `n` units whatever it holds: `tat` moves by their price even past the
    /// tolerance (a debt: checks are denied until time has paid it off). A `tat` past
    /// `u64::MAX` (the year 2554) is stored as `u64::MAX`.
    pub(super) fn charge(&self, meter: Option<GcraMeter>, n: u64, now: UnixNanos) -> Meter {
        let (base, c) = self.at(meter, u128::from(now));
        let (price, cold) = self.cost(n, c);
        let tat = UnixNanos::try_from(base.saturating_add(price)).unwrap_or(UnixNanos::MAX);
        self.meter(tat, cold)
    }

    /// A meter given back `n` units that held it until `held_until`: `tat` moves back by the
    /// span of their intervals still ahead of `now` and of `not_before` (what has passed came
    /// back by itself; slots after them move back as far, and must not start before units
    /// admitted may still be spent), never before `now` (a full bucket). The coldness stays.
    pub(super) fn refund(
        &self,
        meter: Option<GcraMeter>,
        n: u64,
        (held_until, not_before): (UnixNanos, UnixNanos),
        now: UnixNanos,
    ) -> Meter {
        let now = u128::from(now);
        let (base, c) = self.at(meter, now);
        // The span of the units' slots still ahead of now, to the nanosecond.
        let ahead = u128::from(held_until).saturating_sub(now.max(u128::from(not_before)));
        let span = self.t.saturating_mul(u128::from(n)).min(ahead);
        let back = base.saturating_sub(span);
        // ≤ base, which fits (it is the stored tat or now).
        let tat = UnixNanos::try_from(back.max(now)).unwrap_or(UnixNanos::MAX);
        self.meter(tat, c)
    }

    /// The units owed beyond the tolerance at `now`, rounded up (0: not in debt).
    pub(super) fn debt(&self, meter: Option<GcraMeter>, now: UnixNanos) -> u64 {
        let now = u128::from(now);
        let (base, _) = self.at(meter, now);
        let over = (base - now).saturating_sub(self.tau);
        u64::try_from(over.div_ceil(self.t)).unwrap_or(u64::MAX)
    }

    /// A meter of this quota's kind: plain, or with its coldness at `tat` (≤ W ≤ u64::MAX for
    /// a valid quota).
    fn meter(&self, tat: UnixNanos, cold: u128) -> Meter {
        match self.warm {
            None => Meter::Gcra { tat },
            Some(_) => Meter::GcraWarmUp {
                tat,
                cold: u64::try_from(cold).unwrap_or(u64::MAX),
            },
        }
    }

    /// A meter worth exactly as much as an absent one at `now`.
    pub(super) fn empty(&self, now: UnixNanos) -> Meter {
        match self.warm {
            None => Meter::Gcra { tat: now },
            Some(wu) => Meter::GcraWarmUp {
                tat: now,
                cold: u64::try_from(wu.w).unwrap_or(u64::MAX),
            },
        }
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
        let meter = tat.map(|t| (t, None));
        match g.take(meter, cost, now) {
            Ok(Meter::Gcra { tat: new }) => {
                *tat = Some(new);
                let s = g.status(Some((new, None)), now);
                (true, s.remaining, s.reset_ns, 0)
            }
            Ok(other) => panic!("{other:?}"),
            Err(retry) => {
                let s = g.status(meter, now);
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
        let meter = tat.map(|t| (t, None));
        assert_eq!(g.status(meter, 10 * S).remaining, 3);
        assert_eq!(g.status(meter, 10 * S).reset_ns, 0);
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
        assert_eq!(g.take(Some((u64::MAX, None)), 1, u64::MAX), Err(u128::MAX));
        assert_eq!(
            g.take(Some((u64::MAX, None)), 5, 0),
            Err(u128::from(u64::MAX))
        );
        assert!(g.take(None, 1, u64::MAX - S).is_ok());
        let _ = g.take(Some((u64::MAX, None)), u64::MAX, 0);
        let s = g.status(Some((u64::MAX, None)), 0);
        assert_eq!((s.remaining, s.reset_ns), (0, u128::from(u64::MAX)));
        // An invalid quota (never given by the caller) still computes something.
        let bad = Gcra::new(&Quota::new(0, Duration::MAX).burst(u64::MAX));
        let _ = bad.take(Some((7, None)), u64::MAX, u64::MAX);
        for f in [0, 1, u32::MAX] {
            let bad = Gcra::new(
                &Quota::new(0, Duration::MAX)
                    .burst(u64::MAX)
                    .warmup(Duration::MAX)
                    .cold_factor(f),
            );
            for meter in [None, Some((7, None)), Some((u64::MAX, Some(u64::MAX)))] {
                for now in [0, u64::MAX] {
                    let _ = bad.take(meter, u64::MAX, now);
                    let _ = bad.take(meter, 1, now);
                    let _ = bad.status(meter, now);
                }
            }
        }
        let _ = bad.take(Some((7, Some(u64::MAX))), u64::MAX, u64::MAX);
        let _ = bad.status(Some((7, Some(u64::MAX))), u64::MAX);
    }

    /// 10 per second, burst 10, warm-up 10 s, cold factor 3: T = 100 ms, τ = 1 s, a unit
    /// warms the key by D = 200 ms, W = 10 s.
    fn warm() -> Gcra {
        Gcra::new(&Quota::per_second(10).warmup(Duration::from_secs(10)))
    }

    fn warm_meter(m: Meter) -> (u64, u64) {
        match m {
            Meter::GcraWarmUp { tat, cold } => (tat, cold),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cold_key_costs_the_integral_and_paces_slower() {
        let g = warm();
        let t0 = 1_700_000_000 * S;
        // Absent: fully cold. 1 unit: 100 ms + 2 × 0.2 × (20 − 0.2) / 40 s = 298 ms.
        let mut meter = None;
        let mut costs = Vec::new();
        for _ in 0..3 {
            let (tat, cold) = warm_meter(g.take(meter, 1, t0).unwrap());
            costs.push(tat - meter.map_or(t0, |(t, _)| t));
            meter = Some((tat, Some(cold)));
        }
        assert_eq!(costs, [298 * MS, 294 * MS, 290 * MS]);
        assert_eq!(meter, Some((t0 + 882 * MS, Some(9_400 * MS))));
        // The 4th would cost 286 ms: owed 882 + 286 − 1000 = 168 ms too early.
        assert_eq!(g.take(meter, 1, t0), Err(u128::from(168 * MS)));
        assert_eq!(g.status(meter, t0).remaining, 0);
        assert!(g.take(meter, 1, t0 + 168 * MS).is_ok());
        // A plain GCRA key of the same quota takes all 10 at once.
        let plain = Gcra::new(&Quota::per_second(10));
        assert!(plain.take(None, 10, t0).is_ok());
    }

    #[test]
    fn idle_time_cools_and_a_plain_state_reads_warm() {
        let g = warm();
        let t0 = 1_700_000_000 * S;
        // A plain state is warm at its tat: 1 unit right then costs T.
        let (tat, cold) = warm_meter(g.take(Some((t0, None)), 1, t0).unwrap());
        assert_eq!((tat, cold), (t0 + 100 * MS, 0));
        assert_eq!(g.status(Some((t0, None)), t0).remaining, 10);
        // 5 s idle after tat: coldness 5 s, 1 unit costs 100 + 2 × 0.2 × 9.8 / 40 s = 198 ms.
        let (tat, cold) = warm_meter(g.take(Some((t0, Some(0))), 1, t0 + 5 * S).unwrap());
        assert_eq!((tat, cold), (t0 + 5 * S + 198 * MS, 4_800 * MS));
        // While owing time the coldness stands still.
        let owing = Some((t0 + 500 * MS, Some(3 * S)));
        let (tat, cold) = warm_meter(g.take(owing, 1, t0).unwrap());
        assert_eq!(cold, 2_800 * MS);
        assert_eq!(
            tat,
            t0 + 500 * MS + 100 * MS + 2 * 200 * (6_000 - 200) / 40_000 * MS
        );
        // The state is worth nothing once fully cold: W − c after tat.
        assert_eq!(
            g.status(owing, t0).worthless_at,
            u128::from(t0 + 7_500 * MS)
        );
        assert_eq!(g.status(None, t0).worthless_at, u128::from(t0));
        assert_eq!(
            g.empty(t0),
            Meter::GcraWarmUp {
                tat: t0,
                cold: 10 * S
            }
        );
    }

    #[test]
    fn a_check_dearer_than_the_tolerance_passes_when_nothing_is_owed() {
        let g = warm();
        let t0 = 1_700_000_000 * S;
        // 10 from cold: 1 s + 2 × 2 × (20 − 2) / 40 s = 2.8 s > τ, admitted: nothing owed.
        assert_eq!(g.status(None, t0).remaining, 10);
        let (tat, cold) = warm_meter(g.take(None, 10, t0).unwrap());
        assert_eq!((tat, cold), (t0 + 2_800 * MS, 8 * S));
        let meter = Some((tat, Some(cold)));
        // 1 more costs 258 ms: owed 2.8 s + 0.258 − 1 s. 10 more: only once nothing is owed.
        assert_eq!(g.take(meter, 1, t0), Err(u128::from(2_058 * MS)));
        assert_eq!(g.take(meter, 10, t0), Err(u128::from(2_800 * MS)));
        assert!(g.take(meter, 10, t0 + 2_800 * MS).is_ok());
        assert!(g.take(meter, 10, t0 + 2_800 * MS - 1).is_err());
        // Never more than the burst, cold or warm.
        assert!(g.take(None, 11, t0).is_err());
    }

    #[test]
    fn saturated_from_cold_the_rate_ramps_to_full_within_the_warm_up() {
        let g = warm();
        let t0 = 1_700_000_000 * S;
        let mut meter = None;
        let mut per_second = [0u32; 14];
        let mut warm_at = None;
        // A check every millisecond: far more than 10 per second.
        for ms in 0..14_000u64 {
            let now = t0 + ms * MS;
            if let Ok(m) = g.take(meter, 1, now) {
                let (tat, cold) = warm_meter(m);
                meter = Some((tat, Some(cold)));
                per_second[(ms / 1000) as usize] += 1;
                if cold == 0 && warm_at.is_none() {
                    warm_at = Some(ms);
                }
            }
        }
        // 6 in the first second, 3 of them at once (cumulative costs 298, 592, 882, 1168, 1450,
        // 1728 ms, the next at 2002 − 1000 ms; a warm key: 20), then 4 a second, more each
        // second, then exactly the rate.
        assert_eq!(per_second, [6, 4, 4, 5, 4, 5, 6, 7, 8, 10, 10, 10, 10, 10]);
        // Taking the whole coldness costs W of time: warm within the warm-up period.
        let warm_at = warm_at.unwrap();
        assert!(warm_at <= 10_000, "{warm_at} ms");
        assert!(warm_at >= 8_000, "{warm_at} ms");
    }

    #[test]
    fn every_cold_factor_starts_at_rate_over_the_factor() {
        let t0 = 1_700_000_000 * S;
        for f in 2..=10u32 {
            let g = Gcra::new(
                &Quota::per_second(10)
                    .burst(1)
                    .warmup(Duration::from_secs(3600))
                    .cold_factor(f),
            );
            // Fully cold, a huge W: the first unit costs f × T, less the first span's slope.
            let (tat, _) = warm_meter(g.take(None, 1, t0).unwrap());
            let cost = tat - t0;
            let f = u64::from(f);
            assert!(
                cost <= f * 100 * MS && cost > f * 100 * MS - MS,
                "{f}: {cost}"
            );
        }
    }
}
