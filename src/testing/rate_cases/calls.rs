//! The calls beyond one check: `wait` (shaping) and `check_all` (all or nothing across limits
//! and keys).

use super::setup::{check, limiter, open};
use crate::testing::harness::Harness;
use crate::testing::util::{assert_err, ms};
use crate::{Error, KeyCheck, Quota};
use std::time::Duration;

/// `wait` shapes; `wait_timeout` gives up at once when the wait cannot fit, consuming nothing.
pub async fn rate_wait(h: &impl Harness) {
    let l = limiter(h).await;
    let rl = open(&l, "wait", Quota::per_minute(60).burst(1)).await;
    assert!(check(&rl, "k", 1).await.allowed);
    let started = std::time::Instant::now();
    assert_err!(rl.wait_timeout("k", 1, ms(100)).await, Error::Timeout);
    assert!(
        started.elapsed() < ms(90),
        "no point waiting 100 ms for a 1 s refill"
    );
    let peek = check(&rl, "k", 0).await;
    assert!(
        peek.retry_after
            .is_some_and(|r| r <= Duration::from_secs(1)),
        "the timeout consumed nothing: {peek:?}"
    );
    let d = rl.wait("k").await.expect("wait");
    assert!(
        d.allowed && started.elapsed() >= ms(800),
        "{d:?} after {:?}",
        started.elapsed()
    );
    let d = rl
        .wait_timeout("k", 1, Duration::from_secs(5))
        .await
        .expect("fits in 5 s");
    assert!(d.allowed);
    assert_err!(rl.wait_n("k", 0).await, Error::InvalidArgument(_));
    let d = rl.wait_timeout("fresh", 1, Duration::MAX).await;
    assert!(
        d.is_ok_and(|d| d.allowed),
        "an unrepresentable timeout is no timeout"
    );
}

/// `check_all`: all or nothing across limits and keys, in order for repeated keys. The keys
/// of one call share a hash tag (`{t}`), so a sharded store keeps them on one cluster.
pub async fn rate_check_all(h: &impl Harness) {
    let l = limiter(h).await;
    let user = open(&l, "user", Quota::per_minute(60).burst(10)).await;
    let global = open(&l, "global", Quota::per_minute(60).burst(2)).await;
    let both = |key: &'static str| {
        [
            KeyCheck::new(&user, key, 1),
            KeyCheck::new(&global, "{t}all", 1),
        ]
    };
    for _ in 0..2 {
        let ds = l.check_all(&both("{t}u1")).await.expect("check_all");
        assert!(ds.iter().all(|d| d.allowed), "{ds:?}");
    }
    let ds = l.check_all(&both("{t}u1")).await.expect("check_all");
    assert!(ds.iter().all(|d| !d.allowed), "global is spent: {ds:?}");
    assert!(ds.iter().all(|d| d.retry_after.is_some()), "{ds:?}");
    assert_eq!(ds[0].remaining, 8, "u1 was not charged");
    assert_eq!(check(&user, "{t}u1", 0).await.remaining, 8);
    let ds = l
        .check_all(&[KeyCheck::new(&user, "u2", 3), KeyCheck::new(&user, "u2", 4)])
        .await
        .expect("same key twice");
    assert_eq!((ds[0].remaining, ds[1].remaining), (7, 3), "{ds:?}");
    // The same key twice, the second over: nothing is charged, though the first alone fits.
    let ds = l
        .check_all(&[KeyCheck::new(&user, "u3", 6), KeyCheck::new(&user, "u3", 6)])
        .await
        .expect("same key, over");
    assert!(ds.iter().all(|d| !d.allowed), "{ds:?}");
    assert_eq!(check(&user, "u3", 0).await.remaining, 10, "nothing charged");
    let banning = open(
        &l,
        "banning",
        Quota::per_minute(60).burst(2).ban(Duration::from_secs(30)),
    )
    .await;
    let ds = l
        .check_all(&[
            KeyCheck::new(&banning, "b", 1),
            KeyCheck::new(&banning, "b", 2),
        ])
        .await
        .expect("a ban from check_all");
    assert!(ds.iter().all(|d| !d.allowed), "{ds:?}");
    let d = check(&banning, "b", 1).await;
    assert!(
        !d.allowed && d.retry_after > Some(Duration::from_secs(25)),
        "the denial's ban holds, and nothing else was charged: {d:?}"
    );
    let other = limiter(h).await;
    let foreign = open(&other, "user", Quota::per_minute(60).burst(10)).await;
    assert_err!(
        l.check_all(&[KeyCheck::new(&foreign, "u", 1)]).await,
        Error::InvalidArgument(_)
    );
    assert_err!(l.check_all(&[]).await, Error::InvalidArgument(_));
    assert_err!(
        l.check_all(&[KeyCheck::new(&user, "u", 11)]).await,
        Error::InvalidArgument(_)
    );
}
