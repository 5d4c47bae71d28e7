//! Fair flows through `decide_flow`: never more than the meter admits, a flow alone gets
//! everything, flows with steady demands get their max-min allocation, and a quota without
//! fair flows decides as today whatever the flow.

use super::{decide, decide_flow, Algorithm, FlowId, KeyState, Meter, Quota, Verdict, MAX_FLOWS};
use proptest::prelude::*;
use std::time::Duration;

const S: u64 = 1_000_000_000;
/// The start of a 100 s window (and of a 10 s one).
const T0: u64 = 1_700_000_000 * S;

fn flow(name: &str) -> Option<FlowId> {
    Some(FlowId::of(name).expect("a flow name"))
}

/// A check of `f` on `key`, storing what decide says to store.
fn run(q: &Quota, key: &mut Option<KeyState>, cost: u64, f: &str, now: u64) -> Verdict {
    let v = decide_flow(q, key.as_ref(), cost, None, flow(f), now);
    if let Some(s) = &v.state {
        *key = Some(s.clone());
    }
    v
}

/// 100 per 100 s, fixed windows: T0 starts one.
fn fixed(limit: u64) -> Quota {
    Quota::new(limit, Duration::from_secs(100))
        .algorithm(Algorithm::FixedWindow)
        .fair_flows()
}

#[test]
fn a_heavy_flow_leaves_the_light_flows_due_and_is_refused_without_writes() {
    let q = fixed(100);
    let mut key = None;
    // The light flow asks 10, the heavy ones then hammer.
    assert!(run(&q, &mut key, 10, "light", T0).decision.allowed);
    let v = run(&q, &mut key, 50, "b", T0);
    assert!(v.decision.allowed, "b alone with light: 90 for it");
    // c comes: b has 50 used, so c may take 100 − 10 − 50 = 40 (b is over its 45).
    let v = run(&q, &mut key, 40, "c", T0);
    assert!(v.decision.allowed, "{v:?}");
    assert_eq!(v.decision.remaining, 0);
    // The key is full now.
    let v = run(&q, &mut key, 1, "c", T0);
    assert!(!v.decision.allowed);
}

#[test]
fn the_reserve_holds_for_a_flow_that_asked_before() {
    let q = fixed(100);
    let mut key = None;
    assert!(run(&q, &mut key, 30, "a", T0).decision.allowed);
    // b is denied beyond what a is due: a's demand is 30 (used), b may take 70.
    let v = run(&q, &mut key, 70, "b", T0 + S);
    assert!(v.decision.allowed);
    // a asks 20 more, denied (the key is full); it counts as asked: a is below its level 50.
    let v = run(&q, &mut key, 20, "a", T0 + 2 * S);
    assert!(!v.decision.allowed);
    assert!(v.state.is_some(), "a denial below the level is written");
    let asked: Vec<(u64, u64)> = v
        .state
        .iter()
        .flat_map(|s| s.flows.iter().map(|e| (e.asked, e.used)))
        .collect();
    assert!(asked.contains(&(50, 30)), "{asked:?}");
    // Next window: a's demand is 50 (asked), b hammers: b stops at 50.
    let next = T0 + 100 * S;
    let v = run(&q, &mut key, 50, "b", next);
    assert!(v.decision.allowed);
    assert_eq!(v.decision.remaining, 0, "b may take no more: 50 kept for a");
    let v = run(&q, &mut key, 1, "b", next);
    assert!(!v.decision.allowed);
    assert_eq!(v.state, None, "b is at its level: refused without a write");
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(100)));
    let v = run(&q, &mut key, 50, "a", next + S);
    assert!(v.decision.allowed, "a gets what it is due");
}

#[test]
fn a_denial_for_the_flow_reserve_starts_no_ban_one_past_the_quota_does() {
    let plain = fixed(10);
    let mut key = None;
    assert!(run(&plain, &mut key, 8, "a", T0).decision.allowed);
    // b asks 5, 2 are left: denied, and counted (b's level is 5).
    assert!(!run(&plain, &mut key, 5, "b", T0).decision.allowed);
    // So a must leave b 2: a denial for the flow reserve alone, no ban, nothing written
    // (a is past its level).
    let q = plain.ban(Duration::from_secs(600));
    let v = run(&q, &mut key, 1, "a", T0);
    assert!(!v.decision.allowed);
    assert_eq!(v.state, None);
    assert_eq!(v.decision.remaining, 0);
    assert!(run(&q, &mut key, 2, "b", T0).decision.allowed);
    // Full: this denial bans.
    let v = run(&q, &mut key, 1, "a", T0);
    assert_eq!(v.state.as_ref().map(|s| s.banned_until), Some(T0 + 600 * S));
}

#[test]
fn gcra_paces_every_flow_and_caps_each_at_its_share_of_the_window() {
    // GCRA 10 per 10 s (one a second), burst 2: each flow gets its share of the window's 10,
    // at the meter's pace; a flow's due is not hoarded in the bucket.
    let q = Quota::new(10, Duration::from_secs(10))
        .burst(2)
        .fair_flows();
    let mut key = None;
    assert!(run(&q, &mut key, 2, "a", T0).decision.allowed);
    assert!(!run(&q, &mut key, 1, "a", T0).decision.allowed, "asked 3");
    // b may take 7 this window (a is due 3), one a second as the bucket refills.
    let v = run(&q, &mut key, 1, "b", T0);
    assert_eq!(v.decision.retry_after, Some(Duration::from_secs(1)));
    for k in 1..=7 {
        let v = run(&q, &mut key, 1, "b", T0 + k * S);
        assert!(v.decision.allowed, "b's unit {k}: {v:?}");
    }
    let v = run(&q, &mut key, 1, "b", T0 + 8 * S);
    assert!(
        !v.decision.allowed && v.state.is_none(),
        "over its share: {v:?}"
    );
    assert_eq!(
        v.decision.retry_after,
        Some(Duration::from_secs(2)),
        "the window's end"
    );
    assert_eq!(v.decision.remaining, 0);
    assert!(
        run(&q, &mut key, 1, "a", T0 + 9 * S).decision.allowed,
        "a's due"
    );
}

#[test]
fn a_check_bigger_than_the_flows_share_passes_on_a_full_key() {
    // 10 per window, two flows due 5 each: a check of 8 of a fresh flow waits for a full key.
    let q = fixed(10);
    let mut key = None;
    assert!(run(&q, &mut key, 1, "a", T0).decision.allowed);
    assert!(
        !run(&q, &mut key, 10, "a", T0).decision.allowed,
        "counted: a asked 11"
    );
    assert!(
        !run(&q, &mut key, 9, "b", T0).decision.allowed,
        "a is due 4 more"
    );
    let next = T0 + 100 * S;
    let v = run(&q, &mut key, 8, "b", next);
    assert!(v.decision.allowed, "a full key (new window): {v:?}");
}

#[test]
fn peeks_and_checks_during_a_ban_count_nothing() {
    let q = fixed(2).ban(Duration::from_secs(5));
    let mut key = None;
    assert!(run(&q, &mut key, 2, "a", T0).decision.allowed);
    let v = run(&q, &mut key, 0, "b", T0);
    assert_eq!((v.decision.allowed, v.state), (false, None));
    assert!(run(&q, &mut key, 1, "a", T0).state.is_some(), "the ban");
    let v = run(&q, &mut key, 1, "b", T0 + S);
    assert_eq!((v.decision.allowed, v.state), (false, None), "banned");
}

#[test]
fn the_65th_flow_shares_the_others_entry_and_the_table_expires_after_two_windows() {
    let q = fixed(1000);
    let mut key = None;
    for i in 0..=MAX_FLOWS {
        assert!(run(&q, &mut key, 1, &format!("f{i}"), T0).decision.allowed);
    }
    let v = run(&q, &mut key, 1, "f65", T0);
    let s = v.state.expect("admitted");
    assert_eq!(s.flows.len(), MAX_FLOWS + 1);
    let others = s.flows.iter().find(|e| e.id == 0).map(|e| e.used);
    assert_eq!(others, Some(2), "f64 and f65 share it");
    assert_eq!(
        v.expires_at,
        T0 + 200 * S,
        "worth something for the next window"
    );
    let back = KeyState::decode(&s.encode()).expect("round trip");
    assert_eq!(back, s);
    assert!(s.encode().starts_with(b"2 f "));
}

/// A quota for the property tests, fair or not.
fn quota(algorithm: usize, limit: u64, burst: u64, ban: bool) -> Quota {
    let period = Duration::from_secs(10);
    let q = match algorithm {
        0 => Quota::new(limit, period).burst(burst),
        1 => Quota::new(limit, period).algorithm(Algorithm::FixedWindow),
        _ => Quota::new(limit, period).algorithm(Algorithm::SlidingWindow),
    };
    if ban {
        q.ban(Duration::from_secs(3))
    } else {
        q
    }
}

const FLOWS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// The max-min allocation of `q` over `demands`.
fn max_min(q: u64, demands: &[u64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&i| demands[i]);
    let mut left = q as f64;
    let mut alloc = vec![0.0; demands.len()];
    for (n, &i) in order.iter().enumerate() {
        let level = left / (demands.len() - n) as f64;
        alloc[i] = (demands[i] as f64).min(level);
        left -= alloc[i];
    }
    alloc
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every check a fair quota admits, the plain quota admits on the same meter, leaving the
    /// same meter: flows never admit more than the meter does.
    #[test]
    fn never_more_than_the_meter_admits(
        algorithm in 0usize..3,
        limit in 1u64..40,
        burst in 1u64..40,
        ban in any::<bool>(),
        ops in proptest::collection::vec((0u64..24, 0u64..1000, 0usize..6), 1..80),
    ) {
        let plain = quota(algorithm, limit, burst, ban);
        let fair = plain.fair_flows();
        prop_assert!(fair.validate().is_ok());
        let tick = plain.period.as_nanos() as u64 / 16;
        let mut key: Option<KeyState> = None;
        let mut now = T0;
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for (step, c, f) in ops {
            now += step * tick;
            let cost = c % (fair.max_cost() + 1);
            let who = (f < FLOWS.len()).then(|| FlowId::of(FLOWS[f]).expect("name"));
            let v = decide_flow(&fair, key.as_ref(), cost, None, who, now);
            let bare = key.as_ref().map(|k| KeyState::new(k.meter, k.banned_until, k.stamp, k.tag));
            let p = decide(&plain, bare.as_ref(), cost, now);
            if v.decision.allowed && cost > 0 {
                prop_assert!(p.decision.allowed, "{fair}: admitted beyond the meter");
                prop_assert_eq!(v.state.as_ref().map(|s| s.meter), p.state.map(|s| s.meter));
                *per_window.entry(now / plain.period.as_nanos() as u64).or_default() += cost;
            }
            if v.decision.allowed == p.decision.allowed {
                prop_assert!(v.decision.remaining <= p.decision.remaining);
                prop_assert!(v.expires_at >= p.expires_at);
            }
            if let Some(s) = v.state {
                key = Some(s);
            }
        }
        if algorithm == 1 {
            prop_assert!(per_window.values().all(|&n| n <= limit), "{per_window:?}");
        }
    }

    /// One flow alone (named or not) is decided as without fair flows (its denials may write
    /// what it asked, on the meter as it was).
    #[test]
    fn a_flow_alone_gets_everything(
        algorithm in 0usize..3,
        limit in 1u64..40,
        burst in 1u64..40,
        ban in any::<bool>(),
        named in any::<bool>(),
        ops in proptest::collection::vec((0u64..24, 0u64..1000), 1..60),
    ) {
        let plain = quota(algorithm, limit, burst, ban);
        let fair = plain.fair_flows();
        let who = named.then(|| FlowId::of("alone").expect("name"));
        let tick = plain.period.as_nanos() as u64 / 16;
        let (mut key, mut plain_key): (Option<KeyState>, Option<KeyState>) = (None, None);
        let mut now = T0;
        for (step, c) in ops {
            now += step * tick;
            let cost = c % (fair.max_cost() + 2);
            let v = decide_flow(&fair, key.as_ref(), cost, None, who, now);
            let p = decide(&plain, plain_key.as_ref(), cost, now);
            prop_assert_eq!(v.decision, p.decision);
            if v.decision.allowed {
                prop_assert_eq!(v.state.as_ref().map(|s| s.meter), p.state.as_ref().map(|s| s.meter));
            }
            if let Some(s) = v.state {
                key = Some(s);
            }
            if let Some(s) = p.state {
                plain_key = Some(s);
            }
        }
    }

    /// Without fair flows, any flow decides exactly as today's `decide`.
    #[test]
    fn without_fair_flows_the_flow_is_ignored(
        algorithm in 0usize..3,
        limit in 1u64..40,
        burst in 1u64..40,
        ban in any::<bool>(),
        ops in proptest::collection::vec((0u64..24, 0u64..1000, 0usize..6), 1..60),
    ) {
        let q = quota(algorithm, limit, burst, ban);
        let tick = q.period.as_nanos() as u64 / 16;
        let mut key: Option<KeyState> = None;
        let mut now = T0;
        for (step, c, f) in ops {
            now += step * tick;
            let cost = c % (q.max_cost() + 2);
            let who = (f < FLOWS.len()).then(|| FlowId::of(FLOWS[f]).expect("name"));
            let v = decide_flow(&q, key.as_ref(), cost, None, who, now);
            let p = decide(&q, key.as_ref(), cost, now);
            prop_assert_eq!(&v, &p);
            if let Some(s) = v.state {
                prop_assert!(s.flows.is_empty());
                prop_assert!(s.encode().starts_with(b"1 "));
                key = Some(s);
            }
        }
    }

    /// Flows asking the same in two windows running (checks of 1, in any order, a fixed
    /// window): in the second, each gets its max-min allocation of the quota, ±1.
    #[test]
    fn steady_demands_get_their_max_min_allocation(
        limit in 10u64..200,
        demands in proptest::collection::vec(1u64..250, 2..5),
        seed1 in any::<u64>(),
        seed2 in any::<u64>(),
    ) {
        let q = Quota::new(limit, Duration::from_secs(10))
            .algorithm(Algorithm::FixedWindow)
            .fair_flows();
        let mut key: Option<KeyState> = None;
        let mut admitted = Vec::new();
        for (w, seed) in [(0u64, seed1), (1, seed2)] {
            let mut checks: Vec<usize> = demands
                .iter()
                .enumerate()
                .flat_map(|(f, &d)| std::iter::repeat_n(f, d as usize))
                .collect();
            fastrand::Rng::with_seed(seed).shuffle(&mut checks);
            admitted = vec![0u64; demands.len()];
            let start = T0 + w * 10 * S;
            for (i, f) in checks.into_iter().enumerate() {
                let now = start + i as u64;
                let v = run(&q, &mut key, 1, FLOWS[f], now);
                if v.decision.allowed {
                    admitted[f] += 1;
                }
            }
        }
        let want = max_min(limit, &demands);
        for (got, want) in admitted.iter().zip(&want) {
            prop_assert!(
                (*got as f64 - want).abs() <= 1.0 + 1e-9,
                "Q {limit}, demands {demands:?}: admitted {admitted:?}, max-min {want:?}"
            );
        }
        let total: u64 = admitted.iter().sum();
        prop_assert_eq!(total, limit.min(demands.iter().sum()), "nothing left unused");
    }
}

#[test]
fn a_quota_without_fair_flows_keeps_a_stored_table_until_it_is_worth_nothing() {
    let fair = fixed(10);
    let mut key = None;
    run(&fair, &mut key, 1, "a", T0);
    assert!(key.as_ref().is_some_and(|k| !k.flows.is_empty()));
    let mut plain = fair;
    plain.fair_flows = false;
    let v = run(&plain, &mut key, 1, "a", T0);
    let s = v.state.expect("admitted");
    // A leased key's holders are counted in the table: a plain check keeps it.
    assert_eq!(s.flows, key.as_ref().expect("stored").flows);
    assert_eq!(
        s.meter,
        Meter::Fixed {
            window: T0 / (100 * S),
            count: 2
        }
    );
    let worthless = u64::try_from(s.flows.worthless_at(u128::from(100 * S))).expect("fits");
    let v = run(&plain, &mut key, 1, "a", worthless);
    assert!(
        v.state.expect("admitted").flows.is_empty(),
        "dropped once worth nothing"
    );
}

#[test]
fn state_size_with_1_8_64_flows() {
    let q = Quota::per_second(1_000_000).fair_flows();
    let mut sizes = Vec::new();
    for n in [1usize, 8, 64] {
        let mut key = None;
        for i in 0..n {
            // Realistic counts: a few thousand units per flow.
            run(&q, &mut key, 1000 + i as u64, &format!("tenant-{i}"), T0);
        }
        let mut s = key.expect("admitted");
        s.tag = u64::MAX / 3;
        sizes.push((n, s.encode().len()));
    }
    let plain = KeyState::new(Meter::Gcra { tat: T0 }, 0, T0, u64::MAX / 3)
        .encode()
        .len();
    println!("state bytes: none {plain}, flows {sizes:?}");
    assert!(
        sizes.iter().all(|&(n, b)| b <= plain + 16 + 40 * n),
        "{sizes:?}"
    );
}
