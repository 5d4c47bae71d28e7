//! `rate::decide` against simple, obviously correct references, on random quotas and random
//! sequences of checks (time steps, sometimes backwards, and costs, sometimes 0: peeks).
//!
//! References: GCRA as a token bucket counted in nanoseconds of credit (capacity
//! `burst × T`, one nanosecond of credit per nanosecond, a token is `T` of credit, with the
//! same rounded-up `T` as the quota); fixed and sliding windows from the list of admitted
//! checks, summed per aligned window. On top: the rate bounds over the whole history, exact
//! `retry_after`, denials that write nothing (unless they start a ban), `expires_at`.
//!
//! GCRA with a warm-up has its own reference, Guava's stored permits in nanoseconds: a bucket
//! of credit (which a dear admission may leave negative) and a coldness that grows while the
//! bucket is full; a check's price is summed unit by unit, each unit's share of the
//! integral of the linear cost over the span of coldness it takes, in exact integers (decide
//! uses the closed form). On top: from a fully cold key, nothing is admitted before the
//! cumulative cold price allows (rate / cold_factor pacing plus the burst); a key saturated
//! from cold is warm within the warm-up period and then exactly plain GCRA.

use clusterlimit::rate::{decide, Algorithm, KeyState, Meter, Quota, Verdict};
use proptest::prelude::*;
use std::time::Duration;

/// One check: how far the caller's clock moved (in 64ths of the period, negative: back), a
/// jitter in nanoseconds, and a cost selector.
#[derive(Debug, Clone, Copy)]
struct Op {
    step: i64,
    jitter: u64,
    cost: u64,
}

fn quota() -> impl Strategy<Value = Quota> {
    let period = prop_oneof![
        (1u64..=3000).prop_map(|ms| ms * 1_000_000),
        // Periods that divide by nothing: every rounding path.
        1_000_000u64..=3_000_000_000,
    ];
    let ban = prop_oneof![3 => Just(0u64), 1 => 1u64..=4_000_000_000];
    (0u8..4, 1u64..=12, period, 1u64..=15, ban, warm_up()).prop_map(
        |(algo, limit, period, burst, ban, (factor, periods))| {
            let q = Quota::new(limit, Duration::from_nanos(period)).ban(Duration::from_nanos(ban));
            match algo {
                0 => q.burst(burst),
                1 => q.algorithm(Algorithm::FixedWindow),
                2 => q.algorithm(Algorithm::SlidingWindow),
                _ => with_warm_up(q.burst(burst), factor, periods),
            }
        },
    )
}

/// A cold factor, and the warm-up in 64ths of the period (0: the shortest allowed).
fn warm_up() -> impl Strategy<Value = (u32, u64)> {
    (2u32..=10, prop_oneof![1 => Just(0u64), 4 => 1u64..=64 * 20])
}

/// `q` with a warm-up of `periods` 64ths of its period (at least the shortest allowed).
fn with_warm_up(q: Quota, factor: u32, periods: u64) -> Quota {
    let q = q.cold_factor(factor);
    let w = q.period * u32::try_from(periods).unwrap() / 64;
    q.warmup(w.max(q.min_warmup()))
}

fn warm_quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=12,
        1_000_000u64..=3_000_000_000,
        1u64..=15,
        warm_up(),
    )
        .prop_map(|(limit, period, burst, (factor, periods))| {
            let q = Quota::new(limit, Duration::from_nanos(period)).burst(burst);
            with_warm_up(q, factor, periods)
        })
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let step = prop_oneof![4 => Just(0i64), 8 => 0i64..=16, 4 => 0i64..=200, 1 => -40i64..0];
    let op =
        (step, 0u64..1000, 0u64..1000).prop_map(|(step, jitter, cost)| Op { step, jitter, cost });
    prop::collection::vec(op, 1..60)
}

/// Mostly cost 1, some peeks, some anything up to the maximum.
fn cost_of(sel: u64, max: u64) -> u64 {
    match sel {
        0..=599 => 1,
        600..=699 => 0,
        _ => sel % (max + 1),
    }
}

/// The reference: what one key has admitted, its ban, and the latest write's time.
struct Model {
    quota: Quota,
    period: u128,
    /// GCRA: the emission interval (a token is this many nanoseconds of credit).
    t: u128,
    /// GCRA: (credit, at which time); `None`: full.
    bucket: Option<(u128, u128)>,
    /// GCRA with a warm-up: the warm-up `W` and the cold factor (`W` 0: none).
    w: u128,
    f: u128,
    /// GCRA with a warm-up: (credit, may be negative; coldness in ns; at which time);
    /// `None`: full and fully cold.
    warm: Option<(i128, u128, u128)>,
    /// Every admitted check: (time, cost).
    admitted: Vec<(u64, u64)>,
    /// With a warm-up: the indexes in `admitted` of checks admitted on a full, fully cold key.
    cold_starts: Vec<usize>,
    banned_until: u64,
    stamp: u64,
}

impl Model {
    fn new(quota: Quota) -> Model {
        Model {
            quota,
            period: quota.period.as_nanos(),
            t: quota.emission_interval_ns(),
            bucket: None,
            w: quota.warmup.as_nanos(),
            f: u128::from(quota.cold_factor),
            warm: None,
            admitted: Vec::new(),
            cold_starts: Vec::new(),
            banned_until: 0,
            stamp: 0,
        }
    }

    fn capacity(&self) -> u128 {
        self.t * u128::from(self.quota.burst)
    }

    fn warming(&self) -> bool {
        self.w > 0
    }

    /// With a warm-up: (credit, coldness) at `now`. Credit comes back one nanosecond per
    /// nanosecond up to the capacity; from then on, the key cools as fast, up to `W`.
    fn warm_at(&self, now: u64) -> (i128, u128) {
        let cap = i128::try_from(self.capacity()).unwrap();
        match self.warm {
            None => (cap, self.w),
            Some((credit, cold, at)) => {
                let elapsed = i128::try_from(u128::from(now) - at).unwrap();
                let to_full = cap - credit;
                if elapsed <= to_full {
                    (credit + elapsed, cold)
                } else {
                    let full_for = u128::try_from(elapsed - to_full).unwrap();
                    (cap, (cold + full_for).min(self.w))
                }
            }
        }
    }

    /// With a warm-up: the price of `n` units at coldness `cold`, and the coldness left.
    /// Unit by unit: a unit takes `D = (f + 1) T / 2` of coldness (less if less is left), and
    /// costs `T` plus its share of the surcharge `(f − 1) T x / W` integrated over the span
    /// it takes, divided by `D`: `(f − 1) × m × (2c − m) / ((f + 1) W)` for a span `m` down
    /// from `c`. Kept in half nanoseconds (whole numbers), summed exactly, the price rounded
    /// up once per check and the coldness left rounded up (colder).
    fn warm_price(&self, n: u64, cold: u128) -> (u128, u128) {
        let (f, w, t) = (self.f, self.w, self.t);
        let mut c2 = 2 * cold;
        let mut num = 0u128;
        for _ in 0..n {
            let m2 = ((f + 1) * t).min(c2);
            // m (2c − m) = (m2 / 2)(c2 − m2 / 2) = m2 (2 c2 − m2) / 4.
            num += (f - 1) * m2 * (2 * c2 - m2);
            c2 -= m2;
        }
        let den = 4 * (f + 1) * w;
        // Rounded up by hand, not with the div_ceil decide uses.
        let surcharge = num / den + u128::from(!num.is_multiple_of(den));
        let left = c2 / 2 + u128::from(!c2.is_multiple_of(2));
        (u128::from(n) * t + surcharge, left)
    }

    /// With a warm-up: what the admission test counts of a price: all of it, or the whole
    /// tolerance for a check that costs more (admitted when the bucket is full).
    fn warm_gate(&self, n: u64, price: u128) -> i128 {
        let cap = self.capacity().max(u128::from(n) * self.t);
        i128::try_from(price.min(cap)).unwrap()
    }

    fn warm_admits(&self, n: u64, now: u64) -> bool {
        let (credit, cold) = self.warm_at(now);
        credit >= self.warm_gate(n, self.warm_price(n, cold).0)
    }

    fn credit(&self, now: u64) -> u128 {
        match self.bucket {
            None => self.capacity(),
            Some((credit, at)) => (credit + (u128::from(now) - at)).min(self.capacity()),
        }
    }

    /// Admitted cost in the aligned window `w`.
    fn in_window(&self, w: u128) -> u128 {
        self.admitted
            .iter()
            .filter(|(t, _)| u128::from(*t) / self.period == w)
            .map(|(_, c)| u128::from(*c))
            .sum()
    }

    /// How much is used at `now`, out of `limit` (windows).
    fn used(&self, now: u64) -> u128 {
        let w = u128::from(now) / self.period;
        let count = self.in_window(w);
        match self.quota.algorithm {
            Algorithm::FixedWindow => count,
            _ => {
                let previous = if w == 0 { 0 } else { self.in_window(w - 1) };
                let elapsed = u128::from(now) - w * self.period;
                let weighted = previous * (self.period - elapsed);
                // Rounded up by hand, not with the div_ceil decide uses.
                #[allow(clippy::manual_div_ceil)]
                let up = (weighted + self.period - 1) / self.period;
                up + count
            }
        }
    }

    fn meter_admits(&self, cost: u64, now: u64) -> bool {
        if self.warming() {
            return self.warm_admits(cost, now);
        }
        match self.quota.algorithm {
            Algorithm::Gcra => self.credit(now) >= u128::from(cost) * self.t,
            _ => self.used(now) + u128::from(cost) <= u128::from(self.quota.limit),
        }
    }

    /// Would a check of `cost` be admitted at `now` if nothing happened until then?
    fn admits(&self, cost: u64, now: u64) -> bool {
        now >= self.banned_until && self.meter_admits(cost, now)
    }

    fn remaining(&self, now: u64) -> u64 {
        if now < self.banned_until {
            return 0;
        }
        if self.warming() {
            // The largest single check that would pass now.
            return (0..=self.quota.burst)
                .rev()
                .find(|&n| self.warm_admits(n, now))
                .unwrap_or(0);
        }
        let r = match self.quota.algorithm {
            Algorithm::Gcra => self.credit(now) / self.t,
            _ => u128::from(self.quota.limit).saturating_sub(self.used(now)),
        };
        u64::try_from(r).unwrap()
    }

    fn reset_after(&self, now: u64) -> u128 {
        let n = u128::from(now);
        let w = n / self.period;
        let meter = match self.quota.algorithm {
            _ if self.warming() => {
                let cap = i128::try_from(self.capacity()).unwrap();
                u128::try_from(cap - self.warm_at(now).0).unwrap()
            }
            Algorithm::Gcra => self.capacity() - self.credit(now),
            Algorithm::FixedWindow if self.in_window(w) > 0 => (w + 1) * self.period - n,
            Algorithm::SlidingWindow if self.in_window(w) > 0 => (w + 2) * self.period - n,
            Algorithm::SlidingWindow if w > 0 && self.in_window(w - 1) > 0 => {
                (w + 1) * self.period - n
            }
            _ => 0,
        };
        meter.max(u128::from(self.banned_until.saturating_sub(now)))
    }

    /// A check of `cost` ≥ 1 at `now` (already clamped): admitted or not, and the model
    /// updated as decide's stored state would be.
    fn check(&mut self, cost: u64, now: u64) -> bool {
        if self.admits(cost, now) {
            if self.warming() {
                let (credit, cold) = self.warm_at(now);
                if credit == i128::try_from(self.capacity()).unwrap() && cold == self.w {
                    self.cold_starts.push(self.admitted.len());
                }
                let (price, left) = self.warm_price(cost, cold);
                let credit = credit - i128::try_from(price).unwrap();
                self.warm = Some((credit, left, u128::from(now)));
            } else if self.quota.algorithm == Algorithm::Gcra {
                let left = self.credit(now) - u128::from(cost) * self.t;
                self.bucket = Some((left, u128::from(now)));
            }
            self.admitted.push((now, cost));
            self.stamp = now;
            true
        } else {
            if now >= self.banned_until && !self.quota.ban.is_zero() {
                self.banned_until = now + u64::try_from(self.quota.ban.as_nanos()).unwrap();
                self.stamp = now;
            }
            false
        }
    }
}

fn nanos(d: Duration) -> u128 {
    d.as_nanos()
}

/// Every check of one random sequence, against the model.
fn run(quota: Quota, start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    prop_assume!(quota.validate().is_ok());
    let mut model = Model::new(quota);
    let mut key: Option<KeyState> = None;
    let mut clock = start;
    let p = quota.period.as_nanos() as u64;
    for (i, op) in ops.iter().enumerate() {
        let delta = (p / 64) * op.step.unsigned_abs() + op.jitter;
        clock = if op.step < 0 {
            clock - delta
        } else {
            clock + delta
        };
        let cost = cost_of(op.cost, quota.max_cost());
        let before = key.clone();
        let v: Verdict = decide(&quota, key.as_ref(), cost, clock);
        let now = clock.max(model.stamp);
        let ctx = format!("op {i} at {now} (clock {clock}), cost {cost}, {before:?} → {v:?}");
        let d = v.decision;
        let probe = cost.max(1);

        // The decision, against the model.
        let would = model.admits(probe, now);
        prop_assert_eq!(d.allowed, would, "{}", ctx);
        prop_assert_eq!(d.limit, quota.max_cost(), "{}", ctx);
        prop_assert_eq!(d.retry_after.is_some(), !d.allowed, "{}", ctx);
        if let Some(retry) = d.retry_after {
            // Exact: admitted at now + retry_after, not a nanosecond earlier.
            let at = now + u64::try_from(nanos(retry)).unwrap();
            prop_assert!(
                model_after(&model, cost, now).admits(probe, at),
                "late: {}",
                ctx
            );
            prop_assert!(
                !model_after(&model, cost, now).admits(probe, at - 1),
                "early: {}",
                ctx
            );
        }
        if cost > 0 {
            model.check(cost, now);
        }
        prop_assert_eq!(d.remaining, model.remaining(now), "{}", ctx);
        prop_assert_eq!(nanos(d.reset_after), model.reset_after(now), "{}", ctx);

        // What is written.
        match &v.state {
            None => prop_assert!(cost == 0 || !d.allowed, "an admission must write: {}", ctx),
            Some(s) => {
                prop_assert!(cost > 0, "a peek wrote: {}", ctx);
                prop_assert_eq!((s.stamp, s.tag), (now, 0), "{}", ctx);
                prop_assert_eq!(s.meter.algorithm(), quota.algorithm, "{}", ctx);
                if !d.allowed {
                    // Only the start of a ban: the meter untouched.
                    let started = before.as_ref().map_or(0, |b| b.banned_until) <= now;
                    prop_assert!(started && !quota.ban.is_zero(), "{}", ctx);
                    prop_assert_eq!(s.banned_until, model.banned_until, "{}", ctx);
                    if let Some(b) = &before {
                        prop_assert_eq!(s.meter, b.meter, "{}", ctx);
                    }
                } else {
                    prop_assert_eq!(
                        s.banned_until,
                        before.as_ref().map_or(0, |b| b.banned_until)
                    );
                }
            }
        }
        if let Some(s) = &v.state {
            key = Some(s.clone());
        }

        check_expiry(&quota, key.as_ref(), &v, now, &ctx)?;
        // With the state as stored, a retry at retry_after is admitted by decide too.
        if let Some(retry) = d.retry_after {
            let at = now + u64::try_from(nanos(retry)).unwrap();
            prop_assert!(
                decide(&quota, key.as_ref(), cost, at).decision.allowed,
                "{}",
                ctx
            );
            let early = decide(&quota, key.as_ref(), cost, at - 1);
            prop_assert!(!early.decision.allowed, "{}", ctx);
            prop_assert!(early.state.is_none() || !quota.ban.is_zero(), "{}", ctx);
        }
    }
    check_bounds(&model)
}

/// The model after a denial at `now` (which may start a ban), without touching `model`.
fn model_after(model: &Model, cost: u64, now: u64) -> Model {
    let mut m = Model {
        admitted: model.admitted.clone(),
        cold_starts: model.cold_starts.clone(),
        ..*model
    };
    if cost > 0 && !m.admits(cost, now) {
        m.check(cost, now);
    }
    m
}

/// From `expires_at` on the stored state means nothing; just before it (if later than now) it
/// still does.
fn check_expiry(
    quota: &Quota,
    key: Option<&KeyState>,
    v: &Verdict,
    now: u64,
    ctx: &str,
) -> Result<(), TestCaseError> {
    prop_assert!(v.expires_at >= now, "{}", ctx);
    let at = v.expires_at;
    let with = decide(quota, key, 0, at).decision;
    let without = decide(quota, None, 0, at).decision;
    prop_assert_eq!(with, without, "worth something at expires_at: {}", ctx);
    if quota.warmup > Duration::ZERO {
        // Coldness does not show in a peek: a check of 1 writes the same meter at
        // expires_at, another one a nanosecond before.
        let meter = |key: Option<&KeyState>, at| decide(quota, key, 1, at).state.map(|s| s.meter);
        prop_assert_eq!(meter(key, at), meter(None, at), "{}", ctx);
        if at > now {
            let peeks = decide(quota, key, 0, at - 1).decision;
            let differ = peeks != decide(quota, None, 0, at - 1).decision
                || meter(key, at - 1) != meter(None, at - 1);
            prop_assert!(differ, "worth nothing before expires_at: {}", ctx);
        }
        return Ok(());
    }
    if at > now {
        let with = decide(quota, key, 0, at - 1).decision;
        let without = decide(quota, None, 0, at - 1).decision;
        prop_assert_ne!(with, without, "worth nothing before expires_at: {}", ctx);
    }
    Ok(())
}

/// The rate bounds over everything admitted.
fn check_bounds(model: &Model) -> Result<(), TestCaseError> {
    let q = &model.quota;
    let p = model.period;
    let h = &model.admitted;
    match q.algorithm {
        Algorithm::Gcra => {
            // Every interval [t_i, t_j]: admitted × period ≤ limit × length + burst × period.
            for i in 0..h.len() {
                let mut sum = 0u128;
                for j in i..h.len() {
                    sum += u128::from(h[j].1);
                    let len = u128::from(h[j].0 - h[i].0);
                    prop_assert!(
                        sum * p <= u128::from(q.limit) * len + u128::from(q.burst) * p,
                        "{} admitted in {} ns: {:?}",
                        sum,
                        len,
                        h
                    );
                }
            }
        }
        _ => {
            for (t, _) in h {
                let w = u128::from(*t) / p;
                prop_assert!(model.in_window(w) <= u128::from(q.limit), "window {}", w);
            }
        }
    }
    if model.warming() {
        check_cold_starts(model)?;
    }
    Ok(())
}

/// From a full, fully cold key at `t_i`, the `U` units admitted before a check `j` of `n`
/// units moved `tat` by at least their cold price `C(U) = U T + (f − 1) M (4W − M) / (4 (f +
/// 1) W)` with `M = min(U (f + 1) T, 2W)` (rounding, idle time and splitting only add), so `j`
/// cannot pass before `t_i + C(U) + n T − τ`: the pace of `rate / cold_factor` rising to
/// `rate`, plus the burst.
fn check_cold_starts(model: &Model) -> Result<(), TestCaseError> {
    let (t, f, w) = (model.t, model.f, model.w);
    let tau = model.capacity();
    let h = &model.admitted;
    for &i in &model.cold_starts {
        let mut units = 0u128;
        for j in i..h.len() {
            let n = u128::from(h[j].1);
            let m = (units * (f + 1) * t).min(2 * w);
            let lhs = 4 * (f + 1) * w * (u128::from(h[j].0 - h[i].0) + tau);
            let rhs = 4 * (f + 1) * w * (units + n) * t + (f - 1) * m * (4 * w - m);
            prop_assert!(
                lhs >= rhs,
                "check {} passed too soon after the cold start {}: {:?}",
                j,
                i,
                h
            );
            units += n;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn decide_matches_the_reference(
        quota in quota(),
        start in 1_700_000_000_000_000_000u64..1_800_000_000_000_000_000,
        ops in ops(),
    ) {
        run(quota, start, &ops)?;
    }
}

/// A check of the reference itself, so a model that never admits, never denies or never bans
/// cannot pass unnoticed.
#[test]
fn the_model_sees_admissions_denials_and_bans() {
    let q = Quota::per_second(2).burst(2).ban(Duration::from_millis(10));
    let mut m = Model::new(q);
    let t0 = 1_700_000_000_000_000_000;
    assert!(m.check(1, t0) && m.check(1, t0));
    assert!(!m.check(1, t0));
    assert_eq!(m.banned_until, t0 + 10_000_000);
    assert!(!m.admits(1, t0 + 10_000_000));
    assert!(m.admits(1, t0 + 500_000_000));
    let state = KeyState::new(Meter::Gcra { tat: t0 }, 0, t0, 0);
    assert!(decide(&q, Some(&state), 2, t0).decision.allowed);
}

/// A meter of `algorithm` worth nothing at any time after the epoch.
fn spent(algorithm: Algorithm) -> Meter {
    match algorithm {
        Algorithm::Gcra => Meter::Gcra { tat: 0 },
        Algorithm::FixedWindow => Meter::Fixed {
            window: 0,
            count: 0,
        },
        _ => Meter::Sliding {
            window: 0,
            count: 0,
            previous: 0,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// A stored state of another algorithm (after a quota change) counts as absent, but its
    /// ban and its stamp still hold.
    #[test]
    fn another_algorithms_state_counts_as_absent(
        quota in quota(),
        foreign in 0u8..4,
        fields in (any::<u64>(), any::<u64>(), any::<u64>()),
        stamp_ahead in 0u64..2_000_000_000,
        ban_ahead in prop_oneof![Just(None), (0u64..4_000_000_000).prop_map(Some)],
        cost_sel in 0u64..1000,
    ) {
        prop_assume!(quota.validate().is_ok());
        let now = 1_750_000_000_000_000_000u64;
        let (a, b, c) = fields;
        let meter = match foreign {
            0 => Meter::Gcra { tat: a },
            3 => Meter::GcraWarmUp { tat: a, cold: b },
            1 => Meter::Fixed { window: a, count: b },
            _ => Meter::Sliding { window: a, count: b, previous: c },
        };
        prop_assume!(meter.algorithm() != quota.algorithm);
        let stamp = now + stamp_ahead;
        let banned_until = ban_ahead.map_or(0, |d| stamp + d);
        let stored = KeyState::new(meter, banned_until, stamp, 9);
        let blank = KeyState::new(spent(quota.algorithm), banned_until, stamp, 9);
        let cost = cost_of(cost_sel, quota.max_cost());
        let v = decide(&quota, Some(&stored), cost, now);
        let w = decide(&quota, Some(&blank), cost, now);
        prop_assert_eq!(v.decision, w.decision);
        prop_assert_eq!(v.expires_at, w.expires_at);
        prop_assert_eq!(v.state.is_some(), w.state.is_some());
        if let Some(s) = v.state {
            prop_assert_eq!(s.meter.algorithm(), quota.algorithm);
            prop_assert_eq!(s.stamp, stamp);
            prop_assert!(s.banned_until >= banned_until);
        }
    }
}

/// `quota` with its warm-up (any) removed.
fn plain(quota: &Quota) -> Quota {
    Quota::new(quota.limit, quota.period).burst(quota.burst)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A key saturated from cold (a check of 1 a quarter interval after each admission, and
    /// exactly at `retry_after` after each denial: never idle) is warm (coldness 0) within the
    /// warm-up period plus one interval, and from then on decides exactly as the quota without
    /// a warm-up on the same `tat`: the full rate. (A client late to its `retry_after` on a
    /// key of burst 1 finds it idle, which cools it a little: the model checks that.)
    #[test]
    fn saturated_from_cold_it_is_warm_within_the_warm_up(
        quota in warm_quota(),
        start in 1_700_000_000_000_000_000u64..1_800_000_000_000_000_000,
    ) {
        prop_assume!(quota.validate().is_ok());
        let t = u64::try_from(quota.emission_interval_ns()).unwrap();
        let step = (t / 4).max(1);
        let w = u64::try_from(quota.warmup.as_nanos()).unwrap();
        let plain = plain(&quota);
        let mut key: Option<KeyState> = None;
        let mut now = start;
        let mut warm_at = None;
        let mut admitted = 0u64;
        let next = |v: &Verdict| match v.decision.retry_after {
            Some(r) => u64::try_from(r.as_nanos()).unwrap(),
            None => step,
        };
        while now <= start + w + t {
            let v = decide(&quota, key.as_ref(), 1, now);
            if let Some(s) = &v.state {
                admitted += 1;
                key = Some(s.clone());
                if matches!(s.meter, Meter::GcraWarmUp { cold: 0, .. }) {
                    warm_at = Some(now);
                    break;
                }
            }
            now += next(&v);
        }
        prop_assert!(warm_at.is_some(), "still cold after {} admitted: {:?}", admitted, key);
        // Then: the same decisions as plain GCRA on the same tat, for two periods.
        let Some(Meter::GcraWarmUp { tat, .. }) = key.as_ref().map(|k| k.meter) else {
            return Err(TestCaseError::fail("a warm-up meter"));
        };
        let mut plain_key =
            key.as_ref().map(|k| KeyState::new(Meter::Gcra { tat }, k.banned_until, k.stamp, k.tag));
        let end = now + 2 * u64::try_from(quota.period.as_nanos()).unwrap();
        let mut v = decide(&quota, key.as_ref(), 0, now);
        while now <= end {
            now += next(&v);
            v = decide(&quota, key.as_ref(), 1, now);
            let p = decide(&plain, plain_key.as_ref(), 1, now);
            prop_assert_eq!(v.decision, p.decision, "at {}", now);
            if let (Some(s), Some(ps)) = (v.state.clone(), p.state) {
                let Meter::GcraWarmUp { tat, cold } = s.meter else {
                    return Err(TestCaseError::fail("a warm-up meter"));
                };
                prop_assert_eq!((Meter::Gcra { tat }, cold), (ps.meter, 0));
                key = Some(s);
                plain_key = Some(ps);
            }
        }
    }
}

/// The warm-up reference itself: the worked example of docs/rate-limits.md.
#[test]
fn the_warm_up_model_prices_a_cold_key() {
    // 10 per second, burst 10, warm-up 10 s, cold factor 3.
    let q = Quota::per_second(10).warmup(Duration::from_secs(10));
    let mut m = Model::new(q);
    let ms = 1_000_000;
    assert_eq!(m.warm_price(1, 10_000 * ms), (298 * ms, 9_800 * ms));
    assert_eq!(m.warm_price(10, 10_000 * ms), (2_800 * ms, 8_000 * ms));
    // The whole coldness costs the warm-up period: 50 units.
    assert_eq!(m.warm_price(50, 10_000 * ms), (10_000 * ms, 0));
    let t0 = 1_700_000_000_000_000_000;
    assert!(m.check(1, t0) && m.check(1, t0) && m.check(1, t0));
    assert!(!m.check(1, t0));
    assert_eq!(m.remaining(t0), 0);
    let ms64 = 1_000_000u64;
    assert!(m.admits(1, t0 + 168 * ms64) && !m.admits(1, t0 + 168 * ms64 - 1));
    assert_eq!(m.cold_starts, [0]);
}
