//! Charges and refunds (`adjust`) on every algorithm: a charge always counts and may run the
//! key into debt, which later checks see (denied, with a truthful `retry_after`) until time
//! has paid it off; a refund gives back at most what was taken and never past a full key.

use super::{adjust, debt, decide, Adjustment, Algorithm, KeyState, Quota, SlotLog, Verdict};
use proptest::prelude::*;
use std::time::Duration;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
/// The start of a minute (and of a 10 s window).
const T0: u64 = 1_700_000_040 * S;

fn check(q: &Quota, key: &mut Option<KeyState>, cost: u64, now: u64) -> Verdict {
    keep(key, decide(q, key.as_ref(), cost, now))
}

fn charge(q: &Quota, key: &mut Option<KeyState>, n: u64, now: u64) -> Verdict {
    keep(key, adjust(q, key.as_ref(), Adjustment::Charge(n), now))
}

/// A refund without a reservation: all of `n` the key holds.
fn refund(q: &Quota, key: &mut Option<KeyState>, n: u64, taken_at: u64, now: u64) -> Verdict {
    settle_back(q, key, n, (taken_at, u64::MAX, SlotLog::default()), now)
}

/// A reservation's refund: `n` taken at `taken_at` that held the key until `held_until`,
/// when the key's slot log was `seen`.
fn settle_back(
    q: &Quota,
    key: &mut Option<KeyState>,
    n: u64,
    (taken_at, held_until, seen): (u64, u64, SlotLog),
    now: u64,
) -> Verdict {
    let a = Adjustment::Refund {
        amount: n,
        taken_at,
        held_until,
        seen,
    };
    keep(key, adjust(q, key.as_ref(), a, now))
}

/// What a reservation admitted by `v` at `at` remembers: when, until when its units held
/// the key (`reset_after` after it) and the slot log its check saw.
fn held(v: &Verdict, at: u64) -> (u64, u64, SlotLog) {
    let reset = u64::try_from(v.decision.reset_after.as_nanos()).unwrap_or(u64::MAX);
    (at, at + reset, v.decision.slots)
}

fn keep(key: &mut Option<KeyState>, v: Verdict) -> Verdict {
    if let Some(s) = &v.state {
        *key = Some(s.clone());
    }
    v
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[test]
fn gcra_debt_moves_the_arrival_time_and_time_pays_it_off() {
    // 10 per second, burst 10: T = 100 ms, τ = 1 s.
    let q = Quota::per_second(10);
    let mut key = None;
    assert!(check(&q, &mut key, 10, T0).decision.allowed);
    // 20 more than the key holds: tat = T0 + 3 s, owed 2 s past the tolerance = 20 units.
    let v = charge(&q, &mut key, 20, T0);
    assert!(v.state.is_some() && !v.decision.allowed);
    assert_eq!(debt(&q, key.as_ref(), T0), 20);
    assert_eq!(v.decision.remaining, 0);
    assert_eq!(v.decision.reset_after, secs(3.0));
    // A check of 1 is admitted once tat − τ + T ≤ now: at T0 + 2.1 s, exactly.
    let v = check(&q, &mut key, 1, T0 + S);
    assert_eq!(v.decision.retry_after, Some(secs(1.1)));
    assert_eq!(debt(&q, key.as_ref(), T0 + S), 10);
    assert!(!check(&q, &mut key, 1, T0 + 2100 * MS - 1).decision.allowed);
    assert!(check(&q, &mut key, 1, T0 + 2100 * MS).decision.allowed);
    assert_eq!(debt(&q, key.as_ref(), T0 + 2100 * MS), 0);
}

#[test]
fn gcra_a_refund_is_where_a_smaller_charge_would_have_left_the_key() {
    let q = Quota::per_second(10).burst(20);
    for (estimate, actual, wait) in [(15, 4, 0), (15, 4, 700 * MS), (8, 8, 0), (17, 0, 3 * S)] {
        let (mut reserved, mut direct) = (None, None);
        check(&q, &mut reserved, 3, T0);
        check(&q, &mut direct, 3, T0);
        let v = check(&q, &mut reserved, estimate, T0);
        assert!(v.decision.allowed);
        let h = held(&v, T0);
        settle_back(&q, &mut reserved, estimate - actual, h, T0 + wait);
        charge(&q, &mut direct, actual, T0);
        let (a, b) = (
            decide(&q, reserved.as_ref(), 0, T0 + wait).decision,
            decide(&q, direct.as_ref(), 0, T0 + wait).decision,
        );
        assert_eq!((a.remaining, a.reset_after), (b.remaining, b.reset_after));
    }
    // Never past full: giving back more than is taken leaves a full key.
    let mut key = None;
    check(&q, &mut key, 5, T0);
    let v = refund(&q, &mut key, 1000, T0, T0);
    assert_eq!(
        (v.decision.remaining, v.decision.reset_after),
        (20, secs(0.0))
    );
    // Nothing taken (absent key): nothing written.
    let v = refund(&q, &mut None, 5, T0, T0);
    assert_eq!((v.state, v.decision.remaining), (None, 20));
}

#[test]
fn gcra_gives_back_only_what_still_holds_the_key() {
    // 20 at once, one every 5 ms. A reservation of all 20 at T0 held the key until T0 + 100 ms.
    let q = Quota::per_second(200).burst(20);
    let mut key = None;
    let v = check(&q, &mut key, 20, T0);
    let h = held(&v, T0);
    // 99 ms later 19 have come back by themselves, and are taken by others.
    assert!(check(&q, &mut key, 19, T0 + 99 * MS).decision.allowed);
    // Settled at 0 at T0 + 100 ms: its units have all passed, nothing more to give back
    // (giving 20 back would let 39 through in a millisecond where a burst is 20).
    let v = settle_back(&q, &mut key, 20, h, T0 + 100 * MS);
    assert_eq!(v.state, None, "nothing ahead to give back");
    assert!(!check(&q, &mut key, 2, T0 + 100 * MS).decision.allowed);
    // Settled halfway, 10 of its intervals are still ahead: those come back.
    let mut key = None;
    let v = check(&q, &mut key, 20, T0);
    let h = held(&v, T0);
    let v = settle_back(&q, &mut key, 20, h, T0 + 50 * MS);
    assert_eq!(
        v.decision.remaining, 20,
        "full: 10 came back by time, 10 given"
    );
}

#[test]
fn fixed_window_debt_is_carried_into_the_next_windows() {
    let q = Quota::per_minute(10).algorithm(Algorithm::FixedWindow);
    let mut key = None;
    assert!(check(&q, &mut key, 8, T0).decision.allowed);
    let v = charge(&q, &mut key, 25, T0 + 30 * S);
    // 33 counted: 23 over, carried: 23 next minute (13 over), 13 (3 over), then 3 of 10.
    assert_eq!(debt(&q, key.as_ref(), T0 + 30 * S), 23);
    assert_eq!(v.decision.retry_after, Some(secs(150.0)));
    assert_eq!(v.decision.reset_after, secs(210.0));
    assert_eq!(debt(&q, key.as_ref(), T0 + 60 * S), 13);
    assert!(!check(&q, &mut key, 1, T0 + 179 * S).decision.allowed);
    let v = check(&q, &mut key, 7, T0 + 180 * S);
    assert!(v.decision.allowed && v.decision.remaining == 0);
    assert!(!check(&q, &mut key, 1, T0 + 180 * S).decision.allowed);
    assert!(check(&q, &mut key, 10, T0 + 240 * S).decision.allowed);
}

#[test]
fn fixed_window_refunds_only_while_the_window_that_took_it_lasts() {
    let q = Quota::per_minute(10).algorithm(Algorithm::FixedWindow);
    let mut key = None;
    check(&q, &mut key, 9, T0 + 10 * S);
    let v = refund(&q, &mut key, 6, T0 + 10 * S, T0 + 50 * S);
    assert_eq!(v.decision.remaining, 7);
    check(&q, &mut key, 7, T0 + 55 * S);
    // Taken in the last minute: that minute's unused budget is gone; nothing changes.
    check(&q, &mut key, 4, T0 + 65 * S);
    let v = refund(&q, &mut key, 7, T0 + 55 * S, T0 + 70 * S);
    assert_eq!((v.state, v.decision.remaining), (None, 6));
    // More than is counted: back to empty, not below.
    let v = refund(&q, &mut key, 100, T0 + 65 * S, T0 + 70 * S);
    assert_eq!(v.decision.remaining, 10);
}

#[test]
fn sliding_window_debt_fades_one_window_at_a_time() {
    let q = Quota::new(10, Duration::from_secs(10)).algorithm(Algorithm::SlidingWindow);
    let mut key = None;
    let v = charge(&q, &mut key, 25, T0);
    assert_eq!(debt(&q, key.as_ref(), T0), 15);
    // Next window: 15 carried, the previous 10 fading; the one after: 5 and 10; a check of 1
    // fits once ⌈10 × (10 − e) / 10⌉ ≤ 4: e ≥ 6 s into it, 26 s from now.
    assert_eq!(v.decision.retry_after, Some(secs(26.0)));
    assert_eq!(v.decision.reset_after, secs(40.0));
    assert!(!check(&q, &mut key, 1, T0 + 26 * S - 1).decision.allowed);
    assert!(check(&q, &mut key, 1, T0 + 26 * S).decision.allowed);
    // A refund of what the previous window took comes off its counter.
    let mut key = None;
    check(&q, &mut key, 10, T0 + 5 * S);
    let before = check(&q, &mut key, 0, T0 + 12 * S).decision.remaining;
    let v = refund(&q, &mut key, 6, T0 + 5 * S, T0 + 12 * S);
    assert_eq!((before, v.decision.remaining), (2, 6));
    // Two windows back: faded already, nothing to give.
    let v = refund(&q, &mut key, 4, T0 + 5 * S, T0 + 25 * S);
    assert_eq!(v.state, None);
}

#[test]
fn a_charge_keeps_the_ban_and_starts_none() {
    let q = Quota::per_second(1).burst(1).ban(Duration::from_secs(10));
    let mut key = None;
    check(&q, &mut key, 1, T0);
    check(&q, &mut key, 1, T0);
    let banned = key.as_ref().map(|s| s.banned_until);
    assert_eq!(banned, Some(T0 + 10 * S));
    let v = charge(&q, &mut key, 5, T0 + S);
    assert_eq!(v.state.map(|s| s.banned_until), banned);
    // Past the ban and the 5 charged (tat = T0 + 1 s + 5 s): admitted at T0 + 10 s.
    assert!(check(&q, &mut key, 1, T0 + 10 * S).decision.allowed);
    let mut fresh = None;
    let v = charge(&q, &mut fresh, 50, T0);
    assert_eq!(v.state.map(|s| s.banned_until), Some(0));
}

#[test]
fn zero_adjustments_write_nothing() {
    let q = Quota::per_second(5);
    let mut key = None;
    check(&q, &mut key, 2, T0);
    assert_eq!(charge(&q, &mut key, 0, T0).state, None);
    assert_eq!(refund(&q, &mut key, 0, T0, T0).state, None);
    assert_eq!(charge(&q, &mut key, 0, T0).decision.remaining, 3);
}

#[test]
fn extreme_adjustments_neither_overflow_nor_panic() {
    let quotas = [
        Quota::per_second(1).burst(1),
        Quota::per_second(1).warmup(Duration::from_secs(5)),
        Quota::per_day(crate::rate::MAX_RATE).algorithm(Algorithm::FixedWindow),
        Quota::new(1, crate::rate::MAX_PERIOD).algorithm(Algorithm::SlidingWindow),
        Quota::new(1, crate::rate::MAX_PERIOD).burst(1),
    ];
    for q in quotas {
        for now in [0, T0, u64::MAX] {
            for n in [1, u64::MAX] {
                let mut key = None;
                charge(&q, &mut key, n, now);
                charge(&q, &mut key, n, now);
                let _ = debt(&q, key.as_ref(), now);
                let v = decide(&q, key.as_ref(), 1, now);
                assert!(!v.decision.allowed || n == 1, "{q} {n} {now}");
                refund(&q, &mut key, n, now, now);
                refund(&q, &mut key, n, 0, u64::MAX);
            }
        }
    }
}

/// One step of a key's life: a check, a charge, or a refund of part of the oldest admitted
/// check not settled yet (a reservation settled lower).
#[derive(Debug, Clone)]
enum Step {
    Check(u64),
    Charge(u64),
    SettleLower(u64),
}

fn step() -> impl Strategy<Value = (Step, u64)> {
    let s = prop_oneof![
        (1u64..=10).prop_map(Step::Check),
        (0u64..=30).prop_map(Step::Charge),
        (0u64..=10).prop_map(Step::SettleLower),
    ];
    (s, prop_oneof![0u64..200, 0u64..3_000])
}

fn quotas() -> impl Strategy<Value = Quota> {
    prop_oneof![
        Just(Quota::per_second(10)),
        Just(Quota::per_second(10).algorithm(Algorithm::FixedWindow)),
        Just(Quota::per_second(10).algorithm(Algorithm::SlidingWindow)),
    ]
}

/// Whether, in every interval [a reservation's start, another's end], what the reservations
/// wholly inside it kept (estimate less what came back) stays within GCRA's bound.
fn kept_within_gcra(q: &Quota, events: &[(u64, u64, u64)]) -> bool {
    let t = q.emission_interval_ns() as f64;
    events.iter().all(|&(from, _, _)| {
        events.iter().filter(|e| e.1 >= from).all(|&(_, to, _)| {
            let kept: u64 = events
                .iter()
                .filter(|e| e.0 >= from && e.1 <= to)
                .map(|e| e.2)
                .sum();
            kept as f64 <= q.burst as f64 + (to - from) as f64 / t
        })
    })
}

proptest! {
    /// What checks admitted plus what was charged, less what was given back, never exceeds
    /// the quota over the time seen (the limit per period, plus one burst) plus what the key
    /// still owes: a debt is paid before anything more is admitted. And on GCRA,
    /// without charges, what reservations kept is within the bound in every interval: a
    /// refund never lets a burst through beyond the burst.
    #[test]
    fn admitted_plus_charged_less_refunded_stays_within_the_meter(
        q in quotas(),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut key = None;
        let mut now = T0;
        let mut net = 0u64;
        // Admitted checks not settled yet, oldest first: (cost, what they remember, event
        // index).
        let mut open: std::collections::VecDeque<(u64, (u64, u64, SlotLog), usize)> =
            Default::default();
        // (start, end, kept) of every admitted check, for the interval check.
        let mut events: Vec<(u64, u64, u64)> = Vec::new();
        let mut charged = false;
        for (s, gap_ms) in steps {
            now += gap_ms * MS;
            match s {
                Step::Check(c) => {
                    let v = check(&q, &mut key, c, now);
                    if v.decision.allowed {
                        net += c;
                        open.push_back((c, held(&v, now), events.len()));
                        events.push((now, now, c));
                    }
                }
                Step::Charge(c) => {
                    charge(&q, &mut key, c, now);
                    net += c;
                    charged |= c > 0;
                }
                Step::SettleLower(back) => {
                    if let Some((c, held, i)) = open.pop_front() {
                        let (at, ..) = held;
                        let back = back.min(c);
                        let v = settle_back(&q, &mut key, back, held, now);
                        // What came back can be spent again: count it as not taken.
                        if v.state.is_some() {
                            net -= back;
                        }
                        events[i] = (at, now, c - back);
                    }
                }
            }
        }
        let periods = (now - T0).div_ceil(S) + 2;
        let owed = debt(&q, key.as_ref(), now);
        let bound = 10 * periods + owed;
        prop_assert!(net <= bound, "net {net} > bound {bound} (owing {owed})");
        if q.algorithm == Algorithm::Gcra && !charged {
            prop_assert!(kept_within_gcra(&q, &events), "a burst beyond the burst: {events:?}");
        }
    }
}
