//! `check_all` of a single check is that check's `check_n` (the library chooses the coalesced,
//! paced per-key path, so callers with one check or many make the same call): it counts on
//! the same state as concurrent `check_n`s of the key, and keeps `check_all`'s validation.

use clusterlimit::{
    DecisionSource, Error, KeyCheck, Limiter, Quota, StoreDownGuard, StoreDownPolicy,
};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_check_shares_the_keys_state_with_check_n() {
    let limiter = Limiter::connect("memory://check-all-lone")
        .await
        .expect("connect");
    let rl = limiter
        .rate_limit("lone", Quota::per_minute(15).burst(15))
        .await
        .expect("open");
    let alone = (0..20).map(|_| {
        let (limiter, rl) = (limiter.clone(), rl.clone());
        tokio::spawn(async move {
            let d = limiter.check_all(&[KeyCheck::new(&rl, "k", 1)]).await;
            d.expect("check_all")[0].allowed
        })
    });
    let single = (0..20).map(|_| {
        let rl = rl.clone();
        tokio::spawn(async move { rl.check_n("k", 1).await.expect("check_n").allowed })
    });
    let mut admitted = 0;
    for h in alone.chain(single).collect::<Vec<_>>() {
        admitted += usize::from(h.await.expect("task"));
    }
    assert_eq!(admitted, 15, "one state, counted exactly");

    let guard = StoreDownGuard::new(StoreDownPolicy::FailClosed);
    let other = Limiter::connect("memory://check-all-lone-other")
        .await
        .expect("connect");
    let g = guard
        .check_all_within(
            &other,
            &[KeyCheck::new(&rl, "k2", 1)],
            Duration::from_secs(1),
        )
        .await;
    assert!(matches!(g, Err(Error::InvalidArgument(_))), "{g:?}");
    let g = guard
        .check_all_within(
            &limiter,
            &[KeyCheck::new(&rl, "k2", 1)],
            Duration::from_secs(1),
        )
        .await
        .expect("guarded");
    assert_eq!(g.len(), 1);
    assert!(g[0].decision.allowed && g[0].source == DecisionSource::Store);
    assert!(g[0].store_latency.is_some());
}
