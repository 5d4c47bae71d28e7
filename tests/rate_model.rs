//! `rate::decide` against simple, obviously correct references, on random quotas and random
//! sequences of checks (time steps, sometimes backwards, and costs, sometimes 0: peeks).
//!
//! References: GCRA as a token bucket counted in nanoseconds of credit (capacity
//! `burst × T`, one nanosecond of credit per nanosecond, a token is `T` of credit, with the
//! same rounded-up `T` as the quota); fixed and sliding windows from the list of admitted
//! checks, summed per aligned window. On top: the rate bounds over the whole history, exact
//! `retry_after`, denials that write nothing (unless they start a ban), `expires_at`.

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
    (0u8..3, 1u64..=12, period, 1u64..=15, ban).prop_map(|(algo, limit, period, burst, ban)| {
        let q = Quota::new(limit, Duration::from_nanos(period)).ban(Duration::from_nanos(ban));
        match algo {
            0 => q.burst(burst),
            1 => q.algorithm(Algorithm::FixedWindow),
            _ => q.algorithm(Algorithm::SlidingWindow),
        }
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
    /// Every admitted check: (time, cost).
    admitted: Vec<(u64, u64)>,
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
            admitted: Vec::new(),
            banned_until: 0,
            stamp: 0,
        }
    }

    fn capacity(&self) -> u128 {
        self.t * u128::from(self.quota.burst)
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
            if self.quota.algorithm == Algorithm::Gcra {
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
        let before = key;
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
        match v.state {
            None => prop_assert!(cost == 0 || !d.allowed, "an admission must write: {}", ctx),
            Some(s) => {
                prop_assert!(cost > 0, "a peek wrote: {}", ctx);
                prop_assert_eq!((s.stamp, s.tag), (now, 0), "{}", ctx);
                prop_assert_eq!(s.meter.algorithm(), quota.algorithm, "{}", ctx);
                if !d.allowed {
                    // Only the start of a ban: the meter untouched.
                    let started = before.map_or(0, |b| b.banned_until) <= now;
                    prop_assert!(started && !quota.ban.is_zero(), "{}", ctx);
                    prop_assert_eq!(s.banned_until, model.banned_until, "{}", ctx);
                    if let Some(b) = before {
                        prop_assert_eq!(s.meter, b.meter, "{}", ctx);
                    }
                } else {
                    prop_assert_eq!(s.banned_until, before.map_or(0, |b| b.banned_until));
                }
            }
        }
        if let Some(s) = v.state {
            key = Some(s);
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
    let state = KeyState {
        meter: Meter::Gcra { tat: t0 },
        banned_until: 0,
        stamp: t0,
        tag: 0,
    };
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
        foreign in 0u8..3,
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
            1 => Meter::Fixed { window: a, count: b },
            _ => Meter::Sliding { window: a, count: b, previous: c },
        };
        prop_assume!(meter.algorithm() != quota.algorithm);
        let stamp = now + stamp_ahead;
        let banned_until = ban_ahead.map_or(0, |d| stamp + d);
        let stored = KeyState { meter, banned_until, stamp, tag: 9 };
        let blank = KeyState { meter: spent(quota.algorithm), ..stored };
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
