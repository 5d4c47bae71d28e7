//! What a check answers: GCRA's decisions, costs, fixed and sliding windows, bans, the
//! same for every Limiter sharing a key.

use super::setup::{check, limiter, open, YEAR};
use crate::testing::harness::Harness;
use crate::testing::util::{assert_err, ms};
use crate::{Algorithm, Error, Quota};
use std::time::Duration;

/// GCRA as redis-cell answers: burst at once, then one per emission interval; `limit`,
/// `remaining`, `retry_after` (Some iff denied), `reset_after`.
pub async fn rate_gcra_decisions(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "gcra", Quota::per_minute(60).burst(3)).await;
    for remaining in [2, 1, 0] {
        let d = check(&rl, "k", 1).await;
        assert!(d.allowed, "{d:?}");
        assert_eq!((d.limit, d.remaining, d.retry_after), (3, remaining, None));
        assert!(d.reset_after <= Duration::from_secs(3 - remaining), "{d:?}");
        assert!(d.reset_after > Duration::from_secs(2 - remaining), "{d:?}");
    }
    let denied = check(&rl, "k", 1).await;
    assert!(!denied.allowed && denied.remaining == 0, "{denied:?}");
    let retry = denied.retry_after.expect("a denial says when to retry");
    assert!(
        retry > ms(500) && retry <= Duration::from_secs(1),
        "{denied:?}"
    );
    // Keys are independent.
    assert_eq!(check(&rl, "other", 1).await.remaining, 2);
    // After retry_after, admitted again.
    tokio::time::sleep(retry + ms(20)).await;
    assert!(check(&rl, "k", 1).await.allowed);
}

/// Two Limiters share every key: what one consumes, the other cannot.
pub async fn rate_shared_between_limiters(h: &impl Harness) {
    let a = limiter(h).await;
    let b = limiter(h).await;
    let q = Quota::per_minute(60).burst(4);
    let ra = open(&a, "shared", q).await;
    let rb = b.open_rate_limit("shared").await.expect("open_rate_limit");
    assert_eq!(rb.quota(), q);
    let mut admitted = 0;
    for i in 0..8 {
        let rl = if i % 2 == 0 { &ra } else { &rb };
        admitted += u32::from(check(rl, "k", 1).await.allowed);
    }
    assert_eq!(admitted, 4, "burst 4 across both Limiters");
}

/// Cost: all or nothing; 0 peeks; above the burst is refused.
pub async fn rate_costs(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "costs", Quota::per_minute(60).burst(5)).await;
    let peek = check(&rl, "k", 0).await;
    assert!(peek.allowed && peek.remaining == 5, "{peek:?}");
    assert_eq!(check(&rl, "k", 4).await.remaining, 1);
    let d = check(&rl, "k", 2).await;
    assert!(!d.allowed && d.remaining == 1, "all or nothing: {d:?}");
    assert!(
        check(&rl, "k", 1).await.allowed,
        "the denied cost took nothing"
    );
    let peek = check(&rl, "k", 0).await;
    assert!(!peek.allowed && peek.retry_after.is_some(), "{peek:?}");
    assert_err!(rl.check_n("k", 6).await, Error::InvalidArgument(_));
    let windows = open(
        &l,
        "costs-w",
        Quota::new(3, YEAR).algorithm(Algorithm::FixedWindow),
    )
    .await;
    assert_err!(windows.check_n("k", 4).await, Error::InvalidArgument(_));
    assert!(check(&windows, "k", 3).await.allowed);
}

/// Fixed and sliding windows: at most `limit` per window, `remaining` counts down,
/// `reset_after` within the window.
pub async fn rate_windows(h: &impl Harness) {
    let l = limiter(h).await;
    for (name, algorithm) in [
        ("fixed", Algorithm::FixedWindow),
        ("sliding", Algorithm::SlidingWindow),
    ] {
        let q = Quota::new(3, YEAR).algorithm(algorithm);
        let rl = open(&l, name, q).await;
        for remaining in [2, 1, 0] {
            let d = check(&rl, "k", 1).await;
            assert!(
                d.allowed && d.remaining == remaining && d.limit == 3,
                "{name}: {d:?}"
            );
            assert!(d.reset_after <= YEAR * 2, "{name}: {d:?}");
        }
        let d = check(&rl, "k", 1).await;
        assert!(!d.allowed, "{name}: {d:?}");
        assert!(
            d.retry_after.is_some_and(|r| r <= YEAR * 2),
            "{name}: {d:?}"
        );
    }
}

/// A denial bans the key for `ban`, whatever the meter says.
pub async fn rate_ban(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(
        &l,
        "ban",
        Quota::per_minute(60).burst(1).ban(Duration::from_secs(30)),
    )
    .await;
    assert!(check(&rl, "k", 1).await.allowed);
    let d = check(&rl, "k", 1).await;
    assert!(!d.allowed, "the bucket of 1 refills in 1 s: {d:?}");
    let retry = d.retry_after.expect("denied");
    assert!(retry > Duration::from_secs(25), "the ban says so: {d:?}");
    tokio::time::sleep(ms(1100)).await; // the bucket is full again; the ban holds
    let again = check(&rl, "k", 1).await;
    assert!(
        !again.allowed && again.retry_after > Some(Duration::from_secs(25)),
        "{again:?}"
    );
    // Another Limiter sees the ban too (it is stored).
    let other = limiter(h).await;
    let ro = other.open_rate_limit("ban").await.expect("open");
    assert!(!check(&ro, "k", 1).await.allowed);
    assert!(check(&ro, "k2", 1).await.allowed, "bans are per key");
}
