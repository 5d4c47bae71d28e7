//! [`decide`]: one check against one key's state, for every algorithm, with the ban around it.

use super::decision::Decision;
use super::flows::FlowTable;
use super::gcra::{Gcra, GcraMeter};
use super::quota::{Algorithm, Quota};
use super::state::{KeyState, Meter, SlotLog, UnixNanos};
use super::take::{Status, Take};
use super::window::Window;
use std::time::Duration;

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The answer.
    pub decision: Decision,
    /// The state to store, `Some` iff the store must change (an admitted check of cost ≥ 1, a
    /// denial that starts a ban, or on a quota with fair flows a denial of a flow below its
    /// level, which counts as asked). Its `tag` is 0: the writer sets its own.
    pub state: Option<KeyState>,
    /// When the key's state (the new one, or the old one if unchanged) is worth nothing any
    /// more: back to full and not banned. A store may forget the key after this instant.
    pub expires_at: UnixNanos,
}

/// Decides a check of `cost` (0: a peek) on a key whose stored state is `state` (`None`:
/// absent, i.e. full), at the caller's time `now`, clamped to the state's `stamp` so that time
/// never runs backwards per key.
///
/// - Cost ≥ 1: admitted iff the quota's algorithm admits it and the key is not banned; an
///   admitted check returns the state to store. A denial stores nothing, unless the quota has
///   a ban and the key is not banned yet: then the denial starts the ban (`banned_until =
///   now + ban`) and returns that state.
/// - Cost 0 (a peek) never writes: `allowed` says whether a check of cost 1 would be admitted
///   now, `remaining` and `reset_after` describe the key as it stands.
/// - While banned, `remaining` is 0, and `retry_after` is the later of the ban's end and the
///   time the meter itself would admit the check, so retrying then never starts a new ban.
/// - A stored state of another algorithm than the quota's counts as absent (full); its ban
///   still holds.
/// - `expires_at` is never before `now`.
///
/// `quota` must be valid and `cost ≤ quota.max_cost()`: the caller checks both. Given anything
/// else `decide` still does not panic: a larger cost is denied with `retry_after =
/// Duration::MAX` (it can never be admitted), stores nothing and starts no ban.
pub fn decide(quota: &Quota, state: Option<&KeyState>, cost: u64, now: UnixNanos) -> Verdict {
    reserving(quota, state, cost, 0, now)
}

/// [`decide`] keeping `reserve` units for others.
pub(super) fn reserving(
    quota: &Quota,
    state: Option<&KeyState>,
    cost: u64,
    reserve: u64,
    now: UnixNanos,
) -> Verdict {
    let now = state.map_or(now, |s| now.max(s.stamp));
    let meter = state
        .map(|s| s.meter)
        .filter(|m| m.algorithm() == quota.algorithm);
    let banned_until = state.map_or(0, |s| s.banned_until);
    // The slot log and the flows' table go on (`flow_decide` counts a fair flow's check in
    // the table; on a leased key it is the holders' table: a check on the per-check path
    // must not make the holders' counts start again, or the next lease would see its holder
    // alone and take as much as it asks).
    let stored = |meter: Meter, banned_until: UnixNanos| {
        let mut s = KeyState::new(meter, banned_until, now, 0).carrying(state);
        if s.flows.worthless_at(quota.period.as_nanos().max(1)) <= u128::from(now) {
            s.flows = FlowTable::new();
        }
        s
    };
    let slots = state.map_or_else(SlotLog::default, |s| s.slots);
    let expiry = |worthless_at: u128, banned_until: UnixNanos| {
        expiry(worthless_at, banned_until, now).max(slots.kept_until(now))
    };
    let ban_left = u128::from(banned_until.saturating_sub(now));
    let algo = Algo::new(quota, reserve);
    let current = algo.status(meter, now);
    let unchanged = |allowed: bool, retry_ns: Option<u128>| Verdict {
        decision: Decision {
            allowed,
            limit: quota.max_cost(),
            remaining: if ban_left > 0 { 0 } else { current.remaining },
            retry_after: retry_ns.map(duration),
            reset_after: duration(current.reset_ns.max(ban_left)),
            slots,
        },
        state: None,
        expires_at: expiry(current.worthless_at, banned_until),
    };
    if cost.saturating_add(reserve) > quota.max_cost() {
        return unchanged(false, Some(u128::MAX));
    }
    let taken = algo.take(meter, cost.max(1), now);
    match taken {
        // A peek, or any check during a ban: nothing changes.
        _ if cost == 0 || ban_left > 0 => match taken {
            Ok(_) if ban_left == 0 => unchanged(true, None),
            Ok(_) => unchanged(false, Some(ban_left)),
            Err(retry) => unchanged(false, Some(retry.max(ban_left))),
        },
        Ok(new) => {
            let after = algo.status(Some(new), now);
            Verdict {
                decision: Decision {
                    allowed: true,
                    limit: quota.max_cost(),
                    remaining: after.remaining,
                    retry_after: None,
                    reset_after: duration(after.reset_ns),
                    slots,
                },
                state: Some(stored(new, banned_until)),
                expires_at: expiry(after.worthless_at, banned_until),
            }
        }
        Err(retry) if quota.ban.is_zero() => unchanged(false, Some(retry)),
        // Denied for the reserve only: no ban, the reserve is for others to use.
        Err(retry) if reserve > 0 && Algo::new(quota, 0).take(meter, cost, now).is_ok() => {
            unchanged(false, Some(retry))
        }
        Err(retry) => {
            // This denial starts a ban: the meter stays as it was.
            let ban = quota.ban.as_nanos();
            let banned_until = clamp_u64(u128::from(now).saturating_add(ban));
            Verdict {
                decision: Decision {
                    allowed: false,
                    limit: quota.max_cost(),
                    remaining: 0,
                    retry_after: Some(duration(retry.max(ban))),
                    reset_after: duration(current.reset_ns.max(ban)),
                    slots,
                },
                state: Some(stored(
                    meter.unwrap_or_else(|| algo.empty(now)),
                    banned_until,
                )),
                expires_at: expiry(current.worthless_at, banned_until),
            }
        }
    }
}

/// The quota's algorithm with its constants.
pub(super) enum Algo {
    Gcra(Gcra),
    Fixed(Window),
    Sliding(Window),
}

impl Algo {
    /// The algorithm as a check keeping `reserve` units sees it: everything but the reserve
    /// (GCRA's tolerance less `reserve` intervals, a window's limit less `reserve`).
    pub(super) fn new(quota: &Quota, reserve: u64) -> Algo {
        match quota.algorithm {
            Algorithm::Gcra => Algo::Gcra(Gcra::new(quota).keeping(reserve)),
            Algorithm::FixedWindow => Algo::Fixed(Window::new(quota).keeping(reserve)),
            Algorithm::SlidingWindow => Algo::Sliding(Window::new(quota).keeping(reserve)),
        }
    }

    /// `meter` (`None`: absent, or of another algorithm) as it stands at `now`.
    pub(super) fn status(&self, meter: Option<Meter>, now: UnixNanos) -> Status {
        match self {
            Algo::Gcra(g) => g.status(gcra_of(meter), now),
            Algo::Fixed(w) => w.fixed_status(fixed_of(meter), now),
            Algo::Sliding(w) => w.sliding_status(sliding_of(meter), now),
        }
    }

    /// A check of `cost` on `meter` at `now`.
    pub(super) fn take(&self, meter: Option<Meter>, cost: u64, now: UnixNanos) -> Take<Meter> {
        match self {
            Algo::Gcra(g) => g.take(gcra_of(meter), cost, now),
            Algo::Fixed(w) => w
                .fixed_take(fixed_of(meter), cost, now)
                .map(|(window, count)| Meter::Fixed { window, count }),
            Algo::Sliding(w) => {
                w.sliding_take(sliding_of(meter), cost, now)
                    .map(|(window, count, previous)| Meter::Sliding {
                        window,
                        count,
                        previous,
                    })
            }
        }
    }

    /// A meter worth exactly as much as an absent one, for a ban on a key without a meter.
    pub(super) fn empty(&self, now: UnixNanos) -> Meter {
        match self {
            Algo::Gcra(g) => g.empty(now),
            Algo::Fixed(w) => Meter::Fixed {
                window: w.index(now),
                count: 0,
            },
            Algo::Sliding(w) => Meter::Sliding {
                window: w.index(now),
                count: 0,
                previous: 0,
            },
        }
    }
}

impl Algo {
    /// `meter` charged `n` whatever it holds (`adjust.rs`).
    pub(super) fn charge(&self, meter: Option<Meter>, n: u64, now: UnixNanos) -> Meter {
        match self {
            Algo::Gcra(g) => g.charge(gcra_of(meter), n, now),
            Algo::Fixed(w) => {
                let (window, count) = w.fixed_charge(fixed_of(meter), n, now);
                Meter::Fixed { window, count }
            }
            Algo::Sliding(w) => {
                let (window, count, previous) = w.sliding_charge(sliding_of(meter), n, now);
                Meter::Sliding {
                    window,
                    count,
                    previous,
                }
            }
        }
    }

    /// `meter` given back `n` taken at `taken_at` and held until `held_until`, moving no
    /// slot before `not_before` (`adjust.rs`).
    pub(super) fn refund(
        &self,
        meter: Option<Meter>,
        n: u64,
        (taken_at, held_until, not_before): (UnixNanos, UnixNanos, UnixNanos),
        now: UnixNanos,
    ) -> Meter {
        match self {
            Algo::Gcra(g) => g.refund(gcra_of(meter), n, (held_until, not_before), now),
            Algo::Fixed(w) => {
                let (window, count) = w.fixed_refund(fixed_of(meter), n, taken_at, now);
                Meter::Fixed { window, count }
            }
            Algo::Sliding(w) => {
                let (window, count, previous) =
                    w.sliding_refund(sliding_of(meter), n, taken_at, now);
                Meter::Sliding {
                    window,
                    count,
                    previous,
                }
            }
        }
    }

    /// What `meter` owes beyond empty at `now`.
    pub(super) fn debt(&self, meter: Option<Meter>, now: UnixNanos) -> u64 {
        match self {
            Algo::Gcra(g) => g.debt(gcra_of(meter), now),
            Algo::Fixed(w) => w.fixed_debt(fixed_of(meter), now),
            Algo::Sliding(w) => w.sliding_debt(sliding_of(meter), now),
        }
    }
}

fn gcra_of(meter: Option<Meter>) -> Option<GcraMeter> {
    match meter {
        Some(Meter::Gcra { tat }) => Some((tat, None)),
        Some(Meter::GcraWarmUp { tat, cold }) => Some((tat, Some(cold))),
        _ => None,
    }
}

fn fixed_of(meter: Option<Meter>) -> Option<(u64, u64)> {
    match meter {
        Some(Meter::Fixed { window, count }) => Some((window, count)),
        _ => None,
    }
}

fn sliding_of(meter: Option<Meter>) -> Option<(u64, u64, u64)> {
    match meter {
        Some(Meter::Sliding {
            window,
            count,
            previous,
        }) => Some((window, count, previous)),
        _ => None,
    }
}

/// The later of the meter's and the ban's end, never before `now`.
fn expiry(worthless_at: u128, banned_until: UnixNanos, now: UnixNanos) -> UnixNanos {
    clamp_u64(worthless_at).max(banned_until).max(now)
}

pub(super) fn clamp_u64(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Nanoseconds as a `Duration`, saturating at `Duration::MAX`.
pub(super) fn duration(ns: u128) -> Duration {
    const NS: u128 = 1_000_000_000;
    match u64::try_from(ns / NS) {
        // The remainder is below 10⁹, so it fits a u32.
        Ok(secs) => Duration::new(secs, u32::try_from(ns % NS).unwrap_or(0)),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::flows::FlowTable;
    use crate::rate::{MAX_PERIOD, MAX_RATE};

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_700_000_000 * S;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Checks in order on one key, storing what decide says to store.
    fn run(quota: &Quota, key: &mut Option<KeyState>, cost: u64, now: u64) -> Verdict {
        let v = decide(quota, key.as_ref(), cost, now);
        if let Some(s) = &v.state {
            *key = Some(s.clone());
        }
        v
    }

    #[test]
    fn gcra_admits_writes_and_denies_without_writing() {
        let q = Quota::per_second(1).burst(2);
        let mut key = None;
        let v = run(&q, &mut key, 1, T0);
        assert!(v.decision.allowed);
        assert_eq!((v.decision.limit, v.decision.remaining), (2, 1));
        assert_eq!(v.decision.reset_after, secs(1));
        let want = KeyState {
            meter: Meter::Gcra { tat: T0 + S },
            banned_until: 0,
            stamp: T0,
            tag: 0,
            flows: FlowTable::new(),
            slots: SlotLog::default(),
        };
        assert_eq!(v.state, Some(want));
        assert_eq!(v.expires_at, T0 + S);
        assert!(run(&q, &mut key, 1, T0).decision.allowed);
        let v = run(&q, &mut key, 1, T0 + S / 2);
        assert!(!v.decision.allowed);
        assert_eq!(v.state, None);
        assert_eq!(v.decision.retry_after, Some(Duration::from_millis(500)));
        assert_eq!(v.decision.reset_after, Duration::from_millis(1500));
        assert_eq!(v.expires_at, T0 + 2 * S);
    }

    #[test]
    fn a_peek_never_writes_and_asks_about_cost_one() {
        let q = Quota::per_minute(2).algorithm(Algorithm::FixedWindow);
        let mut key = None;
        let v = run(&q, &mut key, 0, T0);
        assert!(v.decision.allowed && v.state.is_none());
        assert_eq!(
            (v.decision.remaining, v.decision.reset_after),
            (2, Duration::ZERO)
        );
        assert_eq!(v.expires_at, T0);
        run(&q, &mut key, 2, T0);
        let v = run(&q, &mut key, 0, T0);
        assert!(!v.decision.allowed && v.state.is_none());
        // T0 is 20 s into its minute.
        assert_eq!(v.decision.retry_after, Some(secs(40)));
        assert_eq!(
            (v.decision.remaining, v.decision.reset_after),
            (0, secs(40))
        );
    }

    #[test]
    fn time_never_runs_backwards_per_key() {
        let q = Quota::per_second(1).burst(1);
        let mut key = None;
        run(&q, &mut key, 1, T0 + 10 * S);
        // A writer whose clock is 10 s behind: decided at the stamp, not at its own time.
        let v = run(&q, &mut key, 1, T0);
        assert_eq!(v.decision.retry_after, Some(secs(1)));
        let v = run(&q, &mut key, 1, T0 + 11 * S);
        assert_eq!(v.state.map(|s| s.stamp), Some(T0 + 11 * S));
        let v = run(&q, &mut key, 0, 0);
        assert_eq!(v.decision.reset_after, secs(1));
    }

    #[test]
    fn a_ban_holds_whatever_the_meter_says() {
        let q = Quota::per_second(1).burst(1).ban(secs(10));
        let mut key = None;
        run(&q, &mut key, 1, T0);
        let v = run(&q, &mut key, 1, T0);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.retry_after, Some(secs(10)));
        assert_eq!(
            (v.decision.remaining, v.decision.reset_after),
            (0, secs(10))
        );
        assert_eq!(v.expires_at, T0 + 10 * S);
        let want = KeyState {
            meter: Meter::Gcra { tat: T0 + S },
            banned_until: T0 + 10 * S,
            stamp: T0,
            tag: 0,
            flows: FlowTable::new(),
            slots: SlotLog::default(),
        };
        assert_eq!(v.state, Some(want));
        // The meter would admit at T0 + 1 s; the ban says no, and writes nothing.
        let v = run(&q, &mut key, 1, T0 + 2 * S);
        assert_eq!(v.decision.retry_after, Some(secs(8)));
        assert_eq!(v.state, None);
        let v = run(&q, &mut key, 0, T0 + 2 * S);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.retry_after, Some(secs(8)));
        // Over: admitted, the old ban end kept (it is in the past).
        let v = run(&q, &mut key, 1, T0 + 10 * S);
        assert!(v.decision.allowed);
        assert_eq!(v.state.map(|s| s.banned_until), Some(T0 + 10 * S));
        assert_eq!(v.expires_at, T0 + 11 * S);
    }

    #[test]
    fn a_ban_shorter_than_the_wait_says_the_wait() {
        // 2 per minute, ban 5 s: denied 20 s into the minute, the window ends in 40 s.
        let q = Quota::per_minute(2)
            .algorithm(Algorithm::FixedWindow)
            .ban(secs(5));
        let mut key = None;
        run(&q, &mut key, 2, T0);
        let v = run(&q, &mut key, 1, T0);
        assert_eq!(v.decision.retry_after, Some(secs(40)));
        assert_eq!(v.state.map(|s| s.banned_until), Some(T0 + 5 * S));
        assert_eq!(v.expires_at, T0 + 40 * S);
        let v = run(&q, &mut key, 1, T0 + S);
        assert_eq!((v.decision.retry_after, v.state), (Some(secs(39)), None));
        // After the ban, before the window ends: denied again, a new ban.
        let v = run(&q, &mut key, 1, T0 + 6 * S);
        assert_eq!(v.state.map(|s| s.banned_until), Some(T0 + 11 * S));
        assert!(run(&q, &mut key, 2, T0 + 40 * S).decision.allowed);
    }

    #[test]
    fn another_algorithms_state_counts_as_absent_but_its_ban_holds() {
        let fixed = Quota::per_second(1).algorithm(Algorithm::FixedWindow);
        let stored = KeyState {
            meter: Meter::Gcra { tat: T0 + 100 * S },
            banned_until: 0,
            stamp: T0,
            tag: 7,
            flows: FlowTable::new(),
            slots: SlotLog::default(),
        };
        let v = decide(&fixed, Some(&stored), 1, T0);
        assert!(v.decision.allowed);
        let window = T0 / S;
        assert_eq!(
            v.state.map(|s| s.meter),
            Some(Meter::Fixed { window, count: 1 })
        );
        let banned = KeyState {
            banned_until: T0 + 3 * S,
            ..stored.clone()
        };
        let v = decide(&fixed, Some(&banned), 1, T0);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.retry_after, Some(secs(3)));
        assert_eq!(v.expires_at, T0 + 3 * S);
        // A ban on an absent meter stores an empty one of the quota's algorithm.
        let q = Quota::per_second(1)
            .algorithm(Algorithm::SlidingWindow)
            .ban(secs(1));
        let full = KeyState {
            meter: Meter::Sliding {
                window,
                count: 1,
                previous: 0,
            },
            ..stored.clone()
        };
        let v = decide(&q, Some(&full), 1, T0);
        assert_eq!(v.state.map(|s| s.meter), Some(full.meter));
        assert_eq!(
            Algo::new(&q, 0).empty(T0),
            Meter::Sliding {
                window,
                count: 0,
                previous: 0
            }
        );
    }

    #[test]
    fn a_cost_above_the_maximum_is_denied_forever_without_a_ban() {
        let q = Quota::per_second(5).ban(secs(10));
        let v = decide(&q, None, 6, T0);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.retry_after, Some(Duration::MAX));
        assert_eq!((v.state, v.decision.remaining), (None, 5));
        assert_eq!(v.expires_at, T0);
    }

    #[test]
    fn sliding_window_through_decide() {
        // 4 per 10 s; T0 is in window 170_000_000, 0 s into it.
        let q = Quota::new(4, secs(10)).algorithm(Algorithm::SlidingWindow);
        let mut key = None;
        let v = run(&q, &mut key, 4, T0 + 5 * S);
        assert_eq!(v.decision.reset_after, secs(15));
        assert_eq!(v.expires_at, T0 + 20 * S);
        // 2.5 s into the next window: ⌈4 × 0.75⌉ = 3 used.
        let v = run(&q, &mut key, 2, T0 + 12 * S + S / 2);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.remaining, 1);
        // 2 fit once ⌈4 × (10 − e) / 10⌉ ≤ 2: e ≥ 5 s.
        assert_eq!(v.decision.retry_after, Some(Duration::from_millis(2500)));
        assert!(run(&q, &mut key, 2, T0 + 15 * S).decision.allowed);
    }

    #[test]
    fn every_algorithm_survives_extreme_inputs() {
        let quotas = [
            Quota::per_second(1).burst(1).ban(secs(1)),
            Quota::per_day(MAX_RATE)
                .algorithm(Algorithm::FixedWindow)
                .ban(secs(1)),
            Quota::new(1, MAX_PERIOD).algorithm(Algorithm::SlidingWindow),
            Quota::per_second(1)
                .burst(1)
                .warmup(MAX_PERIOD)
                .cold_factor(10),
            Quota::new(MAX_RATE, MAX_PERIOD)
                .burst(MAX_RATE)
                .warmup(MAX_PERIOD)
                .ban(secs(1)),
            // Invalid quotas are excluded by the caller; still no panic.
            Quota::new(0, Duration::ZERO).burst(0),
            Quota::new(u64::MAX, Duration::MAX)
                .burst(u64::MAX)
                .ban(Duration::MAX),
        ];
        let meters = [
            Meter::Gcra { tat: u64::MAX },
            Meter::GcraWarmUp {
                tat: u64::MAX,
                cold: u64::MAX,
            },
            Meter::GcraWarmUp { tat: 0, cold: 0 },
            Meter::Fixed {
                window: u64::MAX,
                count: u64::MAX,
            },
            Meter::Sliding {
                window: u64::MAX,
                count: u64::MAX,
                previous: u64::MAX,
            },
            Meter::Sliding {
                window: 0,
                count: u64::MAX,
                previous: u64::MAX,
            },
        ];
        for q in quotas {
            for m in meters {
                for (stamp, banned_until) in [(0, 0), (u64::MAX, u64::MAX), (u64::MAX - 1, 0)] {
                    let s = KeyState {
                        meter: m,
                        banned_until,
                        stamp,
                        tag: 1,
                        flows: FlowTable::new(),
                        slots: SlotLog::default(),
                    };
                    for cost in [0, 1, u64::MAX] {
                        for now in [0, T0, u64::MAX] {
                            let v = decide(&q, Some(&s), cost, now);
                            assert!(v.expires_at >= now.max(stamp), "{q} {s:?} {cost} {now}");
                            let _ = decide(&q, None, cost, now);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn warm_up_through_decide() {
        // 10 per second, burst 10, warm-up 10 s (gcra.rs has the arithmetic).
        let q = Quota::per_second(10).warmup(secs(10)).ban(secs(1));
        let mut key = None;
        let v = run(&q, &mut key, 1, T0);
        let ms = 1_000_000;
        let cold = Meter::GcraWarmUp {
            tat: T0 + 298 * ms,
            cold: 9_800 * ms,
        };
        assert_eq!(v.state.map(|s| s.meter), Some(cold));
        // Worth something until fully cold again: 200 ms of coldness after tat.
        assert_eq!(v.expires_at, T0 + 498 * ms);
        assert_eq!((v.decision.limit, v.decision.remaining), (10, 2));
        run(&q, &mut key, 2, T0);
        // Denied: the ban stores the meter as it was.
        let v = run(&q, &mut key, 1, T0);
        assert!(!v.decision.allowed);
        assert_eq!(v.decision.retry_after, Some(secs(1)));
        // The same state under the quota without its warm-up: plain GCRA on its tat, written
        // back as a plain meter.
        let plain = Quota::per_second(10).ban(secs(1));
        let v = decide(&plain, key.as_ref(), 1, T0 + 2 * S);
        assert!(matches!(v.state.map(|s| s.meter), Some(Meter::Gcra { .. })));
        // A ban on an absent key stores a fully cold meter, worth exactly an absent one.
        assert_eq!(
            Algo::new(&q, 0).empty(T0),
            Meter::GcraWarmUp {
                tat: T0,
                cold: 10 * S
            }
        );
    }
}
