//! A class's reserve through `decide_as`: a check of a class never leaves less than its
//! reserve, it is exactly a check of `cost + reserve` without a class that consumes `cost`,
//! and checks without a class decide as if the quota had no reserves.

use super::{decide, decide_as, Algorithm, KeyState, Quota, Verdict};
use proptest::prelude::*;
use std::time::Duration;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * S;

/// Checks in order on one key, storing what decide says to store.
fn run(q: &Quota, key: &mut Option<KeyState>, cost: u64, class: Option<&str>, now: u64) -> Verdict {
    let v = decide_as(q, key.as_ref(), cost, class, now);
    if let Some(s) = &v.state {
        *key = Some(s.clone());
    }
    v
}

#[test]
fn gcra_a_class_stops_at_its_reserve_and_no_class_takes_the_rest() {
    // 10 per minute, burst 10: T = 6 s. Batch keeps 3.
    let q = Quota::per_minute(10).reserve("batch", 3);
    let mut key = None;
    let v = run(&q, &mut key, 5, Some("batch"), T0);
    assert!(v.decision.allowed);
    assert_eq!((v.decision.limit, v.decision.remaining), (10, 2));
    let v = run(&q, &mut key, 2, Some("batch"), T0);
    assert_eq!((v.decision.allowed, v.decision.remaining), (true, 0));
    let v = run(&q, &mut key, 1, Some("batch"), T0);
    assert!(!v.decision.allowed && v.state.is_none());
    // Batch could take one more once one interval has passed.
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(6)));
    // Everything consumed so far: 7 of 10, the key is full again in 42 s.
    assert_eq!(v.decision.reset_after, Duration::from_secs(42));
    // A peek of batch says the same, without writing.
    let v = run(&q, &mut key, 0, Some("batch"), T0);
    assert_eq!((v.decision.allowed, v.state), (false, None));
    // Without a class: the reserve is there.
    let v = run(&q, &mut key, 3, None, T0);
    assert_eq!((v.decision.allowed, v.decision.remaining), (true, 0));
    assert!(!run(&q, &mut key, 1, None, T0).decision.allowed);
    // Batch now waits for the key to have 4 left: 4 intervals.
    let v = run(&q, &mut key, 1, Some("batch"), T0);
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(24)));
    assert!(
        !run(&q, &mut key, 1, Some("batch"), T0 + 24 * S - 1)
            .decision
            .allowed
    );
    assert!(
        run(&q, &mut key, 1, Some("batch"), T0 + 24 * S)
            .decision
            .allowed
    );
}

#[test]
fn windows_count_plus_cost_stays_within_limit_less_reserve() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        // Windows of a year: T0 is far from their edges for both.
        let q = Quota::new(10, Duration::from_secs(365 * 86_400))
            .algorithm(algorithm)
            .reserve("batch", 4)
            .reserve("critical", 0);
        let mut key = None;
        let v = run(&q, &mut key, 6, Some("batch"), T0);
        assert_eq!(
            (v.decision.allowed, v.decision.remaining),
            (true, 0),
            "{algorithm}"
        );
        assert!(!run(&q, &mut key, 1, Some("batch"), T0).decision.allowed);
        let v = run(&q, &mut key, 4, Some("critical"), T0);
        assert_eq!(
            (v.decision.allowed, v.decision.remaining),
            (true, 0),
            "{algorithm}"
        );
        assert!(!run(&q, &mut key, 1, None, T0).decision.allowed);
    }
}

#[test]
fn a_denial_for_the_reserve_starts_no_ban_one_past_the_quota_does() {
    let q = Quota::per_minute(10)
        .ban(Duration::from_secs(600))
        .reserve("batch", 3);
    let mut key = None;
    assert!(run(&q, &mut key, 7, Some("batch"), T0).decision.allowed);
    let v = run(&q, &mut key, 1, Some("batch"), T0);
    assert_eq!((v.decision.allowed, v.state), (false, None));
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(6)));
    assert!(run(&q, &mut key, 3, None, T0).decision.allowed);
    // Now the key itself is out: this denial bans, whatever the class.
    let v = run(&q, &mut key, 1, Some("batch"), T0);
    assert!(!v.decision.allowed);
    assert_eq!(v.state.map(|s| s.banned_until), Some(T0 + 600 * S));
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(600)));
}

#[test]
fn a_class_the_quota_does_not_name_admits_nothing() {
    let q = Quota::per_minute(10).reserve("batch", 3);
    let v = decide_as(&q, None, 1, Some("gone"), T0);
    assert!(!v.decision.allowed && v.state.is_none());
    assert_eq!(v.decision.retry_after, Some(Duration::MAX));
    assert!(v.decision.never_admits());
    // A cost the class can never take: the same.
    let v = decide_as(&q, None, 8, Some("batch"), T0);
    assert!(v.decision.never_admits());
}

fn quota(algorithm: usize, limit: u64, burst: u64, r1: u64, r2: u64, ban: bool) -> Quota {
    let period = Duration::from_secs(10);
    let q = match algorithm {
        0 => Quota::new(limit, period).burst(burst),
        1 => Quota::new(limit, period).algorithm(Algorithm::FixedWindow),
        _ => Quota::new(limit, period).algorithm(Algorithm::SlidingWindow),
    };
    let most = q.max_cost();
    let q = q
        .reserve("critical", 0)
        .reserve("batch", r1 % most)
        .reserve("bulk", r2 % most);
    if ban {
        q.ban(Duration::from_secs(3))
    } else {
        q
    }
}

/// The classes the ops pick (by index) of a quota from `quota`.
const CLASSES: [Option<&str>; 4] = [None, Some("critical"), Some("batch"), Some("bulk")];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Each check of a class is decided exactly as a check of `cost + reserve` without one
    /// (admitted alike, the same wait, consuming only `cost`, `remaining` less the reserve),
    /// and an admitted one leaves at least the reserve.
    #[test]
    fn a_class_is_a_check_of_cost_plus_reserve_and_leaves_its_reserve(
        algorithm in 0usize..3,
        limit in 1u64..30,
        burst in 1u64..30,
        r1 in 0u64..30,
        r2 in 0u64..30,
        ban in any::<bool>(),
        // (time step in 16ths of the period, cost selector, class index)
        ops in proptest::collection::vec((0u64..24, 0u64..1000, 0usize..4), 1..60),
    ) {
        let q = quota(algorithm, limit, burst, r1, r2, ban);
        prop_assert!(q.validate().is_ok(), "{q}");
        let tick = q.period.as_nanos() as u64 / 16;
        let mut key: Option<KeyState> = None;
        let mut now = T0;
        for (step, c, class) in ops {
            now += step * tick;
            let class = CLASSES[class];
            let r = q.reserves.reserve_of(class);
            let cost = c % (q.max_cost() - r + 1);
            let mine = decide_as(&q, key.as_ref(), cost, class, now);
            let plain = decide(&q, key.as_ref(), cost.max(1) + r, now);
            let took = decide(&q, key.as_ref(), cost, now);
            prop_assert_eq!(mine.decision.allowed, plain.decision.allowed);
            if mine.decision.allowed {
                prop_assert_eq!(&mine.state, &took.state);
                prop_assert_eq!(mine.decision.reset_after, took.decision.reset_after);
                prop_assert_eq!(mine.decision.remaining, took.decision.remaining.saturating_sub(r));
                if let Some(s) = &mine.state {
                    let left = decide(&q, Some(s), 0, now).decision.remaining;
                    prop_assert!(left >= r, "{q}: class left {left} < reserve {r}");
                }
            } else if !ban {
                prop_assert_eq!(mine.decision.retry_after, plain.decision.retry_after);
                prop_assert_eq!(mine.decision.reset_after, plain.decision.reset_after);
                prop_assert_eq!(mine.decision.remaining, plain.decision.remaining.saturating_sub(r));
                prop_assert_eq!(&mine.state, &None);
            }
            if let Some(s) = mine.state {
                key = Some(s);
            }
        }
    }

    /// Checks without a class (or of a class with reserve 0) on a quota with reserves are
    /// decided, to the stored state, as on the same quota without any.
    #[test]
    fn no_class_decides_as_without_reserves(
        algorithm in 0usize..3,
        limit in 1u64..30,
        burst in 1u64..30,
        r1 in 0u64..30,
        ban in any::<bool>(),
        ops in proptest::collection::vec((0u64..24, 0u64..1000, 0usize..2), 1..60),
    ) {
        let with = quota(algorithm, limit, burst, r1, r1, ban);
        let without = with.reserves(super::Reserves::new());
        let tick = with.period.as_nanos() as u64 / 16;
        let mut key: Option<KeyState> = None;
        let mut now = T0;
        for (step, c, class) in ops {
            now += step * tick;
            let cost = c % (with.max_cost() + 2);
            let a = decide_as(&with, key.as_ref(), cost, CLASSES[class], now);
            let b = decide(&without, key.as_ref(), cost, now);
            prop_assert_eq!(&a, &b);
            if let Some(s) = a.state {
                key = Some(s);
            }
        }
    }
}
