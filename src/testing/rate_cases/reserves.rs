//! Priority classes: a class's reserve is stored with the quota (every client agrees), and
//! under contention a class stops exactly at `limit − reserve` while checks without a class
//! (or of a class with reserve 0) still get the reserve, never more than the quota in all.

use super::setup::{limiter, open, YEAR};
use crate::testing::harness::Harness;
use crate::testing::util::assert_err;
use crate::{Algorithm, CheckOptions, Error, KeyCheck, Limiter, Quota, RateLimit, Waited};
use std::time::Duration;

/// A denial this long is the quota's (the next unit is days away), not pacing turning a check
/// away for a moment on a hot key.
const FOR_GOOD: Duration = Duration::from_secs(3600);

/// The reserves round-trip through the store: another Limiter opening by name decides with
/// them, for `check_with`, `wait_with` and `check_all` alike; a class the quota does not declare, or a
/// cost the class can never take, is refused before any request.
pub async fn rate_reserve_stored(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let q = Quota::new(10, YEAR)
        .reserve("batch", 4)
        .reserve("critical", 0);
    open(&a, "reserved", q).await;
    let rb = b
        .open_rate_limit("reserved")
        .await
        .expect("open_rate_limit");
    assert_eq!(rb.quota(), q, "the reserves round-trip through the store");
    let d = class_check(&rb, "batch", 6).await;
    assert!(d.allowed && d.remaining == 0, "{d:?}");
    let d = class_check(&rb, "batch", 1).await;
    assert!(!d.allowed && d.remaining == 0, "{d:?}");
    let plain = Quota::new(10, YEAR);
    match b.rate_limit("reserved", plain).await {
        Err(Error::QuotaMismatch { stored, requested }) => {
            assert_eq!((*stored, *requested), (q, plain));
        }
        r => panic!("expected QuotaMismatch, got {r:?}"),
    }
    // check_all: a class per check, decided with the rest, all or nothing (keys tagged so a
    // sharded store keeps them on one cluster).
    let call = |c1: Option<&str>, cost: u64| {
        let first = KeyCheck::new(&rb, "{r}j1", cost);
        [
            c1.map_or(first.clone(), |c| first.class(c)),
            KeyCheck::new(&rb, "{r}j2", 1),
        ]
    };
    let ds = b
        .check_all(&call(Some("batch"), 6))
        .await
        .expect("check_all");
    assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    assert_eq!(ds[0].remaining, 0, "batch's remaining: {ds:?}");
    let ds = b
        .check_all(&call(Some("batch"), 1))
        .await
        .expect("check_all");
    assert!(
        ds.iter().all(|d| !d.allowed),
        "batch is at its reserve: {ds:?}"
    );
    assert_eq!(ds[1].remaining, 9, "nothing consumed: {ds:?}");
    let ds = b.check_all(&call(None, 4)).await.expect("check_all");
    assert!(
        ds.iter().all(|d| d.allowed),
        "no class takes the reserve: {ds:?}"
    );
    let lone = [KeyCheck::new(&rb, "{r}j3", 7).class("batch")];
    assert_err!(b.check_all(&lone).await, Error::InvalidArgument(_));
    // A wait of a class: admitted while the class may take, then denied at once when its
    // next chance is past the budget.
    let soon = |cost| {
        CheckOptions::new()
            .class("batch")
            .cost(cost)
            .within(Duration::from_millis(200))
    };
    let w = rb.wait_with("w", soon(6)).await.expect("wait_with");
    assert!(matches!(w, Waited::Admitted(_)), "{w:?}");
    let w = rb.wait_with("w", soon(1)).await.expect("wait_with");
    assert!(matches!(w, Waited::Denied(_)), "{w:?}");
    let before = b.stats();
    let bulk = CheckOptions::new().class("bulk");
    assert_err!(rb.check_with("k", bulk).await, Error::InvalidArgument(_));
    let big = CheckOptions::new().class("batch").cost(7);
    assert_err!(rb.check_with("k", big).await, Error::InvalidArgument(_));
    assert_eq!(
        b.stats().since(&before).total(),
        0,
        "refused before any request"
    );
}

/// Several Limiters hammering one key: checks of class `batch` (reserve 30 of 100) stop at
/// exactly 70, then checks without a class and of class `critical` (reserve 0), hammering
/// beside more `batch` checks, take exactly the 30 left and `batch` none. Quotas of a year:
/// nothing comes back during the run, so exact counts are the contract.
pub async fn rate_reserve_under_contention(h: &impl Harness) {
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    for (name, algorithm) in [
        ("reserve-gcra", Algorithm::Gcra),
        ("reserve-sliding", Algorithm::SlidingWindow),
    ] {
        let quota = Quota::new(100, YEAR)
            .algorithm(algorithm)
            .reserve("batch", 30)
            .reserve("critical", 0);
        open(&limiters[0], name, quota).await;
        let batch = hammer(&limiters, name, &[Some("batch")], 6).await;
        assert_eq!(batch, [70], "{quota}: batch stops at limit − reserve");
        let mixed = hammer(&limiters, name, &[Some("batch"), None, Some("critical")], 3).await;
        assert_eq!(
            mixed[0], 0,
            "{quota}: batch took from the reserve: {mixed:?}"
        );
        assert_eq!(
            mixed[1] + mixed[2],
            30,
            "{quota}: the reserve, to checks without a class or of class critical: {mixed:?}"
        );
    }
}

/// `tasks` tasks per Limiter and class, each checking `name`'s key "hot" (cost 1) until a
/// denial for good: how many each class had admitted.
async fn hammer(
    limiters: &[Limiter],
    name: &str,
    classes: &[Option<&'static str>],
    tasks: usize,
) -> Vec<u64> {
    let mut running = Vec::new();
    for l in limiters {
        let rl = l.open_rate_limit(name).await.expect("open_rate_limit");
        for (i, class) in classes.iter().enumerate() {
            for _ in 0..tasks {
                let rl = rl.clone();
                let class = *class;
                running.push((
                    i,
                    tokio::spawn(async move {
                        let mut admitted = 0u64;
                        for _ in 0..10_000 {
                            let opts =
                                class.map_or(CheckOptions::new(), |c| CheckOptions::new().class(c));
                            let d = rl.check_with("hot", opts).await.expect("check_with");
                            if d.allowed {
                                admitted += 1;
                            } else if d.retry_after.is_some_and(|r| r >= FOR_GOOD) {
                                return admitted;
                            } else {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                        panic!("{class:?}: no denial for good in 10,000 checks");
                    }),
                ));
            }
        }
    }
    let mut admitted = vec![0u64; classes.len()];
    for (i, t) in running {
        admitted[i] += t.await.expect("checking task");
    }
    admitted
}

/// One check of `cost` of `class` on key "k", which must not fail.
async fn class_check(rl: &RateLimit, class: &str, cost: u64) -> crate::Decision {
    rl.check_with("k", CheckOptions::new().class(class).cost(cost))
        .await
        .unwrap_or_else(|e| panic!("check_with(k, {class}, {cost}) on {}: {e}", rl.name()))
}
