//! Many checks: what they cost in store requests, and never more admitted than the quota
//! allows while several Limiters hammer one key.

use super::setup::{check, limiter, open, requests};
use crate::testing::harness::Harness;
use crate::testing::rate_history::{assert_gcra_exact, unix_ns, Admitted};
use crate::testing::util::ms;
use crate::Quota;
use std::time::Duration;

/// Costs in store requests: a first touch and an uncontended admission take one each (no read
/// before the write); a denial the last state proves takes none; concurrent checks of one key
/// in one Limiter share writes.
pub async fn rate_request_counts(h: &impl Harness) {
    let l = limiter(h).await;
    // Slow (one per hour): no key expires, so no store clean-up runs while we count.
    let rl = open(&l, "counts", Quota::per_day(24).burst(2)).await;
    let before = l.stats();
    assert!(check(&rl, "k", 1).await.allowed);
    assert_eq!(requests(&l, &before), 1, "first touch: one write");
    let before = l.stats();
    assert!(check(&rl, "k", 1).await.allowed);
    assert_eq!(requests(&l, &before), 1, "uncontended: one write");
    let before = l.stats();
    for _ in 0..20 {
        assert!(!check(&rl, "k", 1).await.allowed);
    }
    assert_eq!(requests(&l, &before), 0, "provable denials: no request");
    assert_eq!(l.stats().since(&before).rate_local_answers, 20);
    let hot = open(&l, "counts-hot", Quota::per_minute(6000).burst(1000)).await;
    let before = l.stats();
    let checks = (0..64).map(|_| hot.check("hot"));
    let ds = futures::future::join_all(checks).await;
    assert!(
        ds.iter().all(|d| d.as_ref().is_ok_and(|d| d.allowed)),
        "{ds:?}"
    );
    let since = l.stats().since(&before);
    let used = since.total();
    // One write per batch; a store slow enough to make the client resend a request (a loaded
    // machine) may add one.
    assert!(
        used <= since.rate_batches + 1 && since.rate_batches < 64,
        "64 concurrent checks of one key: {used} requests in {} batches: {since:?}",
        since.rate_batches
    );
}

/// Several Limiters hammering one key never admit more than the quota allows in any
/// interval, and admit close to it over the run (the long version is
/// `tests/rate_exactness.rs`).
pub async fn rate_exact_under_contention(h: &impl Harness) {
    let quota = Quota::per_second(100).burst(10);
    let run = Duration::from_millis(1500);
    let mut limiters = Vec::new();
    for _ in 0..3 {
        limiters.push(limiter(h).await);
    }
    open(&limiters[0], "hot", quota).await;
    let mut tasks = Vec::new();
    for l in &limiters {
        let rl = l.open_rate_limit("hot").await.expect("open");
        for _ in 0..8 {
            let rl = rl.clone();
            tasks.push(tokio::spawn(async move {
                let stop = std::time::Instant::now() + run;
                let mut admitted = Vec::new();
                let mut calls = 0u32;
                while std::time::Instant::now() < stop && calls < 100_000 {
                    calls += 1;
                    let start = unix_ns();
                    let d = rl.check("hot").await.expect("check");
                    if d.allowed {
                        admitted.push(Admitted {
                            start,
                            end: unix_ns(),
                            cost: 1,
                        });
                    } else {
                        let pause = d.retry_after.unwrap_or(ms(1)).min(ms(5));
                        tokio::time::sleep(pause).await;
                    }
                }
                admitted
            }));
        }
    }
    let mut events = Vec::new();
    for t in tasks {
        events.extend(t.await.expect("caller task"));
    }
    assert_gcra_exact(&events, &quota, 0.0);
    let floor = 100.0 * 1.2;
    assert!(
        events.len() as f64 >= floor,
        "only {} admitted in {run:?} at 100/s",
        events.len()
    );
}
