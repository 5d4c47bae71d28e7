//! The approximate mode (`approximate.rs`): what one report does, and, simulated over a few
//! seconds, that holders deciding locally and reporting every ~100 ms admit close to the
//! quota — within 5% over — settled, and when holders join.

use super::approximate::{approximable, local_after_report, report_usage, scaled, start_local};
use super::{debt, decide, Algorithm, FlowId, KeyState, Meter, Quota};
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The start of a second.
const T0: u64 = 1_700_000_040 * 1_000_000_000;

fn holder(who: usize) -> FlowId {
    FlowId::of(&format!("limiter-{who}")).expect("a valid name")
}

#[test]
fn a_report_charges_what_was_admitted_and_counts_what_was_asked() {
    let q = Quota::per_second(1_000);
    let r = report_usage(&q, None, (holder(0), 300, 200, 0), T0);
    assert_eq!(r.state.meter, Meter::Gcra { tat: T0 + 200 * MS });
    assert_eq!(r.share, Some(1.0), "alone: the whole quota");
    assert_eq!(r.debt, 0);
    let e = r.state.flows.iter().next().expect("counted");
    assert_eq!((e.asked, e.used), (300, 200));
    // Past the limit: the key is in debt, and says so.
    let r = report_usage(&q, Some(&r.state), (holder(0), 1_000, 1_000, 0), T0);
    assert_eq!(r.debt, 200);
    assert!(
        !decide(&q, Some(&r.state), 1, T0 + 100 * MS)
            .decision
            .allowed
    );
    assert!(r.expires_at >= T0 + 1_200 * MS);
}

#[test]
fn shares_are_max_min_levels_of_the_holders_demands() {
    let q = Quota::per_second(1_000);
    let a = report_usage(&q, None, (holder(0), 900, 0, 0), T0);
    let b = report_usage(&q, Some(&a.state), (holder(1), 900, 0, 0), T0);
    assert_eq!(b.share, Some(0.5), "two heavy holders split it");
    let light = report_usage(&q, Some(&b.state), (holder(2), 100, 0, 0), T0);
    assert_eq!(
        light.share,
        Some(1.0 / 3.0),
        "the light one's level (it uses 100 of it)"
    );
    let heavy = report_usage(&q, Some(&light.state), (holder(0), 0, 0, 0), T0);
    assert_eq!(
        heavy.share,
        Some(0.45),
        "the heavy ones get what the light one leaves"
    );
    // Next window, last window's demand still counts; two windows on, it is gone.
    let next = report_usage(
        &q,
        Some(&heavy.state),
        (holder(0), 0, 0, 0),
        T0 + 1_000 * MS,
    );
    assert_eq!(next.share, Some(0.45));
    let later = report_usage(&q, Some(&next.state), (holder(0), 0, 0, 0), T0 + 2_000 * MS);
    assert_eq!(later.share, Some(1.0));
}

#[test]
fn a_holder_s_demand_counts_as_its_pace_over_the_window() {
    let q = Quota::per_second(1_000);
    let a = report_usage(&q, None, (holder(0), 5, 0, 900), T0);
    let b = report_usage(&q, Some(&a.state), (holder(1), 5, 0, 900), T0);
    assert_eq!(b.share, Some(0.5), "a's pace, not its 5 units asked so far");
    let a = report_usage(&q, Some(&b.state), (holder(0), 100, 0, 900), T0);
    let e = a.state.flows.iter().find(|e| e.id == holder(0).get());
    assert_eq!(
        e.map(|e| e.asked),
        Some(1_000),
        "topped up to the projection once"
    );
}

#[test]
fn a_quota_decided_per_check_is_charged_but_gets_no_share() {
    let banning = Quota::per_second(1_000).ban(Duration::from_secs(1));
    assert!(!approximable(&banning));
    assert!(approximable(&Quota::per_second(1_000)));
    assert!(approximable(
        &Quota::per_second(10).algorithm(Algorithm::SlidingWindow)
    ));
    let r = report_usage(&banning, None, (holder(0), 10, 10, 0), T0);
    assert_eq!(r.share, None);
    assert!(r.state.flows.is_empty());
    assert_eq!(r.state.meter, Meter::Gcra { tat: T0 + 10 * MS });
}

#[test]
fn windows_are_charged_past_the_limit_and_carry_the_debt() {
    let q = Quota::per_second(100).algorithm(Algorithm::FixedWindow);
    let r = report_usage(&q, None, (holder(0), 130, 130, 0), T0 + 500 * MS);
    assert_eq!(r.debt, 30);
    let next = T0 + 1_000 * MS;
    assert!(
        debt(&q, Some(&r.state), next) > 0
            || !decide(&q, Some(&r.state), 71, next).decision.allowed
    );
}

#[test]
fn a_first_report_charges_its_part_of_the_burst_ahead() {
    let q = Quota::per_second(1_000);
    let key = KeyState::new(Meter::Gcra { tat: T0 + 200 * MS }, 0, T0, 0);
    let (local, after, ahead) = start_local(&q, &key, 0.5, T0);
    assert_eq!(ahead, 400, "half of the 800 left");
    assert_eq!(
        local.meter,
        Meter::Gcra {
            tat: T0 + 1_000 * MS
        },
        "the local meter is empty: the units ahead are spent apart"
    );
    assert_eq!(after.meter, Meter::Gcra { tat: T0 + 600 * MS });
    let (_, _, none) = start_local(&q, &after, 1.0, T0);
    assert_eq!(none, 400, "the next holder gets what is left");
}

#[test]
fn a_scaled_quota_keeps_the_tolerance_in_time() {
    let q = Quota::per_second(2_000).burst(500);
    let s = scaled(&q, 0.25);
    assert_eq!((s.limit, s.burst), (500, 125));
    assert_eq!(
        u128::from(s.burst) * s.emission_interval_ns(),
        u128::from(q.burst) * q.emission_interval_ns()
    );
    let tiny = scaled(&Quota::per_second(100), 0.001);
    assert_eq!((tiny.limit, tiny.burst), (1, 1), "at least one unit");
    let w = scaled(
        &Quota::per_second(100).algorithm(Algorithm::FixedWindow),
        0.5,
    );
    assert_eq!((w.limit, w.burst), (50, 50));
}

#[test]
fn a_local_meter_is_brought_up_to_the_key_never_back() {
    let q = Quota::per_second(1_000);
    let key = KeyState::new(Meter::Gcra { tat: T0 + 900 * MS }, 0, T0, 0);
    let behind = KeyState::new(Meter::Gcra { tat: T0 + 100 * MS }, 0, T0, 0);
    let ahead = KeyState::new(Meter::Gcra { tat: T0 + 950 * MS }, 0, T0, 0);
    let s = scaled(&q, 0.5);
    let up = local_after_report(&s, (Some(&key), 0.5), Some(&behind), T0);
    assert_eq!(up.meter, key.meter, "the key's debt makes it wait too");
    let kept = local_after_report(&s, (Some(&key), 0.5), Some(&ahead), T0);
    assert_eq!(kept.meter, ahead.meter);
    let fresh = local_after_report(&s, (Some(&key), 0.5), None, T0);
    assert_eq!(
        fresh.meter, key.meter,
        "a first report starts where the key is"
    );
    // Windows: the key's counts scaled to the share, in the same window.
    let w = Quota::per_second(100).algorithm(Algorithm::FixedWindow);
    let win = T0 / 1_000_000_000;
    let key = KeyState::new(
        Meter::Fixed {
            window: win,
            count: 90,
        },
        0,
        T0,
        0,
    );
    let mine = KeyState::new(
        Meter::Fixed {
            window: win,
            count: 10,
        },
        0,
        T0,
        0,
    );
    let up = local_after_report(&scaled(&w, 0.5), (Some(&key), 0.5), Some(&mine), T0);
    assert_eq!(
        up.meter,
        Meter::Fixed {
            window: win,
            count: 45
        }
    );
    let old = KeyState::new(
        Meter::Fixed {
            window: win - 1,
            count: 50,
        },
        0,
        T0,
        0,
    );
    let up = local_after_report(&scaled(&w, 0.5), (Some(&key), 0.5), Some(&old), T0);
    assert_eq!(
        up.meter,
        Meter::Fixed {
            window: win,
            count: 45
        },
        "a newer window"
    );
}

/// A holder in the simulation: asks `demand` units a millisecond from `from_ms` on.
struct Sim {
    who: usize,
    demand: u64,
    from_ms: u64,
    local: Option<KeyState>,
    share: Option<f64>,
    asked: u64,
    admitted: u64,
    prepaid: u64,
    next_report: u64,
    total: u64,
}

/// Runs `holders` on one key of `quota` for `run_ms`, each reporting every 80–120 ms (its
/// first report as it starts, before it decides anything); what they admitted in all.
fn simulate(quota: &Quota, holders: &mut [Sim], run_ms: u64) -> u64 {
    let mut key: Option<KeyState> = None;
    let mut rng = fastrand::Rng::with_seed(7);
    for ms in 0..run_ms {
        let now = T0 + ms * MS;
        for h in holders.iter_mut().filter(|h| ms >= h.from_ms) {
            if now >= h.next_report {
                let r = report_usage(
                    quota,
                    key.as_ref(),
                    (holder(h.who), h.asked, h.admitted, h.demand * 1_000),
                    now,
                );
                let share = r.share.expect("approximable");
                let s = scaled(quota, share);
                if h.local.is_none() {
                    let (local, after, ahead) = start_local(quota, &r.state, share, now);
                    h.local = Some(local);
                    h.prepaid = ahead;
                    key = Some(after);
                } else {
                    let local =
                        local_after_report(&s, (Some(&r.state), share), h.local.as_ref(), now);
                    h.local = Some(local);
                    key = Some(r.state);
                }
                h.share = Some(share);
                (h.asked, h.admitted) = (0, 0);
                h.next_report = now + rng.u64(80..=120) * MS;
            }
            let s = scaled(quota, h.share.expect("reported"));
            for _ in 0..h.demand {
                h.asked += 1;
                if h.prepaid > 0 {
                    h.prepaid -= 1;
                    h.total += 1;
                    continue;
                }
                let v = decide(&s, h.local.as_ref(), 1, now);
                if v.decision.allowed {
                    h.admitted += 1;
                    h.total += 1;
                }
                if let Some(st) = v.state {
                    h.local = Some(st);
                }
            }
        }
    }
    holders.iter().map(|h| h.total).sum()
}

fn sim(who: usize, demand: u64, from_ms: u64) -> Sim {
    Sim {
        who,
        demand,
        from_ms,
        local: None,
        share: None,
        asked: 0,
        admitted: 0,
        prepaid: 0,
        next_report: 0,
        total: 0,
    }
}

/// What `quota` allows from a full key over `ms` milliseconds.
fn allowed(quota: &Quota, ms: u64) -> f64 {
    quota.burst as f64 + quota.limit as f64 * ms as f64 / quota.period.as_millis() as f64
}

#[test]
fn settled_holders_admit_the_quota_within_five_percent() {
    let q = Quota::per_second(2_000);
    let mut hs: Vec<Sim> = (0..3).map(|i| sim(i, 5, 0)).collect();
    let total = simulate(&q, &mut hs, 3_000) as f64;
    let bound = allowed(&q, 3_000);
    println!("3 holders: {total} of {bound} ({:.3})", total / bound);
    assert!(
        total <= 1.05 * bound && total >= 0.9 * bound,
        "{total} of {bound}"
    );
    // Unequal demands: 1:1:1:5, the light ones' demand met.
    let q = Quota::per_second(10_000);
    let mut hs = vec![sim(0, 1, 0), sim(1, 1, 0), sim(2, 1, 0), sim(3, 30, 0)];
    let total = simulate(&q, &mut hs, 3_000) as f64;
    let bound = allowed(&q, 3_000);
    println!(
        "1:1:1:30: {total} of {bound}; {:?}",
        hs.iter().map(|h| h.total).collect::<Vec<_>>()
    );
    // Never over; the heavy holder gets less than the rest of the quota (it alone pays the
    // debts that the light holders, refilling at once, leave: a known limit of this model).
    assert!(total <= 1.05 * bound, "{total} of {bound}");
    assert!(
        hs[..3].iter().all(|h| h.total >= 2_700),
        "light demands are met"
    );
}

#[test]
fn holders_that_join_overshoot_a_little_and_pay_it_back() {
    let q = Quota::per_second(10_000);
    let mut hs: Vec<Sim> = (0..8)
        .map(|i| sim(i, 20, if i < 4 { 0 } else { 1_500 }))
        .collect();
    let total = simulate(&q, &mut hs, 3_000) as f64;
    let bound = allowed(&q, 3_000);
    println!("4 + 4 joining: {total} of {bound} ({:.3})", total / bound);
    assert!(total <= 1.05 * bound, "{total} of {bound}");
    assert!(total >= 0.9 * bound, "{total} of {bound}");
    let q = Quota::per_second(10_000).algorithm(Algorithm::FixedWindow);
    let mut hs: Vec<Sim> = (0..8)
        .map(|i| sim(i, 20, if i < 4 { 0 } else { 1_500 }))
        .collect();
    let total = simulate(&q, &mut hs, 3_000) as f64;
    println!("windows, 4 + 4 joining: {total} of 30000");
    assert!(
        (0.9 * 30_000.0..=1.05 * 30_000.0).contains(&total),
        "{total}"
    );
}
